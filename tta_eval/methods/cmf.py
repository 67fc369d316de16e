"""CMF (Lee & Chang, ICLR 2024): continual momentum filtering of the adapted parameters, trained with
ROID's loss (Marsden et al. 2024): certainty- and diversity-weighted soft likelihood ratio plus an
augmentation-consistency term, and a batch prior correction of the outputs."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ccc.validation import check_in_range, check_non_negative, check_positive_int
from tta_eval.methods.registry import MethodEntry, register_method
from tta_eval.methods.roid import ROID, ROIDConfig, TensorStore

BETA_FLOOR = 0.89
BETA_SATURATION = 0.9999


@dataclass(frozen=True)
class CMFConfig(ROIDConfig):
    """CMF: continual momentum filtering of the adapted parameters, ROID's loss.

    The fields of ``ROIDConfig`` (loss, prior correction, seed; ``ensemble_momentum`` is γ below),
    and hidden_momentum (α) in [0, 1]; process_noise q0 >= 0, scaled by (adapted parameter count /
    process_noise_reference_size).
    """

    hidden_momentum: float = 0.99
    process_noise: float = 0.005
    process_noise_reference_size: int = 38400

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in_range("hidden_momentum", self.hidden_momentum, 0.0, 1.0)
        check_non_negative("process_noise", self.process_noise)
        check_positive_int("process_noise_reference_size", self.process_noise_reference_size)


class CMF(ROID):
    """CMF over the affine parameters of every normalisation layer (BatchNorm with batch statistics).

    Per batch: ROID's loss and SGD step (``ROID``); then, instead of ROID's weight ensembling, the
    filter over the adapted parameters θ with source values θ0 and hidden state h: h ← α h + (1 − α) θ0;
    v ← α² v + q; β = clip((1 − q) / (v + 1 − q)) (at least 0.89, 1 from 0.9999 on); v ← β v;
    h ← β h + (1 − β) θ; θ ← γ θ + (1 − γ) h. Returns z corrected by the batch prior.
    """

    method_name = "cmf"

    def __init__(self, model: nn.Module, config: CMFConfig) -> None:
        super().__init__(model, config)
        self.hidden_parameters = TensorStore(self.adapted_parameters)
        self.register_buffer("hidden_variance", torch.zeros((), dtype=torch.float64))
        adapted_count = sum(parameter.numel() for parameter in self.adapted_parameters)
        self.process_noise = config.process_noise * adapted_count / config.process_noise_reference_size
        self._remember_initial_state()

    @torch.no_grad()
    def _after_step(self) -> None:
        """The momentum filter of the adapted parameters (replaces ROID's weight ensembling)."""
        config: CMFConfig = self.config
        alpha, gamma, noise = config.hidden_momentum, config.ensemble_momentum, self.process_noise
        hidden = self.hidden_parameters.tensors()
        for hidden_value, source_value in zip(hidden, self.source_parameters.tensors()):
            hidden_value.mul_(alpha).add_(source_value, alpha=1.0 - alpha)
        variance = alpha**2 * float(self.hidden_variance) + noise
        beta = (1.0 - noise) / (variance + 1.0 - noise)
        beta = max(beta, BETA_FLOOR)
        beta = 1.0 if beta >= BETA_SATURATION else beta
        self.hidden_variance.fill_(beta * variance)
        for hidden_value, parameter in zip(hidden, self.adapted_parameters):
            hidden_value.mul_(beta).add_(parameter, alpha=1.0 - beta)
            parameter.mul_(gamma).add_(hidden_value, alpha=1.0 - gamma)


register_method(
    MethodEntry(
        "cmf",
        CMF,
        CMFConfig,
        "continual momentum filtering of the norm parameters with ROID's weighted loss",
        needs_batchnorm=False,
        sources="Lee & Chang ICLR 2024; mariodoebler/test-time-adaptation methods/cmf.py, roid.py",
        colour="#9c9ede",
    )
)
