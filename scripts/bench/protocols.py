"""Benchmark of the protocol machinery: wall time of a protocol run beyond the method's own compute.

For each protocol (offline, Alfarra with measured C, Tempora discrete at ρ = 100 % with b = 1,
Tempora amortised with a budget spent halfway) one method runs over ``--batches`` in-memory batches
(cycled from 16 pre-generated ones, so no data loading is timed) with measured timing, its records
collected in a RecordTable and written to CSV as ``tta-eval run`` does. Compute is the time inside
the method's calls plus the time of the protocol's non-adapting forward passes (Alfarra's skipped
batches and λ_t reference passes, frozen predictions); everything else (stream handling, clocks,
scheduling, records, CSV) is the protocol's overhead. Each protocol runs ``--repeats`` times,
interleaved; the median is reported. Also timed: the pure Tempora functions on long traces.

    python scripts/bench/protocols.py --batches 1000          # tiny CNN, 16×16 (default: 2,000 batches)
    python scripts/bench/protocols.py --model resnet18 --image-size 32 --classes 100 --batches 100

Numbers: docs/protocols.md ("Performance").
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torchvision
from torch import nn

from tta_eval.methods import create
from tta_eval.protocols import (
    AlfarraProtocol,
    AmortisedProtocol,
    DiscreteProtocol,
    OfflineProtocol,
    RunContext,
    Timing,
    calibrate_baseline_latency,
    execution,
    run_protocol,
)
from tta_eval.protocols.tempora import continuous_utility, served_batches
from tta_eval.records import CsvRecordWriter, RecordTable
from tta_eval.synthetic import tiny_bn_cnn

DISTINCT_BATCHES = 16


class TimedMethod(nn.Module):
    """Wraps a method and accumulates the wall time of its calls (seconds); forwards ``last_step``."""

    def __init__(self, method: nn.Module) -> None:
        super().__init__()
        self.method = method
        self.seconds = 0.0

    @property
    def last_step(self):
        """The wrapped method's last step."""
        return self.method.last_step

    def reset(self) -> None:
        """Reset the wrapped method."""
        self.method.reset()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """The wrapped method's call, timed."""
        started = time.perf_counter()
        logits = self.method(images)
        self.seconds += time.perf_counter() - started
        return logits


class TimedPredictions:
    """Replaces the protocols' non-adapting forward pass with a timed one while installed."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._original = execution.predict_without_adapting

    def __enter__(self) -> TimedPredictions:
        def timed(network: nn.Module, images: torch.Tensor) -> torch.Tensor:
            started = time.perf_counter()
            logits = self._original(network, images)
            self.seconds += time.perf_counter() - started
            return logits

        execution.predict_without_adapting = timed
        return self

    def __exit__(self, *exception: object) -> None:
        execution.predict_without_adapting = self._original


def build_model(name: str, num_classes: int) -> nn.Module:
    """The benchmarked model: the tiny synthetic CNN or a randomly initialised torchvision model."""
    if name == "tiny":
        return tiny_bn_cnn(num_classes).eval()
    return torchvision.models.get_model(name, weights=None, num_classes=num_classes).eval()


def run_once(protocol, method_name: str, model: nn.Module, batches: list, total: int, latency: float) -> dict:
    """One protocol run; seconds of the whole run, of the method's calls and of non-adapting passes."""
    method = TimedMethod(create(method_name, model))
    table = RecordTable()
    stream = itertools.islice(itertools.cycle(batches), total)
    with tempfile.TemporaryDirectory() as folder, open(Path(folder) / "records.csv", "w", newline="") as handle:
        writer = CsvRecordWriter(handle)
        with TimedPredictions() as predictions:
            started = time.perf_counter()
            for record in run_protocol(
                {method_name: method}, stream, protocol, RunContext("cpu", False, Timing("cpu"), latency)
            ):
                table.append(record)
                writer.write(record)
            elapsed = time.perf_counter() - started
    compute = method.seconds + predictions.seconds
    return {
        "elapsed": elapsed,
        "compute": compute,
        "overhead_fraction": (elapsed - compute) / elapsed,
        "overhead_ms_per_batch": 1000 * (elapsed - compute) / total,
        "adapted_fraction": float(table.column("adapted").mean()),
    }


def main() -> None:
    """Parse the options, run every protocol ``--repeats`` times and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=2000, help="batches per run (default 2,000)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=16)
    parser.add_argument("--model", default="tiny", help="'tiny' (synthetic CNN) or a torchvision model name")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--method", default="tent", help="method to run (default tent)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--repeats", type=int, default=3, help="runs per protocol (median reported)")
    arguments = parser.parse_args()
    torch.set_num_threads(arguments.threads)
    torch.manual_seed(0)
    model = build_model(arguments.model, arguments.classes)
    generator = torch.Generator().manual_seed(1)
    size = arguments.image_size
    batches = [
        (
            torch.rand(arguments.batch_size, 3, size, size, generator=generator),
            torch.randint(0, arguments.classes, (arguments.batch_size,), generator=generator),
        )
        for _ in range(DISTINCT_BATCHES)
    ]
    latency = calibrate_baseline_latency(model, batches[0][0]).baseline_latency
    # The amortised run charges overhead beyond half the method's mean step time, with a budget of that
    # overhead for half the batches, so that it freezes about halfway (λ's value does not matter here).
    probe = TimedMethod(create(arguments.method, model))
    for images, _ in batches[:4]:
        probe(images)
    amortised_latency = probe.seconds / 8
    protocols = {
        "offline": (OfflineProtocol(), latency),
        "alfarra (measured C)": (AlfarraProtocol(), latency),
        "discrete ρ=100 % b=1": (DiscreteProtocol(utilisation=1.0, buffer=1), latency),
        "amortised (B spent halfway)": (
            AmortisedProtocol(budget=amortised_latency * arguments.batches / 2),
            amortised_latency,
        ),
    }
    results: dict[str, list[dict]] = {name: [] for name in protocols}
    for _ in range(arguments.repeats):
        for name, (protocol, baseline) in protocols.items():
            results[name].append(run_once(protocol, arguments.method, model, batches, arguments.batches, baseline))

    print(
        f"model {arguments.model}, batch {arguments.batch_size}×3×{size}², {arguments.batches:,} batches, method "
        f"{arguments.method}, {arguments.threads} thread(s), CPU, λ = {1e3 * latency:.2f} ms, "
        f"median of {arguments.repeats}"
    )
    print(
        "| protocol | adapted batches | ms/batch | compute ms/batch "
        "| protocol overhead ms/batch | overhead (% of wall time) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, runs in results.items():
        median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        print(
            f"| {name} | {100 * median['adapted_fraction']:.0f} % | "
            f"{1000 * median['elapsed'] / arguments.batches:.2f} | "
            f"{1000 * median['compute'] / arguments.batches:.2f} | {median['overhead_ms_per_batch']:.3f} | "
            f"{100 * median['overhead_fraction']:.2f} |"
        )

    rng = np.random.default_rng(0)
    count = 1_000_000
    latencies = rng.uniform(0.5, 3.0, count)
    started = time.perf_counter()
    served_batches(latencies, 1.0, buffer=1)
    simulation = time.perf_counter() - started
    started = time.perf_counter()
    continuous_utility(rng.uniform(0, 1, count), latencies, rng.uniform(0, 1, count), 1.0, 2.0)
    utility = time.perf_counter() - started
    print(
        f"pure functions on {count:,} batches: served_batches {1e6 * simulation / count:.2f} µs/batch, "
        f"continuous_utility {1e6 * utility / count:.3f} µs/batch"
    )


if __name__ == "__main__":
    main()
