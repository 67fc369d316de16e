"""Tests of ccc.stream.paths: golden reference paths, an independent reference oracle, path validity,
exact optimality of the new objectives against brute force, and input validation.

Brute force enumerates every path, which is only feasible on small grids; ``find_path`` accepts
square grids from 2×2 to 21×21 (the top-left corner of the CCC grid), so optimality is checked on
2×2 … 8×8 grids. On integer-valued grids with integer targets every sum is exact, so there the
chosen path itself (including the documented tie-breaking) must equal the brute-force one.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache

import numpy as np
import pytest

from ccc.stream.paths import (
    GRID_SIZE,
    PATH_OBJECTIVES,
    find_path,
    path_accuracies,
    path_severities,
    validate_path,
)
from tests.builders import GOLDEN

GOLDEN_PATHS = json.loads((GOLDEN / "ccc_reference_paths.json").read_text())["cases"]


def all_paths(size: int) -> list[list[tuple[int, int]]]:
    """Every valid path on a size×size grid."""
    paths = []

    def extend(path: list[tuple[int, int]]) -> None:
        row, column = path[-1]
        if row == 0:
            paths.append(list(path))
            return
        extend(path + [(row - 1, column)])
        if column + 1 < size:
            extend(path + [(row, column + 1)])

    for start_row in range(1, size):
        extend([(start_row, 0)])
    return paths


def step_code(path: list[tuple[int, int]]) -> tuple[int, ...]:
    """Steps as 0 (s2 step) / 1 (s1 step): lexicographic order prefers the s2 step."""
    return tuple(0 if following[1] > cell[1] else 1 for cell, following in zip(path, path[1:]))


def deviations(matrix: np.ndarray, path: list[tuple[int, int]], target: float) -> list[float]:
    return [abs(float(matrix[i, j]) - target) for i, j in path]


def backward_sum(values: list[float]) -> float:
    total = values[-1]
    for value in reversed(values[:-1]):
        total = value + total
    return total


def reference_oracle(matrix: np.ndarray, target: float) -> list[tuple[int, int]]:
    """The public generator's recursion, written recursively as described in docs/paths.md."""
    size = matrix.shape[0]
    huge = 9999999999999

    @lru_cache(maxsize=None)
    def best(row: int, column: int) -> tuple[float, tuple]:
        if column >= size:
            return huge, (None,)
        if row == 0:
            return matrix[row][column], ((row, column),)
        down_sum, down_path = best(row - 1, column)
        right_sum, right_path = best(row, column + 1)
        value = matrix[row][column]
        if abs((down_sum + value) / (len(down_path) + 1) - target) < abs(
            (right_sum + value) / (len(right_path) + 1) - target
        ):
            return down_sum + value, ((row, column),) + down_path
        return right_sum + value, ((row, column),) + right_path

    scores = [abs(best(row, 0)[0] / len(best(row, 0)[1]) - target) for row in range(1, size)]
    return list(best(1 + scores.index(min(scores)), 0)[1])


def random_matrix(rng: np.random.Generator, size: int, kind: str) -> np.ndarray:
    if kind == "uniform":
        return rng.uniform(0, 100, (size, size))
    if kind == "integer":
        return rng.integers(0, 101, (size, size)).astype(float)
    if kind == "coarse":  # few distinct values: many exact ties
        return rng.choice([0.0, 20.0, 40.0, 60.0], (size, size))
    severities = np.arange(size) / 4
    decay_1, decay_2 = rng.uniform(0.5, 3, 2)
    smooth = 80 * np.exp(-np.add.outer(severities / decay_1, severities / decay_2))
    return np.clip(np.round(smooth + rng.normal(0, 2, (size, size)), 2), 0, 100)


MATRIX_KINDS = ("uniform", "integer", "coarse", "monotone")
EXACT_KINDS = ("integer", "coarse")  # integer values: sums and comparisons are exact


@pytest.mark.parametrize("case_index", range(len(GOLDEN_PATHS)))
def test_reference_matches_golden(case_index: int) -> None:
    case = GOLDEN_PATHS[case_index]
    expected = [tuple(cell) for cell in case["path"]]
    assert find_path(case["matrix"], case["target"], "reference") == expected
    assert find_path(np.array(case["matrix"]), case["target"]) == expected


@pytest.mark.parametrize("kind", MATRIX_KINDS)
def test_reference_matches_recursive_oracle(kind: str) -> None:
    rng = np.random.default_rng(7)
    for trial in range(40):
        size = int(rng.integers(2, GRID_SIZE + 1))
        matrix = random_matrix(rng, size, kind)
        target = float(rng.choice([0.0, 20.0, 40.0, rng.uniform(0, 100)]))
        assert find_path(matrix, target) == reference_oracle(matrix, target), (trial, size, target)


def test_reference_ties_take_the_s2_step_and_the_first_start() -> None:
    path = find_path(np.full((GRID_SIZE, GRID_SIZE), 30.0), 40.0)
    assert path == [(1, column) for column in range(GRID_SIZE)] + [(0, GRID_SIZE - 1)]


def test_reference_is_not_the_mean_optimum() -> None:
    """The greedy recursion misses the best mean on some matrices (found by random search on 4×4)."""
    rng = np.random.default_rng(3)
    paths = all_paths(4)
    for _ in range(500):
        matrix = rng.integers(0, 101, (4, 4)).astype(float)
        best = min(abs(np.mean([matrix[c] for c in p]) - 50) for p in paths)
        chosen = find_path(matrix, 50)
        if abs(np.mean(path_accuracies(matrix, chosen)) - 50) > best + 1e-9:
            return
    pytest.fail("the reference objective matched the exact mean optimum on every sampled matrix")


@pytest.mark.parametrize("objective", PATH_OBJECTIVES)
@pytest.mark.parametrize("kind", MATRIX_KINDS)
def test_paths_are_valid(objective: str, kind: str) -> None:
    rng = np.random.default_rng(11)
    for _ in range(25):
        size = int(rng.choice([2, 3, 5, 13, GRID_SIZE]))
        matrix = random_matrix(rng, size, kind)
        path = find_path(matrix, float(rng.uniform(0, 100)), objective)
        validate_path(path, grid_size=size)
        assert all(type(index) is int for cell in path for index in cell)
        start, end = path[0], path[-1]
        assert start[1] == 0 and start[0] >= 1 and end[0] == 0
        assert all(0 <= index < size for cell in path for index in cell)
        assert len(path) == start[0] + end[1] + 1


@pytest.mark.parametrize("size", range(2, 9))
@pytest.mark.parametrize("kind", MATRIX_KINDS)
def test_minimax_matches_brute_force(size: int, kind: str) -> None:
    rng = np.random.default_rng(100 + size)
    paths = all_paths(size)
    for _ in range(6):
        matrix = random_matrix(rng, size, kind)
        target = float(rng.integers(0, 101)) if kind != "uniform" else float(rng.uniform(0, 100))
        chosen = find_path(matrix, target, "minimax")
        per_path = [deviations(matrix, path, target) for path in paths]
        best_max = min(max(values) for values in per_path)
        within = [index for index, values in enumerate(per_path) if max(values) == best_max]
        chosen_deviations = deviations(matrix, chosen, target)
        assert max(chosen_deviations) == best_max
        assert sum(chosen_deviations) == pytest.approx(min(sum(per_path[index]) for index in within), abs=1e-9)
        if kind in EXACT_KINDS:  # exact arithmetic: the tie-breaking must pick this very path
            expected = min(
                within,
                key=lambda index: (backward_sum(per_path[index]), paths[index][0][0], step_code(paths[index])),
            )
            assert chosen == paths[expected]


@pytest.mark.parametrize("size", range(2, 9))
@pytest.mark.parametrize("kind", MATRIX_KINDS)
def test_mean_abs_matches_brute_force(size: int, kind: str) -> None:
    rng = np.random.default_rng(200 + size)
    paths = all_paths(size)
    for _ in range(6):
        matrix = random_matrix(rng, size, kind)
        target = float(rng.integers(0, 101)) if kind != "uniform" else float(rng.uniform(0, 100))
        chosen = find_path(matrix, target, "mean_abs")
        per_path = [deviations(matrix, path, target) for path in paths]
        best_mean = min(sum(values) / len(values) for values in per_path)
        assert np.mean(deviations(matrix, chosen, target)) == pytest.approx(best_mean, abs=1e-9)
        if kind in EXACT_KINDS:
            expected = min(
                range(len(paths)),
                key=lambda index: (
                    backward_sum(per_path[index]) / len(paths[index]),
                    paths[index][0][0],
                    len(paths[index]),
                    step_code(paths[index]),
                ),
            )
            assert chosen == paths[expected]


def test_new_objectives_are_never_worse_on_their_own_measure() -> None:
    for case in GOLDEN_PATHS[:30]:
        matrix, target = np.array(case["matrix"]), case["target"]
        by_objective = {objective: find_path(matrix, target, objective) for objective in PATH_OBJECTIVES}
        worst = {name: max(deviations(matrix, path, target)) for name, path in by_objective.items()}
        mean = {name: np.mean(deviations(matrix, path, target)) for name, path in by_objective.items()}
        assert worst["minimax"] <= min(worst.values())
        assert mean["mean_abs"] <= min(mean.values()) + 1e-12


def test_path_severities_and_accuracies() -> None:
    matrix = np.arange(GRID_SIZE * GRID_SIZE, dtype=float).reshape(GRID_SIZE, GRID_SIZE) / 5
    path = [(2, 0), (2, 1), (1, 1), (0, 1)]
    assert path_severities(path) == [(0.5, 0.0), (0.5, 0.25), (0.25, 0.25), (0.0, 0.25)]
    assert path_accuracies(matrix, path) == [matrix[2, 0], matrix[2, 1], matrix[1, 1], matrix[0, 1]]
    from_array = path_severities(np.array(path))
    assert from_array == path_severities(path) and all(type(value) is float for cell in from_array for value in cell)
    straight_down = [(row, 0) for row in range(GRID_SIZE - 1, -1, -1)]
    severities = path_severities(straight_down)
    assert severities[0] == (5.0, 0.0) and severities[-1] == (0.0, 0.0) and len(severities) == GRID_SIZE


@pytest.mark.parametrize(
    ("matrix", "message"),
    [
        (np.zeros((GRID_SIZE, GRID_SIZE - 1)), r"matrix must be a square grid .* got shape \(21, 20\)"),
        (np.zeros((22, 22)), r"matrix must be a square grid .* got shape \(22, 22\)"),
        (np.zeros((1, 1)), r"got shape \(1, 1\)"),
        (np.zeros(GRID_SIZE), r"got shape \(21,\)"),
        ([[1.0, 2.0], [3.0]], r"matrix must be a square grid of accuracies in percent, got a list"),
        (np.full((3, 3), np.nan), r"matrix values must be finite, got nan at \(0, 0\)"),
        (np.full((3, 3), 100.5), r"matrix values must be accuracies in percent in \[0, 100\], got 100.5"),
        (np.full((3, 3), -1.0), r"in \[0, 100\], got -1.0 at \(0, 0\)"),
    ],
)
def test_invalid_matrix(matrix: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        find_path(matrix, 20.0)


@pytest.mark.parametrize("target", [math.nan, math.inf, -0.5, 100.5, "forty", True, None])
def test_invalid_target(target: object) -> None:
    with pytest.raises(ValueError, match=r"target must be .*accuracy in percent in \[0, 100\], got"):
        find_path(np.zeros((3, 3)), target)


def test_unknown_objective_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"objective must be one of reference, minimax, mean_abs, got 'mean'"):
        find_path(np.zeros((3, 3)), 20.0, "mean")


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ([(1, 0)], r"path must have at least 2 cells"),
        ([(0, 0), (0, 1)], r"path must start at a cell \(i, 0\) with i >= 1, got \(0, 0\)"),
        ([(2, 1), (1, 1), (0, 1)], r"must start at a cell \(i, 0\).*got \(2, 1\)"),
        ([(2, 0), (0, 0)], r"path step 1 must go .* got \(2, 0\) -> \(0, 0\)"),
        ([(1, 0), (1, 1)], r"path must end at a cell \(0, j\), got \(1, 1\)"),
        ([(1, 0), (0, 0), (0, 1)], r"path must end at its first cell with i == 0"),
        ([(1, 0), (1, 21), (0, 21)], r"path\[1\] must be a pair of integer grid indices in \[0, 20\]"),
        ([(1.0, 0), (0, 0)], r"path\[0\] must be a pair of integer grid indices"),
        ([(1, 0), 7], r"path\[1\] must be a pair of integer grid indices in \[0, 20\], got 7"),
        ([(1, 0, 0), (0, 0)], r"path\[0\] must be a pair of integer grid indices in \[0, 20\], got \(1, 0, 0\)"),
    ],
)
def test_invalid_path(path: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_path(path)
    with pytest.raises(ValueError, match=message):
        path_severities(path)


def test_path_accuracies_checks_the_path_against_the_matrix_size() -> None:
    with pytest.raises(ValueError, match=r"path\[1\] must be a pair of integer grid indices in \[0, 2\]"):
        path_accuracies(np.zeros((3, 3)), [(2, 0), (2, 3), (0, 3)])
