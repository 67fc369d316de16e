#!/usr/bin/env bash
# Every GPU-side speed measurement of issue 29 in one command, about 8 minutes on one H100:
#   1. render.py --part render: images/s of the torch path on cuda per corruption and for the medium mix
#      at batch 64, 128, 256, 512, with and without the JPEG round trip (and the CPU path, one core);
#   2. render.py --part tta: ResNet-50 (random weights) tta-eval runs of source and tent, fp32 and bf16,
#      on the demo medium stream rendered on the GPU (ccc-render:…,device=cuda) against the same stream
#      on stored shards (ccc:DIR).
# Results: FOLDER/render.json, render.md, tta.json, tta.md, nvidia-smi.txt (FOLDER: the argument, else
# $OUT, else results/gpu_check). The render part is written before the tta part starts.
#
# usage: scripts/bench/gpu_check.sh [--quick] [FOLDER]
#   --quick: the same steps on the CPU with tiny sizes and the demo model (a check that it runs).
set -euo pipefail

quick=0
if [[ "${1:-}" == "--quick" ]]; then
    quick=1
    shift
fi
folder="${1:-${OUT:-results/gpu_check}}"
repository="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PYTHONPATH="${repository}${PYTHONPATH:+:${PYTHONPATH}}"
mkdir -p "${folder}"

if ((quick)); then
    render=(--device cpu --corruptions gaussian_noise,contrast --batch-sizes 2,4 --images 4 --cpu-images 2 --repeats 1)
    tta=(--device cpu --model demo --method source --precision fp32 --tta-streams shards,device
         --tta-samples 64 --tta-warmup 64 --num-workers 1)
else
    nvidia-smi > "${folder}/nvidia-smi.txt"
    render=(--device cuda --corruptions all --batch-sizes 64,128,256,512 --images 1024 --cpu-images 64 --repeats 3)
    tta=(--device cuda --model resnet50 --method source,tent --precision fp32,bf16 --tta-streams shards,device
         --tta-samples 12800 --tta-warmup 1280 --num-workers 12)
fi

python "${repository}/scripts/bench/render.py" --part render "${render[@]}" --json "${folder}/render.json" \
    | tee "${folder}/render.md"
python "${repository}/scripts/bench/render.py" --part tta "${tta[@]}" --json "${folder}/tta.json" \
    | tee "${folder}/tta.md"
