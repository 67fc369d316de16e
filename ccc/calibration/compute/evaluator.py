"""Model side of the calibration: top-1 predictions on rendered uint8 images, and one unit in-process."""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from ccc.calibration.compute.engine import (
    DEFAULT_IMAGES_PER_TASK,
    RenderContext,
    UnitResult,
    WorkUnit,
    count_correct,
    finish_base,
    render_base,
    render_targets,
    target_groups,
)
from ccc.validation import MAX_BATCH_SIZE, check_positive_int


def images_to_device(images: NDArray[np.uint8], device: torch.device | str) -> Tensor:
    """uint8 ``N × H × W × 3`` images → uint8 ``N × 3 × H × W`` on ``device`` (a copy)."""
    return torch.from_numpy(np.array(images, dtype=np.uint8, copy=True)).to(device).permute(0, 3, 1, 2)


def to_model_input(images: Tensor) -> Tensor:
    """uint8 ``N × 3 × H × W`` images → the model's input, float32 ``images / 255`` in [0, 1], on their device."""
    return images.float().div_(255.0)


class ModelEvaluator:
    """Top-1 predictions of a classifier on uint8 images (images / 255 in [0, 1] go to the model).

    Args:
        model: an ``nn.Module`` taking float N×3×H×W images in [0, 1] (normalisation inside, as
            :func:`ccc.models.load_model` builds them) and returning N×classes logits.
        device: torch device the model lives on.
        batch_size: images per forward pass, in [1, ``MAX_BATCH_SIZE``].
        amp: float16 autocast (CUDA only).
    """

    def __init__(
        self, model: nn.Module, device: torch.device | str = "cpu", batch_size: int = 64, amp: bool = False
    ) -> None:
        check_positive_int("batch_size", batch_size, at_most=MAX_BATCH_SIZE)
        self.device = torch.device(device)
        if amp and self.device.type != "cuda":
            raise ValueError(f"mixed precision (amp) needs a CUDA device, got device {str(self.device)!r}")
        self.model = model.to(self.device).eval()
        self.batch_size = batch_size
        self.amp = amp

    def _autocast(self) -> contextlib.AbstractContextManager[object]:
        if self.amp:
            return torch.autocast(device_type="cuda", dtype=torch.float16)
        return contextlib.nullcontext()

    @torch.inference_mode()
    def predict(self, images: NDArray[np.uint8]) -> NDArray[np.int64]:
        """Predicted class index per image of uint8 ``N × H × W × 3``; int64 array of length N."""
        predictions = np.empty(len(images), dtype=np.int64)
        for start in range(0, len(images), self.batch_size):
            chunk = images[start : start + self.batch_size]
            predictions[start : start + len(chunk)] = (
                self.predict_tensor(to_model_input(images_to_device(chunk, self.device))).cpu().numpy()
            )
        return predictions

    @torch.inference_mode()
    def predict_tensor(self, images: Tensor) -> Tensor:
        """Predicted class index per image of float32 ``N × 3 × H × W`` in [0, 1] (any device).

        Returns int64 (N,) on the evaluator's device; the images move to it batch by batch, so
        images already there (rendered on the device) never visit the host. The same forward passes
        as :meth:`predict` for the same images and batches.
        """
        predictions = []
        for start in range(0, len(images), self.batch_size):
            batch = images[start : start + self.batch_size].to(self.device)
            with self._autocast():
                logits = self.model(batch)
            predictions.append(logits.argmax(dim=1))
        if not predictions:
            return torch.empty(0, dtype=torch.int64, device=self.device)
        return torch.cat(predictions)


def execute_unit(
    context: RenderContext,
    unit: WorkUnit,
    evaluator: ModelEvaluator,
    images_per_task: int = DEFAULT_IMAGES_PER_TASK,
) -> UnitResult:
    """Run one unit in this process: render base and targets group by group, predict, count."""
    labels = context.block_labels(unit.block)
    base = render_base(context, unit.corruption, unit.severity, unit.block)
    correct: list[int] = []
    if unit.evaluate_base:
        correct += count_correct(evaluator.predict(finish_base(context, base)), labels)
    for group in target_groups(unit, len(labels), images_per_task):
        rendered = render_targets(context, base, unit.corruption, unit.severity, unit.block, group)
        correct += count_correct(evaluator.predict(rendered), labels)
    return UnitResult(unit, tuple(correct), len(labels))
