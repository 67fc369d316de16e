#!/usr/bin/env bash
# Every GPU-side speed measurement of issues 29 and 36 in one command, about 9 minutes on one H100:
#   1. render.py --part render: images/s of the torch path on cuda per corruption and for the medium mix
#      at batch 128, 256, 512, 1024, with and without the JPEG round trip (and the CPU path, one core),
#      in the default float64 working precision;
#   2. the same for the medium mix alone in the float32 precision (render_float32.*);
#   3. render.py --part tta: ResNet-50 (random weights) tta-eval runs of source and tent, fp32 and bf16,
#      on the demo medium stream rendered on the GPU (ccc-render:…,device=cuda; and device_fast: the
#      sources decoded by nvJPEG, float32 precision) against the same stream on stored shards (ccc:DIR);
#   4. feed.py: the loader workers' decode rate per core on this machine (how many feed the GPU).
# Results: FOLDER/render.json, render.md, render_float32.json, render_float32.md, tta.json, tta.md,
# feed.json, feed.md, nvidia-smi.txt (FOLDER: the argument, else $OUT, else results/gpu_check). Each part
# is written before the next starts.
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
    render32=(--device cpu --corruptions none --batch-sizes 4 --images 4 --cpu-images 0 --repeats 1)
    tta=(--device cpu --model demo --method source --precision fp32 --tta-streams shards,device,device_fast
         --tta-samples 64 --tta-warmup 64 --num-workers 1)
    feed=(--quick)
else
    nvidia-smi > "${folder}/nvidia-smi.txt"
    render=(--device cuda --corruptions all --batch-sizes 128,256,512,1024 --images 1024 --cpu-images 64 --repeats 3)
    render32=(--device cuda --corruptions none --batch-sizes 128,512,1024 --images 1024 --cpu-images 0 --repeats 3)
    tta=(--device cuda --model resnet50 --method source,tent --precision fp32,bf16
         --tta-streams shards,device,device_fast --tta-samples 12800 --tta-warmup 1280 --num-workers 12)
    feed=()
fi

python "${repository}/scripts/bench/render.py" --part render "${render[@]}" --json "${folder}/render.json" \
    | tee "${folder}/render.md"
python "${repository}/scripts/bench/render.py" --part render "${render32[@]}" --render-precision float32 \
    --json "${folder}/render_float32.json" | tee "${folder}/render_float32.md"
python "${repository}/scripts/bench/render.py" --part tta "${tta[@]}" --json "${folder}/tta.json" \
    | tee "${folder}/tta.md"
python "${repository}/scripts/bench/feed.py" "${feed[@]}" --json "${folder}/feed.json" | tee "${folder}/feed.md"
