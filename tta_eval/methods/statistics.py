"""Methods without gradient updates: the source model and test-batch BatchNorm statistics."""

from __future__ import annotations

import torch
from torch import nn

from tta_eval.methods.base import AdaptationMethod, StepInfo, require_batchnorm, set_batchnorm_batch_statistics
from tta_eval.methods.configs import BatchNormConfig, SourceConfig


class Source(AdaptationMethod):
    """The pretrained model in evaluation mode; never changes a parameter or buffer."""

    def __init__(self, model: nn.Module, config: SourceConfig) -> None:
        super().__init__(model, config)
        model.requires_grad_(False)
        self._remember_initial_state()

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) of the unadapted model for images (N×C×H×W)."""
        logits = self.model(images)
        self.last_step = StepInfo()
        return logits


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
