"""A long CCC horizon end to end on one machine: render a stream with ``ccc-generate``, evaluate it with
``tta-eval run``, each killed once (SIGKILL to the whole process group, Ray workers included) and resumed
by running the same command again; memory sampled over both.

    nice -n 5 python scripts/bench/long_horizon.py --images 1000000 --work /tmp/long_horizon \\
        --json long_horizon.json -- --demo --corruption-set cifar --difficulty medium

Arguments after ``--`` go to ``ccc-generate`` (the stream); ``--method`` (repeatable, default source and bn)
and ``--tta-arg`` go to ``tta-eval run`` (``--render-only``: no evaluation; ``--evaluate-only``: evaluate what an
earlier run rendered). Each command runs in its own process group with its working
directory ``--work``; stdout and stderr go to ``<work>/<command>.log``. What is measured:

- **images per second** of each command: stream length / wall seconds of the whole command (the killed
  run, the restart and the resumed run together: what a user who lost a run to a kill waits);
- **memory**: every ``--sample-every`` seconds the proportional set size (``Pss`` of
  ``/proc/PID/smaps_rollup``, shared pages split between the processes that share them) summed over the
  command's process tree (Ray's raylet, GCS and workers are descendants of the driver), and the driver's
  own ``VmRSS``; "flat" means the last quarter's median is within ``--flat-tolerance`` of the second
  quarter's (over the run that finished); per kind of process (driver, Ray workers, ``gcs_server``,
  ``raylet``, Ray's Python helpers by script name) the same two medians and the growth between them in MB per
  100,000 images (for a command that was not killed);
- **the kill** (``--kill-render-at`` / ``--kill-eval-at`` seconds): the command's process group gets
  SIGKILL then; the same command is run again and must finish with exit code 0 (its log says where it
  resumed);
- **10,000,000 images**: ten times the measured wall seconds per million (rendering is per sample,
  evaluation per batch, and memory is flat).

The JSON holds every sample and number; the closing table prints them. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def process_tree(root: int) -> list[int]:
    """``root`` and every descendant process id (from ``/proc/*/stat``'s parent ids)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(children.get(pid, []))
    return tree


def proc_kilobytes(path: str, field: str) -> int:
    """One ``field:`` of a ``/proc`` memory file in kB; 0 when the process has gone."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def process_kind(pid: int, root: int) -> str:
    """What process ``pid`` of ``root``'s tree is: ``driver`` (``root``), ``workers`` (Ray workers, ``ray::…``),
    ``gcs_server`` or ``raylet`` (Ray's binaries), else the name of its program or Python script (e.g.
    ``log_monitor.py``); ``gone`` when it has ended."""
    if pid == root:
        return "driver"
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return "gone"
    if argv[0].startswith("ray::") or any(argument.endswith("default_worker.py") for argument in argv):
        return "workers"
    program = Path(argv[0].split()[0] if argv[0] else "?").name
    if program.startswith("python"):
        return next((Path(argument).name for argument in argv[1:] if argument.endswith(".py")), program)
    return program


def memory_sample(root: int) -> dict[str, Any]:
    """PSS of ``root``'s process tree and ``root``'s own RSS, in MB, the tree's process count and its PSS per
    kind of process (:func:`process_kind`)."""
    tree = process_tree(root)
    by_kind: dict[str, float] = {}
    for pid in tree:
        kind = process_kind(pid, root)
        by_kind[kind] = by_kind.get(kind, 0.0) + proc_kilobytes(f"/proc/{pid}/smaps_rollup", "Pss") / 1024
    return {
        "tree_pss_mb": sum(by_kind.values()),
        "driver_rss_mb": proc_kilobytes(f"/proc/{root}/status", "VmRSS") / 1024,
        "processes": len(tree),
        "pss_mb_by_process": {kind: round(mb, 1) for kind, mb in sorted(by_kind.items()) if kind != "gone"},
    }


def run_command(
    argv: Sequence[str], work: Path, log_name: str, sample_every: float, kill_at_seconds: float | None
) -> dict[str, Any]:
    """Run ``argv`` in its own process group under ``work``; sample memory; SIGKILL the group after
    ``kill_at_seconds`` (None: let it finish). Returns wall seconds, exit code and the samples."""
    samples: list[dict[str, float]] = []
    with open(work / log_name, "a") as log:
        log.write(f"\n$ {' '.join(argv)}\n")
        log.flush()
        start = time.monotonic()
        process = subprocess.Popen(argv, cwd=work, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        killed = False
        while process.poll() is None:
            time.sleep(sample_every)
            elapsed = time.monotonic() - start
            if process.poll() is None:
                samples.append({"seconds": round(elapsed, 1), **memory_sample(process.pid)})
            if kill_at_seconds is not None and elapsed >= kill_at_seconds and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                killed = True
        return {
            "argv": list(argv),
            "wall_s": time.monotonic() - start,
            "exit_code": process.returncode,
            "killed": killed,
            "memory": samples,
        }


def flat(samples: list[dict[str, float]], key: str, tolerance: float) -> dict[str, Any]:
    """Median of ``key`` over the second and the last quarter of ``samples`` and whether they agree
    within ``tolerance`` (a fraction)."""
    values = [sample[key] for sample in samples]
    if len(values) < 8:
        return {"second_quarter_mb": None, "last_quarter_mb": None, "flat": None}
    quarter = len(values) // 4
    second, last = statistics.median(values[quarter : 2 * quarter]), statistics.median(values[-quarter:])
    return {
        "second_quarter_mb": round(second, 1),
        "last_quarter_mb": round(last, 1),
        "max_mb": round(max(values), 1),
        "flat": abs(last - second) <= tolerance * second,
    }


def growth_by_process(samples: list[dict[str, Any]], images: int) -> dict[str, dict[str, float]]:
    """Per kind of process (:func:`process_kind`): PSS medians of the second and the last quarter of ``samples``
    (MB) and the growth between them per 100,000 images, for a run that rendered or read ``images`` at an even
    pace (the quarters' middles lie half the run apart); empty with fewer than 8 samples."""
    if len(samples) < 8:
        return {}
    quarter = len(samples) // 4
    kinds = sorted({kind for sample in samples for kind in sample["pss_mb_by_process"]})
    growth = {}
    for kind in kinds:
        values = [sample["pss_mb_by_process"].get(kind, 0.0) for sample in samples]
        second, last = statistics.median(values[quarter : 2 * quarter]), statistics.median(values[-quarter:])
        per_100k = (last - second) / (images / 2) * 100_000
        growth[kind] = {"second_quarter_mb": round(second, 1), "last_quarter_mb": round(last, 1)}
        growth[kind]["mb_per_100k_images"] = round(per_100k, 2)
    return growth


def killed_and_resumed(
    argv: Sequence[str], work: Path, name: str, sample_every: float, kill_at_seconds: float
) -> dict[str, Any]:
    """Run ``argv``, kill it after ``kill_at_seconds``, run it again to the end; both runs' records."""
    first = run_command(argv, work, f"{name}.log", sample_every, kill_at_seconds)
    second = run_command(argv, work, f"{name}.log", sample_every, None)
    if second["exit_code"] != 0:
        raise SystemExit(f"{name}: the resumed run ended with exit code {second['exit_code']}; see {work / name}.log")
    return {"first": first, "resumed": second, "wall_s": first["wall_s"] + second["wall_s"]}


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    generate_extra = arguments[arguments.index("--") + 1 :] if "--" in arguments else []
    own = arguments[: arguments.index("--")] if "--" in arguments else arguments
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=1_000_000, help="stream length (default 1,000,000)")
    parser.add_argument("--work", type=Path, required=True, help="working folder (shards/ and results/ go here)")
    parser.add_argument("--method", action="append", default=None, help="tta-eval method (default: source, bn)")
    parser.add_argument("--tta-arg", action="append", default=[], help="one more tta-eval run argument")
    parser.add_argument("--kill-render-at", type=float, default=None, help="seconds into ccc-generate (default: none)")
    parser.add_argument("--kill-eval-at", type=float, default=None, help="seconds into tta-eval run (default: none)")
    parser.add_argument("--sample-every", type=float, default=5.0, help="memory sampling period, seconds")
    parser.add_argument("--flat-tolerance", type=float, default=0.05, help="flat memory: relative tolerance")
    parser.add_argument(
        "--evaluate-only", action="store_true", help="evaluate the stream an earlier run rendered under --work"
    )
    parser.add_argument("--render-only", action="store_true", help="render the stream, do not evaluate it")
    parser.add_argument("--json", type=Path, help="write every number here")
    options = parser.parse_args(own)
    options.work.mkdir(parents=True, exist_ok=True)
    run_dir = options.work / "shards" / "long_horizon"
    generate = ["ccc-generate", *generate_extra, "--num-images", str(options.images)]
    generate += ["--out", str(run_dir.parent), "--name", run_dir.name]
    methods = [argument for method in (options.method or ["source", "bn"]) for argument in ("--method", method)]
    evaluate = ["tta-eval", "run", "--stream", f"ccc:{run_dir}", *methods, *options.tta_arg]
    report: dict[str, Any] = {"images": options.images, "generate": generate, "evaluate": evaluate}
    steps = [("render", generate, options.kill_render_at), ("evaluate", evaluate, options.kill_eval_at)]
    if options.evaluate_only and options.render_only:
        parser.error("--evaluate-only and --render-only exclude each other")
    steps = steps[1:] if options.evaluate_only else steps[:1] if options.render_only else steps
    for name, command, kill_at in steps:
        print(f"{name}: {' '.join(command)}", file=sys.stderr, flush=True)
        if kill_at is None:
            result = run_command(command, options.work, f"{name}.log", options.sample_every, None)
            if result["exit_code"] != 0:
                raise SystemExit(f"{name} ended with exit code {result['exit_code']}; see {options.work / name}.log")
            runs = {"first": result, "wall_s": result["wall_s"]}
        else:
            runs = killed_and_resumed(command, options.work, name, options.sample_every, kill_at)
        samples = [sample for run in ("first", "resumed") if run in runs for sample in runs[run]["memory"]]
        runs["images_per_s"] = options.images / runs["wall_s"]
        runs["memory_flat"] = flat(runs.get("resumed", runs["first"])["memory"], "tree_pss_mb", options.flat_tolerance)
        runs["peak_tree_pss_mb"] = max((sample["tree_pss_mb"] for sample in samples), default=None)
        if kill_at is None:
            runs["growth_by_process"] = growth_by_process(runs["first"]["memory"], options.images)
        runs["estimate_10m_hours"] = runs["wall_s"] * 10_000_000 / options.images / 3600
        report[name] = runs
        rate, hours = f"{runs['images_per_s']:,.0f} images/s", f"{runs['estimate_10m_hours']:.1f} h"
        summary = f"{options.images:,} images in {runs['wall_s']:.0f} s ({rate}), memory {runs['memory_flat']}"
        print(f"{name}: {summary}, 10M images ≈ {hours}", file=sys.stderr)
        for kind, growth in runs.get("growth_by_process", {}).items():
            print(f"{name}: {kind}: {growth}", file=sys.stderr)
    if options.json:
        options.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
