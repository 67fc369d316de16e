"""The calibration computation's unit of work and its pixels (no model, no torch).

Vocabulary (all indices are small integers so that records stay compact):

- a **cell** (:class:`Cell`) is one measured condition: the clean images, one corruption alone at
  one severity ("single"), or corruption ``n1`` at ``s1`` followed by ``n2`` at ``s2`` ("pair").
  Corruptions are indices into the run's corruption list, severities indices 0 … 20 of the grid
  (severity ``index / 4``). A pair grid's first row and column are single cells and its corner is
  the clean cell, so those are measured once and shared by every pair.
- a **block** is a run of ``block_size`` consecutive images of the image set's evaluation order
  (:meth:`CalibrationImageSet.evaluation_order`); results are counted per (cell, block).
- a **work unit** (:class:`WorkUnit`) corrupts one block with a base ``(n1, s1)`` once and reuses
  the result for every target ``(n2, s2)``: that is the work sharing of the brute-force grid, where
  each image is corrupted ``C·20 + C·(C−1)·400`` times for ``C`` corruptions.

Randomness: image ``k`` of the set corrupted by ``n`` at severity index ``s`` draws from
``SeedSequence(seed, spawn_key=(k, id(n), s))``; the second stage of a pair from
``SeedSequence(seed, spawn_key=(k, id(n1), s1, id(n2), s2))``, where ``id`` is the CRC-32 of the
corruption's canonical name. Results therefore depend neither on scheduling nor on which worker
runs a unit, and a single cell is the same images whether it is reached as ``(n, s)`` or as the
first row/column of any pair.
With the stream preprocessing (:class:`~ccc.calibration.compute.imageset.Preprocessing`) image ``k``'s
random-resized crop and flip draw from ``SeedSequence(seed, spawn_key=(k, CROP_KEY))``, once per image
for every cell, and every image the model sees has been through the stream's JPEG round trip.

Pixels are rendered by :func:`render_base` and :func:`render_targets` (numpy only: this module does
not import torch, so Ray rendering workers start fast); predictions come from
:class:`ccc.calibration.compute.evaluator.ModelEvaluator`; :func:`ccc.calibration.compute.evaluator.execute_unit`
combines them in-process and the Ray backend (:mod:`ccc.calibration.compute.backends.model`) runs the same
functions in tasks and actors.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from ccc.calibration.compute.imageset import CalibrationImageSet
from ccc.calibration.table import SEVERITIES
from ccc.corruptions import canonical_name, corrupt_batch, get_corruption
from ccc.validation import check_non_negative_int, check_positive_int

NO_CORRUPTION = -1
"""Corruption index of "no corruption" (the clean cell, the second stage of a single cell)."""

DEFAULT_BLOCK_SIZE = 25
"""Images per block (a unit of work and of persisted results)."""

DEFAULT_IMAGES_PER_TASK = 125
"""Corrupted images produced by one rendering task before they go to the model (bounds memory)."""


class Cell(NamedTuple):
    """One measured condition; indices into the run's corruption list and the 21-step severity grid.

    - clean: ``Cell(-1, 0, -1, 0)``;
    - single corruption ``n`` at severity index ``s`` (1 … 20): ``Cell(n, s, -1, 0)``;
    - pair: ``Cell(n1, s1, n2, s2)`` with ``n1 != n2`` and ``s1, s2`` in 1 … 20.
    """

    n1: int
    s1: int
    n2: int
    s2: int

    @property
    def is_clean(self) -> bool:
        """True for the clean cell."""
        return self.n1 == NO_CORRUPTION

    @property
    def is_single(self) -> bool:
        """True for a single-corruption cell."""
        return self.n1 != NO_CORRUPTION and self.n2 == NO_CORRUPTION


CLEAN_CELL = Cell(NO_CORRUPTION, 0, NO_CORRUPTION, 0)


def single_cell(corruption: int, severity: int) -> Cell:
    """The cell of corruption index ``corruption`` alone at severity index ``severity`` (0 → clean)."""
    return CLEAN_CELL if severity == 0 else Cell(corruption, severity, NO_CORRUPTION, 0)


def grid_cell(n1: int, n2: int, i: int, j: int) -> Cell:
    """The cell behind ``grid(n1, n2)[i, j]`` (severity indices ``i``, ``j`` in 0 … 20)."""
    if i == 0:
        return single_cell(n2, j)
    if j == 0:
        return single_cell(n1, i)
    return Cell(n1, i, n2, j)


@dataclasses.dataclass(frozen=True)
class WorkUnit:
    """Corrupt one block with the base ``(corruption, severity)`` once, then with every target.

    Attributes:
        corruption: base corruption index, or -1 for the clean images (then ``severity`` is 0).
        severity: base severity index, 0 … 20.
        block: block index of the image set's evaluation order.
        evaluate_base: whether the base images themselves are evaluated (the single or clean cell).
        targets: ``(n2, s2)`` second stages applied to the base images, each evaluated (pair cells);
            ``s2`` in 1 … 20, ``n2`` different from the base corruption.
    """

    corruption: int
    severity: int
    block: int
    evaluate_base: bool
    targets: tuple[tuple[int, int], ...]

    def cells(self) -> tuple[Cell, ...]:
        """The cells this unit measures, in result order (the base cell first when evaluated)."""
        base = [single_cell(self.corruption, self.severity)] if self.evaluate_base else []
        return tuple(base) + tuple(Cell(self.corruption, self.severity, n2, s2) for n2, s2 in self.targets)


@dataclasses.dataclass(frozen=True)
class UnitResult:
    """Number of correct top-1 predictions per cell of ``unit.cells()`` on the unit's block."""

    unit: WorkUnit
    correct: tuple[int, ...]
    images_per_cell: int

    @property
    def evaluated_images(self) -> int:
        """Model evaluations this unit performed (cells × images per cell)."""
        return len(self.correct) * self.images_per_cell

    @property
    def corrupted_images(self) -> int:
        """Corruption calls this unit made: the base once per image (unless clean), each target once."""
        base = 0 if self.unit.corruption == NO_CORRUPTION else 1
        return (base + len(self.unit.targets)) * self.images_per_cell


@dataclasses.dataclass(frozen=True)
class RenderContext:
    """What rendering needs, shared by every unit of a run (sent once to Ray workers).

    Attributes:
        image_set: the calibration images.
        corruptions: canonical corruption names; units refer to them by index.
        seed: root seed of the per-image generators.
        block_size: images per block (≥ 1); the last block may be shorter.
    """

    image_set: CalibrationImageSet
    corruptions: tuple[str, ...]
    seed: int
    block_size: int = DEFAULT_BLOCK_SIZE
    _order: tuple[int, ...] = dataclasses.field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        check_positive_int("block_size", self.block_size)
        check_non_negative_int("seed", self.seed)
        names = tuple(canonical_name(name, "corruptions") for name in self.corruptions)
        object.__setattr__(self, "corruptions", names)
        object.__setattr__(self, "_order", tuple(int(k) for k in self.image_set.evaluation_order()))

    @property
    def block_count(self) -> int:
        """Number of blocks covering the image set."""
        return -(-len(self.image_set) // self.block_size)

    def block_positions(self, block: int) -> tuple[int, ...]:
        """Image-set positions of block ``block`` (0 … block_count − 1)."""
        if not 0 <= block < self.block_count:
            raise ValueError(f"block must be in [0, {self.block_count - 1}], got {block}")
        return self._order[block * self.block_size : (block + 1) * self.block_size]

    def block_labels(self, block: int) -> NDArray[np.int64]:
        """Class indices of the images of block ``block``."""
        return np.array([self.image_set.labels[k] for k in self.block_positions(block)], dtype=np.int64)


def corruption_identifier(name: str) -> int:
    """CRC-32 of the canonical corruption name: its stable part of per-image seed keys."""
    return zlib.crc32(canonical_name(name).encode("utf-8"))


def image_generators(
    seed: int, positions: Sequence[int], key: tuple[int, ...], corruption: str
) -> list[np.random.Generator]:
    """One generator per image, ``SeedSequence(seed, spawn_key=(position, *key))``, for ``corruption``.

    A corruption that draws no random numbers (``get_corruption(name).random`` is False) gets one
    shared, never-used generator instead: building a generator costs about 60 µs, as much as some
    corruptions of a small image.
    """
    if not get_corruption(corruption).random:
        return [np.random.default_rng(seed)] * len(positions)
    return [np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(int(k), *key))) for k in positions]


def seed_key(
    context: RenderContext, corruption: int, severity: int, target: tuple[int, int] | None = None
) -> tuple[int, ...]:
    """The per-image seed key (after the image position) of a base ``(corruption, severity)``, or of
    its second stage ``target = (n2, s2)``: ``(id(n1), s1)`` or ``(id(n1), s1, id(n2), s2)``."""
    key = (corruption_identifier(context.corruptions[corruption]), severity)
    if target is None:
        return key
    n2, s2 = target
    return (*key, corruption_identifier(context.corruptions[n2]), s2)


def image_seeds(seed: int, positions: Sequence[int], key: tuple[int, ...]) -> NDArray[np.int64]:
    """One integer seed per image from ``SeedSequence(seed, spawn_key=(position, *key))``.

    The first 64-bit word of the sequence's state, masked to 63 bits: int64 array of
    ``len(positions)`` values in [0, 2**63), for renderers that take integer seeds (the torch
    calibration backend) instead of the generators of :func:`image_generators`.
    """
    mask = np.uint64(2**63 - 1)
    return np.array(
        [
            np.random.SeedSequence(seed, spawn_key=(int(k), *key)).generate_state(1, np.uint64)[0] & mask
            for k in positions
        ],
        dtype=np.int64,
    )


def render_base(context: RenderContext, corruption: int, severity: int, block: int) -> NDArray[np.uint8]:
    """Load block ``block`` and apply the base corruption; uint8 ``B × H × W × 3``, not yet finished
    for the model (:func:`finish_base`).

    ``corruption = -1`` (severity 0) returns the preprocessed clean images.
    """
    positions = context.block_positions(block)
    images = context.image_set.load(positions, context.seed)
    if corruption == NO_CORRUPTION:
        return images
    name = context.corruptions[corruption]
    generators = image_generators(context.seed, positions, seed_key(context, corruption, severity), name)
    corruption_set = context.image_set.preprocessing.corruption_set
    return corrupt_batch(images, name, float(SEVERITIES[severity]), generators, corruption_set)


def finish_base(context: RenderContext, base_images: NDArray[np.uint8]) -> NDArray[np.uint8]:
    """The model's view of a base (:func:`render_base`): the preprocessing's step after the corruptions
    (:meth:`~ccc.calibration.compute.imageset.Preprocessing.finish`; the base itself for centre crops)."""
    return context.image_set.preprocessing.finish(base_images)


def render_targets(
    context: RenderContext,
    base_images: NDArray[np.uint8],
    corruption: int,
    severity: int,
    block: int,
    targets: Sequence[tuple[int, int]],
) -> NDArray[np.uint8]:
    """Apply each target ``(n2, s2)`` to the base images and finish them for the model
    (:meth:`~ccc.calibration.compute.imageset.Preprocessing.finish`); uint8 ``(len(targets)·B) × H × W × 3``.

    The base must be a corruption (index ≥ 0); targets are pair cells.
    """
    if corruption == NO_CORRUPTION and targets:
        raise ValueError("targets need a corrupted base: corruption must be >= 0, got -1 (clean)")
    positions = context.block_positions(block)
    corruption_set = context.image_set.preprocessing.corruption_set
    outputs = []
    for n2, s2 in targets:
        name = context.corruptions[n2]
        generators = image_generators(context.seed, positions, seed_key(context, corruption, severity, (n2, s2)), name)
        outputs.append(corrupt_batch(base_images, name, float(SEVERITIES[s2]), generators, corruption_set))
    if not outputs:
        return base_images[:0].copy()
    return context.image_set.preprocessing.finish(np.concatenate(outputs))


def target_groups(unit: WorkUnit, block_images: int, images_per_task: int) -> list[tuple[tuple[int, int], ...]]:
    """Split the unit's targets so that one group renders about ``images_per_task`` images."""
    size = max(1, images_per_task // max(1, block_images))
    return [unit.targets[start : start + size] for start in range(0, len(unit.targets), size)]


def count_correct(predictions: NDArray[np.int64], labels: NDArray[np.int64]) -> tuple[int, ...]:
    """Correct predictions per consecutive group of ``len(labels)`` images (one group per cell)."""
    if len(labels) == 0:
        return ()
    hits = (predictions.reshape(-1, len(labels)) == labels[None, :]).sum(axis=1)
    return tuple(int(value) for value in hits)
