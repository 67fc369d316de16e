"""rpl (Rusak et al. TMLR 2022): generalised cross-entropy to hard pseudo-labels, BatchNorm affine parameters."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ccc.validation import check_in_range
from tta_eval.methods.base import SGDConfig
from tta_eval.methods.layers import NormalizationGradientMethod
from tta_eval.methods.losses import generalized_cross_entropy
from tta_eval.methods.registry import MethodEntry, register_method


@dataclass(frozen=True)
class RPLConfig(SGDConfig):
    """RPL: generalised cross-entropy on hard pseudo-labels; q in (0, 1]."""

    learning_rate: float = 5e-4
    q: float = 0.8

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in_range("q", self.q, 0.0, 1.0, include_low=False)


class RPL(NormalizationGradientMethod):
    """RPL (Rusak et al. 2022): generalised cross-entropy to the model's own hard pseudo-labels."""

    method_name = "rpl"

    def __init__(self, model: nn.Module, config: RPLConfig) -> None:
        super().__init__(model, config)
        self._remember_initial_state()

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W), then one SGD step on mean GCE(q) to arg-max labels."""
        logits = self.model(images)
        loss = generalized_cross_entropy(logits, logits.argmax(1), self.config.q).mean()
        self.last_step = self._take_step(loss, images.shape[0])
        return logits.detach()


register_method(
    MethodEntry(
        "rpl",
        RPL,
        RPLConfig,
        "generalised cross-entropy (q=0.8) to hard pseudo-labels, norm-layer affine parameters",
        needs_batchnorm=False,
        sources="Rusak et al. TMLR 2022; CCC code models/rpl.py",
        colour="#393b79",
    )
)
