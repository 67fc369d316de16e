"""eta (Niu et al. ICML 2022): entropy minimisation on reliable, non-redundant, re-weighted samples
(EATA without its Fisher anchor); the base of eata and rdumb."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ccc.validation import check_in_range
from tta_eval.methods.base import SGDConfig, StepInfo, observe_prediction
from tta_eval.methods.layers import NormalizationGradientMethod
from tta_eval.methods.losses import DEFAULT_ENTROPY_MARGIN_FRACTION, entropy_weights, select_reliable, softmax_entropy
from tta_eval.methods.registry import MethodEntry, register_method


@dataclass(frozen=True)
class ETAConfig(SGDConfig):
    """ETA: entropy minimisation on reliable, non-redundant samples.

    entropy_margin_fraction in (0, 1]: E0 = fraction · ln C (C = number of classes; 0.4 · ln 1000
    on ImageNet); redundancy_margin in [0, 1]: a sample is kept when |cos(p, p̄)| < margin;
    prediction_momentum in [0, 1): weight of the old value in the moving average p̄.
    """

    entropy_margin_fraction: float = DEFAULT_ENTROPY_MARGIN_FRACTION
    redundancy_margin: float = 0.05
    prediction_momentum: float = 0.9

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in_range("entropy_margin_fraction", self.entropy_margin_fraction, 0.0, 1.0, include_low=False)
        check_in_range("redundancy_margin", self.redundancy_margin, 0.0, 1.0)
        check_in_range("prediction_momentum", self.prediction_momentum, 0.0, 1.0, include_high=False)

    def entropy_margin(self, num_classes: int) -> float:
        """E0 in nats for a ``num_classes``-way classifier."""
        return self.entropy_margin_fraction * math.log(num_classes)


def select_non_redundant(
    probabilities: torch.Tensor, mean_prediction: torch.Tensor | None, redundancy_margin: float
) -> torch.Tensor:
    """Indices (into ``probabilities``) of samples with |cos(p, p̄)| < margin (ETA's second filter).

    probabilities: N×C softmax outputs; mean_prediction: moving average p̄ (C,) or None before the
    first update, in which case every sample is kept.
    """
    if mean_prediction is None:
        return torch.arange(probabilities.shape[0], device=probabilities.device)
    similarity = F.cosine_similarity(mean_prediction.unsqueeze(0), probabilities, dim=1)
    return torch.nonzero(similarity.abs() < redundancy_margin, as_tuple=True)[0]


class ETA(NormalizationGradientMethod):
    """ETA (Niu et al. 2022): weighted entropy minimisation on reliable, non-redundant samples.

    Per batch: keep samples with entropy H < E0; of those keep samples whose softmax has absolute
    cosine similarity < ε with p̄, the moving average of earlier batch-mean predictions (skipped
    while p̄ is undefined); minimise mean(H · 1/exp(H - E0)) over the kept samples; update
    p̄ ← m p̄ + (1 - m) mean(kept softmax), or initialise it with that mean.
    """

    method_name = "eta"

    def __init__(self, model: nn.Module, config: ETAConfig) -> None:
        super().__init__(model, config)
        self.mean_prediction: torch.Tensor | None = None
        self._remember_initial_state()

    def _reset_method_buffers(self) -> None:
        self.mean_prediction = None

    def _reliable(self, entropies: torch.Tensor, margin: float) -> torch.Tensor:
        """Indices of the reliable samples: entropy (nats, N) below ``margin`` (ETA's first filter)."""
        return select_reliable(entropies, margin)

    def _regularisation(self) -> torch.Tensor | None:
        """Extra loss term added to the entropy loss (none for ETA)."""
        return None

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W), then one SGD step on the filtered, weighted entropy."""
        logits = self.model(images)
        if observe_prediction(logits):
            logits = self.model(images)
        config: ETAConfig = self.config
        margin = config.entropy_margin(logits.shape[1])
        entropies = softmax_entropy(logits)
        reliable = self._reliable(entropies.detach(), margin)
        reliable_probabilities = logits[reliable].softmax(1).detach()
        kept_within_reliable = select_non_redundant(
            reliable_probabilities, self.mean_prediction, config.redundancy_margin
        )
        kept = reliable[kept_within_reliable]
        if kept.numel() == 0:
            self.last_step = StepInfo()
        else:
            kept_entropies = entropies[kept]
            loss = (kept_entropies * entropy_weights(kept_entropies, margin)).mean()
            regularisation = self._regularisation()
            if regularisation is not None:
                loss = loss + regularisation
            self.last_step = self._take_step(loss, int(kept.numel()))
        self._update_mean_prediction(reliable_probabilities[kept_within_reliable])
        return logits.detach()

    def _update_mean_prediction(self, kept_probabilities: torch.Tensor) -> None:
        if kept_probabilities.shape[0] == 0:
            return
        batch_mean = kept_probabilities.mean(0)
        if self.mean_prediction is None:
            self.mean_prediction = batch_mean
        else:
            momentum = self.config.prediction_momentum
            self.mean_prediction = momentum * self.mean_prediction + (1.0 - momentum) * batch_mean


register_method(
    MethodEntry(
        "eta",
        ETA,
        ETAConfig,
        "entropy minimisation on reliable, non-redundant, re-weighted samples",
        needs_batchnorm=False,
        sources="Niu et al. ICML 2022; mr-eggplant/EATA eata.py; CCC code models/eata.py",
        colour="tab:green",
    )
)
