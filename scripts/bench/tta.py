"""Benchmark of tta_eval's methods: slowdown δ/λ, time outside model forward/backward, and memory.

For each method (default: source, bn, tent, eta, rdumb; ``--method all`` runs every registered
method) a fresh process runs the offline protocol over ``--batches`` batches (cycled from 32
pre-generated in-memory batches, so no data loading is timed; a method stops early after at least
``MIN_BATCHES`` batches once ``--time-budget`` seconds have passed), collecting records in a
RecordTable and writing them to a CSV file as ``tta-eval run`` does.

Slowdown: before each batch's method call, a separate copy of the plain model predicts the same
batch (evaluation mode, no gradient): λ_t is its wall time, δ_t that of the method's call (predict +
adapt). δ/λ is the median over batches of δ_t/λ_t, excluding the first ``WARMUP_BATCHES`` batches;
measuring λ next to every call (as Alfarra et al. re-measure λ at each step) keeps the ratio stable
when the machine's load drifts. It is the relative adaptation speed that the time-constrained
protocols depend on (Alfarra et al.'s C = ceil(δ/λ); Tempora's slowdown). The λ calls are excluded
from every other figure.

Overhead: forward time is measured by a wrapper around the model, backward time by wrapping
``torch.Tensor.backward`` and ``torch.autograd.grad``; everything else (filters, optimiser step,
resets, records, CSV, protocol) is overhead, split into time inside the method call (its loss,
filters, optimiser step, resets) and the protocol and record keeping around it. Memory: resident
set size (RSS) sampled at 5 points of the run and its peak.

A randomly initialised model is never confident, so filter thresholds are opened (``BENCH_OPTIONS``)
to make every method adapt on every batch as it would on a trained model; ttac_nq gets source
statistics computed from random images.

    python scripts/bench/tta.py                          # 20,000 batches per method (long)
    python scripts/bench/tta.py --batches 2000 --model resnet18 --image-size 32
    python scripts/bench/tta.py --method all --batches 30 --time-budget 60 --model resnet18 --image-size 32
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import multiprocessing
import resource
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torchvision
from torch import nn

from tta_eval.methods import compute_source_statistics, create, get_method, list_methods
from tta_eval.protocols import OfflineProtocol, run_offline
from tta_eval.records import CsvRecordWriter, RecordTable
from tta_eval.synthetic import tiny_bn_cnn

DEFAULT_METHODS = ("source", "bn", "tent", "eta", "rdumb")
DISTINCT_BATCHES = 32
MEMORY_SAMPLES = 5
WARMUP_BATCHES = 2
MIN_BATCHES = WARMUP_BATCHES + 3
# Filters opened so a random model adapts on every batch (see the module docstring).
BENCH_OPTIONS: dict[str, dict] = {
    "eta": {"entropy_margin_fraction": 1.0, "redundancy_margin": 1.0},
    "rdumb": {"entropy_margin_fraction": 1.0, "redundancy_margin": 1.0},
    "eata": {"entropy_margin_fraction": 1.0, "redundancy_margin": 1.0, "fisher_samples": 64},
    "pl": {"confidence_threshold": 0.0},
    "sar": {"entropy_margin_fraction": 1.0, "recovery_threshold": 0.0},
    "deyo": {"filter_margin_fraction": 1.0, "plpd_threshold": -1.0},
    "ttac_nq": {"confidence_threshold": 0.0},
}
# Published slowdowns on GPUs (ResNet-50, batch 64): Tempora's δ/λ (RTX 4080) and Alfarra et al.'s
# average C = ceil(δ/λ) (A100-class).
PUBLISHED_TEMPORA_SLOWDOWN = {"tent": 2.43, "eta": 2.45, "shot_im": 3.03, "deyo": 3.25, "cmf": 4.01, "sar": 4.89}
PUBLISHED_ALFARRA_C = {"adabn": 1, "tent": 3, "shot": 3, "eata": 3, "sar": 8, "ttac_nq": 12, "memo": 54, "cotta": 103}


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
    """Wraps a method and records the wall time of each call (seconds) and, just before it, that of
    ``plain``'s forward pass on the same batch; forwards ``last_step``, ``reset`` and the stream
    preparation of methods that need it (EATA)."""

    def __init__(self, method: nn.Module, plain: nn.Module) -> None:
        super().__init__()
        self.method = method
        self.plain = plain.eval().requires_grad_(False)
        self.call_seconds: list[float] = []
        self.plain_seconds: list[float] = []

    @property
    def seconds(self) -> float:
        return sum(self.call_seconds)

    @property
    def last_step(self):
        return self.method.last_step

    @property
    def preparation_samples(self) -> int:
        return getattr(self.method, "preparation_samples", 0)

    def prepare(self, image_batches) -> None:
        self.method.prepare(image_batches)

    def reset(self) -> None:
        self.method.reset()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        started = time.perf_counter()
        with torch.no_grad():
            self.plain(images)
        self.plain_seconds.append(time.perf_counter() - started)
        started = time.perf_counter()
        logits = self.method(images)
        self.call_seconds.append(time.perf_counter() - started)
        return logits

    def slowdown(self) -> float:
        """Median of δ_t/λ_t over the calls after the warm-up."""
        ratios = [call / plain for call, plain in zip(self.call_seconds, self.plain_seconds)]
        return statistics.median(ratios[WARMUP_BATCHES:] or ratios)


def build_model(name: str, num_classes: int) -> nn.Module:
    """The benchmarked model: the tiny synthetic CNN or a randomly initialised torchvision model."""
    if name == "tiny":
        return tiny_bn_cnn(num_classes).eval()
    return torchvision.models.get_model(name, weights=None, num_classes=num_classes).eval()


def resident_megabytes() -> float:
    """Current resident set size of this process in MB (Linux /proc)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


def budgeted(batches: list, total: int, budget_seconds: float) -> Iterator:
    """Cycle ``batches`` for ``total`` batches, or fewer (at least MIN_BATCHES) once the budget is spent."""
    started = time.perf_counter()
    for count, batch in enumerate(itertools.islice(itertools.cycle(batches), total)):
        if count >= MIN_BATCHES and time.perf_counter() - started > budget_seconds:
            return
        yield batch


def benchmark_method(method_name: str, arguments: dict, results: multiprocessing.Queue) -> None:
    """Run one method and put its timing and memory figures on ``results``."""
    torch.set_num_threads(arguments["threads"])
    torch.manual_seed(0)
    model = build_model(arguments["model"], arguments["classes"])
    generator = torch.Generator().manual_seed(1)
    size = arguments["image_size"]
    batches = [
        (
            torch.rand(arguments["batch_size"], 3, size, size, generator=generator),
            torch.randint(0, arguments["classes"], (arguments["batch_size"],), generator=generator),
        )
        for _ in range(DISTINCT_BATCHES)
    ]
    plain = copy.deepcopy(model)
    timed = TimedModel(model)
    options = dict(BENCH_OPTIONS.get(method_name, {}))
    with tempfile.TemporaryDirectory() as folder:
        if "source_statistics" in get_method(method_name).option_names():
            statistics_path = Path(folder) / "source.ttac.pt"
            compute_source_statistics(model, (images for images, _ in batches[:8])).save(statistics_path)
            options["source_statistics"] = str(statistics_path)
        method = TimedMethod(create(method_name, timed, **options), plain)
    timers = [module for module in method.modules() if isinstance(module, TimedModel)]

    backward_seconds = 0.0
    original_backward = torch.Tensor.backward
    original_grad = torch.autograd.grad

    def timed_backward(tensor, *args, **kwargs):
        nonlocal backward_seconds
        started = time.perf_counter()
        original_backward(tensor, *args, **kwargs)
        backward_seconds += time.perf_counter() - started

    def timed_grad(*args, **kwargs):
        nonlocal backward_seconds
        started = time.perf_counter()
        gradients = original_grad(*args, **kwargs)
        backward_seconds += time.perf_counter() - started
        return gradients

    torch.Tensor.backward = timed_backward
    torch.autograd.grad = timed_grad
    total = arguments["batches"]
    checkpoints = {max(1, round(total * (index + 1) / MEMORY_SAMPLES)) for index in range(MEMORY_SAMPLES)}
    memory = []
    table = RecordTable()
    count = 0
    with tempfile.TemporaryDirectory() as folder, open(Path(folder) / "records.csv", "w", newline="") as handle:
        writer = CsvRecordWriter(handle)
        started = time.perf_counter()
        stream = budgeted(batches, total, arguments["time_budget"])
        for count, record in enumerate(run_offline({method_name: method}, stream, OfflineProtocol()), start=1):
            table.append(record)
            writer.write(record)
            if count in checkpoints:
                memory.append((count, round(resident_megabytes(), 1)))
        elapsed = time.perf_counter() - started - sum(method.plain_seconds)
    torch.Tensor.backward = original_backward
    torch.autograd.grad = original_grad
    forward_seconds = sum(timer.seconds for timer in timers)
    overhead = elapsed - forward_seconds - backward_seconds
    bookkeeping = elapsed - method.seconds
    total = count
    results.put(
        {
            "method": method_name,
            "batches": total,
            "plain_forward_ms": 1000 * statistics.median(method.plain_seconds[WARMUP_BATCHES:] or method.plain_seconds),
            "method_call_ms": 1000 * statistics.median(method.call_seconds[WARMUP_BATCHES:] or method.call_seconds),
            "slowdown": method.slowdown(),
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
    parser.add_argument(
        "--method", action="append", help="method to benchmark (repeatable; 'all' = every registered method)"
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        default=float("inf"),
        help=f"seconds per method after which it stops (after >= {MIN_BATCHES} batches)",
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    arguments = parser.parse_args()
    if arguments.batches < max(MEMORY_SAMPLES, MIN_BATCHES):
        parser.error(f"--batches must be >= {max(MEMORY_SAMPLES, MIN_BATCHES)}, got {arguments.batches}")
    requested = arguments.method or list(DEFAULT_METHODS)
    names = list_methods() if "all" in requested else requested
    unknown = sorted(set(names) - set(list_methods()))
    if unknown:
        parser.error(f"unknown method(s) {', '.join(unknown)}; available: all, {', '.join(list_methods())}")
    settings = {
        "batches": arguments.batches,
        "batch_size": arguments.batch_size,
        "image_size": arguments.image_size,
        "model": arguments.model,
        "classes": arguments.classes,
        "threads": arguments.threads,
        "time_budget": arguments.time_budget,
    }
    context = multiprocessing.get_context("spawn")
    results = []
    for method_name in names:
        queue = context.Queue()
        process = context.Process(target=benchmark_method, args=(method_name, settings, queue))
        process.start()
        results.append(queue.get())
        process.join()
    print(
        f"model {arguments.model}, batch {arguments.batch_size}×3×{arguments.image_size}², "
        f"up to {arguments.batches:,} batches, "
        f"{arguments.threads} thread(s), CPU"
    )
    print()
    print(
        "| method | batches | λ plain forward ms (median) | δ method ms (median) | δ/λ (median) "
        "| Tempora δ/λ (GPU) | Alfarra C (GPU) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for result in results:
        name = result["method"]
        tempora = PUBLISHED_TEMPORA_SLOWDOWN.get(name)
        alfarra = PUBLISHED_ALFARRA_C.get(name)
        print(
            f"| {name} | {result['batches']} | {result['plain_forward_ms']:.2f} | {result['method_call_ms']:.2f} | "
            f"{result['slowdown']:.2f} | {'' if tempora is None else f'{tempora:.2f}'} | "
            f"{'' if alfarra is None else alfarra} |"
        )
    print()
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
            f"{result['method_extra_ms']:.2f} | "
            f"{result['bookkeeping_ms']:.2f} ({100 * result['bookkeeping_fraction']:.1f}) | "
            f"{rss} | {result['peak_rss_mb']:.0f} |"
        )
    if arguments.json:
        arguments.json.write_text(json.dumps({"settings": settings, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
