#!/usr/bin/env bash
# Run ccc-generate on a Ray cluster spanning a SLURM allocation (one task per node).
# Usage: sbatch --nodes=N --ntasks-per-node=1 --cpus-per-task=C slurm_generate.sh <ccc-generate arguments>
# The head runs on the first node of the allocation; outputs are written there (see README.md).
set -euo pipefail
exec "$(dirname "$0")/slurm_ray.sh" ccc-generate --ray-address auto "$@"
