"""The pure plan of a CCC stream: everything needed to render sample ``index``, without pixels.

``plan_sample(plan, index) -> SampleSpec`` is a pure function of the stream definition
(:class:`StreamSpec`), the schedule (:mod:`ccc.schedule`) and the source image list
(:class:`SourceImages`). It does not depend on which samples were planned before, in which order,
or in which process, so any number of workers can render any subset of a stream.

Randomness comes only from ``numpy.random.SeedSequence(spec.seed, spawn_key=(purpose, n))``:

- purpose :data:`STEP_IMAGES_PURPOSE`, ``n`` = path step: ``choice(len(sources), speed,
  replace=False)`` draws the step's ``speed`` distinct source images (sample ``index`` takes entry
  ``index % speed``). The last few steps' draws are cached, so planning consecutive samples costs
  amortised O(1); a random single index costs one draw of ``speed`` integers.
- purpose :data:`SAMPLE_PURPOSE`, ``n`` = sample index: the sample's own generator draws, in this
  order, the random-resized-crop box (:func:`sample_resized_crop`), the horizontal flip
  (``random() < 0.5``) and the 63-bit seed that rendering gives to ``numpy.random.default_rng``
  for the corruptions.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import OrderedDict
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from ccc.paths import PATH_OBJECTIVES
from ccc.schedule import SCHEDULES, StreamSchedule, build_schedule

__all__ = [
    "CROP_ATTEMPTS",
    "CROP_RATIO",
    "CROP_SCALE",
    "DEFAULT_SHARD_SIZE",
    "FLIP_PROBABILITY",
    "PLAN_FORMAT_VERSION",
    "SAMPLE_PURPOSE",
    "STEP_IMAGES_PURPOSE",
    "PlanError",
    "SampleSpec",
    "SourceImages",
    "StreamPlan",
    "StreamSpec",
    "build_stream_plan",
    "plan_hash",
    "plan_sample",
    "run_name",
    "sample_resized_crop",
]

PLAN_FORMAT_VERSION = 1
"""Version of the planning rules; part of :func:`plan_hash`. Changing what a sample is planned to
be (seeds, draw order, crop rules) requires a new version."""

DEFAULT_SHARD_SIZE = 25_000
"""Samples per shard, as the public CCC shards."""

CROP_SCALE = (0.08, 1.0)
"""Range of the crop's area as a fraction of the source image (torchvision ``RandomResizedCrop``)."""

CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)
"""Range of the crop's aspect ratio width / height, sampled log-uniformly (torchvision)."""

CROP_ATTEMPTS = 10
"""Random crops tried before falling back to the central crop (torchvision)."""

FLIP_PROBABILITY = 0.5
"""Probability of a horizontal flip."""

SAMPLE_PURPOSE = 0
"""First spawn-key entry of a sample's own generator."""

STEP_IMAGES_PURPOSE = 1
"""First spawn-key entry of a path step's source-image draw."""

_RENDER_SEED_BOUND = 2**63
_STEP_CACHE_SIZE = 4
_SHA256_HEX_DIGITS = 64


class PlanError(ValueError):
    """A stream definition or plan request is invalid; the message names the parameter."""


def _check_integer(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise PlanError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_sha256(name: str, value: object) -> str:
    if not (isinstance(value, str) and len(value) == _SHA256_HEX_DIGITS and all(c in "0123456789abcdef" for c in value)):
        raise PlanError(f"{name} must be a sha256 hex digest (64 lowercase hex digits), got {value!r}")
    return value


@dataclass(frozen=True)
class StreamSpec:
    """The definition of a stream; two streams with equal specs (and equal inputs) are byte-identical.

    Attributes:
        target_accuracy: calibration target accuracy in percent, in [0, 100].
        corruptions: corruption names (>= 2, distinct), in the order the schedule draws from.
        speed: images per path step ("transition speed" k), >= 1.
        seed: stream seed, >= 0.
        num_images: stream length in images, >= 1 (no upper limit).
        calibration_checksum: :meth:`CalibrationTable.checksum` of the table the paths come from.
        source_index_checksum: :meth:`ImageIndex.checksum` of the source image folder.
        difficulty: name of the difficulty preset the target and corruptions came from, or None.
        schedule: corruption-order schedule, one of :data:`ccc.schedule.SCHEDULES`.
        path_objective: one of :data:`ccc.paths.PATH_OBJECTIVES`.
        shard_size: samples per shard, >= 1 (the last shard may be shorter).
    """

    target_accuracy: float
    corruptions: tuple[str, ...]
    speed: int
    seed: int
    num_images: int
    calibration_checksum: str
    source_index_checksum: str
    difficulty: str | None = None
    schedule: str = "reference"
    path_objective: str = "reference"
    shard_size: int = DEFAULT_SHARD_SIZE

    def __post_init__(self) -> None:
        target = self.target_accuracy
        if isinstance(target, bool) or not isinstance(target, (int, float)) or not (math.isfinite(target) and 0 <= target <= 100):
            raise PlanError(f"target_accuracy must be a number in [0, 100] percent, got {target!r}")
        object.__setattr__(self, "target_accuracy", float(target))
        if isinstance(self.corruptions, str) or not all(isinstance(name, str) for name in self.corruptions):
            raise PlanError(f"corruptions must be a sequence of names, got {self.corruptions!r}")
        object.__setattr__(self, "corruptions", tuple(self.corruptions))
        if len(set(self.corruptions)) != len(self.corruptions) or len(self.corruptions) < 2:
            raise PlanError(f"corruptions must hold at least 2 distinct names, got {list(self.corruptions)}")
        for name, minimum in (("speed", 1), ("seed", 0), ("num_images", 1), ("shard_size", 1)):
            object.__setattr__(self, name, _check_integer(name, getattr(self, name), minimum))
        _check_sha256("calibration_checksum", self.calibration_checksum)
        _check_sha256("source_index_checksum", self.source_index_checksum)
        if self.difficulty is not None and (not isinstance(self.difficulty, str) or not self.difficulty):
            raise PlanError(f"difficulty must be None or a preset name, got {self.difficulty!r}")
        if self.schedule not in SCHEDULES:
            raise PlanError(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if self.path_objective not in PATH_OBJECTIVES:
            raise PlanError(f"path_objective must be one of {', '.join(PATH_OBJECTIVES)}, got {self.path_objective!r}")

    @property
    def num_shards(self) -> int:
        """Number of shards: ``ceil(num_images / shard_size)``."""
        return -(-self.num_images // self.shard_size)

    def shard_range(self, shard_index: int) -> range:
        """Sample indices of shard ``shard_index`` (0 <= shard_index < num_shards)."""
        if isinstance(shard_index, bool) or not isinstance(shard_index, int) or not 0 <= shard_index < self.num_shards:
            raise PlanError(f"shard_index must be an integer in [0, {self.num_shards - 1}], got {shard_index!r}")
        start = shard_index * self.shard_size
        return range(start, min(start + self.shard_size, self.num_images))

    def to_json_dict(self) -> dict[str, Any]:
        """The spec as a JSON-serialisable dict (corruptions as a list)."""
        document = asdict(self)
        document["corruptions"] = list(self.corruptions)
        return document

    @classmethod
    def from_json_dict(cls, document: object) -> StreamSpec:
        """Rebuild a spec from :meth:`to_json_dict`'s output; every field must be present.

        Raises:
            PlanError: for a missing, unexpected or invalid field.
        """
        if not isinstance(document, dict):
            raise PlanError(f"a stream spec must be a JSON object, got {type(document).__name__}")
        names = [field.name for field in fields(cls)]
        missing = [name for name in names if name not in document]
        unexpected = sorted(set(document) - set(names))
        if missing or unexpected:
            raise PlanError(f"stream spec fields: missing {missing or 'none'}, unexpected {unexpected or 'none'}")
        if not isinstance(document["corruptions"], list):
            raise PlanError(f"stream spec corruptions must be a list, got {document['corruptions']!r}")
        return cls(**{**document, "corruptions": tuple(document["corruptions"])})


def run_name(target_accuracy: float, speed: int, seed: int) -> str:
    """The public data's run name ``baseline_<b>_transition+speed_<k>_seed_<s>`` (b written with ``%g``: 20, 40, 12.5)."""
    return f"baseline_{target_accuracy:g}_transition+speed_{speed}_seed_{seed}"


@dataclass(frozen=True)
class SourceImages:
    """The source images a stream draws from, in the canonical order of :class:`ccc.imagenet.ImageIndex`.

    Attributes:
        root: the image folder (absolute path as text); workers read ``root/relative_path``.
        relative_paths: ``<wnid>/<file>`` per image.
        class_indices: class index per image (sorted-folder order, 0..K-1).
        sizes: ``(width, height)`` in pixels per image, as stored in the file (the crop box depends on it).
        index_checksum: :meth:`ImageIndex.checksum` of the folder.
    """

    root: str
    relative_paths: tuple[str, ...]
    class_indices: tuple[int, ...]
    sizes: tuple[tuple[int, int], ...]
    index_checksum: str

    def __post_init__(self) -> None:
        count = len(self.relative_paths)
        if count == 0:
            raise PlanError("source images must not be empty")
        if len(self.class_indices) != count or len(self.sizes) != count:
            raise PlanError(
                f"source images need one class index and one size per path ({count}), "
                f"got {len(self.class_indices)} class indices and {len(self.sizes)} sizes"
            )
        _check_sha256("index_checksum", self.index_checksum)

    def __len__(self) -> int:
        return len(self.relative_paths)

    def sizes_checksum(self) -> str:
        """sha256 (hex) of the image sizes in order (the index checksum covers only the names)."""
        return hashlib.sha256(np.asarray(self.sizes, dtype="<i8").tobytes()).hexdigest()


@dataclass(frozen=True)
class SampleSpec:
    """Everything needed to render one sample and to explain it later.

    Attributes:
        index: sample index in the stream, >= 0.
        step: path step, ``index // speed``.
        pair_index: position of the corruption pair in the stream's chain.
        path_position: position of the cell in the pair's severity path.
        path_cell: grid indices ``(i, j)`` of the cell: ``s1 = i / 4``, ``s2 = j / 4``.
        n1, s1, n2, s2: corruptions and severities in [0, 5]; ``n2`` is applied after ``n1``.
        calibrated_accuracy: the calibration table's accuracy at the cell, percent in [0, 100].
        source_position: position of the source image in :class:`SourceImages`.
        source_path: ``<wnid>/<file>`` of the source image.
        class_index: label, 0..K-1 (ImageNet: 0..999 in sorted-WordNet-id order).
        source_size: ``(width, height)`` of the source image in pixels.
        crop_box: ``(left, top, right, bottom)`` in source pixels (PIL box convention, right and
            bottom exclusive); resized to 224×224 after cropping.
        flip: whether the 224×224 crop is mirrored left-right.
        seed: render seed in [0, 2**63): ``numpy.random.default_rng(seed)`` drives the corruptions.
    """

    index: int
    step: int
    pair_index: int
    path_position: int
    path_cell: tuple[int, int]
    n1: str
    s1: float
    n2: str
    s2: float
    calibrated_accuracy: float
    source_position: int
    source_path: str
    class_index: int
    source_size: tuple[int, int]
    crop_box: tuple[int, int, int, int]
    flip: bool
    seed: int

    @property
    def wnid(self) -> str:
        """Class folder name (WordNet id) of the source image."""
        return self.source_path.split("/", 1)[0]

    @property
    def file_name(self) -> str:
        """File name of the source image."""
        return self.source_path.rsplit("/", 1)[-1]

    def to_json_dict(self) -> dict[str, Any]:
        """The spec as a JSON-serialisable dict (tuples as lists)."""
        return {
            field.name: list(value) if isinstance(value, tuple) else value
            for field in fields(self)
            for value in (getattr(self, field.name),)
        }


def sample_resized_crop(generator: np.random.Generator, width: int, height: int) -> tuple[int, int, int, int]:
    """Random-resized-crop box with torchvision's ``RandomResizedCrop.get_params`` semantics.

    Up to :data:`CROP_ATTEMPTS` times: area fraction ``~ U(CROP_SCALE)``, aspect ratio
    ``exp(U(log CROP_RATIO))``, ``w = round(sqrt(area * ratio))``, ``h = round(sqrt(area / ratio))``
    (Python's round); if the box fits, its top then left offset are drawn uniformly. Otherwise the
    central crop: the whole image if its aspect ratio is within ``CROP_RATIO``, else the largest
    box of the nearest allowed ratio. Draws come from ``generator`` (float64; torchvision uses torch's
    float32 generator, so values differ but the distribution is the same).

    Args:
        generator: numpy Generator the draws come from.
        width, height: source image size in pixels, >= 1.

    Returns:
        ``(left, top, right, bottom)`` in pixels, right and bottom exclusive.
    """
    area = width * height
    log_ratio_low, log_ratio_high = math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1])
    for _ in range(CROP_ATTEMPTS):
        target_area = area * generator.uniform(CROP_SCALE[0], CROP_SCALE[1])
        aspect_ratio = math.exp(generator.uniform(log_ratio_low, log_ratio_high))
        crop_width = int(round(math.sqrt(target_area * aspect_ratio)))
        crop_height = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < crop_width <= width and 0 < crop_height <= height:
            top = int(generator.integers(0, height - crop_height + 1))
            left = int(generator.integers(0, width - crop_width + 1))
            return (left, top, left + crop_width, top + crop_height)
    input_ratio = width / height
    if input_ratio < min(CROP_RATIO):
        crop_width, crop_height = width, int(round(width / min(CROP_RATIO)))
    elif input_ratio > max(CROP_RATIO):
        crop_width, crop_height = int(round(height * max(CROP_RATIO))), height
    else:
        crop_width, crop_height = width, height
    top = (height - crop_height) // 2
    left = (width - crop_width) // 2
    return (left, top, left + crop_width, top + crop_height)


class StreamPlan:
    """A stream definition bound to its schedule and source images; see :func:`plan_sample`.

    Build one with :func:`build_stream_plan`. Behaves as immutable (it caches the last few steps'
    image draws); pickling sends the definition without the cache.
    """

    __slots__ = ("spec", "schedule", "sources", "_step_images")

    def __init__(self, spec: StreamSpec, schedule: StreamSchedule, sources: SourceImages) -> None:
        self.spec = spec
        self.schedule = schedule
        self.sources = sources
        self._step_images: OrderedDict[int, np.ndarray] = OrderedDict()

    def __reduce__(self) -> tuple[type, tuple]:
        return (StreamPlan, (self.spec, self.schedule, self.sources))

    def step_images(self, step: int) -> np.ndarray:
        """Positions (into :attr:`sources`) of the ``speed`` distinct images of path step ``step``."""
        cached = self._step_images.get(step)
        if cached is not None:
            self._step_images.move_to_end(step)
            return cached
        sequence = np.random.SeedSequence(self.spec.seed, spawn_key=(STEP_IMAGES_PURPOSE, step))
        positions = np.random.default_rng(sequence).choice(len(self.sources), size=self.spec.speed, replace=False)
        positions.setflags(write=False)
        self._step_images[step] = positions
        if len(self._step_images) > _STEP_CACHE_SIZE:
            self._step_images.popitem(last=False)
        return positions


def build_stream_plan(spec: StreamSpec, table: Any, sources: SourceImages) -> StreamPlan:
    """Compute the schedule of ``spec`` from ``table`` and bind it to ``sources``.

    Args:
        spec: the stream definition.
        table: the :class:`ccc.calibration.CalibrationTable` whose checksum ``spec`` records.
        sources: the source images whose index checksum ``spec`` records; at least ``spec.speed`` images.

    Raises:
        PlanError: if the checksums disagree or there are fewer source images than ``speed``.
        ccc.schedule.ScheduleError: if the table lacks a pair or a corruption (a ``ValueError``).
    """
    if table.checksum() != spec.calibration_checksum:
        raise PlanError(
            f"spec calibration_checksum {spec.calibration_checksum} does not match the table's {table.checksum()}"
        )
    if sources.index_checksum != spec.source_index_checksum:
        raise PlanError(
            f"spec source_index_checksum {spec.source_index_checksum} does not match the images' {sources.index_checksum}"
        )
    if spec.speed > len(sources):
        raise PlanError(
            f"speed must be at most the number of source images ({len(sources)}) since each path step "
            f"uses distinct images, got {spec.speed}"
        )
    schedule = build_schedule(table, spec.target_accuracy, spec.corruptions, spec.seed, spec.schedule, spec.path_objective)
    return StreamPlan(spec, schedule, sources)


def plan_sample(plan: StreamPlan, index: int) -> SampleSpec:
    """Return the :class:`SampleSpec` of sample ``index`` (0 <= index < ``plan.spec.num_images``).

    Pure: the result depends only on the plan's definition and ``index``.

    Raises:
        PlanError: if ``index`` is not an integer in range.
    """
    spec = plan.spec
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < spec.num_images:
        raise PlanError(f"index must be an integer in [0, {spec.num_images - 1}], got {index!r}")
    index = int(index)
    step_number, position_in_step = divmod(index, spec.speed)
    step = plan.schedule.step(step_number)
    source_position = int(plan.step_images(step_number)[position_in_step])
    width, height = plan.sources.sizes[source_position]
    generator = np.random.default_rng(np.random.SeedSequence(spec.seed, spawn_key=(SAMPLE_PURPOSE, index)))
    crop_box = sample_resized_crop(generator, width, height)
    flip = bool(generator.random() < FLIP_PROBABILITY)
    render_seed = int(generator.integers(0, _RENDER_SEED_BOUND))
    return SampleSpec(
        index=index,
        step=step_number,
        pair_index=step.pair_index,
        path_position=step.path_position,
        path_cell=step.cell,
        n1=step.n1,
        s1=step.s1,
        n2=step.n2,
        s2=step.s2,
        calibrated_accuracy=step.calibrated_accuracy,
        source_position=source_position,
        source_path=plan.sources.relative_paths[source_position],
        class_index=plan.sources.class_indices[source_position],
        source_size=(width, height),
        crop_box=crop_box,
        flip=flip,
        seed=render_seed,
    )


def plan_hash(plan: StreamPlan) -> str:
    """sha256 (hex) identifying what the plan produces.

    Hashes, as canonical JSON: :data:`PLAN_FORMAT_VERSION`, the spec, the source sizes checksum,
    every pair (names, path cells, accuracies) the stream's steps touch, and the full
    :class:`SampleSpec` of the first and last sample of every shard. The samples catch a change of
    numpy's random streams or of the planning code that the definition alone would not reveal.
    """
    spec = plan.spec
    num_steps = -(-spec.num_images // spec.speed)
    pairs = [
        [visit.path.n1, visit.path.n2, [list(cell) for cell in visit.path.cells], list(visit.path.accuracies)]
        for visit in plan.schedule.visits(num_steps)
    ]
    probes = []
    for shard_index in range(spec.num_shards):
        shard = spec.shard_range(shard_index)
        probes.append(plan_sample(plan, shard[0]).to_json_dict())
        probes.append(plan_sample(plan, shard[-1]).to_json_dict())
    document = {
        "plan_format_version": PLAN_FORMAT_VERSION,
        "spec": spec.to_json_dict(),
        "source_sizes_sha256": plan.sources.sizes_checksum(),
        "pairs": pairs,
        "probe_samples": probes,
    }
    encoded = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return hashlib.sha256(encoded).hexdigest()

