"""Compare the severity-path objectives of ccc.stream.paths on golden and synthetic accuracy grids.

For each objective and each path it records, over the path's cells (m = calibrated accuracy, %):
mean and max per-step deviation |m - target|, the share of steps within 5 points of the target,
path length (cells) and |mean(m) - target|, and prints Markdown tables of their averages (and the
worst max deviation) plus the time per call.

Grids: the 120 golden cases of the public generator (tests/golden/ccc_reference_paths.json) and
synthetic monotone grids shaped like real ones: accuracy = clean accuracy × two decreasing logistic
curves (one per severity axis) + Gaussian noise, clipped to [0, 100], at targets 0, 20 and 40.
Results are also shown for the "reachable" grids only: both single-corruption edges
(column 0 below the corner and row 0) get within 1 point of the target, as for the corruptions the public
generator keeps at each difficulty; on the others every objective must end or start far away.

Usage: python scripts/bench/paths.py [--synthetic-count 200] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from ccc.stream.paths import GRID_SIZE, PATH_OBJECTIVES, find_path, path_accuracies

GOLDEN_PATH = Path(__file__).resolve().parents[2] / "tests" / "golden" / "ccc_reference_paths.json"
SYNTHETIC_TARGETS = (0.0, 20.0, 40.0)
NEAR_TARGET_POINTS = 5.0
REACH_TOLERANCE_POINTS = 1.0


def synthetic_matrix(rng: np.random.Generator) -> np.ndarray:
    """A 21×21 accuracy grid (%) falling in both severities, with calibration-like noise."""
    severities = np.arange(GRID_SIZE) / 4
    clean_accuracy = rng.uniform(70, 80)
    midpoints = rng.uniform(0.5, 6.0, 2)  # severity of half accuracy; > 5 = never gets hard
    widths = rng.uniform(0.3, 1.5, 2)
    falloff_1 = 1 / (1 + np.exp((severities - midpoints[0]) / widths[0]))
    falloff_2 = 1 / (1 + np.exp((severities - midpoints[1]) / widths[1]))
    falloff_1, falloff_2 = falloff_1 / falloff_1[0], falloff_2 / falloff_2[0]
    grid = clean_accuracy * np.outer(falloff_1, falloff_2) + rng.normal(0, 0.7, (GRID_SIZE, GRID_SIZE))
    return np.clip(np.round(grid, 2), 0, 100)


def path_statistics(matrix: np.ndarray, target: float, objective: str) -> tuple[list[float], float]:
    """[mean deviation, max deviation, share within 5 points, length, |mean - target|] and seconds."""
    start = time.perf_counter()
    path = find_path(matrix, target, objective)
    seconds = time.perf_counter() - start
    accuracies = np.array(path_accuracies(matrix, path))
    deviation = np.abs(accuracies - target)
    near_share = float(np.mean(deviation <= NEAR_TARGET_POINTS))
    return [deviation.mean(), deviation.max(), near_share, len(path), abs(accuracies.mean() - target)], seconds


def reaches_target(matrix: np.ndarray, target: float) -> bool:
    """Whether each corruption alone (column 0 from row 1, row 0) gets within 1 point of ``target``."""
    limit = target + REACH_TOLERANCE_POINTS
    return bool(matrix[1:, 0].min() <= limit and matrix[0, :].min() <= limit)


def table(cases: list[tuple[np.ndarray, float]], title: str) -> str:
    lines = [
        f"### {title} ({len(cases)} grids)",
        "",
        "| objective | mean step dev | mean of max step dev | worst max step dev | steps within 5 pts | "
        "path length | \\|mean − target\\| | ms / call |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for objective in PATH_OBJECTIVES:
        results = [path_statistics(matrix, target, objective) for matrix, target in cases]
        stats = np.array([row for row, _ in results])
        milliseconds = 1000 * np.mean([seconds for _, seconds in results])
        lines.append(
            f"| {objective} | {stats[:, 0].mean():.2f} | {stats[:, 1].mean():.2f} | {stats[:, 1].max():.2f} | "
            f"{100 * stats[:, 2].mean():.0f}% | {stats[:, 3].mean():.1f} | {stats[:, 4].mean():.2f} | "
            f"{milliseconds:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synthetic-count", type=int, default=200, help="synthetic grids per target")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic grids")
    arguments = parser.parse_args()
    if arguments.synthetic_count < 1:
        parser.error(f"--synthetic-count must be >= 1, got {arguments.synthetic_count}")

    golden = json.loads(GOLDEN_PATH.read_text())["cases"]
    golden_cases = [(np.array(case["matrix"]), float(case["target"])) for case in golden]
    rng = np.random.default_rng(arguments.seed)
    synthetic = [synthetic_matrix(rng) for _ in range(arguments.synthetic_count)]

    groups = [("Golden cases of the public generator (targets 0, 20, 40 %)", golden_cases)]
    groups += [
        (f"Synthetic monotone grids, target {target:g}%", [(matrix, target) for matrix in synthetic])
        for target in SYNTHETIC_TARGETS
    ]
    tables = []
    for title, cases in groups:
        tables.append(table(cases, f"{title}, all"))
        reachable = [case for case in cases if reaches_target(*case)]
        if reachable:
            tables.append(table(reachable, f"{title}, reachable only"))
    print("\n\n".join(tables))


if __name__ == "__main__":
    main()
