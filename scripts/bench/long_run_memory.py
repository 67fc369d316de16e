"""Memory over a long tta-eval run: resident set size (RSS) at checkpoints of a 1,000,000-sample stream.

Runs ``tta_eval.experiment.run_experiment`` (what ``tta-eval run`` does: records streamed row by row
to CSV files, the in-memory ``RecordTable`` of every method, the summary at the end) on a cheap
synthetic stream (``synthetic:``, 16×16 images, the tiny CNN) and records, as the protocol consumes
the stream, the process's RSS (``VmRSS``) and peak RSS (``VmHWM``) from ``/proc/self/status`` at
every ``--every`` samples, plus the bytes the in-memory records hold per batch.

    nice -n 5 python scripts/bench/long_run_memory.py --samples 1000000 --method source --method tent \
        --json long_run_memory.json

Prints one line per checkpoint and a table at the end (samples, RSS MB, peak MB, record rows, record
bytes per batch). Linux only (/proc).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ccc.models import ModelSpec
from tta_eval.experiment import run_experiment
from tta_eval.records import BatchRecord, RecordTable
from tta_eval.settings import ExperimentSettings, MethodSpec
from tta_eval.streams import SizedStream, StreamOptions, open_stream_source, register_stream_source

SCHEME = "memory_probe"
CHECKPOINTS: list[dict[str, Any]] = []


def status_megabytes(field: str) -> float:
    """A ``/proc/self/status`` memory field (``VmRSS``, ``VmHWM``) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def record_bytes_per_batch(rows: int = 20_000) -> float:
    """Bytes a RecordTable holds per appended record (tracemalloc), each record with a fresh domain
    string object, as the majority domain of a CCC batch ("n1→n2") is."""
    table = RecordTable()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(rows):
            domain = "→".join(("gaussian_noise", f"fog{index % 3}"))
            table.append(BatchRecord("m", index, index * 64, 64, 10, 64, 0.5, False, False, 0.01, domain))
        return (tracemalloc.get_traced_memory()[0] - before) / rows
    finally:
        tracemalloc.stop()


def _probe(location: str, options: StreamOptions) -> SizedStream:
    every, _, synthetic = location.partition(";")
    inner = open_stream_source(f"synthetic:{synthetic}", options)
    length = getattr(inner, "spec").num_batches * options.batch_size
    return SizedStream(_probed(inner, int(every)), length)


def _probed(batches: Any, every: int) -> Iterator[Any]:
    seen = 0
    start = time.monotonic()
    next_checkpoint = every
    for item in batches:
        yield item
        seen += int(item[1].shape[0])
        if seen >= next_checkpoint:
            entry = {
                "samples": seen,
                "rss_mb": round(status_megabytes("VmRSS"), 1),
                "peak_rss_mb": round(status_megabytes("VmHWM"), 1),
                "seconds": round(time.monotonic() - start, 1),
            }
            CHECKPOINTS.append(entry)
            print(json.dumps(entry), flush=True)
            next_checkpoint += every


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=1_000_000, help="stream length in samples (default 1,000,000)")
    parser.add_argument("--every", type=int, default=100_000, help="samples between RSS checkpoints (default 100,000)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--method", action="append", help="method (repeatable; default: source and tent)")
    parser.add_argument("--out", type=Path, default=None, help="results folder (default: a temporary folder)")
    parser.add_argument("--json", type=Path, default=None, help="write the checkpoints and settings here")
    arguments = parser.parse_args()
    torch.set_num_threads(1)
    register_stream_source(SCHEME, _probe)
    num_batches = -(-arguments.samples // arguments.batch_size)
    stream = f"{SCHEME}:{arguments.every};num_batches={num_batches},domain_length=500"
    methods = tuple(MethodSpec.parse(text) for text in (arguments.method or ["source", "tent"]))
    with tempfile.TemporaryDirectory() as folder:
        output_root = arguments.out or Path(folder)
        settings = ExperimentSettings(
            stream=stream,
            methods=methods,
            model=ModelSpec("tta_eval.synthetic:pretrained_tiny_cnn"),
            output_root=output_root,
            run_name="long_run_memory",
            stream_options=StreamOptions(batch_size=arguments.batch_size),
            collapse_reference=None,
            window=10_000,
            collapse_span=50_000,
            overwrite=True,
            progress=False,
        )
        started = time.monotonic()
        run_dir = run_experiment(settings)
        elapsed = time.monotonic() - started
        csv_bytes = sum(path.stat().st_size for path in (run_dir / "records").glob("*.csv"))
    per_batch = record_bytes_per_batch()
    result = {
        "samples": arguments.samples,
        "batch_size": arguments.batch_size,
        "methods": [method.label for method in methods],
        "seconds": round(elapsed, 1),
        "checkpoints": CHECKPOINTS,
        "final_peak_rss_mb": round(status_megabytes("VmHWM"), 1),
        "record_csv_bytes": csv_bytes,
        "record_table_bytes_per_batch": round(per_batch, 1),
    }
    print("| samples | RSS MB | peak RSS MB | seconds |")
    print("|---:|---:|---:|---:|")
    for entry in CHECKPOINTS:
        print(f"| {entry['samples']:,} | {entry['rss_mb']:.0f} | {entry['peak_rss_mb']:.0f} | {entry['seconds']:.0f} |")
    print(
        f"records: {csv_bytes / 1e6:.1f} MB of CSV; in memory {per_batch:.0f} bytes per batch and method "
        f"({per_batch * num_batches * len(methods) / 1e6:.1f} MB for this run)"
    )
    if arguments.json:
        arguments.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
