"""Measure the torch blur corruptions (and snow) against the CPU path; prints markdown rows.

Deterministic corruptions: mean/max absolute difference in uint8 levels after the same truncation, on
demo-world images centre-cropped to 224×224, severities 0.5 … 5. Random ones: paired distribution
statistics (``tests/ccc/render_torch/blur_statistics.py``) over images × seeds per severity.

    PYTHONPATH=. python scripts/fidelity_torch_blur.py [--images 32] [--seeds 8]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from ccc.corruptions import corrupt
from ccc.render_torch import blur
from ccc.render_torch.snow import snow
from tests.ccc.render_torch.blur_statistics import paired_comparison, sample_statistics
from tests.ccc.render_torch.random_double import sample_random
from tests.ccc.render_torch.test_blur import as_tensor, demo_images, truncated

DETERMINISTIC = ("defocus_blur", "zoom_blur", "gaussian_blur")
RANDOM = ("glass_blur", "motion_blur", "snow")
FUNCTIONS = {**blur.TORCH_CORRUPTIONS, "snow": snow}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--first-seed", type=int, default=0, help="offset of the seeds of both paths")
    parser.add_argument("--device", default="cpu", help="torch device of the torch path (cpu, cuda)")
    parser.add_argument("--only", nargs="*", default=None, help="corruptions to measure (default: all)")
    arguments = parser.parse_args()
    torch.set_num_threads(1)
    images = demo_images(arguments.images)
    device = torch.device(arguments.device)
    tensor = as_tensor(images).to(device)
    print("| corruption | severity | max abs diff | mean abs diff |")
    print("|---|---|---|---|")
    for name in [name for name in DETERMINISTIC if arguments.only is None or name in arguments.only]:
        for severity in (0.1, 0.2, 0.3, *np.arange(0.5, 5.01, 0.5)):
            severities = torch.full((len(images),), severity, dtype=torch.float64, device=device)
            got = truncated(
                FUNCTIONS[name](tensor, severities, sample_random(torch.arange(len(images), device=device)))
            )
            expected = np.stack([corrupt(image, name, float(severity)) for image in images])
            difference = np.abs(got.astype(int) - expected)
            print(f"| {name} | {severity:.1f} | {difference.max()} | {difference.mean():.2e} |")
    print()
    print("| corruption | severity | statistic | torch | cpu | paired diff | z |")
    print("|---|---|---|---|---|---|---|")
    for name in [name for name in RANDOM if arguments.only is None or name in arguments.only]:
        for severity in (1.0, 3.0, 5.0):
            torch_outputs, cpu_outputs = [], []
            for seed in range(arguments.seeds):
                seeds = torch.arange(len(images), device=device) + 1000 * seed + 100_000 * arguments.first_seed
                severities = torch.full((len(images),), severity, dtype=torch.float64, device=device)
                torch_outputs.append(truncated(FUNCTIONS[name](tensor, severities, sample_random(seeds))))
                cpu_outputs.append(
                    np.stack(
                        [
                            corrupt(
                                image, name, severity, rng=10_000 + 1000 * seed + 100_000 * arguments.first_seed + k
                            )
                            for k, image in enumerate(images)
                        ]
                    )
                )
            clean = np.concatenate([images] * arguments.seeds)
            rows = paired_comparison(
                sample_statistics(clean, np.concatenate(torch_outputs)),
                sample_statistics(clean, np.concatenate(cpu_outputs)),
            )
            for statistic, row in rows.items():
                if statistic == "spectrum":
                    print(
                        f"| {name} | {severity:.0f} | spectrum (max band, log10) | | | "
                        f"{row['difference']:.4f} | {row['z']:.2f} |"
                    )
                else:
                    print(
                        f"| {name} | {severity:.0f} | {statistic} | {row['torch']:.3f} | {row['cpu']:.3f} | "
                        f"{row['difference']:+.4f} | {row['z']:.2f} |"
                    )


if __name__ == "__main__":
    main()
