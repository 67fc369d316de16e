"""cpl (Goyal et al. NeurIPS 2022): conjugate pseudo-labels of the PolyLoss, BatchNorm affine parameters."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ccc.validation import check_non_negative, check_positive
from tta_eval.methods.base import SGDConfig
from tta_eval.methods.layers import NormalizationGradientMethod
from tta_eval.methods.losses import conjugate_polyloss
from tta_eval.methods.registry import MethodEntry, register_method


@dataclass(frozen=True)
class CPLConfig(SGDConfig):
    """Conjugate pseudo-labels with the PolyLoss; poly_epsilon >= 0, temperature > 0."""

    learning_rate: float = 1e-3
    poly_epsilon: float = 8.0
    temperature: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_non_negative("poly_epsilon", self.poly_epsilon)
        check_positive("temperature", self.temperature)


class CPL(NormalizationGradientMethod):
    """Conjugate pseudo-labels (Goyal et al. 2022) for a model trained with the PolyLoss(ε)."""

    method_name = "cpl"

    def __init__(self, model: nn.Module, config: CPLConfig) -> None:
        super().__init__(model, config)
        self._remember_initial_state()

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W), then one SGD step on the mean conjugate loss."""
        logits = self.model(images)
        loss = conjugate_polyloss(logits, self.config.poly_epsilon, self.config.temperature).mean()
        self.last_step = self._take_step(loss, images.shape[0])
        return logits.detach()


register_method(
    MethodEntry(
        "cpl",
        CPL,
        CPLConfig,
        "conjugate pseudo-labels of the PolyLoss (eps=8), norm-layer affine parameters",
        needs_batchnorm=False,
        sources="Goyal et al. NeurIPS 2022; CCC code models/conjugate.py",
        colour="#8c6d31",
    )
)
