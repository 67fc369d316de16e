"""roid (Marsden, Döbler, Yang, WACV 2024): certainty- and diversity-weighted soft likelihood ratio
with an augmentation-consistency term, weight ensembling with the source model, and a batch prior
correction of the outputs, over the affine parameters of every normalisation layer.

CMF (``cmf.py``) trains with the same loss and replaces the weight ensembling by its filter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from ccc.validation import check_choice, check_in_range, check_non_negative_int, check_positive
from tta_eval.methods.augmentation import augment_batch
from tta_eval.methods.base import SGDConfig, StepInfo, observe_prediction
from tta_eval.methods.layers import NormalizationGradientMethod, batchnorm_statistics_frozen
from tta_eval.methods.losses import softmax_entropy, symmetric_cross_entropy
from tta_eval.methods.registry import MethodEntry, register_method

SLR_CLIP = 0.99
SLR_EPSILON = 1e-5
PRIOR_CORRECTIONS = ("logits", "probabilities", "none")


@dataclass(frozen=True)
class ROIDConfig(SGDConfig):
    """ROID: weighted soft likelihood ratio, consistency, weight ensembling, prior correction.

    prediction_momentum in [0, 1): weight of the old class-probability average in the diversity
    weight (ROID.MOMENTUM_PROBS); weight_temperature > 0 (ROID.TEMPERATURE); use_weighting /
    use_consistency: ROID's sample weights and augmentation-consistency term; prior_correction:
    "logits" (the public code multiplies the logits by the smoothed batch prior), "probabilities"
    (the paper: re-weight the softmax) or "none"; ensemble_momentum in [0, 1]: weight of the adapted
    parameters when they are averaged with the source parameters after each step (ROID.MOMENTUM_SRC;
    1 turns ensembling off); seed of the augmentation generator.
    """

    nesterov: bool = True
    prediction_momentum: float = 0.9
    weight_temperature: float = 1.0 / 3.0
    use_weighting: bool = True
    use_consistency: bool = True
    prior_correction: Literal["logits", "probabilities", "none"] = "logits"
    ensemble_momentum: float = 0.99
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in_range("prediction_momentum", self.prediction_momentum, 0.0, 1.0, include_high=False)
        check_positive("weight_temperature", self.weight_temperature)
        check_choice("prior_correction", self.prior_correction, PRIOR_CORRECTIONS)
        check_in_range("ensemble_momentum", self.ensemble_momentum, 0.0, 1.0)
        check_non_negative_int("seed", self.seed)


def clipped_soft_likelihood_ratio(logits: torch.Tensor) -> torch.Tensor:
    """ROID's soft likelihood ratio −Σ_c p_c ln(p_c / (1 − p_c) + 1e-5), p = min(softmax, 0.99), per
    sample; gradients flow through both factors (unlike ``losses.soft_likelihood_ratio``)."""
    probabilities = logits.softmax(1).clamp(max=SLR_CLIP)
    return -(probabilities * torch.log(probabilities / (1.0 - probabilities) + SLR_EPSILON)).sum(1)


def min_max_normalize(values: torch.Tensor) -> torch.Tensor:
    """(v − min v) / (max v − min v); all zeros when every value is equal."""
    span = values.max() - values.min()
    if float(span) == 0.0:
        return torch.zeros_like(values)
    return (values - values.min()) / span


def roid_sample_weights(
    logits: torch.Tensor, class_average: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """ROID's weights (N,) and the boolean mask (N,) of the samples kept.

    diversity d = min-max-normalised 1 − cos(p̄, p_n) (p̄ = ``class_average``); certainty
    c = min-max-normalised −H(p_n); weight exp(d · c / temperature); samples with d below the batch
    mean of d get weight 0 and are dropped.
    """
    probabilities = logits.softmax(1)
    diversity = min_max_normalize(1.0 - F.cosine_similarity(class_average.unsqueeze(0), probabilities, dim=1))
    kept = diversity >= diversity.mean()
    certainty = min_max_normalize(-softmax_entropy(logits))
    weights = torch.exp(diversity * certainty / temperature)
    return torch.where(kept, weights, torch.zeros_like(weights)), kept


def smoothed_batch_prior(logits: torch.Tensor) -> torch.Tensor:
    """ROID's prior (C,): (p̄ + s) / (1 + s C), p̄ the batch-mean softmax, s = max(1/N, 1/C) / max p̄."""
    count, classes = logits.shape
    prior = logits.softmax(1).mean(0)
    smoothing = max(1.0 / count, 1.0 / classes) / prior.max()
    return (prior + smoothing) / (1.0 + smoothing * classes)


def prior_corrected(logits: torch.Tensor, mode: str) -> torch.Tensor:
    """Logits (N×C) corrected by ``smoothed_batch_prior``: "logits" multiplies the logits by the prior
    (the public code), "probabilities" returns log softmax + log prior (the paper), "none" nothing."""
    if mode == "none":
        return logits
    prior = smoothed_batch_prior(logits)
    if mode == "logits":
        return logits * prior
    return logits.log_softmax(1) + prior.log()


@torch.no_grad()
def ensemble_with_source(
    parameters: list[torch.Tensor], source_parameters: list[torch.Tensor], momentum: float
) -> None:
    """Weight ensembling in place: θ ← m θ + (1 − m) θ0 for each parameter θ and its source value θ0."""
    for parameter, source in zip(parameters, source_parameters):
        parameter.mul_(momentum).add_(source, alpha=1.0 - momentum)


class TensorStore(nn.Module):
    """Buffers holding copies of a list of tensors (so they follow ``.to(device)`` and ``state_dict``)."""

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        super().__init__()
        self.count = len(tensors)
        for index, tensor in enumerate(tensors):
            self.register_buffer(f"tensor_{index}", tensor.detach().clone())

    def tensors(self) -> list[torch.Tensor]:
        """The stored tensors, in the order given."""
        return [getattr(self, f"tensor_{index}") for index in range(self.count)]


class ROID(NormalizationGradientMethod):
    """ROID over the affine parameters of every normalisation layer (BatchNorm with batch statistics).

    Per batch: logits z; loss = Σ_kept w_n · SLR(z_n) / N + Σ_kept w_n · SCE(z_aug_n, z_n) / N
    (``roid_sample_weights``; z_aug from one reflect-padded augmentation draw of the kept images,
    gradients through both arguments); p̄ ← m p̄ + (1 − m) mean softmax (p̄ starts uniform); one SGD
    step; then ``_after_step``: θ ← m θ + (1 − m) θ0 with the source values θ0. Returns z corrected
    by the batch prior.
    """

    method_name = "roid"

    def __init__(self, model: nn.Module, config: ROIDConfig) -> None:
        super().__init__(model, config, excluded_modules="")
        self.source_parameters = TensorStore(self.adapted_parameters)
        self.class_average: torch.Tensor | None = None
        self._seeded_generator(config.seed)
        self._remember_initial_state()

    def _reset_method_buffers(self) -> None:
        self.class_average = None

    def _loss(self, images: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, int]:
        config: ROIDConfig = self.config
        count, classes = logits.shape
        if self.class_average is None:
            self.class_average = torch.full((classes,), 1.0 / classes, dtype=logits.dtype, device=logits.device)
        if config.use_weighting:
            with torch.no_grad():
                weights, kept_mask = roid_sample_weights(logits.detach(), self.class_average, config.weight_temperature)
                momentum = config.prediction_momentum
                self.class_average = momentum * self.class_average + (1.0 - momentum) * logits.detach().softmax(1).mean(
                    0
                )
            kept = torch.nonzero(kept_mask, as_tuple=True)[0]
        else:
            weights = torch.ones(count, dtype=logits.dtype, device=logits.device)
            kept = torch.arange(count, device=logits.device)
        loss = (clipped_soft_likelihood_ratio(logits[kept]) * weights[kept]).sum() / count
        if config.use_consistency and kept.numel() > 0:
            augmented = augment_batch(images[kept], self.generator, 0.0, padding_mode="reflect", blur=False)
            with batchnorm_statistics_frozen(self.model):
                augmented_logits = self.model(augmented)
            loss = loss + (symmetric_cross_entropy(augmented_logits, logits[kept]) * weights[kept]).sum() / count
        return loss, int(kept.numel())

    def _after_step(self) -> None:
        """Weight ensembling with the source parameters (called after each optimiser step)."""
        ensemble_with_source(self.adapted_parameters, self.source_parameters.tensors(), self.config.ensemble_momentum)

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Prior-corrected logits (N×C) for images in [0, 1] (N×3×H×W), then one update."""
        logits = self.model(images)
        if observe_prediction(logits):
            logits = self.model(images)
        loss, kept = self._loss(images, logits)
        step: StepInfo = self._take_step(loss, kept)
        if step.updated:
            self._after_step()
        self.last_step = step
        return prior_corrected(logits.detach(), self.config.prior_correction)


register_method(
    MethodEntry(
        "roid",
        ROID,
        ROIDConfig,
        "weighted soft likelihood ratio + consistency, weight ensembling with the source, prior correction",
        needs_batchnorm=False,
        sources=(
            "Marsden, Döbler, Yang WACV 2024; mariodoebler/test-time-adaptation methods/roid.py, cfgs/ccc/roid.yaml"
        ),
        colour="#008080",
    )
)
