"""Computing a calibration table: plan the cells, run the work units, persist, assemble.

:func:`compute_calibration` is the library entry point behind ``ccc-calibrate compute``::

    job = CalibrationJob(image_set, corruptions=("fog", "snow", "jpeg"), model_name=..., model_digest=...)
    backend = ModelBackend(SerialExecutor(), job.render_context(), model)
    table = compute_calibration(job, backend, work_folder).table

A **planner** decides which cells to measure on how many blocks of images, in rounds:

- :class:`BruteForcePlanner` — one round: the clean cell, every single-corruption cell and every
  pair cell on every block (the paper's full grid, with work sharing).
- :class:`ccc.calibration.adaptive.AdaptivePlanner` — several rounds, each decided from the results
  of the previous ones, measuring pair cells only where paths need them.

Requests are cumulative "cell → number of blocks" (a cell measured on ``b`` blocks used the first
``b`` blocks of the evaluation order). Work already in the work folder is skipped; the rest is
grouped into :class:`~ccc.calibration.compute.engine.WorkUnit` s (one per base corruption, severity and
block, so every base image is corrupted once and reused for all its targets) and handed to a
backend. A round's decisions only read results of the blocks requested by earlier rounds, so a run
that is killed and restarted makes the same decisions and ends with the same table.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import hashlib
import logging
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from ccc.calibration.compute import DEFAULT_BACKEND
from ccc.calibration.compute.backends.registry import CalibrationBackend
from ccc.calibration.compute.engine import (
    CLEAN_CELL,
    DEFAULT_BLOCK_SIZE,
    Cell,
    RenderContext,
    UnitResult,
    WorkUnit,
    grid_cell,
    single_cell,
)
from ccc.calibration.compute.imageset import CalibrationImageSet
from ccc.calibration.presets import RESNET50_DIFFICULTY_PRESETS
from ccc.calibration.table import GRID_SIZE, CalibrationError, CalibrationMetadata, CalibrationTable
from ccc.corruptions import canonical_name
from ccc.render import DEFAULT_RENDER_PRECISION, check_render_precision

logger = logging.getLogger(__name__)


class CellMeasurement(NamedTuple):
    """What is known of one cell: its results on the blocks :func:`cell_blocks` gives it.

    Attributes:
        correct: correct predictions over the measured blocks.
        images: images evaluated (the sizes of the measured blocks added up).
        blocks: the measured blocks, in the cell's own order.
        block_correct: correct predictions per measured block, in the same order.
    """

    correct: int
    images: int
    blocks: tuple[int, ...]
    block_correct: tuple[int, ...]


Measurements = Mapping[Cell, CellMeasurement]
"""Cell → its :class:`CellMeasurement`."""

Requests = dict[Cell, int]
"""Cell → number of blocks the cell must be measured on (which ones: :func:`cell_blocks`)."""


def cell_blocks(cell: Cell, count: int, block_count: int) -> list[int]:
    """The blocks a cell measured on ``count`` of ``block_count`` blocks uses, in its own order.

    The clean cell and the single-corruption cells use blocks ``0 … count − 1``. A pair cell starts
    at its own offset (CRC-32 of its four indices, modulo ``block_count``) and wraps around. Cells
    measured on a few blocks therefore see different images: their errors do not all share the
    luck of the same first blocks, and averaging over cells (smoothing, a path's mean) removes
    them. A cell asked for more blocks keeps its earlier ones (its order is fixed), and with
    ``count = block_count`` every cell uses every block.

    Args:
        cell: the cell.
        count: blocks wanted, in [0, block_count].
        block_count: blocks of the image set, ≥ 1.
    """
    if not 0 <= count <= block_count:
        raise ValueError(f"count must be in [0, {block_count}], got {count}")
    if cell.is_clean or cell.is_single:
        return list(range(count))
    offset = zlib.crc32(struct.pack("<4i", *cell)) % block_count
    return [(offset + step) % block_count for step in range(count)]


RESNET50_MODEL_NAME = "torchvision resnet50 IMAGENET1K_V1"


def ordered_pairs(corruption_count: int) -> list[tuple[int, int]]:
    """All ordered pairs ``(a, b)``, ``a != b``, of corruption indices, sorted."""
    return [(a, b) for a in range(corruption_count) for b in range(corruption_count) if a != b]


def single_cells(corruption_count: int) -> list[Cell]:
    """The clean cell and every single-corruption cell (severity indices 1 … 20)."""
    return [CLEAN_CELL] + [single_cell(n, s) for n in range(corruption_count) for s in range(1, GRID_SIZE)]


def pair_cells(n1: int, n2: int) -> list[Cell]:
    """The 400 pair cells (both severity indices in 1 … 20) of the ordered pair ``(n1, n2)``."""
    return [Cell(n1, i, n2, j) for i in range(1, GRID_SIZE) for j in range(1, GRID_SIZE)]


class CalibrationPlanner(Protocol):
    """Decides, round by round, which cells to measure and turns measurements into grids."""

    def identity(self) -> dict[str, Any]:
        """JSON-able description of the scheme and its settings (part of the run identity)."""

    def next_round(self, requested: Mapping[Cell, int], measured: Measurements) -> Requests | None:
        """Cumulative requests for the next round, or None when done.

        ``requested`` is what earlier rounds asked for; ``measured`` holds exactly those results.
        """

    def grids(self, measured: Measurements) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        """Accuracy (percent) and image counts per ordered pair: two [P, 21, 21] arrays, pairs in
        :func:`ordered_pairs` order."""

    def notes(self) -> str:
        """How the table's values were obtained (stored in the metadata notes)."""


def measured_grids(corruption_count: int, measured: Measurements) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Correct predictions and images per grid cell, two [P, 21, 21] int arrays (0 where unmeasured)."""
    pairs = ordered_pairs(corruption_count)
    correct = np.zeros((len(pairs), GRID_SIZE, GRID_SIZE), dtype=np.int64)
    images = np.zeros_like(correct)
    for p, (a, b) in enumerate(pairs):
        for i in range(GRID_SIZE):
            for j in range(GRID_SIZE):
                known = measured.get(grid_cell(a, b, i, j))
                if known is not None:
                    correct[p, i, j], images[p, i, j] = known.correct, known.images
    return correct, images


@dataclasses.dataclass(frozen=True)
class BruteForcePlanner:
    """Every cell on every block: the full grid (with work sharing), one round."""

    corruption_count: int
    block_count: int

    def identity(self) -> dict[str, Any]:
        """``{"scheme": "brute-force"}``."""
        return {"scheme": "brute-force"}

    def next_round(self, requested: Mapping[Cell, int], measured: Measurements) -> Requests | None:
        """All cells on all blocks, then None."""
        if requested:
            return None
        cells = single_cells(self.corruption_count)
        for a, b in ordered_pairs(self.corruption_count):
            cells += pair_cells(a, b)
        return {cell: self.block_count for cell in cells}

    def grids(self, measured: Measurements) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        """Measured accuracy of every cell (all cells are measured on all images)."""
        correct, images = measured_grids(self.corruption_count, measured)
        if (images == 0).any():
            raise CalibrationError("brute-force grids are incomplete: some cells were never measured")
        return 100.0 * correct / images, images

    def notes(self) -> str:
        """The table's values are plain measurements."""
        return "brute force: every cell measured on every calibration image"


def pending_units(requests: Mapping[Cell, int], done: Iterable[tuple[Cell, int]], block_count: int) -> list[WorkUnit]:
    """Group the requested (cell, block) pairs (blocks from :func:`cell_blocks`) that are not
    ``done`` into work units.

    One unit per (base corruption, base severity, block): the base cell is evaluated if requested,
    and every requested pair cell with that base is a target. Units come sorted by base, then block.
    """
    finished = set(done)
    grouped: dict[tuple[int, int, int], tuple[list[bool], list[tuple[int, int]]]] = collections.defaultdict(
        lambda: ([False], [])
    )
    for cell, blocks in requests.items():
        for block in cell_blocks(cell, blocks, block_count):
            if (cell, block) in finished:
                continue
            base_flag, targets = grouped[(cell.n1, cell.s1, block)]
            if cell.is_clean or cell.is_single:
                base_flag[0] = True
            else:
                targets.append((cell.n2, cell.s2))
    return [
        WorkUnit(corruption, severity, block, flag[0], tuple(sorted(targets)))
        for (corruption, severity, block), (flag, targets) in sorted(grouped.items())
    ]


@dataclasses.dataclass(frozen=True)
class CalibrationJob:
    """Everything that determines a calibration table's numbers.

    Attributes:
        image_set: the calibration images (with their preprocessing).
        corruptions: corruption names (≥ 2, canonical CCC spellings are stored).
        model_name: model identity for the metadata, e.g. ``"torchvision resnet50 IMAGENET1K_V1"``.
        model_digest: sha256 of the model's weights (:func:`state_dict_digest` or of the weights file).
        planner: brute force or adaptive; built by :meth:`with_brute_force` / the adaptive module.
        seed: root of the per-image corruption seeds, ≥ 0.
        block_size: images per block, ≥ 1.
        amp: whether predictions use float16 autocast (changes numbers slightly, so part of the identity).
        weights_file_sha256: sha256 of the weights file when one was given (metadata), else None.
        backend: the calibration backend that runs the units (:mod:`ccc.calibration.compute.backends.registry`);
            one other than the default ``model`` is part of the identity and named in the table's notes
            (the ``torch`` backend's pixels differ from the CPU path's, so its results differ).
        render_precision: the ``torch`` backend's working float precision (``ccc.render.RENDER_PRECISIONS``);
            one other than the default ``float64`` is part of the identity (its pixels differ again).
    """

    image_set: CalibrationImageSet
    corruptions: tuple[str, ...]
    model_name: str
    model_digest: str
    planner: CalibrationPlanner
    seed: int = 0
    block_size: int = DEFAULT_BLOCK_SIZE
    amp: bool = False
    weights_file_sha256: str | None = None
    backend: str = DEFAULT_BACKEND
    render_precision: str = DEFAULT_RENDER_PRECISION

    def __post_init__(self) -> None:
        check_render_precision(self.render_precision)
        names = tuple(canonical_name(name, "corruptions") for name in self.corruptions)
        if len(names) < 2:
            raise ValueError(f"corruptions must list at least 2 corruptions, got {list(self.corruptions)}")
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"corruptions must be distinct, got {duplicates} more than once")
        object.__setattr__(self, "corruptions", names)

    def render_context(self) -> RenderContext:
        """The :class:`RenderContext` shared by all work units of this job."""
        return RenderContext(self.image_set, self.corruptions, self.seed, self.block_size)

    @property
    def block_count(self) -> int:
        """Blocks covering the image set."""
        return -(-len(self.image_set) // self.block_size)

    def identity(self) -> dict[str, Any]:
        """JSON-able identity of the run (stored in the work folder; a resume must match it)."""
        identity: dict[str, Any] = {
            "format": "ccc-calibration-run",
            "format_version": 1,
            "corruptions": list(self.corruptions),
            "image_set_sha256": self.image_set.checksum(),
            "image_count": len(self.image_set),
            "image_selection_seed": self.image_set.seed,
            "preprocessing": self.image_set.preprocessing.to_record(),
            "model_name": self.model_name,
            "model_digest": self.model_digest,
            "seed": self.seed,
            "block_size": self.block_size,
            "amp": self.amp,
            "planner": self.planner.identity(),
        }
        if self.backend != DEFAULT_BACKEND:
            identity["backend"] = self.backend
        if self.render_precision != DEFAULT_RENDER_PRECISION:
            identity["render_precision"] = self.render_precision
        return identity


def state_dict_digest(model: nn.Module) -> str:
    """sha256 (hex) of a model's parameters and buffers: names, dtypes, shapes and values, sorted by name."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        value = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{value.dtype}|{tuple(value.shape)}\n".encode("utf-8"))
        digest.update(value.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True)
class CalibrationOutcome:
    """The table and what this call did.

    Attributes:
        table: the finished calibration table.
        evaluated_images: model evaluations (image × cell) performed by this call.
        resumed_images: evaluations found already done in the work folder.
        total_images: evaluations behind the table (evaluated + resumed).
        seconds: wall time of this call's computation.
        corrupted_images: corruption calls (one image, one corruption) made by this call.
    """

    table: CalibrationTable
    evaluated_images: int
    resumed_images: int
    total_images: int
    seconds: float
    corrupted_images: int = 0

    @property
    def images_per_second(self) -> float:
        """Model evaluations per second of this call (0 if it evaluated nothing)."""
        return self.evaluated_images / self.seconds if self.seconds > 0 else 0.0


class ResultStore(Protocol):
    """Where finished units go: :class:`~ccc.calibration.compute.workfolder.WorkFolder` (persistent) or
    :class:`MemoryResultStore`. ``results`` maps (cell, block) to correct predictions."""

    results: dict[tuple[Cell, int], int]

    def append(self, result: UnitResult) -> None:
        """Record one finished unit."""


class MemoryResultStore:
    """Results kept in memory only (nothing survives the process): for tests and benchmarks."""

    def __init__(self) -> None:
        self.results: dict[tuple[Cell, int], int] = {}

    def append(self, result: UnitResult) -> None:
        """Record one finished unit."""
        for cell, value in zip(result.unit.cells(), result.correct):
            self.results[(cell, result.unit.block)] = value


ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(evaluations just finished, evaluations planned so far)``."""


def _measurements(
    requests: Mapping[Cell, int], results: Mapping[tuple[Cell, int], int], block_sizes: list[int]
) -> dict[Cell, CellMeasurement]:
    measured: dict[Cell, CellMeasurement] = {}
    for cell, count in requests.items():
        blocks = cell_blocks(cell, count, len(block_sizes))
        block_correct = []
        for block in blocks:
            value = results.get((cell, block))
            if value is None:
                raise CalibrationError(f"internal error: result of cell {tuple(cell)} block {block} missing")
            block_correct.append(value)
        images = sum(block_sizes[block] for block in blocks)
        measured[cell] = CellMeasurement(sum(block_correct), images, tuple(blocks), tuple(block_correct))
    return measured


def compute_calibration(
    job: CalibrationJob,
    backend: CalibrationBackend,
    folder: ResultStore,
    progress: ProgressCallback | None = None,
    created: str | None = None,
) -> CalibrationOutcome:
    """Run (or resume) ``job`` on ``backend``, persisting every finished unit in ``folder``.

    Args:
        job: what to compute.
        backend: where units run (:class:`~ccc.calibration.compute.backends.model.ModelBackend` on an executor,
            or a simulation; :mod:`ccc.calibration.compute.backends.registry` builds one by name).
        folder: the opened work folder (its results are reused, new ones appended), or a
            :class:`MemoryResultStore`.
        progress: optional callback, see :data:`ProgressCallback`.
        created: ISO 8601 creation time for the metadata (default: now).

    Returns:
        The table and counts of evaluations done now and earlier.
    """
    context = job.render_context()
    block_sizes = [len(context.block_positions(block)) for block in range(context.block_count)]
    requested: Requests = {}
    evaluated = resumed = corrupted = 0
    start = time.perf_counter()

    def on_result(result: UnitResult) -> None:
        nonlocal evaluated, corrupted
        folder.append(result)
        evaluated += result.evaluated_images
        corrupted += result.corrupted_images
        if progress is not None:
            progress(result.evaluated_images, 0)

    while True:
        measured = _measurements(requested, folder.results, block_sizes)
        wanted = job.planner.next_round(requested, measured)
        if wanted is None:
            break
        for cell, blocks in requested.items():
            if wanted.get(cell, 0) < blocks:
                raise CalibrationError(f"internal error: planner shrank the request of cell {tuple(cell)}")
        new_pairs = [
            (cell, block)
            for cell, count in wanted.items()
            for block in cell_blocks(cell, count, len(block_sizes))[requested.get(cell, 0) :]
        ]
        already = sum(block_sizes[block] for cell, block in new_pairs if (cell, block) in folder.results)
        resumed += already
        units = pending_units(wanted, folder.results, len(block_sizes))
        planned = sum(len(unit.cells()) * block_sizes[unit.block] for unit in units)
        logger.info("round: %d cells requested, %d evaluations to do, %d already done", len(wanted), planned, already)
        if progress is not None:
            progress(0, planned)
        backend.run(units, on_result)
        requested = wanted
    seconds = time.perf_counter() - start
    measured = _measurements(requested, folder.results, block_sizes)
    accuracy, counts = job.planner.grids(measured)
    table = _build_table(job, accuracy, counts, created)
    total = sum(known.images for known in measured.values())
    return CalibrationOutcome(table, evaluated, resumed, total, seconds, corrupted)


def _build_table(
    job: CalibrationJob, accuracy: NDArray[np.float64], counts: NDArray[np.int64], created: str | None
) -> CalibrationTable:
    names = job.corruptions
    pairs = ordered_pairs(len(names))
    metadata = CalibrationMetadata(
        model_name=job.model_name,
        preprocessing=job.image_set.preprocessing.describe(),
        preprocessing_kind=job.image_set.preprocessing.kind,
        corruption_set=job.image_set.preprocessing.corruption_set,
        image_set_description=job.image_set.describe(),
        image_count=len(job.image_set),
        model_weights_sha256=job.weights_file_sha256 or job.model_digest,
        image_set_sha256=job.image_set.checksum(),
        corruptions=names,
        created=created or datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        notes=(
            f"{job.planner.notes()}; per-image corruption seeds from seed {job.seed}, "
            f"blocks of {job.block_size} images; model weights sha256 is "
            + ("of the weights file" if job.weights_file_sha256 else "of the state_dict (ccc state_dict_digest)")
            + ("; float16 autocast" if job.amp else "")
            + (f"; computed by calibration backend {job.backend!r}" if job.backend != DEFAULT_BACKEND else "")
        ),
    )
    presets = {}
    if job.model_name == RESNET50_MODEL_NAME:
        presets = {
            name: preset
            for name, preset in RESNET50_DIFFICULTY_PRESETS.items()
            if all(corruption in names for corruption in preset.corruptions)
        }
    return CalibrationTable(accuracy, counts, np.array(pairs, dtype=np.int64), metadata, presets)
