"""The calibration backend ``torch``: every cell rendered and evaluated on one device with :mod:`ccc.render_torch`.

The work units, their results and everything around them (work folder, resume, the adaptive scheme,
the table) are those of the default backend ``model``
(:class:`~ccc.calibration.compute.backends.model.ModelBackend`); only the pixels are made differently. For
each unit, in this process:

1. the block's preprocessed images are loaded on the host (decode, resize, centre crop:
   :meth:`~ccc.calibration.compute.imageset.CalibrationImageSet.load`, as the CPU engine does) and moved to
   the device, where they stay as uint8 for the block's other units (up to :data:`CACHED_IMAGES` images);
2. the base corruption ``(n1, s1)`` is applied once with
   :func:`~ccc.render_torch.apply_corruption_stage` (stage 0) and reused for every target of the unit,
   as :func:`~ccc.calibration.compute.engine.render_base` does on the CPU;
3. the targets ``(n2, s2)`` are applied to the base images (stage 1), several targets in one batch of
   about ``images_per_batch`` images (each sample carries its own corruption, severity and seed);
4. the model predicts on the device (:meth:`~ccc.calibration.compute.evaluator.ModelEvaluator.predict_tensor`)
   and only the per-cell counts of correct predictions come back to the host.

Like the CPU engine, centre-crop calibration has no JPEG round trip (it measures the corrupted images
themselves); with the stream preprocessing the crop and flip are drawn on the host by the same
:meth:`~ccc.calibration.compute.imageset.CalibrationImageSet.load` and every image the model sees goes
through the stream's JPEG quality-85 round trip on the device (:func:`~ccc.render_torch.jpeg_round_trip`,
Pillow's bytes). Between the two stages the images are truncated to byte levels. Image ``k``'s seed
for a stage is :func:`~ccc.calibration.compute.engine.image_seeds` of the CPU engine's key for the
same image and cell, so a cell's images depend neither on the unit nor on the batch.

**Its bytes differ from the CPU path's**: the random corruptions draw from counter-based per-sample
streams (:class:`~ccc.render_torch.SampleRandom`) instead of numpy generators, and several
corruptions are parallel formulations equivalent in distribution (``docs/fidelity.md``); results
are reproducible on the same device type. The deterministic corruptions (brightness, contrast,
saturate, pixelate, jpeg) give the CPU path's bytes on the CPU device, so their cells' counts agree
exactly. Choose it with a GPU (``--backend torch --device cuda``): rendering, the CPU path's
bottleneck, then runs on the device. Registered as the calibration backend ``torch`` (option:
``images_per_batch``); the run identity and the table's notes record it, so a work folder is never
resumed with the other backend.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from ccc.calibration.compute.backends.model import build_evaluator
from ccc.calibration.compute.backends.registry import BackendEntry, BackendSetup, register_backend
from ccc.calibration.compute.engine import (
    NO_CORRUPTION,
    RenderContext,
    UnitResult,
    WorkUnit,
    count_correct,
    image_seeds,
    seed_key,
    target_groups,
)
from ccc.calibration.compute.evaluator import ModelEvaluator, images_to_device, to_model_input
from ccc.calibration.table import SEVERITIES
from ccc.corruptions import DEFAULT_CORRUPTION_SET
from ccc.models import resolve_device
from ccc.render import DEFAULT_RENDER_PRECISION, check_render_precision
from ccc.render_torch import apply_corruption_stage, jpeg_round_trip
from ccc.validation import check_positive_int

logger = logging.getLogger(__name__)

DEFAULT_IMAGES_PER_BATCH = 250
"""Target images corrupted in one call (memory ≈ a few × this × 3 × H × W × 4 bytes on the device)."""

CACHED_IMAGES = 10_000
"""Decoded clean images kept on the device as uint8 (≈ 1.5 GB at 224 × 224), by block, least recently used dropped."""


class TorchRenderBackend:
    """Renders and evaluates work units on ``evaluator.device`` (see the module docstring).

    Args:
        context: what every unit renders from (image set, corruptions, seed, block size).
        evaluator: the model on the rendering device.
        images_per_batch: target images corrupted and evaluated together, >= 1 (whole targets:
            ``max(1, images_per_batch // block size)`` targets per batch).
        precision: the rendering backend's working float precision, ``"float64"`` (default) or
            ``"float32"`` (:func:`ccc.render_torch.apply_corruption_stage`).
    """

    def __init__(
        self,
        context: RenderContext,
        evaluator: ModelEvaluator,
        images_per_batch: int = DEFAULT_IMAGES_PER_BATCH,
        precision: str = DEFAULT_RENDER_PRECISION,
    ) -> None:
        check_positive_int("images_per_batch", images_per_batch)
        corruption_set = context.image_set.preprocessing.corruption_set
        if corruption_set != DEFAULT_CORRUPTION_SET:
            raise ValueError(
                f"calibration backend 'torch' implements corruption set {DEFAULT_CORRUPTION_SET!r} only, got "
                f"{corruption_set!r}: measure it with the model backend (--backend model)"
            )
        self.precision = check_render_precision(precision)
        self.context = context
        self.evaluator = evaluator
        self.images_per_batch = images_per_batch
        self._blocks: OrderedDict[int, Tensor] = OrderedDict()

    @property
    def device(self) -> torch.device:
        """Where the units are rendered and evaluated."""
        return self.evaluator.device

    def run(self, units: Sequence[WorkUnit], on_result: Callable[[UnitResult], None]) -> None:
        """Execute ``units`` one after the other, reporting each through ``on_result``."""
        for unit in units:
            on_result(self.execute(unit))

    def _seeds(self, positions: Sequence[int], key: tuple[int, ...]) -> Tensor:
        return torch.from_numpy(image_seeds(self.context.seed, positions, key)).to(self.device)

    def block_images(self, block: int) -> Tensor:
        """The clean preprocessed images of ``block``: float32 (B, 3, H, W) byte levels ``k / 255`` on the device.

        Decoded on the host once and kept on the device as uint8 (the least recently used blocks
        beyond :data:`CACHED_IMAGES` images are dropped): the units of one block share its decoding.
        """
        cached = self._blocks.pop(block, None)
        if cached is None:
            positions = self.context.block_positions(block)
            cached = images_to_device(self.context.image_set.load(positions, self.context.seed), self.device)
        self._blocks[block] = cached
        while sum(len(images) for images in self._blocks.values()) > CACHED_IMAGES and len(self._blocks) > 1:
            self._blocks.pop(next(iter(self._blocks)))
        return to_model_input(cached)

    def render_base(self, unit: WorkUnit) -> Tensor:
        """The unit's block with its base corruption: float32 (B, 3, H, W) byte levels ``k / 255`` on the device."""
        context = self.context
        positions = context.block_positions(unit.block)
        images = self.block_images(unit.block)
        if unit.corruption == NO_CORRUPTION:
            return images
        name = context.corruptions[unit.corruption]
        seeds = self._seeds(positions, seed_key(context, unit.corruption, unit.severity))
        severity = float(SEVERITIES[unit.severity])
        count = len(positions)
        return apply_corruption_stage(images, [name] * count, [severity] * count, seeds, 0, self.precision)

    def render_targets(self, unit: WorkUnit, base: Tensor, targets: Sequence[tuple[int, int]]) -> Tensor:
        """Each target ``(n2, s2)`` applied to ``base`` (B images): float32 (len(targets)·B, 3, H, W), target-major."""
        context = self.context
        positions = context.block_positions(unit.block)
        count = len(positions)
        names = [context.corruptions[n2] for n2, _ in targets for _ in range(count)]
        severities = [float(SEVERITIES[s2]) for _, s2 in targets for _ in range(count)]
        seeds = torch.cat(
            [self._seeds(positions, seed_key(context, unit.corruption, unit.severity, target)) for target in targets]
        )
        return apply_corruption_stage(base.repeat(len(targets), 1, 1, 1), names, severities, seeds, 1, self.precision)

    def execute(self, unit: WorkUnit) -> UnitResult:
        """Render and evaluate one unit; its :class:`UnitResult` (counts per cell of ``unit.cells()``).

        The images stay on the device; only the predicted class indices (int64, one per image) come back.
        """
        if unit.corruption == NO_CORRUPTION and unit.targets:
            raise ValueError("targets need a corrupted base: corruption must be >= 0, got -1 (clean)")
        labels = self.context.block_labels(unit.block)
        base = self.render_base(unit)
        correct: list[int] = []
        if unit.evaluate_base:
            correct += count_correct(self._predict(base), labels)
        for group in target_groups(unit, len(labels), self.images_per_batch):
            correct += count_correct(self._predict(self.render_targets(unit, base, group)), labels)
        return UnitResult(unit, tuple(correct), len(labels))

    def _predict(self, images: Tensor) -> NDArray[np.int64]:
        return self.evaluator.predict_tensor(self._model_view(images)).cpu().numpy()

    def _model_view(self, images: Tensor) -> Tensor:
        """Rendered images as the model sees them: with the stream preprocessing rounded to bytes and
        through the stream's JPEG round trip; centre-crop images as they are."""
        if not self.context.image_set.preprocessing.jpeg_after_corruptions:
            return images
        return to_model_input(jpeg_round_trip(torch.round(images * 255).to(torch.uint8)))


def _torch_backend(setup: BackendSetup) -> TorchRenderBackend:
    setup.check_options("torch", ("images_per_batch", "precision"))
    if setup.evaluators is not None:
        raise ValueError("calibration backend 'torch' runs one model in this process: do not pass evaluators")
    resolve_device(setup.device)
    evaluator = build_evaluator(setup.model, setup.device, setup.batch_size, setup.amp)
    backend = TorchRenderBackend(setup.context, evaluator, **setup.options)
    logger.info("calibration: rendering and predicting on %s (torch rendering backend)", setup.device)
    return backend


register_backend(
    BackendEntry(
        "torch",
        _torch_backend,
        "renders each cell with the torch rendering backend and evaluates it on --device, in this process "
        "(choose it with a GPU; its bytes differ from the CPU path's; options: images_per_batch, precision "
        "float64 or float32)",
        uses_executor=False,
    )
)
