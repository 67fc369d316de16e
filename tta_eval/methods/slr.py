"""slr (Mummadi et al. 2021): soft likelihood ratio plus a class-diversity term, Adam over the
BatchNorm affine parameters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from ccc.validation import check_choice, check_in_range, check_non_negative, check_positive
from tta_eval.methods.layers import NormalizationGradientMethod
from tta_eval.methods.losses import kl_to_uniform, soft_likelihood_ratio
from tta_eval.methods.registry import MethodEntry, register_method


@dataclass(frozen=True)
class SLRConfig:
    """SLR (Mummadi et al. 2021) with Adam over norm-layer affine parameters.

    learning_rate: Adam step size > 0; adam_beta1/adam_beta2 in [0, 1); diversity_weight >= 0 scales
    KL(p̄ ‖ uniform) where p̄ is a moving average (momentum diversity_momentum in [0, 1)) of the
    batch-mean prediction; soft_labels: "soft" uses the (constant) prediction as labels, "hard"
    its one-hot arg-max.
    """

    learning_rate: float = 6e-4
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    diversity_weight: float = 1.0
    diversity_momentum: float = 0.9
    soft_labels: Literal["soft", "hard"] = "soft"

    def __post_init__(self) -> None:
        check_positive("learning_rate", self.learning_rate)
        check_in_range("adam_beta1", self.adam_beta1, 0.0, 1.0, include_high=False)
        check_in_range("adam_beta2", self.adam_beta2, 0.0, 1.0, include_high=False)
        check_non_negative("diversity_weight", self.diversity_weight)
        check_in_range("diversity_momentum", self.diversity_momentum, 0.0, 1.0, include_high=False)
        check_choice("soft_labels", self.soft_labels, ("soft", "hard"))


class SLR(NormalizationGradientMethod):
    """SLR (Mummadi et al. 2021): soft likelihood ratio loss plus a class-diversity term, Adam.

    loss = mean_n SLR(z_n; y_n) + w · KL(p̄ ‖ uniform), with y the stop-gradient prediction (or its
    one-hot arg-max) and p̄ = m · p̄_prev + (1 - m) · mean_n softmax(z_n) (p̄_prev constant; the
    first batch uses its own mean). Only norm-layer affine parameters change, so the last layer stays frozen.
    """

    method_name = "slr"

    def __init__(self, model: nn.Module, config: SLRConfig) -> None:
        super().__init__(model, config)
        self.mean_prediction: torch.Tensor | None = None
        self._remember_initial_state()

    def _make_optimizer(self, parameters: list[nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            parameters,
            lr=self.config.learning_rate,
            betas=(self.config.adam_beta1, self.config.adam_beta2),
            foreach=True,
        )

    def _reset_method_buffers(self) -> None:
        self.mean_prediction = None

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W), then one Adam step on the SLR + diversity loss."""
        config: SLRConfig = self.config
        logits = self.model(images)
        probabilities = logits.softmax(1)
        if config.soft_labels == "soft":
            labels = probabilities.detach()
        else:
            labels = torch.nn.functional.one_hot(logits.argmax(1), logits.shape[1]).to(logits.dtype)
        batch_mean = probabilities.mean(0)
        if self.mean_prediction is None:
            mean_prediction = batch_mean
        else:
            mean_prediction = (
                config.diversity_momentum * self.mean_prediction + (1 - config.diversity_momentum) * batch_mean
            )
        loss = soft_likelihood_ratio(logits, labels).mean() + config.diversity_weight * kl_to_uniform(mean_prediction)
        self.last_step = self._take_step(loss, images.shape[0])
        self.mean_prediction = mean_prediction.detach()
        return logits.detach()


register_method(
    MethodEntry(
        "slr",
        SLR,
        SLRConfig,
        "soft likelihood ratio + diversity regulariser, Adam, norm-layer affine parameters",
        needs_batchnorm=False,
        sources="Mummadi et al. 2021 (arXiv 2106.14999); no public CCC implementation",
        colour="#637939",
    )
)
