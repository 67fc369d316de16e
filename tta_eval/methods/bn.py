"""bn: test-batch BatchNorm statistics (Schneider et al. 2020), nothing learned."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from tta_eval.methods.base import AdaptationMethod, StepInfo, require_batchnorm, set_batchnorm_batch_statistics
from tta_eval.methods.registry import MethodEntry, register_method


@dataclass(frozen=True)
class BatchNormConfig:
    """Test-batch statistics in every BatchNorm layer; nothing is learned."""


class BatchNormStatistics(AdaptationMethod):
    """Normalise with the statistics of each test batch (Schneider et al. 2020, "BN" in CCC).

    Running statistics keep being updated from the stream (momentum of each BatchNorm layer) so the
    model can also predict in evaluation mode with target statistics; nothing is learned.
    """

    def __init__(self, model: nn.Module, config: BatchNormConfig) -> None:
        require_batchnorm(model, "bn")
        super().__init__(model, config)
        model.requires_grad_(False)
        self._remember_initial_state()

    def _apply_layer_modes(self) -> None:
        set_batchnorm_batch_statistics(self.model)

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) with batch statistics for images (N×C×H×W)."""
        logits = self.model(images)
        self.last_step = StepInfo(samples_adapted=images.shape[0])
        return logits


register_method(
    MethodEntry(
        "bn",
        BatchNormStatistics,
        BatchNormConfig,
        "test-batch BatchNorm statistics, nothing learned",
        sources="Schneider et al. 2020; CCC code models/batchnorm.py",
        colour="tab:blue",
    )
)
