"""Benchmark of tta_eval's own overhead: time per batch outside model forward/backward, and memory.

For each method (default: source, bn, tent, eta, rdumb) a fresh process runs the offline protocol
over ``--batches`` batches (cycled from 32 pre-generated in-memory batches, so no data loading is
timed), collecting records in a RecordTable and writing them to a CSV file as ``tta-eval run`` does.
Forward time is measured by a wrapper around the model, backward time by wrapping
``torch.Tensor.backward``; everything else (filters, optimiser step, resets, records, CSV, protocol)
is overhead, split into time inside the method call (its loss, filters, optimiser step, resets) and
the protocol and record keeping around it. Memory: resident set size (RSS) sampled at 5 points of
the run and its peak.

    python scripts/bench/tta.py                          # 20,000 batches per method (long)
    python scripts/bench/tta.py --batches 2000 --model resnet18 --image-size 32
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import resource
import tempfile
import time
from pathlib import Path

import torch
import torchvision
from torch import nn

from tta_eval.methods import create
from tta_eval.protocols import OfflineProtocol, run_offline
from tta_eval.records import CsvRecordWriter, RecordTable
from tta_eval.synthetic import tiny_bn_cnn

DEFAULT_METHODS = ("source", "bn", "tent", "eta", "rdumb")
DISTINCT_BATCHES = 32
MEMORY_SAMPLES = 5


class TimedModel(nn.Module):
    """Wraps a model and accumulates the wall time of its forward calls (seconds)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.seconds = 0.0

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        started = time.perf_counter()
        logits = self.model(images)
        self.seconds += time.perf_counter() - started
        return logits


class TimedMethod(nn.Module):
    """Wraps a method and accumulates the wall time of its calls (seconds); forwards ``last_step``."""

    def __init__(self, method: nn.Module) -> None:
        super().__init__()
        self.method = method
        self.seconds = 0.0

    @property
    def last_step(self):
        return self.method.last_step

    def reset(self) -> None:
        self.method.reset()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        started = time.perf_counter()
        logits = self.method(images)
        self.seconds += time.perf_counter() - started
        return logits


def build_model(name: str, num_classes: int) -> nn.Module:
    """The benchmarked model: the tiny synthetic CNN or a randomly initialised torchvision model."""
    if name == "tiny":
        return tiny_bn_cnn(num_classes).eval()
    return torchvision.models.get_model(name, weights=None, num_classes=num_classes).eval()


def resident_megabytes() -> float:
    """Current resident set size of this process in MB (Linux /proc)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


def benchmark_method(method_name: str, arguments: dict, results: multiprocessing.Queue) -> None:
    """Run one method and put its timing and memory figures on ``results``."""
    torch.set_num_threads(arguments["threads"])
    torch.manual_seed(0)
    timed = TimedModel(build_model(arguments["model"], arguments["classes"]))
    # A random model is never confident: open ETA's filters so it adapts on every batch like a real model.
    options = {"entropy_margin_fraction": 1.0, "redundancy_margin": 1.0} if method_name in ("eta", "rdumb") else {}
    method = TimedMethod(create(method_name, timed, **options))
    timers = [module for module in method.modules() if isinstance(module, TimedModel)]

    backward_seconds = 0.0
    original_backward = torch.Tensor.backward

    def timed_backward(tensor, *args, **kwargs):
        nonlocal backward_seconds
        started = time.perf_counter()
        original_backward(tensor, *args, **kwargs)
        backward_seconds += time.perf_counter() - started

    torch.Tensor.backward = timed_backward
    generator = torch.Generator().manual_seed(1)
    size = arguments["image_size"]
    batches = [
        (
            torch.rand(arguments["batch_size"], 3, size, size, generator=generator),
            torch.randint(0, arguments["classes"], (arguments["batch_size"],), generator=generator),
        )
        for _ in range(DISTINCT_BATCHES)
    ]
    total = arguments["batches"]
    checkpoints = {max(1, round(total * (index + 1) / MEMORY_SAMPLES)) for index in range(MEMORY_SAMPLES)}
    memory = []
    table = RecordTable()
    with tempfile.TemporaryDirectory() as folder, open(Path(folder) / "records.csv", "w", newline="") as handle:
        writer = CsvRecordWriter(handle)
        started = time.perf_counter()
        stream = itertools.islice(itertools.cycle(batches), total)
        for count, record in enumerate(run_offline({method_name: method}, stream, OfflineProtocol()), start=1):
            table.append(record)
            writer.write(record)
            if count in checkpoints:
                memory.append((count, round(resident_megabytes(), 1)))
        elapsed = time.perf_counter() - started
    torch.Tensor.backward = original_backward
    forward_seconds = sum(timer.seconds for timer in timers)
    overhead = elapsed - forward_seconds - backward_seconds
    bookkeeping = elapsed - method.seconds
    results.put(
        {
            "method": method_name,
            "batches": total,
            "ms_per_batch": 1000 * elapsed / total,
            "forward_ms": 1000 * forward_seconds / total,
            "backward_ms": 1000 * backward_seconds / total,
            "overhead_ms": 1000 * overhead / total,
            "overhead_fraction": overhead / elapsed,
            "method_extra_ms": 1000 * (overhead - bookkeeping) / total,
            "bookkeeping_ms": 1000 * bookkeeping / total,
            "bookkeeping_fraction": bookkeeping / elapsed,
            "rss_mb": memory,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=20_000, help="batches per method (default 20,000)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=16)
    parser.add_argument("--model", default="tiny", help="'tiny' (synthetic CNN) or a torchvision model name")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--method", action="append", help="method to benchmark (repeatable)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    arguments = parser.parse_args()
    if arguments.batches < MEMORY_SAMPLES:
        parser.error(f"--batches must be >= {MEMORY_SAMPLES}, got {arguments.batches}")
    settings = {
        "batches": arguments.batches,
        "batch_size": arguments.batch_size,
        "image_size": arguments.image_size,
        "model": arguments.model,
        "classes": arguments.classes,
        "threads": arguments.threads,
    }
    context = multiprocessing.get_context("spawn")
    results = []
    for method_name in arguments.method or DEFAULT_METHODS:
        queue = context.Queue()
        process = context.Process(target=benchmark_method, args=(method_name, settings, queue))
        process.start()
        results.append(queue.get())
        process.join()
    print(f"model {arguments.model}, batch {arguments.batch_size}×3×{arguments.image_size}², {arguments.batches:,} batches, "
          f"{arguments.threads} thread(s), CPU")
    print(
        "| method | ms/batch | forward ms | backward ms | overhead ms (%) | of which in the method ms "
        "| of which protocol + records ms (%) | RSS MB over the run | peak RSS MB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|")
    for result in results:
        rss = " → ".join(f"{megabytes:.0f}" for _, megabytes in result["rss_mb"])
        print(
            f"| {result['method']} | {result['ms_per_batch']:.2f} | {result['forward_ms']:.2f} | "
            f"{result['backward_ms']:.2f} | {result['overhead_ms']:.2f} ({100 * result['overhead_fraction']:.1f}) | "
            f"{result['method_extra_ms']:.2f} | {result['bookkeeping_ms']:.2f} ({100 * result['bookkeeping_fraction']:.1f}) | "
            f"{rss} | {result['peak_rss_mb']:.0f} |"
        )
    if arguments.json:
        arguments.json.write_text(json.dumps({"settings": settings, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
