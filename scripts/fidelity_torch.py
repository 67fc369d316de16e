"""Measure the torch backend (``ccc.render_torch``) against the CPU path, per corruption and severity.

Usage: PYTHONPATH=. python scripts/fidelity_torch.py [--corruptions NAME ...] [--images 16] [--seeds 4]
       [--device cpu] [--part fidelity|throughput|precision|all] > tables.md

Prints the per-corruption table of docs/fidelity.md ("The torch backend"), severities 0.5, 1.0, ..., 5.0,
on demo-world images centre-cropped to 224×224, both paths truncated to bytes as the pipeline does:

- deterministic corruptions: mean and max absolute difference in uint8 levels to
  ``ccc.corruptions.corrupt`` on the same images;
- random corruptions, over images × seeds (torch draws from ``SampleRandom``, the CPU path from
  ``numpy.random.default_rng``; independent draws): paired differences torch − CPU of the per-image
  mean, std and PSNR to the clean image, the total variation distance of the output-byte histograms,
  the largest difference of the 8 radial log10 power-spectrum bands, and the largest z-score (paired
  difference / its standard error) over mean, std, PSNR, Laplacian and spectrum.

With ``--part throughput`` (or ``all``): images/s of each torch corruption on ``--device`` at batch ``--images`` (one
torch thread, severities spread over 0.5..5), of the CPU path (``corrupt``, per image), of the
geometry and of the final JPEG round trip.

With ``--part precision``: the backend's float32 mode against its default float64 (``render_batch(...,
precision=)``), per corruption over ``--images`` images at each severity 1 … 5 with the same draws
(seeds), both truncated to bytes: mean and max absolute difference in levels, the share of bytes that
differ and of those more than one level apart, and the images/s of each mode on ``--device`` (one thread).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable

import numpy as np
import torch

from ccc.corruptions import corrupt, get_corruption, list_corruptions
from ccc.demo.images import render_demo_image
from ccc.render_torch import SampleRandom, crop_resize_flip, jpeg_round_trip, torch_corruptions
from ccc.stream.spec import SampleSpec
from tests.ccc.render_torch.image_statistics import histogram_distance, paired_comparison, sample_statistics
from tests.ccc.render_torch.images import demo_images, to_bytes, to_tensor

SEVERITIES = [0.5 * k for k in range(1, 11)]
HEADER = (
    "| corruption | kind | severity | mean abs diff | max abs diff | Δ mean | Δ std | Δ PSNR (dB) "
    "| histogram TV | spectrum Δ (log10) | max z |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def deterministic_row(name: str, images: np.ndarray, severity: float, device: torch.device) -> str:
    severities = torch.full((len(images),), severity, dtype=torch.float64, device=device)
    seeds = torch.arange(len(images), device=device)
    ours = to_bytes(torch_corruptions()[name](to_tensor(images).to(device), severities, SampleRandom(seeds)).cpu())
    theirs = np.stack([corrupt(image, name, severity) for image in images])
    difference = np.abs(ours.astype(np.int64) - theirs)
    return (
        f"| {name} | deterministic | {severity:.1f} | {difference.mean():.4f} | {difference.max()} "
        "| — | — | — | — | — | — |"
    )


def random_row(name: str, images: np.ndarray, severity: float, seeds: int, device: torch.device) -> str:
    batch = to_tensor(images).to(device)
    severities = torch.full((len(images),), severity, dtype=torch.float64, device=device)
    ours, theirs = [], []
    for seed in range(seeds):
        sample_seeds = torch.arange(len(images), device=device) + 1000 * seed
        ours.append(to_bytes(torch_corruptions()[name](batch, severities, SampleRandom(sample_seeds)).cpu()))
        theirs.append(
            np.stack([corrupt(im, name, severity, rng=10_000 + 1000 * seed + k) for k, im in enumerate(images)])
        )
    clean = np.concatenate([images] * seeds)
    ours_all, theirs_all = np.concatenate(ours), np.concatenate(theirs)
    rows = paired_comparison(sample_statistics(clean, ours_all), sample_statistics(clean, theirs_all))
    return (
        f"| {name} | random | {severity:.1f} | — | — | {rows['mean']['difference']:+.3f} "
        f"| {rows['std']['difference']:+.3f} | {rows['psnr']['difference']:+.3f} "
        f"| {histogram_distance(ours_all, theirs_all):.4f} | {rows['spectrum']['difference']:.4f} "
        f"| {max(row['z'] for row in rows.values()):.2f} |"
    )


def _rate(work: Callable[[], object], count: int, device: torch.device) -> float:
    """Images per second of ``work`` (``count`` images), after one warm-up call."""
    work()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    work()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return count / (time.perf_counter() - start)


def throughput_table(names: list[str], images: np.ndarray, device: torch.device) -> list[str]:
    batch = to_tensor(images).to(device)
    severities = torch.linspace(0.5, 5.0, len(images), dtype=torch.float64, device=device)
    seeds = torch.arange(len(images), device=device)
    lines = [
        f"| step | torch images/s ({device.type}, 1 thread, batch {len(images)}) | CPU path images/s |",
        "|---|---:|---:|",
    ]
    for name in names:
        function = torch_corruptions()[name]
        ours = _rate(lambda: function(batch, severities, SampleRandom(seeds)), len(images), device)
        theirs = _rate(
            lambda: [corrupt(im, name, float(s), rng=k) for k, (im, s) in enumerate(zip(images, severities))],
            len(images),
            torch.device("cpu"),
        )
        lines.append(f"| {name} | {ours:.1f} | {theirs:.1f} |")
    specs = [
        SampleSpec(k, k, 0, 0, (0, 0), "contrast", 0.0, "contrast", 0.0, 50.0, k, "c/x", 0, (320, 240),
                   (10, 5, 250, 215), bool(k % 2), k)
        for k in range(len(images))
    ]  # fmt: skip
    sources = [render_demo_image(k % 16, np.random.default_rng(k)) for k in range(len(images))]
    landscape = [source if source.shape[1] == 320 else source.transpose(1, 0, 2).copy() for source in sources]
    geometry = _rate(lambda: crop_resize_flip(specs, landscape, device), len(specs), device)
    lines.append(f"| geometry (320×240 → crop 240×210 → 224×224, flip) | {geometry:.1f} | |")
    uint8 = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous().to(device)
    lines.append(f"| JPEG quality-85 round trip | {_rate(lambda: jpeg_round_trip(uint8), len(images), device):.1f} | |")
    return lines


PRECISION_SEVERITIES = (1.0, 2.0, 3.0, 4.0, 5.0)


def precision_table(names: list[str], images: np.ndarray, device: torch.device) -> list[str]:
    """float32 − float64 bytes of each corruption (same images, severities and seeds), and both modes' speed."""
    batch = to_tensor(images).to(device)
    seeds = torch.arange(len(images), device=device)
    lines = [
        "| corruption | mean abs diff | max abs diff | bytes differing | bytes > 1 level apart "
        "| float64 images/s | float32 images/s |\n|---|---:|---:|---:|---:|---:|---:|"
    ]
    for name in names:
        function = torch_corruptions()[name]
        total = maximum = differing = far = 0.0
        seconds = {torch.float64: 0.0, torch.float32: 0.0}
        for severity in PRECISION_SEVERITIES:
            severities = torch.full((len(images),), severity, dtype=torch.float64)
            outputs = {}
            for dtype in seconds:
                start = time.perf_counter()
                outputs[dtype] = to_bytes(function(batch, severities, SampleRandom(seeds, dtype=dtype), dtype).cpu())
                seconds[dtype] += time.perf_counter() - start
            difference = np.abs(outputs[torch.float32].astype(np.int64) - outputs[torch.float64])
            total += difference.mean()
            maximum = max(maximum, float(difference.max()))
            differing += (difference > 0).mean()
            far += (difference > 1).mean()
        count = len(PRECISION_SEVERITIES)
        rates = [count * len(images) / seconds[dtype] for dtype in (torch.float64, torch.float32)]
        lines.append(
            f"| {name} | {total / count:.4f} | {maximum:.0f} | {100 * differing / count:.3f} % "
            f"| {100 * far / count:.4f} % | {rates[0]:.1f} | {rates[1]:.1f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corruptions", nargs="+", default=list_corruptions(), help="names (default: all 19)")
    parser.add_argument("--images", type=int, default=16, help="demo images per severity (default 16)")
    parser.add_argument("--seeds", type=int, default=4, help="seeds per image for random corruptions (default 4)")
    parser.add_argument("--device", default="cpu", help="torch device of the torch path: cpu or cuda[:index]")
    parser.add_argument(
        "--part",
        choices=("fidelity", "throughput", "precision", "all"),
        default="fidelity",
        help="the per-severity table (default), images/s per corruption, float32 against float64 bytes, or all",
    )
    arguments = parser.parse_args()
    try:
        names = [get_corruption(name).name for name in arguments.corruptions]
        device = torch.device(arguments.device)
    except (ValueError, RuntimeError) as error:
        sys.exit(f"error: {error}")
    torch.set_num_threads(1)
    images = demo_images(arguments.images)
    if arguments.part in ("fidelity", "all"):
        print(f"### torch − CPU, {arguments.images} images × {arguments.seeds} seeds (random), device {device}\n")
        print(HEADER)
        for name in names:
            for severity in SEVERITIES:
                if get_corruption(name).random:
                    print(random_row(name, images, severity, arguments.seeds, device), flush=True)
                else:
                    print(deterministic_row(name, images, severity, device), flush=True)
    if arguments.part in ("throughput", "all"):
        print(f"\n### Throughput, device {device}\n")
        print("\n".join(throughput_table(names, images, device)))
    if arguments.part in ("precision", "all"):
        print(f"\n### float32 − float64, {arguments.images} images × severities 1 … 5, device {device}\n")
        for line in precision_table(names, images, device):
            print(line, flush=True)


if __name__ == "__main__":
    main()
