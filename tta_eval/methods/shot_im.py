"""shot_im (Liang et al. ICML 2020), online: information maximisation over every parameter except the
classifier head's; the base of shot."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ccc.validation import check_non_negative
from tta_eval.methods.base import AdaptationMethod, SGDConfig, make_optimizer, set_batchnorm_batch_statistics
from tta_eval.methods.layers import find_classifier_head, forward_with_features, parameters_outside_head
from tta_eval.methods.losses import softmax_entropy
from tta_eval.methods.registry import MethodEntry, register_method


@dataclass(frozen=True)
class SHOTIMConfig(SGDConfig):
    """SHOT-IM: mean entropy − diversity_weight · entropy of the batch-mean prediction (>= 0), over
    every parameter except the classifier head's."""

    diversity_weight: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_non_negative("diversity_weight", self.diversity_weight)


def information_maximization_loss(logits: torch.Tensor, diversity_weight: float) -> torch.Tensor:
    """SHOT's information-maximisation loss mean_n H(p_n) − w · H(p̄), p̄ = mean_n p_n (nats).

    It lies in [−w ln C, ln C]; low when predictions are confident and diverse across the batch.
    """
    mean_prediction = logits.softmax(1).mean(0)
    return softmax_entropy(logits).mean() - diversity_weight * torch.special.entr(mean_prediction).sum()


class SHOTIM(AdaptationMethod):
    """SHOT-IM (Liang et al. 2020), online: one SGD step per batch on the information-maximisation
    loss over every parameter except the classifier head's (the last nn.Linear); BatchNorm layers
    normalise with batch statistics."""

    method_name = "shot_im"

    def __init__(self, model: nn.Module, config: SHOTIMConfig) -> None:
        super().__init__(model, config)
        self.head_name = find_classifier_head(model, self.method_name)
        parameters = self._adapt_only(parameters_outside_head(model, self.head_name, self.method_name))
        self.optimizer = make_optimizer(parameters, config)
        self._remember_initial_state()

    def _apply_layer_modes(self) -> None:
        set_batchnorm_batch_statistics(self.model)

    def _loss(self, logits: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        return information_maximization_loss(logits, self.config.diversity_weight)

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W), then one SGD step on the loss."""
        logits, features = forward_with_features(self.model, self.head_name, images)
        self.last_step = self._take_step(self._loss(logits, features), images.shape[0])
        return logits.detach()


register_method(
    MethodEntry(
        "shot_im",
        SHOTIM,
        SHOTIMConfig,
        "information maximisation (entropy - diversity), every non-classifier parameter",
        needs_batchnorm=False,
        sources="Liang et al. ICML 2020; tim-learn/SHOT; MotasemAlfarra/Online_Test_Time_Adaptation shot_im.py",
        colour="#e6550d",
    )
)
