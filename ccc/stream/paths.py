"""Constant-accuracy severity paths on a calibration accuracy grid.

A CCC stream mixes two corruptions ``n1`` and ``n2`` at severities ``(s1, s2)`` on the grid
``{0, 0.25, ..., 5}²``. The calibration table stores, per ordered pair, a 21×21 accuracy grid
``matrix[i][j]`` (top-1 accuracy in percent at ``s1 = i / 4``, ``s2 = j / 4``). A *severity path*
moves from "only n1" to "only n2":

* it starts at a cell ``(i, 0)`` with ``i >= 1`` (``n1`` alone at severity ``i / 4``);
* every step either lowers ``i`` by one (less ``n1``) or raises ``j`` by one (more ``n2``);
* it ends at the first cell with ``i == 0``; ``j`` never leaves the grid (``j <= 20``).

Paths are lists of grid indices ``(i, j)``; :func:`path_severities` turns them into severities.
:func:`find_path` chooses a path whose accuracy stays near a target, under one of the objectives in
:data:`PATH_OBJECTIVES` (``docs/paths.md`` explains and compares them):

``"reference"``
    The public CCC generator's choice, reproduced exactly (greedy; see :func:`find_path`).
``"minimax"``
    Exact minimum over all paths of the largest per-cell deviation ``|m(cell) - target|``.
``"mean_abs"``
    Exact minimum over all paths of the mean per-cell deviation ``|m(cell) - target|``.

Grids smaller than 21×21 (square, at least 2×2: the top-left corner of the full grid, severities up
to ``(n - 1) / 4``) are accepted so that the exact objectives can be checked against brute-force
enumeration of all paths.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from ccc.validation import check_integer

__all__ = [
    "GRID_SIZE",
    "PATH_OBJECTIVES",
    "SEVERITY_STEP",
    "Cell",
    "PathObjective",
    "find_path",
    "path_accuracies",
    "path_severities",
    "validate_path",
]

GRID_SIZE = 21
"""Cells per axis of a CCC calibration grid: severities 0, 0.25, ..., 5."""

SEVERITY_STEP = 0.25
"""Severity difference between neighbouring grid cells."""

PathObjective = Literal["reference", "minimax", "mean_abs"]
PATH_OBJECTIVES: tuple[str, ...] = ("reference", "minimax", "mean_abs")
"""Valid values of ``find_path(objective=...)``."""

Cell = tuple[int, int]
"""Grid indices ``(i, j)`` of one path cell: severities ``(i / 4, j / 4)``."""

_Grid = list[list[float]]


def find_path(matrix: ArrayLike, target: float, objective: PathObjective = "reference") -> list[Cell]:
    """Return the severity path whose accuracies best match ``target`` under ``objective``.

    Args:
        matrix: square accuracy grid in percent, values finite and in [0, 100];
            ``matrix[i][j]`` is the accuracy at ``s1 = i / 4``, ``s2 = j / 4``. CCC grids are
            21×21; any size from 2×2 to 21×21 is accepted.
        target: target accuracy in percent, finite and in [0, 100].
        objective: one of :data:`PATH_OBJECTIVES`:

            * ``"reference"`` — exactly the path the public CCC generator picks. It scores a
              continuation by ``|mean accuracy of the continuation - target|`` and, working back from
              the last row, keeps at every cell only the better of its two continuations (the
              s2 step wins ties); among the starts ``(i, 0)`` it takes the smallest ``i`` with the
              strictly smallest ``|mean - target|``. This is greedy: it does not find the path with
              the mean closest to the target, because a continuation rejected at one cell is never
              reconsidered with the cells that precede it. Where the s2 step would leave the grid
              (``j = n - 1``) the public code scores it with an enormous sentinel sum, which can never
              win for accuracies and targets in [0, 100]; here that step is simply not offered.
            * ``"minimax"`` — minimises the largest ``|m(cell) - target|`` over the path's cells,
              exactly (bottleneck shortest path on the grid's DAG). Among paths with that smallest
              maximum, it minimises the sum of ``|m(cell) - target|``; remaining exact ties go to the
              smallest start ``i``, then to the path that takes the s2 step at the first cell where
              the tied paths part.
            * ``"mean_abs"`` — minimises the mean of ``|m(cell) - target|`` over the path's cells,
              exactly. A start row ``i`` and end column ``e`` fix the path length (``i + e + 1``
              cells), so for every end column an ordinary shortest-path recursion gives the smallest
              deviation sum from each start; the best mean over all (start, end) pairs wins. Exact ties
              go to the smallest start ``i``, then the shortest path, then the s2 step at the first
              parting cell. Cost O(n³) for an n×n grid.

    Returns:
        Grid indices ``(i, j)`` in path order: first ``(i0, 0)`` with ``i0 >= 1``, last ``(0, e)``.

    Raises:
        ValueError: if ``matrix``, ``target`` or ``objective`` is invalid; the message names the
            parameter and the received value.
    """
    grid = _validated_grid(matrix)
    target_value = _validated_target(target)
    if objective == "reference":
        return _reference_path(grid, target_value)
    if objective == "minimax":
        return _minimax_path(grid, target_value)
    if objective == "mean_abs":
        return _mean_abs_path(grid, target_value)
    raise ValueError(f"objective must be one of {', '.join(PATH_OBJECTIVES)}, got {objective!r}")


def path_severities(path: Sequence[Cell]) -> list[tuple[float, float]]:
    """Return the severities ``(s1, s2) = (i / 4, j / 4)`` of each cell of ``path``, each in [0, 5].

    Raises:
        ValueError: if ``path`` is not a valid severity path on the 21×21 grid.
    """
    validate_path(path)
    return [(int(i) * SEVERITY_STEP, int(j) * SEVERITY_STEP) for i, j in path]


def path_accuracies(matrix: ArrayLike, path: Sequence[Cell]) -> list[float]:
    """Return ``matrix[i][j]`` (accuracy in percent) for each cell ``(i, j)`` of ``path``, in order.

    Raises:
        ValueError: if ``matrix`` is invalid (see :func:`find_path`) or ``path`` is not a valid
            severity path on a grid of the matrix's size.
    """
    grid = _validated_grid(matrix)
    validate_path(path, grid_size=len(grid))
    return [grid[i][j] for i, j in path]


def validate_path(path: Sequence[Cell], grid_size: int = GRID_SIZE) -> None:
    """Check that ``path`` is a valid severity path on a ``grid_size`` × ``grid_size`` grid.

    Valid: at least two cells given as pairs of integer indices in ``[0, grid_size)``; the first is
    ``(i, 0)`` with ``i >= 1``; each step is ``(i - 1, j)`` or ``(i, j + 1)``; only the last cell has
    ``i == 0``.

    Raises:
        ValueError: naming the first offending cell or step.
    """
    check_integer("grid_size", grid_size, 2)
    cells = list(path)
    if len(cells) < 2:
        raise ValueError(f"path must have at least 2 cells, got {len(cells)}: {cells!r}")
    expected_cell = f"a pair of integer grid indices in [0, {grid_size - 1}]"
    for position, cell in enumerate(cells):
        try:
            indices = tuple(cell)
        except TypeError:
            raise ValueError(f"path[{position}] must be {expected_cell}, got {cell!r}") from None
        if (
            len(indices) != 2
            or not all(isinstance(index, (int, np.integer)) and not isinstance(index, bool) for index in indices)
            or not all(0 <= index < grid_size for index in indices)
        ):
            raise ValueError(f"path[{position}] must be {expected_cell}, got {cell!r}")
    start_row, start_column = cells[0]
    if start_column != 0 or start_row < 1:
        raise ValueError(f"path must start at a cell (i, 0) with i >= 1, got {tuple(cells[0])!r}")
    for position, (previous, current) in enumerate(zip(cells, cells[1:]), start=1):
        (row, column), (next_row, next_column) = previous, current
        if row == 0:
            raise ValueError(f"path must end at its first cell with i == 0, but continues at path[{position}]")
        if (next_row, next_column) not in ((row - 1, column), (row, column + 1)):
            raise ValueError(
                f"path step {position} must go from (i, j) to (i - 1, j) or (i, j + 1), "
                f"got {tuple(previous)!r} -> {tuple(current)!r}"
            )
    if cells[-1][0] != 0:
        raise ValueError(f"path must end at a cell (0, j), got {tuple(cells[-1])!r}")


def _validated_grid(matrix: ArrayLike) -> _Grid:
    """Return ``matrix`` as a list of rows of Python floats after checking shape and range."""
    try:
        array = np.asarray(matrix, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"matrix must be a square grid of accuracies in percent, got a {type(matrix).__name__} "
            f"that does not convert to a float array ({error})"
        ) from error
    if array.ndim != 2 or array.shape[0] != array.shape[1] or not 2 <= array.shape[0] <= GRID_SIZE:
        raise ValueError(
            f"matrix must be a square grid of shape (n, n) with 2 <= n <= {GRID_SIZE} "
            f"(CCC uses {GRID_SIZE}×{GRID_SIZE}), got shape {array.shape}"
        )
    if not np.all(np.isfinite(array)):
        bad = tuple(int(index) for index in np.argwhere(~np.isfinite(array))[0])
        raise ValueError(f"matrix values must be finite, got {array[bad]} at {bad}")
    if array.min() < 0 or array.max() > 100:
        bad = tuple(int(index) for index in np.argwhere((array < 0) | (array > 100))[0])
        raise ValueError(f"matrix values must be accuracies in percent in [0, 100], got {array[bad]} at {bad}")
    return array.tolist()


def _validated_target(target: float) -> float:
    """Return ``target`` as a float after checking it is a finite percentage in [0, 100]."""
    if isinstance(target, bool):
        raise ValueError(f"target must be an accuracy in percent in [0, 100], got {target!r}")
    try:
        value = float(target)
    except (TypeError, ValueError) as error:
        raise ValueError(f"target must be an accuracy in percent in [0, 100], got {target!r}") from error
    if not math.isfinite(value) or not 0 <= value <= 100:
        raise ValueError(f"target must be a finite accuracy in percent in [0, 100], got {target!r}")
    return value


def _follow(successor: list[list[Cell | None]], start: Cell) -> list[Cell]:
    """Walk successor links from ``start`` until a cell without successor (row 0)."""
    path = [start]
    following = successor[start[0]][start[1]]
    while following is not None:
        path.append(following)
        following = successor[following[0]][following[1]]
    return path


def _reference_path(grid: _Grid, target: float) -> list[Cell]:
    """The public generator's greedy memoised recursion, evaluated bottom-up.

    The recursion's value at a cell (sum and length of the kept continuation) depends only on the
    cell, so filling rows from 0 upwards and each row from the last column leftwards visits every
    cell after both of its successors and yields the same choices. Sums are accumulated from the end
    of the path towards its start and every score is computed with the same floating-point operations
    as the public code, so ties and near-ties resolve identically.
    """
    size = len(grid)
    sums = [[0.0] * size for _ in range(size)]
    lengths = [[0] * size for _ in range(size)]
    successor: list[list[Cell | None]] = [[None] * size for _ in range(size)]
    for column in range(size):
        sums[0][column] = grid[0][column]
        lengths[0][column] = 1
    for row in range(1, size):
        for column in range(size - 1, -1, -1):
            value = grid[row][column]
            down_sum, down_length = sums[row - 1][column], lengths[row - 1][column]
            take_down = column == size - 1
            if not take_down:
                right_sum, right_length = sums[row][column + 1], lengths[row][column + 1]
                down_score = abs((down_sum + value) / (down_length + 1) - target)
                right_score = abs((right_sum + value) / (right_length + 1) - target)
                take_down = down_score < right_score
            if take_down:
                sums[row][column] = down_sum + value
                lengths[row][column] = down_length + 1
                successor[row][column] = (row - 1, column)
            else:
                sums[row][column] = right_sum + value
                lengths[row][column] = right_length + 1
                successor[row][column] = (row, column + 1)
    best_start = 1
    best_score = math.inf
    for row in range(1, size):
        score = abs(sums[row][0] / lengths[row][0] - target)
        if score < best_score:
            best_start, best_score = row, score
    return _follow(successor, (best_start, 0))


def _deviations(grid: _Grid, target: float) -> _Grid:
    return [[abs(value - target) for value in row] for row in grid]


def _minimax_path(grid: _Grid, target: float) -> list[Cell]:
    """Bottleneck path, then the smallest deviation sum among paths within the bottleneck.

    A lexicographic (max, sum) cost has no optimal substructure (a continuation with a larger max but
    a smaller sum can win once the prefix's max dominates), so this runs two exact passes: first
    the smallest achievable maximum deviation, then a shortest path on the cells whose deviation is at
    most that value.
    """
    size = len(grid)
    deviation = _deviations(grid, target)
    bottleneck = [row[:] for row in deviation]
    for row in range(1, size):
        for column in range(size - 1, -1, -1):
            best_next = bottleneck[row - 1][column]
            if column + 1 < size:
                best_next = min(best_next, bottleneck[row][column + 1])
            bottleneck[row][column] = max(deviation[row][column], best_next)
    smallest_maximum = min(bottleneck[row][0] for row in range(1, size))

    totals = [[math.inf] * size for _ in range(size)]
    successor: list[list[Cell | None]] = [[None] * size for _ in range(size)]
    for column in range(size):
        if deviation[0][column] <= smallest_maximum:
            totals[0][column] = deviation[0][column]
    for row in range(1, size):
        for column in range(size - 1, -1, -1):
            if deviation[row][column] > smallest_maximum:
                continue
            next_cell, next_total = (row - 1, column), totals[row - 1][column]
            if column + 1 < size and totals[row][column + 1] <= next_total:
                next_cell, next_total = (row, column + 1), totals[row][column + 1]
            if next_total < math.inf:
                totals[row][column] = deviation[row][column] + next_total
                successor[row][column] = next_cell
    best_start = min(range(1, size), key=lambda start_row: (totals[start_row][0], start_row))
    return _follow(successor, (best_start, 0))


def _mean_abs_path(grid: _Grid, target: float) -> list[Cell]:
    """Exact minimum mean deviation: one shortest-path pass per end column ``e``.

    Every path from ``(i, 0)`` to ``(0, e)`` has ``i + e + 1`` cells, so for a fixed (start, end)
    pair minimising the mean is minimising the sum of deviations.
    """
    size = len(grid)
    deviation = _deviations(grid, target)
    # (mean deviation, start row, path length): tuple order is the tie-break order.
    best_key = (math.inf, size, 2 * size)
    best_successor: list[list[Cell | None]] = []
    for end_column in range(size):
        width = end_column + 1
        totals = [[math.inf] * width for _ in range(size)]
        successor: list[list[Cell | None]] = [[None] * width for _ in range(size)]
        totals[0][end_column] = deviation[0][end_column]
        for row in range(1, size):
            for column in range(end_column, -1, -1):
                next_cell, next_total = (row - 1, column), totals[row - 1][column]
                if column < end_column and totals[row][column + 1] <= next_total:
                    next_cell, next_total = (row, column + 1), totals[row][column + 1]
                if next_total < math.inf:
                    totals[row][column] = deviation[row][column] + next_total
                    successor[row][column] = next_cell
        for start_row in range(1, size):
            length = start_row + end_column + 1
            key = (totals[start_row][0] / length, start_row, length)
            if key < best_key:
                best_key, best_successor = key, successor
    return _follow(best_successor, (best_key[1], 0))
