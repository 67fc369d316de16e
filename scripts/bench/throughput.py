r"""Throughput where evaluation runs: methods' images/s per precision, rendering on the fly per worker,
and how many render workers keep a model fed.

Two parts (both by default):

- ``methods``: images/s of each method (default source, bn, tent, eta, rdumb) through the real run
  machinery (``evaluate_protocol``, offline protocol, measured wall time of each method call, the
  device synchronised) on ``--batches`` in-memory batches of random 224×224 images, for every
  ``--precision`` (fp32; bf16/fp16 on CUDA) and optionally ``--channels-last``. The first
  ``WARMUP_BATCHES`` batches are excluded. Filters are opened (as in ``tta.py``) so that a random
  input adapts on every batch, as a trained model on real images mostly does.
- ``render``: images/s of a ``ccc-render:`` stream (``ccc.render_stream`` → float tensors in [0, 1]
  through ``stream_loader``) at 224 px, with 0 DataLoader workers (in this process: the rate of one
  worker; stretches spread over the whole stream) and with ``--workers`` workers, for the demo world
  (procedural 320×240 images, its table) and an ImageNet-layout folder of 500×375 photographs
  (synthetic 15-corruption table, the ResNet-50 "medium" preset). The first batch (worker start-up)
  is excluded.

On the CPU, rates are CPU time of this process by default (``--clock cpu``; one torch thread, one
rendering process), so they hold on a shared machine; ``--clock wall`` gives elapsed time, the
default on CUDA (the records' measured seconds, device synchronised).

Then, per model and method: render workers needed = method images/s ÷ images/s of one worker.

    python scripts/bench/throughput.py --model demo --device cpu --threads 1              # CPU, fp32
    python scripts/bench/throughput.py --model resnet50 --device cuda --precision fp32,bf16 --channels-last \
        --workers 8 --json tp.json

``--model``: ``demo`` (the demo CNN), or a torchvision name with random weights (speed only).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generate import make_source_folder, synthetic_table  # noqa: E402

from ccc.demo import DEMO_NUM_IMAGES  # noqa: E402
from ccc.models import ModelSpec, load_model, resolve_device  # noqa: E402
from tta_eval.methods import create  # noqa: E402
from tta_eval.protocols import OfflineProtocol, RunContext, evaluate_protocol  # noqa: E402
from tta_eval.streams import StreamOptions, open_stream_source  # noqa: E402

DEFAULT_METHODS = "source,bn,tent,eta,rdumb"
WARMUP_BATCHES = 2
OPEN_FILTERS: dict[str, dict] = {
    "eta": {"entropy_margin_fraction": 1.0, "redundancy_margin": 1.0},
    "rdumb": {"entropy_margin_fraction": 1.0, "redundancy_margin": 1.0},
}


def build_model(name: str, device: torch.device) -> torch.nn.Module:
    """The demo model, or a torchvision model with random weights (1,000 classes), on ``device``."""
    spec = ModelSpec("ccc.demo:demo_model") if name == "demo" else ModelSpec(name, "none")
    return load_model(spec, device)


def _timed(stream: list, clock_start: list[float]) -> object:
    """Yield ``stream``'s items; record the CPU time when the first timed batch is requested."""
    for index, item in enumerate(stream):
        if index == WARMUP_BATCHES:
            clock_start.append(time.process_time())
        yield item


def method_rates(
    model: torch.nn.Module,
    methods: list[str],
    device: torch.device,
    precision: str,
    channels_last: bool,
    batches: int,
    batch_size: int,
    clock: str,
) -> dict[str, float]:
    """Images/s of each method under the offline protocol: with clock "wall", from the median of the
    records' measured seconds per call (device synchronised); with "cpu", from this process's CPU
    time over the timed batches (protocol and records included; robust to other load on a shared
    machine, meaningful with one thread on the CPU)."""
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(batch_size, 3, 224, 224, generator=generator)
    with torch.no_grad():
        classes = int(model(images[:2].to(device)).shape[1])
    labels = torch.randint(0, classes, (batch_size,), generator=generator)
    stream = [(images, labels)] * (batches + WARMUP_BATCHES)
    rates = {}
    for name in methods:
        method = create(name, model, **OPEN_FILTERS.get(name, {}))
        clock_start: list[float] = []
        context = RunContext(device, precision=precision, channels_last=channels_last)
        table = evaluate_protocol({name: method}, _timed(stream, clock_start), OfflineProtocol(), context)[name]
        if clock == "cpu":
            rates[name] = batches * batch_size / (time.process_time() - clock_start[0])
        else:
            rates[name] = batch_size / statistics.median(table.column("seconds")[WARMUP_BATCHES:])
        print(
            f"  {name} {precision}{' channels-last' if channels_last else ''}: {rates[name]:.1f} images/s",
            file=sys.stderr,
            flush=True,
        )
    return rates


RENDER_SEGMENTS = 8
"""The per-worker render rate is measured on this many stretches spread evenly over the stream (the
corruption pairs and severities, and so the cost per image, change along a stream)."""


def _segment_rate(
    stream_text: str, start: int, workers: int, samples: int, batch_size: int, timer: object
) -> tuple[int, float]:
    """(samples, seconds) of reading ``samples`` from sample ``start`` on (first batch excluded with workers)."""
    stream = open_stream_source(
        f"{stream_text},start={start}", StreamOptions(batch_size=batch_size, num_workers=workers)
    )
    iterator = iter(stream)
    if workers:
        next(iterator)
    started = timer()  # type: ignore[operator]
    seen = 0
    for images, _, _ in iterator:
        seen += images.shape[0]
        if seen >= samples:
            break
    return seen, timer() - started  # type: ignore[operator]


def render_rate(stream_text: str, length: int, workers: int, samples: int, batch_size: int, clock: str) -> float:
    """Images/s of a ``ccc-render:`` stream of ``length`` samples through ``workers`` DataLoader workers.

    0 workers: ``RENDER_SEGMENTS`` stretches spread over the stream, CPU time of this process with
    clock "cpu" (the rate of one core). Otherwise: one stretch from the middle of the stream, wall
    time, the first batch (worker start-up) excluded."""
    if workers:
        seen, seconds = _segment_rate(stream_text, length // 2, workers, samples, batch_size, time.perf_counter)
        return seen / seconds
    timer = time.process_time if clock == "cpu" else time.perf_counter
    parts = [
        _segment_rate(
            stream_text,
            index * length // RENDER_SEGMENTS,
            0,
            max(batch_size, samples // RENDER_SEGMENTS),
            batch_size,
            timer,
        )
        for index in range(RENDER_SEGMENTS)
    ]
    return sum(seen for seen, _ in parts) / sum(seconds for _, seconds in parts)


def render_streams(folder: Path) -> dict[str, tuple[str, int]]:
    """``ccc-render:`` texts and lengths of the demo world's stream and of a paper-length stream over
    an ImageNet-layout folder of photographs."""
    table = folder / "table.npz"
    synthetic_table().save(table)
    images = make_source_folder(folder / "val", 200)
    return {
        "demo world (320×240 sources)": ("ccc-render:demo,difficulty=medium,seed=43", DEMO_NUM_IMAGES),
        "ImageNet layout (500×375 sources)": (
            f"ccc-render:difficulty=medium,speed=200,seed=43,num_images=7500000,imagenet={images},calibration={table}",
            7_500_000,
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("all", "methods", "render"), default="all")
    parser.add_argument("--model", action="append", help="demo or a torchvision name (repeatable; default: demo)")
    parser.add_argument(
        "--method", default=DEFAULT_METHODS, help=f"comma-separated methods (default {DEFAULT_METHODS})"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--precision", default="fp32", help="comma-separated: fp32, bf16, fp16 (reduced precision on CUDA only)"
    )
    parser.add_argument(
        "--channels-last", action="store_true", help="also measure every precision with channels-last memory format"
    )
    parser.add_argument("--batches", type=int, default=10, help="timed batches per method (default 10)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for the methods on the CPU (default 1)")
    parser.add_argument(
        "--render-samples", type=int, default=320, help="samples timed per render measurement (default 320)"
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="DataLoader workers of the second render measurement (default 2)"
    )
    parser.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default=None,
        help=(
            "cpu: CPU time of this process (default on the CPU; robust to other load), wall: elapsed (default on CUDA)"
        ),
    )
    parser.add_argument("--json", type=Path, default=None)
    arguments = parser.parse_args()
    torch.set_num_threads(arguments.threads)
    device = resolve_device(arguments.device)
    precisions = arguments.precision.split(",")
    clock = arguments.clock or ("cpu" if device.type == "cpu" else "wall")
    if device.type == "cpu" and precisions != ["fp32"]:
        parser.error("reduced precision needs a CUDA device; CPU runs use fp32")
    result: dict = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "threads": arguments.threads,
        "clock": clock,
        "batch_size": arguments.batch_size,
        "methods": {},
        "render": {},
    }
    if arguments.part in ("all", "methods"):
        for model_name in arguments.model or ["demo"]:
            model = build_model(model_name, device)
            for precision in precisions:
                for channels_last in (False, True) if arguments.channels_last else (False,):
                    key = f"{model_name} {precision}{' channels-last' if channels_last else ''}"
                    result["methods"][key] = method_rates(
                        model,
                        arguments.method.split(","),
                        device,
                        precision,
                        channels_last,
                        arguments.batches,
                        arguments.batch_size,
                        clock,
                    )
    if arguments.part in ("all", "render"):
        with tempfile.TemporaryDirectory() as folder:
            for label, (text, length) in render_streams(Path(folder)).items():
                rates = {
                    workers: render_rate(text, length, workers, arguments.render_samples, arguments.batch_size, clock)
                    for workers in (0, arguments.workers)
                }
                result["render"][label] = rates
                print(
                    f"  render {label}: "
                    + ", ".join(f"{workers} workers {rate:.1f} images/s" for workers, rate in rates.items()),
                    file=sys.stderr,
                    flush=True,
                )
    print(
        f"device: {result['device']}, torch {result['torch']}, {arguments.threads} thread(s), "
        f"batch {arguments.batch_size}, clock: {clock}"
    )
    if result["methods"]:
        names = arguments.method.split(",")
        print("\n| model, precision | " + " | ".join(names) + " |\n|---|" + "---:|" * len(names))
        for key, rates in result["methods"].items():
            print(f"| {key} | " + " | ".join(f"{rates[name]:.0f}" for name in names) + " |")
    if result["render"]:
        print(
            f"\n| rendered stream (224 px, float) | images/s, 1 worker (in process, {clock} time) "
            f"| images/s, {arguments.workers} workers (wall) |\n|---|---:|---:|"
        )
        for label, rates in result["render"].items():
            print(f"| {label} | {rates[0]:.1f} | {rates[arguments.workers]:.1f} |")
    if result["methods"] and result["render"]:
        print("\nrender workers needed to keep the method fed (method images/s ÷ one worker's images/s):\n")
        for key, rates in result["methods"].items():
            for label, render in result["render"].items():
                needed = ", ".join(f"{name} {rate / render[0]:.1f}" for name, rate in rates.items())
                print(f"- {key} on {label}: {needed}")
    if arguments.json:
        arguments.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
