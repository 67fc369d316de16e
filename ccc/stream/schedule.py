"""The corruption schedule of a CCC stream: which pair and which severities at every path step.

A stream visits a chain of corruptions ``c0, c1, c2, ...`` (consecutive names differ). Pair ``p``
is ``(c_p, c_{p+1})``; the stream walks that pair's severity path (:func:`ccc.stream.paths.find_path`)
from "only ``c_p``" to "only ``c_{p+1}``", one *path step* per cell, ``speed`` images per step,
then continues with pair ``p + 1``. Step ``s`` therefore covers images ``s * speed`` to
``(s + 1) * speed - 1``.

:class:`StreamSchedule` answers "what happens at step ``s``" for any ``s`` (random access). The
chain is an unbounded sequence drawn from a seeded generator, so it is produced lazily: whenever a
step beyond the known part is asked for, the chain is regenerated to twice its length and the
cumulative path lengths are extended (amortised O(1) per pair); a lookup is then a binary search
over those cumulative lengths, O(log P) for P pairs (about 400 pairs for the paper's 7.5M images at
speed 1,000). Paths are computed once per ordered pair when the schedule is built.

The schedule holds no calibration table (only the paths and the accuracies along them), so it is
small and cheap to send to worker processes.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ccc.stream.order import reference_corruption_order
from ccc.stream.paths import PATH_OBJECTIVES, SEVERITY_STEP, Cell, find_path, path_accuracies
from ccc.validation import check_non_negative_int

__all__ = [
    "SCHEDULES",
    "PairPath",
    "PairVisit",
    "ScheduleError",
    "ScheduledStep",
    "StreamSchedule",
    "build_schedule",
]

SCHEDULES: tuple[str, ...] = ("reference",)
"""Corruption-order schedules. ``"reference"``: the public generator's order for the seed
(:func:`ccc.stream.order.reference_corruption_order`)."""

_INITIAL_CHAIN_LENGTH = 64


class ScheduleError(ValueError):
    """A schedule cannot be built: bad argument, or the calibration table lacks a needed pair."""


class _AccuracyGrids(Protocol):
    """What the schedule needs of a calibration table (see :class:`ccc.calibration.CalibrationTable`)."""

    def resolve_corruption(self, name: str) -> str: ...

    def has_pair(self, n1: str, n2: str) -> bool: ...

    def grid(self, n1: str, n2: str) -> Sequence[Sequence[float]]: ...


@dataclass(frozen=True)
class PairPath:
    """The severity path of one ordered pair.

    Attributes:
        n1, n2: corruption names (the table's spelling).
        cells: grid indices ``(i, j)`` in path order; severities ``s1 = i / 4``, ``s2 = j / 4``.
        accuracies: calibrated accuracy in percent ([0, 100]) at each cell.
    """

    n1: str
    n2: str
    cells: tuple[Cell, ...]
    accuracies: tuple[float, ...]


@dataclass(frozen=True)
class ScheduledStep:
    """What the stream does at one path step.

    Attributes:
        step: path step number, >= 0 (images ``step * speed`` … ``(step + 1) * speed - 1``).
        pair_index: position of the pair in the chain, >= 0.
        path_position: position of the cell in the pair's path, >= 0.
        cell: grid indices ``(i, j)``.
        n1, s1, n2, s2: the corruptions and their severities in [0, 5] (multiples of 0.25).
        calibrated_accuracy: the calibration table's accuracy at the cell, percent.
    """

    step: int
    pair_index: int
    path_position: int
    cell: Cell
    n1: str
    s1: float
    n2: str
    s2: float
    calibrated_accuracy: float


@dataclass(frozen=True)
class PairVisit:
    """One pair of the chain and the steps it occupies: ``first_step`` … ``first_step + len(path.cells) - 1``."""

    pair_index: int
    first_step: int
    path: PairPath


class StreamSchedule:
    """Random access to the path steps of a stream (see the module docstring).

    Build one with :func:`build_schedule`. Behaves as immutable: the lazily extended chain is a
    cache that only ever grows and never changes an answer already given; pickling sends the
    definition, not the cache.
    """

    __slots__ = (
        "corruptions",
        "seed",
        "schedule",
        "path_objective",
        "target_accuracy",
        "pair_paths",
        "_chain",
        "_ends",
    )

    def __init__(
        self,
        corruptions: tuple[str, ...],
        seed: int,
        schedule: str,
        path_objective: str,
        target_accuracy: float,
        pair_paths: dict[tuple[str, str], PairPath],
    ) -> None:
        self.corruptions = corruptions
        self.seed = seed
        self.schedule = schedule
        self.path_objective = path_objective
        self.target_accuracy = target_accuracy
        self.pair_paths = pair_paths
        self._chain: list[str] = []
        self._ends: list[int] = []

    def __reduce__(self) -> tuple[type, tuple]:
        return (
            StreamSchedule,
            (self.corruptions, self.seed, self.schedule, self.path_objective, self.target_accuracy, self.pair_paths),
        )

    def _extend_until(self, step: int) -> None:
        while not self._ends or self._ends[-1] <= step:
            length = max(_INITIAL_CHAIN_LENGTH, 2 * len(self._chain))
            self._chain = reference_corruption_order(self.corruptions, self.seed, length)
            total = self._ends[-1] if self._ends else 0
            for pair_index in range(len(self._ends), length - 1):
                total += len(self.pair_path(pair_index).cells)
                self._ends.append(total)

    def pair_path(self, pair_index: int) -> PairPath:
        """The path of the ``pair_index``-th pair of the chain (pair_index >= 0)."""
        check_non_negative_int("pair_index", pair_index, error=ScheduleError)
        while len(self._chain) < pair_index + 2:
            self._chain = reference_corruption_order(
                self.corruptions, self.seed, max(_INITIAL_CHAIN_LENGTH, 2 * len(self._chain), pair_index + 2)
            )
        return self.pair_paths[(self._chain[pair_index], self._chain[pair_index + 1])]

    def step(self, step: int) -> ScheduledStep:
        """The pair, cell and severities of path step ``step`` (integer >= 0)."""
        check_non_negative_int("step", step, error=ScheduleError)
        self._extend_until(step)
        pair_index = bisect.bisect_right(self._ends, step)
        first_step = self._ends[pair_index - 1] if pair_index else 0
        path = self.pair_path(pair_index)
        position = step - first_step
        row, column = path.cells[position]
        return ScheduledStep(
            step=step,
            pair_index=pair_index,
            path_position=position,
            cell=(row, column),
            n1=path.n1,
            s1=row * SEVERITY_STEP,
            n2=path.n2,
            s2=column * SEVERITY_STEP,
            calibrated_accuracy=path.accuracies[position],
        )

    def visits(self, num_steps: int) -> list[PairVisit]:
        """The pairs of the chain that the first ``num_steps`` steps (>= 0) touch, in order.

        The last pair may extend beyond ``num_steps``.
        """
        check_non_negative_int("num_steps", num_steps, error=ScheduleError)
        if num_steps == 0:
            return []
        self._extend_until(num_steps - 1)
        visits = []
        first_step = 0
        for pair_index, end in enumerate(self._ends):
            visits.append(PairVisit(pair_index, first_step, self.pair_path(pair_index)))
            if end >= num_steps:
                break
            first_step = end
        return visits


def build_schedule(
    table: _AccuracyGrids,
    target_accuracy: float,
    corruptions: Sequence[str],
    seed: int,
    schedule: str = "reference",
    path_objective: str = "reference",
) -> StreamSchedule:
    """Compute the paths of every ordered pair of ``corruptions`` and return the stream's schedule.

    Args:
        table: calibration table (:class:`ccc.calibration.CalibrationTable`) holding every ordered
            pair of ``corruptions``; aliases such as ``jpeg_compression`` are accepted.
        target_accuracy: calibration target in percent, in [0, 100].
        corruptions: at least 2 distinct names; their order matters for the reference schedule
            (it decides which name a seeded ``random.choice`` returns).
        seed: integer >= 0.
        schedule: one of :data:`SCHEDULES`.
        path_objective: one of :data:`ccc.stream.paths.PATH_OBJECTIVES`.

    Raises:
        ScheduleError: for an invalid argument, an unknown corruption or a missing pair (listed).
    """
    check_non_negative_int("seed", seed, error=ScheduleError)
    if schedule not in SCHEDULES:
        raise ScheduleError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if path_objective not in PATH_OBJECTIVES:
        raise ScheduleError(f"path_objective must be one of {', '.join(PATH_OBJECTIVES)}, got {path_objective!r}")
    if isinstance(target_accuracy, bool) or not isinstance(target_accuracy, (int, float)):
        raise ScheduleError(f"target_accuracy must be a number in [0, 100] percent, got {target_accuracy!r}")
    if not (math.isfinite(target_accuracy) and 0.0 <= target_accuracy <= 100.0):
        raise ScheduleError(f"target_accuracy must be in [0, 100] percent, got {target_accuracy!r}")
    if isinstance(corruptions, str):
        raise ScheduleError(f"corruptions must be a sequence of names, got the string {corruptions!r}")
    try:
        names = tuple(table.resolve_corruption(name) for name in corruptions)
    except ValueError as error:
        raise ScheduleError(str(error)) from None
    if len(set(names)) != len(names) or len(names) < 2:
        raise ScheduleError(f"corruptions must hold at least 2 distinct names, got {list(corruptions)}")
    missing = [(a, b) for a in names for b in names if a != b and not table.has_pair(a, b)]
    if missing:
        listed = ", ".join(f"({a}, {b})" for a, b in missing[:6]) + (
            f" and {len(missing) - 6} more" if len(missing) > 6 else ""
        )
        raise ScheduleError(
            f"the calibration table lacks {len(missing)} of the {len(names) * (len(names) - 1)} ordered pairs "
            f"these corruptions need: {listed}"
        )
    target = float(target_accuracy)
    pair_paths = {}
    for n1 in names:
        for n2 in names:
            if n1 != n2:
                grid = table.grid(n1, n2)
                cells = find_path(grid, target, path_objective)  # type: ignore[arg-type]
                accuracies = path_accuracies(grid, cells)
                pair_paths[(n1, n2)] = PairPath(n1, n2, tuple((int(i), int(j)) for i, j in cells), tuple(accuracies))
    return StreamSchedule(names, seed, schedule, path_objective, target, pair_paths)
