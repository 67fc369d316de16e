#!/usr/bin/env bash
# Evaluate methods over the 27 paper streams on a Ray cluster spanning a SLURM allocation: one Ray task
# per stream (all methods in lockstep), one GPU each with --device cuda.
# Usage: sbatch --nodes=N --ntasks-per-node=1 --cpus-per-task=C --gpus-per-node=G slurm_evaluate.sh \
#            SHARDS_FOLDER <tta-eval run arguments: --method ..., --device cuda, --out ...>
# SHARDS_FOLDER and --out must be on a file system every node mounts at the same path (see README.md).
set -euo pipefail

here="$(dirname "$0")"
shards="${1:?usage: slurm_evaluate.sh SHARDS_FOLDER <tta-eval run arguments>}"
shift
streams="$("$here/paper_streams.sh" "$shards")"   # stops here, naming them, when streams are missing
# shellcheck disable=SC2086  # each line is "--stream ccc:PATH": split into its two words on purpose
exec "$here/slurm_ray.sh" tta-eval run $streams --ray-address auto --no-progress "$@"
