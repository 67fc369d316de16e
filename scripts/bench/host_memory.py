"""Benchmark of ``ccc.host_memory.reuse_freed_memory``: a demo-model tta-eval run with freed tensor
buffers kept for reuse (what every console script does) against glibc's default behaviour.

Each repeat runs both modes, alternating, each in a fresh process (so that the allocator starts from
its defaults): the offline protocol with the demo world's five methods (source, bn, tent, eta,
rdumb, the demo's options) and the demo model on a ``synthetic:`` stream of ``--batches`` batches of
64 images of 224×224 (no data loading), checkpoints off. Per run: wall time of the run, the child's
user and kernel CPU seconds, minor page faults and peak resident memory. The records' outcomes
(correct predictions, samples adapted, losses, resets; not the timing columns) are the same in both
modes (only where memory comes from differs); the script checks it.

    python scripts/bench/host_memory.py                     # 50 batches (3,200 images), 2 repeats
    python scripts/bench/host_memory.py --batches 100 --repeats 3 --json results/host_memory.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
MODES = ("reuse", "plain")

DRIVER = """
import csv, hashlib, json, resource, sys, time
from pathlib import Path
mode, batches, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
if mode == "reuse":
    from ccc.host_memory import reuse_freed_memory
    reuse_freed_memory()
from ccc.demo import DEMO_METHOD_OPTIONS, DEMO_METHODS, DEMO_MODEL_NAME
from ccc.models import ModelSpec
from tta_eval.experiment import run_experiment
from tta_eval.settings import ExperimentSettings, MethodSpec
settings = ExperimentSettings(
    stream=f"synthetic:num_batches={batches},num_classes=16,image_size=224,batch_size=64",
    methods=tuple(MethodSpec(name, name, tuple(DEMO_METHOD_OPTIONS.get(name, {}).items())) for name in DEMO_METHODS),
    model=ModelSpec(DEMO_MODEL_NAME),
    output_root=out, run_name=mode, overwrite=True, progress=False, checkpoint_every=0,
)
started = time.perf_counter()
folder = run_experiment(settings)
wall = time.perf_counter() - started
usage = resource.getrusage(resource.RUSAGE_SELF)
records = hashlib.sha256()
for path in sorted((folder / "records").glob("*.csv")):
    for row in csv.DictReader(path.open()):
        outcome = [row[key] for key in ("batch_index", "correct", "samples_adapted", "loss", "reset")]
        records.update(repr(outcome).encode())
print(json.dumps({"wall_s": wall, "user_s": usage.ru_utime, "system_s": usage.ru_stime,
                  "minor_faults": usage.ru_minflt, "max_rss_mb": usage.ru_maxrss / 1024,
                  "records_sha256": records.hexdigest()}))
"""


def run_once(mode: str, batches: int, out: Path) -> dict[str, float | str]:
    """One run of ``mode`` in a fresh process; its measurements."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith("MALLOC_")}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY), environment.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-c", DRIVER, mode, str(batches), str(out)],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=50, help="batches of 64 images per run (default: 50)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per mode, alternating (default: 2)")
    parser.add_argument("--json", metavar="FILE", help="also write the measurements as JSON")
    arguments = parser.parse_args(argv)
    if arguments.batches < 1 or arguments.repeats < 1:
        parser.error("--batches and --repeats must be >= 1")
    runs: dict[str, list[dict[str, float | str]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(arguments.repeats):
            for mode in MODES:
                runs[mode].append(run_once(mode, arguments.batches, Path(folder)))
    digests = {run["records_sha256"] for mode in MODES for run in runs[mode]}
    if len(digests) != 1:
        print("records differ between the modes or repeats", file=sys.stderr)
        return 1
    keys = ("wall_s", "user_s", "system_s", "minor_faults", "max_rss_mb")
    medians = {mode: {key: statistics.median(float(run[key]) for run in runs[mode]) for key in keys} for mode in MODES}
    print(f"{arguments.batches} batches of 64 (demo model, 5 methods), median of {arguments.repeats} runs per mode")
    print("| mode | wall s | user s | kernel s | minor page faults | peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode in MODES:
        row = medians[mode]
        print(
            f"| {mode} | {row['wall_s']:.1f} | {row['user_s']:.1f} | {row['system_s']:.1f} "
            f"| {row['minor_faults']:,.0f} | {row['max_rss_mb']:.0f} |"
        )
    print(f"wall time plain ÷ reuse: {medians['plain']['wall_s'] / medians['reuse']['wall_s']:.2f}×; records identical")
    if arguments.json:
        Path(arguments.json).parent.mkdir(parents=True, exist_ok=True)
        Path(arguments.json).write_text(json.dumps({"batches": arguments.batches, "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
