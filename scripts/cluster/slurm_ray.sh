#!/usr/bin/env bash
# Start a Ray cluster spanning a SLURM allocation (one task per node), run one command on the head
# node with RAY_ADDRESS set (so that '--ray-address auto' finds the cluster), then stop Ray.
# Usage: sbatch --nodes=N --ntasks-per-node=1 --cpus-per-task=C [--gpus-per-node=G] slurm_ray.sh COMMAND [ARGUMENTS...]
# Ray detects each node's GPUs itself (CUDA_VISIBLE_DEVICES, as SLURM sets it). See README.md.
set -euo pipefail

export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"   # trusted cluster network assumed
port="${RAY_PORT:-6379}"
cpus="${SLURM_CPUS_PER_TASK:-$(nproc)}"
mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
head_node="${nodes[0]}"
head_address="$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address | awk '{print $1}'):${port}"

srun --nodes=1 --ntasks=1 -w "$head_node" \
    ray start --head --port="$port" --num-cpus="$cpus" --include-dashboard=false --block &
sleep 20
for node in "${nodes[@]:1}"; do
    srun --nodes=1 --ntasks=1 -w "$node" ray start --address="$head_address" --num-cpus="$cpus" --block &
done
sleep 20

status=0
RAY_ADDRESS="$head_address" "$@" || status=$?

for node in "${nodes[@]}"; do
    srun --nodes=1 --ntasks=1 -w "$node" ray stop || true
done
wait || true
exit "$status"
