"""Measure the torch backend's noise and digital corruptions, geometry and JPEG against the CPU path.

Usage: python scripts/fidelity_torch_core.py [--images 64] [--seeds 8] > tables.md

Prints the tables of docs/fidelity_torch_core.md:

1. digital corruptions (deterministic): mean and max absolute difference in uint8 levels to
   ``ccc.corruptions.corrupt`` on the same images, severities 0.5, 1.0, ..., 5.0;
2. noise corruptions (random): over images × seeds, the difference of the mean, of the standard
   deviation and of the PSNR to the clean image, and the total variation distance of the output-byte
   histograms, torch minus CPU;
3. throughput on the CPU at batch 64 (one thread): images per second of each corruption, of the
   geometry and of the JPEG round trip.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from ccc.corruptions import corrupt
from ccc.demo.images import render_demo_image
from ccc.render_torch import digital, noise
from ccc.render_torch.geometry import crop_resize_flip
from ccc.render_torch.jpeg import jpeg_round_trip
from ccc.render_torch.random import SampleRandom
from ccc.stream.spec import SampleSpec

SEVERITIES = [0.5 * k for k in range(1, 11)]


def demo_crops(count: int) -> np.ndarray:
    """``count`` demo images, centre 224×224 crops: uint8 (count, 224, 224, 3)."""
    generator = np.random.default_rng(0)
    crops = []
    for index in range(count):
        image = render_demo_image(index % 16, generator)
        top, left = (image.shape[0] - 224) // 2, (image.shape[1] - 224) // 2
        crops.append(image[top : top + 224, left : left + 224])
    return np.stack(crops)


def to_tensor(images: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(images).permute(0, 3, 1, 2).to(torch.float32) / 255


def to_bytes(images: torch.Tensor) -> np.ndarray:
    return torch.clamp(images * 255, 0, 255).floor().to(torch.uint8).permute(0, 2, 3, 1).numpy()


def psnr(corrupted: np.ndarray, clean: np.ndarray) -> float:
    return float(10 * np.log10(255.0**2 / np.mean((corrupted.astype(np.float64) - clean) ** 2)))


def digital_table(images: np.ndarray) -> list[str]:
    lines = ["| corruption | severity | mean abs diff | max abs diff |", "|---|---:|---:|---:|"]
    for name, function in digital.TORCH_CORRUPTIONS.items():
        for severity in SEVERITIES:
            severities = torch.full((len(images),), severity, dtype=torch.float64)
            ours = to_bytes(function(to_tensor(images), severities, SampleRandom(torch.arange(len(images)))))
            theirs = np.stack([corrupt(image, name, severity) for image in images])
            difference = np.abs(ours.astype(np.int64) - theirs)
            lines.append(f"| {name} | {severity:.1f} | {difference.mean():.4f} | {difference.max()} |")
    return lines


def noise_table(images: np.ndarray, seeds: int) -> list[str]:
    lines = [
        "| corruption | severity | Δ mean | Δ std | Δ PSNR (dB) | histogram TV |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, function in noise.TORCH_CORRUPTIONS.items():
        for severity in SEVERITIES:
            severities = torch.full((len(images),), severity, dtype=torch.float64)
            ours = np.stack(
                [
                    to_bytes(function(to_tensor(images), severities, SampleRandom(torch.arange(len(images)) + 997 * s)))
                    for s in range(seeds)
                ]
            )
            theirs = np.stack(
                [
                    np.stack([corrupt(im, name, severity, rng=10_000 * s + k) for k, im in enumerate(images)])
                    for s in range(seeds)
                ]
            )
            histograms = [np.bincount(values.ravel(), minlength=256) / values.size for values in (ours, theirs)]
            lines.append(
                f"| {name} | {severity:.1f} | {ours.mean() - theirs.mean():+.3f} | {ours.std() - theirs.std():+.3f} "
                f"| {psnr(ours, images[None]) - psnr(theirs, images[None]):+.3f} "
                f"| {0.5 * np.abs(histograms[0] - histograms[1]).sum():.4f} |"
            )
    return lines


def _rate(work, count: int) -> float:
    work()
    start = time.perf_counter()
    work()
    return count / (time.perf_counter() - start)


def throughput_table(images: np.ndarray) -> list[str]:
    batch = to_tensor(images)
    severities = torch.linspace(0.5, 5.0, len(images), dtype=torch.float64)
    lines = ["| step | images/s (CPU, 1 thread, batch 64) |", "|---|---:|"]
    for name, function in {**noise.TORCH_CORRUPTIONS, **digital.TORCH_CORRUPTIONS}.items():
        rate = _rate(lambda: function(batch, severities, SampleRandom(torch.arange(len(images)))), len(images))
        lines.append(f"| {name} | {rate:.1f} |")
    specs = [
        SampleSpec(k, k, 0, 0, (0, 0), "contrast", 0.0, "contrast", 0.0, 50.0, k, "c/x", 0, (320, 240),
                   (10, 5, 250, 215), bool(k % 2), k)
        for k in range(len(images))
    ]  # fmt: skip
    sources = [render_demo_image(k % 16, np.random.default_rng(k)) for k in range(len(images))]
    landscape = [source if source.shape[1] == 320 else source.transpose(1, 0, 2).copy() for source in sources]
    geometry_rate = _rate(lambda: crop_resize_flip(specs, landscape, "cpu"), len(specs))
    lines.append(f"| geometry (320×240 → crop 240×210 → 224×224, flip) | {geometry_rate:.1f} |")
    uint8 = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()
    lines.append(f"| JPEG quality-85 round trip | {_rate(lambda: jpeg_round_trip(uint8), len(images)):.1f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=8)
    arguments = parser.parse_args()
    torch.set_num_threads(1)
    images = demo_crops(arguments.images)
    for title, lines in (
        ("Digital corruptions: torch − CPU, uint8 levels", digital_table(images)),
        (
            f"Noise corruptions: torch − CPU over {arguments.images} images × {arguments.seeds} seeds",
            noise_table(images, arguments.seeds),
        ),
        ("Throughput", throughput_table(images)),
    ):
        print(f"### {title}\n")
        print("\n".join(lines))
        print()


if __name__ == "__main__":
    main()
