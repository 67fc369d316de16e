#!/usr/bin/env bash
# Print the --stream arguments of the CCC paper's 27 streams below a shards folder, one per line:
# difficulties easy/medium/hard (run names baseline_40/20/0) × speeds 1000/2000/5000 × seeds 43/44/45,
# the run folders ccc-generate names by default. Fails, naming them, when any is missing.
# Usage: tta-eval run $(scripts/cluster/paper_streams.sh /data/ccc/shards) --method ... (see README.md)
set -euo pipefail

root="${1:?usage: paper_streams.sh SHARDS_FOLDER}"
missing=()
for baseline in 40 20 0; do
    for speed in 1000 2000 5000; do
        for seed in 43 44 45; do
            run="${root%/}/baseline_${baseline}_transition+speed_${speed}_seed_${seed}"
            if [[ -f "$run/manifest.json" ]]; then
                echo "--stream ccc:$run"
            else
                missing+=("$run")
            fi
        done
    done
done
if (( ${#missing[@]} )); then
    echo "paper_streams.sh: ${#missing[@]} of the 27 paper streams are missing (no manifest.json): ${missing[*]}" >&2
    exit 2
fi
