"""Measure ccc.corruptions against the reference's golden data; print the tables of docs/fidelity.md.

Usage: python scripts/fidelity_report.py [--seeds 64] [--corruption-set cifar] > fidelity_tables.md

For the imagenet set (the default):

1. Deterministic corruptions and motion blur: absolute difference to the reference outputs.
2. Legacy mode (RandomState seeded like np.random.seed): the golden statistics, relative difference.
3. Generator mode versus the reference's draw order (legacy mode) over many images: difference of
   the mean PSNR in percent and in standard errors.

For another corruption set (its golden data ``tests/golden/corruption_set_<set>*``):

1. Legacy mode versus the public script's outputs, per corruption and integer severity.
2. Impulse noise's statistics versus the script's (OS-seeded) draws, in standard errors.
3. Generator mode versus legacy mode, as 3. above.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from ccc.corruptions import canonical_name, corrupt, get_corruption, list_corruptions
from ccc.corruptions.statistics import per_image_statistics, summary_statistics

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "golden"
NAMES = {"jpeg_compression": "jpeg", "elastic_transform": "elastic"}


def deterministic_table(images: np.ndarray) -> list[str]:
    lines = ["| corruption | severity | mean abs diff | within 1 level | max diff |", "|---|---:|---:|---:|---:|"]
    golden = np.load(GOLDEN / "corruption_deterministic.npz")
    groups: dict[tuple[str, float], list[np.ndarray]] = {}
    for key in golden.files:
        name, severity, index = key.split("@")
        ours = corrupt(images[int(index)], NAMES.get(name, name), float(severity)).astype(np.int64)
        groups.setdefault((NAMES.get(name, name), float(severity)), []).append(np.abs(ours - golden[key]))
    angles = json.loads((GOLDEN / "corruption_random_stats.json").read_text())["motion_blur_angles"]
    motion = np.load(GOLDEN / "corruption_motion_blur.npz")
    for key in motion.files:
        severity, index, seed = key.split("@")
        assert abs(np.random.RandomState(int(seed)).uniform(-45, 45) - angles[key]) < 1e-12
        ours = corrupt(images[int(index)], "motion_blur", float(severity), rng=np.random.RandomState(int(seed)))
        groups.setdefault(("motion_blur", float(severity)), []).append(np.abs(ours.astype(np.int64) - motion[key]))
    for (name, severity), differences in groups.items():
        difference = np.concatenate([d.ravel() for d in differences])
        lines.append(
            f"| {name} | {severity:g} | {difference.mean():.4f} | "
            f"{100 * np.mean(difference <= 1):.2f}% | {difference.max()} |"
        )
    return lines


def legacy_table(images: np.ndarray) -> list[str]:
    cases = json.loads((GOLDEN / "corruption_random_stats.json").read_text())["cases"]
    lines = ["| case | largest relative difference over the 5 statistics |", "|---|---:|"]
    for key, reference in cases.items():
        name, severity = key.split("@")
        generators = [lambda seed=seed: np.random.RandomState(seed) for seed in range(16)]
        ours = summary_statistics(per_image_statistics(NAMES.get(name, name), float(severity), images, generators))
        worst = max(abs(ours[k] - v) / max(abs(v), 1e-12) for k, v in reference.items())
        lines.append(f"| {key} | {worst:.1e} |")
    return lines


def generator_table(
    images: np.ndarray, seeds: int, corruption_set: str = "imagenet", severities=(0.5, 1.75, 3.0, 5.0)
) -> list[str]:
    lines = [
        "| corruption | severity | images | PSNR legacy | PSNR generator | difference | in standard errors |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in [n for n in list_corruptions() if get_corruption(n).random]:
        count = 400 if name == "frost" else seeds
        for severity in severities:
            legacy = per_image_statistics(
                name,
                severity,
                images,
                [lambda s=s: np.random.RandomState(s) for s in range(count)],
                corruption_set=corruption_set,
            )
            ours = per_image_statistics(
                name,
                severity,
                images,
                [lambda s=s: np.random.default_rng(s) for s in range(count)],
                corruption_set=corruption_set,
            )
            a, b = legacy["psnr"], ours["psnr"]
            standard_error = math.sqrt(a.var() / len(a) + b.var() / len(b))
            difference = b.mean() - a.mean()
            lines.append(
                f"| {name} | {severity:g} | {len(a)} | {a.mean():.3f} | {b.mean():.3f} | "
                f"{100 * difference / a.mean():+.2f}% | "
                f"{difference / standard_error:+.2f} |"
            )
    return lines


def set_script_table(corruption_set: str) -> list[str]:
    """Legacy mode against the public script's outputs: share of differing values and largest difference."""
    golden = np.load(GOLDEN / f"corruption_set_{corruption_set}.npz")
    groups: dict[tuple[str, int], list[np.ndarray]] = {}
    for key in golden.files:
        if key == "inputs":
            continue
        name, severity, index, seed = key.split("@")
        ours = corrupt(
            golden["inputs"][int(index)],
            canonical_name(name),
            float(severity),
            rng=np.random.RandomState(int(seed)),
            corruption_set=corruption_set,
        )
        groups.setdefault((name, int(severity)), []).append(np.abs(ours.astype(np.int64) - golden[key]))
    lines = ["| corruption | differing values at severity 1, 2, 3, 4, 5 | max diff |", "|---|---|---:|"]
    for name in sorted({name for name, _ in groups}):
        differences = [np.concatenate([d.ravel() for d in groups[(name, severity)]]) for severity in range(1, 6)]
        shares = ", ".join(f"{100 * np.mean(d > 0):.2f}%" for d in differences)
        lines.append(f"| {name} | {shares} | {max(d.max() for d in differences)} |")
    return lines


def set_impulse_table(corruption_set: str) -> list[str]:
    """Impulse noise in legacy mode against the script's statistics: differences in standard errors."""
    images = np.load(GOLDEN / f"corruption_set_{corruption_set}.npz")["inputs"]
    reference = json.loads((GOLDEN / f"corruption_set_{corruption_set}_impulse.json").read_text())["impulse_noise"]
    statistics = ("residual_mean", "residual_std", "psnr", "frac_changed")
    lines = ["| severity | " + " | ".join(statistics) + " |", "|---:|" + "---:|" * len(statistics)]
    for severity, expected in reference.items():
        calls = expected["psnr"]["count"] // len(images)
        generators = [lambda s=s: np.random.RandomState(s) for s in range(calls)]
        ours = per_image_statistics("impulse_noise", float(severity), images, generators, corruption_set=corruption_set)
        cells = []
        for statistic in statistics:
            values, script = ours[statistic], expected[statistic]
            error = math.sqrt(script["std"] ** 2 / script["count"] + values.var(ddof=1) / len(values))
            cells.append(f"{(values.mean() - script['mean']) / error:+.2f}")
        lines.append(f"| {severity} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=64, help="seeds per image for the generator-mode comparison")
    parser.add_argument("--corruption-set", default="imagenet", help="the set to measure (default: imagenet)")
    arguments = parser.parse_args()
    if arguments.corruption_set != "imagenet":
        name = arguments.corruption_set
        images = np.load(GOLDEN / f"corruption_set_{name}.npz")["inputs"]
        for title, lines in (
            (f"{name}: legacy mode versus the public script's outputs", set_script_table(name)),
            (f"{name}: impulse noise versus the script's statistics (standard errors)", set_impulse_table(name)),
            (
                f"{name}: generator mode versus the reference draw order",
                generator_table(images, arguments.seeds, name, (1.0, 2.5, 5.0)),
            ),
        ):
            print(f"### {title}\n")
            print("\n".join(lines) + "\n")
        return
    images = np.load(GOLDEN / "corruption_inputs.npz")["images"]
    for title, lines in (
        ("Deterministic corruptions and motion blur versus the reference outputs", deterministic_table(images)),
        ("Legacy mode versus the golden statistics", legacy_table(images)),
        ("Generator mode versus the reference draw order", generator_table(images, arguments.seeds)),
    ):
        print(f"### {title}\n")
        print("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
