"""source: the pretrained model in evaluation mode, no adaptation (the reference of every comparison)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from tta_eval.methods.base import AdaptationMethod, StepInfo
from tta_eval.methods.registry import MethodEntry, register_method


@dataclass(frozen=True)
class SourceConfig:
    """The unadapted model in evaluation mode; nothing to configure."""


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


register_method(
    MethodEntry(
        "source",
        Source,
        SourceConfig,
        "pretrained model, evaluation mode, no adaptation",
        needs_batchnorm=False,
        sources="CCC code models/pretrained.py",
        colour="black",
    )
)
