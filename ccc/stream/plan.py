"""The plan of a CCC stream: everything needed to render sample ``index``, without pixels.

``plan_sample(plan, index) -> SampleSpec`` is a pure function of the stream definition
(:class:`StreamSpec`), the schedule (:mod:`ccc.stream.schedule`) and the source image list
(:class:`SourceImages`). It does not depend on which samples were planned before, in which order,
or in which process, so any number of workers can render any subset of a stream.

Randomness comes only from ``numpy.random.SeedSequence(spec.seed, spawn_key=(purpose, n))``:

- purpose :data:`STEP_IMAGES_PURPOSE`, ``n`` = path step: ``choice(len(sources), speed,
  replace=False)`` draws the step's ``speed`` distinct source images (sample ``index`` takes entry
  ``index % speed``). The last few steps' draws are cached, so planning consecutive samples costs
  amortised O(1); a random single index costs one draw of ``speed`` integers. A ``cin-c`` or
  ``gradual`` stream makes this draw once, with the spawn key ``(DOMAIN_IMAGES_PURPOSE,)``, and
  every domain shows those images in that order (the public loaders reseed Python's ``random``
  before each domain, so each domain shuffles one list identically).
- purpose :data:`SAMPLE_PURPOSE`, ``n`` = sample index: the sample's own generator draws, in this
  order, the random-resized-crop box (:func:`sample_resized_crop`), the horizontal flip
  (``random() < 0.5``) and the 63-bit seed that rendering gives to ``numpy.random.default_rng``
  for the corruptions; with ``crop="center"`` (``cin-c``, ``gradual``) the sample is ImageNet-C's
  ``Resize(256)`` + ``CenterCrop(224)`` (``SampleSpec.resize`` and a box in the resized image), there
  is no flip, and the render seed is the generator's first draw; with ``crop="whole"`` the box is the
  whole image, there is no flip, and the render seed is the first draw too.

A step is a severity-path cell of a ``ccc`` stream (:mod:`ccc.stream.schedule`) or one
``(corruption, severity)`` domain of a ``cin-c`` or ``gradual`` stream (:mod:`ccc.stream.domains`).

:func:`plan_stream` is the one way from a stream definition, a calibration table and an image
folder to a plan (it indexes the folder, then calls :func:`build_stream_plan`); ``ccc-generate``,
``render_stream`` and ``ccc-verify``'s plan-hash check all use it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ccc.stream.domains import DomainSchedule, center_crop
from ccc.stream.schedule import StreamSchedule, build_schedule
from ccc.stream.sources import SourceImages, index_image_folder, load_source_images, resolve_imagenet_folder
from ccc.stream.spec import (
    CCC_KIND,
    DEFAULT_CORRUPTION_SET,
    PlanError,
    SampleSpec,
    StreamSpec,
    resolve_stream_spec,
)
from ccc.validation import check_integer

__all__ = [
    "CROP_ATTEMPTS",
    "CROP_RATIO",
    "CROP_SCALE",
    "DOMAIN_IMAGES_PURPOSE",
    "FLIP_PROBABILITY",
    "PLAN_FORMAT_VERSION",
    "SAMPLE_PURPOSE",
    "STEP_IMAGES_PURPOSE",
    "StreamPlan",
    "build_stream_plan",
    "plan_hash",
    "plan_sample",
    "plan_stream",
    "sample_resized_crop",
]

logger = logging.getLogger(__name__)

PLAN_FORMAT_VERSION = 1
"""Version of the planning rules; part of :func:`plan_hash`. Changing what a sample is planned to
be (seeds, draw order, crop rules) requires a new version."""

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

DOMAIN_IMAGES_PURPOSE = 2
"""Spawn key entry of the one source-image draw of a ``cin-c`` or ``gradual`` stream (every domain's images)."""

DOMAIN_IMAGES_KEY = (DOMAIN_IMAGES_PURPOSE,)
"""The whole spawn key of that draw (also its key in the step cache, where ``ccc`` steps are integers)."""

_RENDER_SEED_BOUND = 2**63
_STEP_CACHE_SIZE = 4


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

    def __init__(self, spec: StreamSpec, schedule: StreamSchedule | DomainSchedule, sources: SourceImages) -> None:
        self.spec = spec
        self.schedule = schedule
        self.sources = sources
        self._step_images: OrderedDict[int | tuple[int], np.ndarray] = OrderedDict()

    def __reduce__(self) -> tuple[type, tuple]:
        return (StreamPlan, (self.spec, self.schedule, self.sources))

    def step_images(self, step: int) -> np.ndarray:
        """Positions (into :attr:`sources`) of the ``speed`` distinct images of path step ``step``.

        A ``ccc`` step draws its own; every domain of a ``cin-c`` or ``gradual`` stream shows the same
        images in the same order (one draw for the stream), as the public loaders do.
        """
        domains = self.spec.kind != CCC_KIND
        key = DOMAIN_IMAGES_KEY if domains else step
        cached = self._step_images.get(key)
        if cached is not None:
            self._step_images.move_to_end(key)
            return cached
        sequence = np.random.SeedSequence(
            self.spec.seed, spawn_key=DOMAIN_IMAGES_KEY if domains else (STEP_IMAGES_PURPOSE, step)
        )
        positions = np.random.default_rng(sequence).choice(len(self.sources), size=self.spec.speed, replace=False)
        positions.setflags(write=False)
        self._step_images[key] = positions
        if len(self._step_images) > _STEP_CACHE_SIZE:
            self._step_images.popitem(last=False)
        return positions


def build_stream_plan(
    spec: StreamSpec, table: Any, sources: SourceImages, schedule: StreamSchedule | None = None
) -> StreamPlan:
    """Bind ``spec`` to its schedule and ``sources``, computing the schedule from ``table`` unless given.

    Args:
        spec: the stream definition.
        table: the :class:`ccc.calibration.CalibrationTable` whose checksum ``spec`` records (None,
            and ignored, for the ``cin-c`` and ``gradual`` kinds, whose domains need no table).
        sources: the source images whose index checksum ``spec`` records; at least ``spec.speed`` images.
        schedule: the schedule of ``spec`` when the caller already computed it
            (:func:`ccc.stream.schedule.build_schedule` with the spec's target, corruptions, seed,
            schedule and path objective), so it is computed once per run; None computes it.

    Raises:
        PlanError: if the checksums disagree, there are fewer source images than ``speed``, or
            ``schedule`` is not the spec's.
        ccc.stream.schedule.ScheduleError: if the table lacks a pair or a corruption (a ``ValueError``).
    """
    if spec.kind == CCC_KIND and table is None:
        raise PlanError("a ccc stream needs its calibration table (its severity paths come from it)")
    if spec.kind == CCC_KIND and table.checksum() != spec.calibration_checksum:
        raise PlanError(
            f"spec calibration_checksum {spec.calibration_checksum} does not match the table's {table.checksum()}"
        )
    if sources.index_checksum != spec.source_index_checksum:
        raise PlanError(
            f"spec source_index_checksum {spec.source_index_checksum} "
            f"does not match the images' {sources.index_checksum}"
        )
    if spec.speed > len(sources) and spec.kind != CCC_KIND:
        raise PlanError(
            "images per domain (speed, --images-per-domain) must be at most "
            f"the number of source images ({len(sources)}) since a domain shows distinct images, got {spec.speed}"
        )
    if spec.speed > len(sources):
        raise PlanError(
            f"speed must be at most the number of source images ({len(sources)}) since each path step "
            f"uses distinct images, got {spec.speed}"
        )
    if spec.kind != CCC_KIND:
        return StreamPlan(spec, DomainSchedule(spec.kind, spec.corruptions, spec.severity), sources)
    if schedule is None:
        schedule = build_schedule(
            table, spec.target_accuracy, spec.corruptions, spec.seed, spec.schedule, spec.path_objective
        )
    else:
        given = (
            schedule.target_accuracy,
            schedule.corruptions,
            schedule.seed,
            schedule.schedule,
            schedule.path_objective,
        )
        expected = (spec.target_accuracy, spec.corruptions, spec.seed, spec.schedule, spec.path_objective)
        if given != expected:
            raise PlanError(
                "schedule (target, corruptions, seed, schedule, path objective) "
                f"must be the spec's {expected}, got {given}"
            )
    return StreamPlan(spec, schedule, sources)


def plan_stream(
    definition: StreamSpec | Mapping[str, Any],
    table: Any,
    image_folder: str | os.PathLike[str] | None,
    *,
    classes: Sequence[str] | None = None,
    skip_bad_images: bool = False,
    progress: bool = False,
    schedule: StreamSchedule | None = None,
) -> StreamPlan:
    """Calibration table + image folder → source images → plan: the one path from a definition to a plan.

    Args:
        definition: a :class:`StreamSpec` or a definition mapping (see
            :func:`ccc.stream.spec.resolve_stream_spec`).
        table: the :class:`ccc.calibration.CalibrationTable` the severity paths come from (None for
            the ``cin-c`` and ``gradual`` kinds).
        image_folder: the source image folder (None: ``$CCC_IMAGENET``).
        classes: an explicit class list (position = class index), None: the folder's own
            (:func:`ccc.stream.sources.class_list`).
        skip_bad_images: exclude unreadable images (logged) instead of failing.
        progress: show progress bars while indexing.
        schedule: the definition's schedule when already computed (see :func:`build_stream_plan`).

    Raises:
        PlanError, ccc.stream.schedule.ScheduleError, ccc.stream.sources.ImageFolderError: a bad
            definition, table or folder (the message says which).
    """
    index = index_image_folder(
        resolve_imagenet_folder(image_folder), classes=classes, skip_bad_images=skip_bad_images, progress=progress
    )
    if index.excluded:
        logger.warning("excluded %d unreadable images: %s", len(index.excluded), ", ".join(index.excluded[:10]))
    sources = load_source_images(index)
    return build_stream_plan(
        resolve_stream_spec(definition, table, sources.index_checksum, len(sources)), table, sources, schedule
    )


def plan_sample(plan: StreamPlan, index: int) -> SampleSpec:
    """Return the :class:`SampleSpec` of sample ``index`` (0 <= index < ``plan.spec.num_images``).

    Pure: the result depends only on the plan's definition and ``index``.

    Raises:
        PlanError: if ``index`` is not an integer in range.
    """
    spec = plan.spec
    index = check_integer("index", index, 0, spec.num_images - 1, error=PlanError)
    step_number, position_in_step = divmod(index, spec.speed)
    step = plan.schedule.step(step_number)
    source_position = int(plan.step_images(step_number)[position_in_step])
    width, height = plan.sources.sizes[source_position]
    generator = np.random.default_rng(np.random.SeedSequence(spec.seed, spawn_key=(SAMPLE_PURPOSE, index)))
    resize = None
    if spec.crop == "center":
        (resize, crop_box), flip = center_crop(width, height), False
    elif spec.crop == "whole":
        crop_box, flip = (0, 0, width, height), False
    else:
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
        domain=None if spec.kind == CCC_KIND else step.n1,
        resize=resize,
        corruption_set=None if spec.corruption_set == DEFAULT_CORRUPTION_SET else spec.corruption_set,
    )


def plan_hash(plan: StreamPlan) -> str:
    """sha256 (hex) identifying what the plan produces.

    Hashes, as canonical JSON: :data:`PLAN_FORMAT_VERSION`, the spec, the source sizes checksum,
    every pair (names, path cells, accuracies) the stream's steps touch, and the full
    :class:`SampleSpec` of the first and last sample of every shard. The samples catch a change of
    numpy's random streams or of the planning code that the definition alone would not reveal.
    For the ``cin-c`` and ``gradual`` kinds the pairs are one pass of the ``[corruption, severity]`` domains.
    """
    spec = plan.spec
    num_steps = -(-spec.num_images // spec.speed)
    if isinstance(plan.schedule, DomainSchedule):
        pairs = [[name, severity] for name, severity in plan.schedule.levels]
    else:
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
