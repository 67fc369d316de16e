"""tent (Wang et al. ICLR 2021): entropy minimisation over the BatchNorm affine parameters."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from tta_eval.methods.base import SGDConfig
from tta_eval.methods.layers import NormalizationGradientMethod
from tta_eval.methods.losses import softmax_entropy
from tta_eval.methods.registry import MethodEntry, register_method


@dataclass(frozen=True)
class TentConfig(SGDConfig):
    """Tent: entropy minimisation over norm-layer affine parameters (lr 2.5e-4 as in the CCC code)."""


class Tent(NormalizationGradientMethod):
    """Tent (Wang et al. 2021): minimise the batch-mean prediction entropy."""

    method_name = "tent"

    def __init__(self, model: nn.Module, config: TentConfig) -> None:
        super().__init__(model, config)
        self._remember_initial_state()

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W), then one SGD step on the mean entropy."""
        logits = self.model(images)
        loss = softmax_entropy(logits).mean()
        self.last_step = self._take_step(loss, images.shape[0])
        return logits.detach()


register_method(
    MethodEntry(
        "tent",
        Tent,
        TentConfig,
        "entropy minimisation over norm-layer affine parameters",
        needs_batchnorm=False,
        sources="Wang et al. ICLR 2021; DequanWang/tent; CCC code models/tent.py",
        colour="tab:orange",
    )
)
