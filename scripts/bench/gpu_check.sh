#!/usr/bin/env bash
# Every GPU-side check and speed measurement of issues 29 and 36 in one command, sized for a lease of a few
# minutes (about 7 minutes on one H200 before part 2's medium stream case, estimated to add 1; start not
# included):
#   1. render_check.py: every torch corruption, the medium mix and crop only at batch 16 on cuda, float64 and
#      float32: does it run (an error is one line, the other cases run on), is it the same bytes run to run,
#      how far its bytes are from torch's CPU device on the same specs, and whether the fused Triton kernels
#      give the bytes of the ATen compositions on the GPU (CCC_TORCH_KERNELS=aten; they should) (check.json);
#   2. render.py --part render, medium mix, medium stream (consecutive samples, one corruption pair per batch)
#      and crop only at batch 128, 256, 512, 1024, with and without the
#      JPEG round trip, in the float64 working precision (mix.json) and the float32 one (mix_float32.json),
#      8 torch threads (the host's share of a batch: packing the sources, tables);
#   3. render_profile.py: where a batch of 512 of the medium mix spends its time, step by step (crop, each
#      corruption, the batch's one upload, JPEG) and kernel by kernel, and batches back to back with page-locked host buffers against
#      ordinary memory, with the time to enqueue them (the host's share, against render_proxies.py's model)
#      (profile.json);
#   4. render.py --part tta: ResNet-50 (random weights) tta-eval runs of source and tent, fp32, on a medium
#      stream of ImageNet-size photographs rendered on the GPU (ccc-render:…,device=cuda; and device_fast:
#      the sources decoded by nvJPEG, float32 precision) against the same stream on stored shards (ccc:DIR)
#      (tta.json);
#   5. the render part for every corruption alone at batch 512, float64, with the CPU path on one core beside
#      it (corruptions.json);
#   6. feed.py: the loader workers' decode rate per core on this machine (feed.json).
# FOLDER (the argument, else $OUT, else results/gpu_check) receives those files and log.txt (the machine:
# nvidia-smi, package versions; then every part's output). A part that fails is reported in log.txt and the
# next one runs; the exit status is the number of failed parts. Eight files: what a device lease returns at most.
#
# usage: [GPU_CHECK_PARTS="check mix …"] scripts/bench/gpu_check.sh [--quick] [FOLDER]
#   --quick: the same steps on the CPU with tiny sizes and the demo model (a check that it runs);
#   GPU_CHECK_PARTS: run only the parts named (check, mix, mix_float32, profile, tta, corruptions, feed).
set -uo pipefail

quick=0
if [[ "${1:-}" == "--quick" ]]; then
    quick=1
    shift
fi
folder="${1:-${OUT:-results/gpu_check}}"
repository="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PYTHONPATH="${repository}${PYTHONPATH:+:${PYTHONPATH}}"
export PYTHONUNBUFFERED=1
mkdir -p "${folder}"
log="${folder}/log.txt"
: > "${log}"

if ((quick)); then
    check=(--device cpu --batch 2 --corruptions gaussian_noise,contrast)
    mix=(--device cpu --corruptions none --batch-sizes 2,4 --images 4 --cpu-images 2 --repeats 1)
    mix32=(--device cpu --corruptions none --batch-sizes 4 --images 4 --cpu-images 0 --repeats 1)
    each=(--device cpu --corruptions gaussian_noise,contrast --batch-sizes 2,4 --images 4 --cpu-images 2 --repeats 1)
    profile=(--device cpu --batch 4 --repeats 1 --top 5)
    tta=(--device cpu --model demo --method source --precision fp32 --tta-streams shards,device,device_fast
         --tta-samples 64 --tta-warmup 0 --num-workers 1)
    feed=(--quick)
else
    nvidia-smi >> "${log}" 2>&1
    python3 - >> "${log}" 2>&1 <<'EOF'
from importlib import metadata
for name in ("torch", "torchvision", "numpy", "scipy", "scikit-image", "Pillow", "opencv-python",
             "opencv-python-headless", "numba", "webdataset", "ray"):
    try:
        print(name, metadata.version(name))
    except metadata.PackageNotFoundError:
        print(name, "absent")
EOF
    check=(--device cuda --batch 16 --threads 16)
    mix=(--device cuda --threads 8 --corruptions none --batch-sizes 128,256,512,1024 --images 1024 --cpu-images 0
         --repeats 3)
    mix32=("${mix[@]}")
    each=(--device cuda --threads 8 --corruptions all --batch-sizes 512 --images 1024 --cpu-images 16 --repeats 2)
    profile=(--device cuda --batch 512 --repeats 3 --top 30)
    tta=(--device cuda --model resnet50 --method source,tent --precision fp32
         --tta-streams shards,device,device_fast --tta-samples 6400 --tta-warmup 640 --num-workers 12)
    feed=(--images 100 --repeats 2 --loader-images 256)
fi

failed=0
part() {
    local name="$1"
    shift
    if [[ -n "${GPU_CHECK_PARTS:-}" && " ${GPU_CHECK_PARTS} " != *" ${name} "* ]]; then
        return
    fi
    echo "== ${name}: $*" >> "${log}"
    local start=${SECONDS}
    if "$@" >> "${log}" 2>&1; then
        echo "== ${name}: done in $((SECONDS - start)) s" | tee -a "${log}"
    else
        echo "== ${name}: FAILED (exit $?) after $((SECONDS - start)) s" | tee -a "${log}"
        failed=$((failed + 1))
    fi
}

bench="${repository}/scripts/bench"
part check python3 "${bench}/render_check.py" "${check[@]}" --json "${folder}/check.json"
part mix python3 "${bench}/render.py" --part render "${mix[@]}" --json "${folder}/mix.json"
part mix_float32 python3 "${bench}/render.py" --part render "${mix32[@]}" --render-precision float32 \
    --json "${folder}/mix_float32.json"
part profile python3 "${bench}/render_profile.py" "${profile[@]}" --json "${folder}/profile.json"
part tta python3 "${bench}/render.py" --part tta "${tta[@]}" --json "${folder}/tta.json"
part corruptions python3 "${bench}/render.py" --part render "${each[@]}" --json "${folder}/corruptions.json"
part feed python3 "${bench}/feed.py" "${feed[@]}" --json "${folder}/feed.json"
exit "${failed}"
