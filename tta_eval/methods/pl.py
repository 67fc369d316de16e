"""pl (Lee 2013, as in Alfarra et al. 2024): cross-entropy to confident hard pseudo-labels, BatchNorm
affine parameters."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ccc.validation import check_in_range
from tta_eval.methods.base import SGDConfig, StepInfo
from tta_eval.methods.layers import NormalizationGradientMethod
from tta_eval.methods.registry import MethodEntry, register_method


@dataclass(frozen=True)
class PLConfig(SGDConfig):
    """PL: cross-entropy to the arg-max of samples whose max probability exceeds confidence_threshold
    (in [0, 1)); norm-layer affine parameters; lr 0.01 as in the time-constrained paper's code."""

    learning_rate: float = 0.01
    confidence_threshold: float = 0.9

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in_range("confidence_threshold", self.confidence_threshold, 0.0, 1.0, include_high=False)


class PL(NormalizationGradientMethod):
    """Pseudo-labelling (Lee 2013) as in the time-constrained paper: cross-entropy to the arg-max of
    the samples whose max softmax probability exceeds ``confidence_threshold``; norm-layer affine parameters,
    batch statistics; no step when no sample is confident."""

    method_name = "pl"

    def __init__(self, model: nn.Module, config: PLConfig) -> None:
        super().__init__(model, config)
        self._remember_initial_state()

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W), then one SGD step on the confident samples."""
        logits = self.model(images)
        confidence, labels = logits.detach().softmax(1).max(1)
        confident = torch.nonzero(confidence > self.config.confidence_threshold, as_tuple=True)[0]
        if confident.numel() == 0:
            self.last_step = StepInfo()
        else:
            loss = F.cross_entropy(logits[confident], labels[confident])
            self.last_step = self._take_step(loss, int(confident.numel()))
        return logits.detach()


register_method(
    MethodEntry(
        "pl",
        PL,
        PLConfig,
        "cross-entropy to confident (p > 0.9) hard pseudo-labels, norm-layer affine parameters",
        needs_batchnorm=False,
        sources="Lee ICML-W 2013; MotasemAlfarra/Online_Test_Time_Adaptation tta_methods/pl.py",
        colour="#3182bd",
    )
)
