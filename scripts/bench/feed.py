r"""The feed of the torch renderer: how fast the CPU prepares the source images a GPU renders, per core,
and how many DataLoader workers it takes to feed a given rendering rate; and how far torchvision's
JPEG decoder (``render_stream(..., source_decoder="device")``) is from Pillow's.

On ``--images`` ImageNet-size photographs (500×375 or 375×500, quality 90: ``generate.py``'s
``make_source_folder``, as ``render.py``) and samples spread over a paper-length medium stream
(``render.py``'s, with a speed of ``--images``), timed on one core (one torch thread; CPU time of this process,
``--clock cpu``, the default, robust to other load; ``--clock wall`` for elapsed time), the median over
``--repeats``:

- ``pillow_worker``: a loader worker's work per sample with the default ``source_decoder="pillow"``:
  ``plan_sample``, reading the file, ``ccc.render.decode_source`` (Pillow, RGB), as a numpy array;
- ``pillow_decode``: ``decode_source`` of bytes in memory alone;
- ``torchvision_decode``: ``torchvision.io.decode_jpeg(bytes, mode=RGB)`` on the CPU (libjpeg-turbo),
  the decoder ``source_decoder="device"`` uses on a CPU device (nvJPEG on CUDA is not measured here);
- ``device_decoder_worker``: a worker's work with ``source_decoder="device"`` (plan, read, header
  check; the JPEG's bytes are sent, not decoded);
- ``workers_needed``: for 1,000, 5,000, 10,000 and 20,000 images/s, ``ceil(rate / per-core rate)``
  loader workers (one core each) of ``pillow_worker`` and of ``device_decoder_worker``;
- ``loader``: images/s (wall) of the workers' side of ``stream_loader(render_stream(...,
  device="cpu"))`` (planning, reading, decoding, collating batches of ``--batch-size``; not rendering)
  with ``num_workers`` 0 and 1 (``--loader-images`` samples);
- ``fidelity``: Pillow's and torchvision's CPU decodes of the photographs re-encoded with several
  settings (4:2:0, 4:2:2, 4:4:4 chroma subsampling; quality 75, 90, 95; grayscale): the share of
  differing bytes and the largest difference; and the rendered images (``render_batch(jpeg=True)`` on
  the CPU of the medium-mix samples) from either decode.

Usage::

    python scripts/bench/feed.py --json results/bench_feed.json
    python scripts/bench/feed.py --quick --json /tmp/feed.json   # tiny, for the tests
"""

from __future__ import annotations

import argparse
import io
import math
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corruptions import UsageError, _environment, run_and_write  # noqa: E402
from generate import make_source_folder, synthetic_table  # noqa: E402
from render import PAPER_STREAM  # noqa: E402

from ccc.load import render_stream  # noqa: E402
from ccc.load.loader import collate_samples  # noqa: E402
from ccc.load.rendered_stream import _worker_source  # noqa: E402
from ccc.render import decode_source  # noqa: E402
from ccc.render_torch import render_batch  # noqa: E402
from ccc.stream.plan import plan_sample, plan_stream  # noqa: E402

FEED_RATES = (1_000, 5_000, 10_000, 20_000)
"""Rendering rates (images/s) to feed, from one GPU's modelled rate to several's."""
ENCODINGS = {
    "4:2:0 q90": {"quality": 90, "subsampling": 2},
    "4:2:2 q90": {"quality": 90, "subsampling": 1},
    "4:4:4 q90": {"quality": 90, "subsampling": 0},
    "4:2:0 q75": {"quality": 75, "subsampling": 2},
    "4:2:0 q95": {"quality": 95, "subsampling": 2},
    "grayscale q90": {"quality": 90, "grayscale": True},
}
"""Re-encodings of the photographs on which the decoders are compared."""


def _decode_torchvision(data: bytes) -> torch.Tensor:
    """torchvision's CPU decode of JPEG ``data``: RGB uint8 (3, H, W)."""
    from torchvision.io import ImageReadMode, decode_jpeg

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torchvision\.io")
        return decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)


def _time(work: Callable[[int], object], count: int, repeats: int) -> dict[str, float]:
    """Images/s (median over ``repeats`` of ``count`` calls ``work(k)``) on the wall and CPU clocks; one
    untimed call first."""
    work(0)
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        for k in range(count):
            work(k)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {"wall": count / statistics.median(walls), "cpu_time": count / statistics.median(cpus)}


def _definition(count: int) -> dict:
    """``render.py``'s paper-length medium stream over ``count`` source images (its speed)."""
    return {**PAPER_STREAM, "speed": count}


def per_core_rates(folder: Path, count: int, repeats: int) -> dict[str, dict[str, float]]:
    """Images/s of each worker step of the module docstring on ``count`` samples (spread evenly over the
    stream) of ``folder``'s ``count`` images."""
    plan = plan_stream(_definition(count), synthetic_table(), folder)
    stride = PAPER_STREAM["num_images"] // count
    specs = [plan_sample(plan, k * stride) for k in range(count)]
    sources = [(folder / spec.source_path).read_bytes() for spec in specs]

    def pillow_worker(k: int) -> np.ndarray:
        spec = plan_sample(plan, k * stride)
        return np.array(decode_source(spec, (folder / spec.source_path).read_bytes()))

    def device_decoder_worker(k: int) -> object:
        spec = plan_sample(plan, k * stride)
        return _worker_source(spec, (folder / spec.source_path).read_bytes(), "device")

    return {
        "pillow_worker": _time(pillow_worker, count, repeats),
        "pillow_decode": _time(lambda k: np.array(decode_source(specs[k], sources[k])), count, repeats),
        "torchvision_decode": _time(lambda k: _decode_torchvision(sources[k]), count, repeats),
        "device_decoder_worker": _time(device_decoder_worker, count, repeats),
    }


def loader_rates(folder: Path, count: int, batch_size: int) -> dict[str, float]:
    """Wall images/s of the workers' side of ``stream_loader(render_stream(..., device="cpu"))`` (decoded
    batches, not rendered) with 0 and 1 workers; the first batch (worker start-up) untimed."""
    stream = render_stream(
        _definition(len(list(folder.rglob("*.JPEG")))),
        calibration=synthetic_table(),
        imagenet=folder,
        device="cpu",
        limit=count,
    )
    rates = {}
    for workers in (0, 1):
        loader = torch.utils.data.DataLoader(
            stream.for_workers().with_chunk_size(batch_size),
            batch_size=batch_size,
            num_workers=workers,
            collate_fn=collate_samples,
            in_order=True,
        )
        batches = iter(loader)
        next(batches)
        start = time.perf_counter()
        samples = sum(len(labels) for _, labels, _ in batches)
        rates[str(workers)] = samples / (time.perf_counter() - start)
    return rates


def _difference(first: np.ndarray, second: np.ndarray) -> dict[str, float]:
    """Share of differing bytes and the largest absolute difference (levels of 255) of two uint8 arrays."""
    difference = np.abs(first.astype(np.int16) - second.astype(np.int16))
    return {"bytes_differing": float((difference > 0).mean()), "max_difference": int(difference.max())}


def fidelity(folder: Path, count: int) -> dict[str, dict[str, float]]:
    """Pillow's decode against torchvision's on the CPU, per re-encoding of the photographs (all images
    pooled), and the rendered images of the medium-mix samples from either decode."""
    photographs = sorted(folder.rglob("*.JPEG"))[:count]
    result: dict[str, dict[str, float]] = {}
    for name, settings in ENCODINGS.items():
        pillow, torchvision = [], []
        for path in photographs:
            image = Image.open(path).convert("L" if settings.get("grayscale") else "RGB")
            buffer = io.BytesIO()
            image.save(buffer, format="JPEG", quality=settings["quality"], subsampling=settings.get("subsampling", -1))
            with Image.open(io.BytesIO(buffer.getvalue())) as opened:
                pillow.append(np.asarray(opened.convert("RGB")).ravel())
            torchvision.append(_decode_torchvision(buffer.getvalue()).permute(1, 2, 0).numpy().ravel())
        result[name] = {"images": len(photographs), **_difference(np.concatenate(pillow), np.concatenate(torchvision))}
    plan = plan_stream(_definition(len(photographs)), synthetic_table(), folder)
    specs = [plan_sample(plan, k * (PAPER_STREAM["num_images"] // count)) for k in range(count)]
    sources = [(folder / spec.source_path).read_bytes() for spec in specs]
    by_pillow = render_batch(specs, [np.array(decode_source(s, b)) for s, b in zip(specs, sources)], "cpu")
    by_torchvision = render_batch(specs, [_decode_torchvision(b) for b in sources], "cpu")
    result["rendered (medium mix, with JPEG)"] = {
        "images": len(specs),
        **_difference((by_pillow * 255).round().byte().numpy(), (by_torchvision * 255).round().byte().numpy()),
    }
    return result


def workers_needed(rates: dict[str, dict[str, float]], clock: str) -> dict[str, dict[str, int]]:
    """Loader workers (one core each) to feed each of :data:`FEED_RATES` images/s, per worker kind."""
    return {
        kind: {str(rate): math.ceil(rate / rates[kind][clock]) for rate in FEED_RATES}
        for kind in ("pillow_worker", "device_decoder_worker")
    }


def run(arguments: argparse.Namespace) -> dict:
    """Every measurement of the module docstring, printed as a Markdown summary."""
    if arguments.quick:
        arguments.images, arguments.repeats, arguments.loader_images, arguments.batch_size = 6, 1, 8, 4
    if min(arguments.images, arguments.repeats, arguments.loader_images, arguments.batch_size) < 1:
        raise UsageError("--images, --repeats, --loader-images and --batch-size must be >= 1")
    torch.set_num_threads(1)
    clock = {"cpu": "cpu_time", "wall": "wall"}[arguments.clock]
    with tempfile.TemporaryDirectory() as temporary:
        folder = make_source_folder(Path(temporary) / "val", arguments.images)
        rates = per_core_rates(folder, arguments.images, arguments.repeats)
        loader = loader_rates(folder, arguments.loader_images, arguments.batch_size)
        decoders = fidelity(folder, arguments.images)
    needed = workers_needed(rates, clock)
    print(f"| step | images/s per core ({clock}) | workers to feed " + ", ".join(f"{r:,}/s" for r in FEED_RATES) + " |")
    print("|---|---:|---:|")
    for kind, rate in rates.items():
        counts = needed.get(kind)
        workers = " / ".join(str(n) for n in counts.values()) if counts else "—"
        print(f"| {kind} | {rate[clock]:,.0f} | {workers} |")
    print()
    for name, difference in decoders.items():
        print(
            f"- Pillow against torchvision's decoder, {name}: {difference['bytes_differing']:.2%} of the bytes differ "
            f"(at most {difference['max_difference']} levels) on {difference['images']} images"
        )
    return {
        "settings": {
            "images": arguments.images,
            "repeats": arguments.repeats,
            "loader_images": arguments.loader_images,
            "batch_size": arguments.batch_size,
            "clock": arguments.clock,
            "quick": arguments.quick,
        },
        "per_core": rates,
        "workers_needed": needed,
        "loader": loader,
        "fidelity": decoders,
        "environment": _environment(),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=200, help="photographs and samples timed (default 200)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repetitions, median reported (default 3)")
    parser.add_argument("--loader-images", type=int, default=256, help="samples through the loader (default 256)")
    parser.add_argument("--batch-size", type=int, default=64, help="the loader's batch size (default 64)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="clock of the per-core rates")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (6 images, 1 repeat), for the tests")
    parser.add_argument("--json", type=Path, help="write the results as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code (2 for a usage error)."""
    return run_and_write(run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
