"""CMF (Lee & Chang, ICLR 2024): continual momentum filtering of the adapted parameters, trained with
ROID's loss (Marsden et al. 2024): certainty- and diversity-weighted soft likelihood ratio plus an
augmentation-consistency term, and a batch prior correction of the outputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from tta_eval.methods.augmentation import augment_batch
from tta_eval.methods.base import SGDConfig, StepInfo
from tta_eval.methods.layers import NormalizationGradientMethod, batchnorm_statistics_frozen
from tta_eval.methods.losses import softmax_entropy, symmetric_cross_entropy
from tta_eval.methods.registry import MethodEntry, register_method
from ccc.validation import check_choice, check_in_range, check_non_negative, check_positive, check_positive_int, check_non_negative_int

SLR_CLIP = 0.99
SLR_EPSILON = 1e-5
BETA_FLOOR = 0.89
BETA_SATURATION = 0.9999


@dataclass(frozen=True)
class CMFConfig(SGDConfig):
    """CMF: continual momentum filtering of the adapted parameters, ROID's loss.

    prediction_momentum in [0, 1): weight of the old class-probability average in the diversity
    weight; weight_temperature > 0; use_weighting / use_consistency: ROID's sample weights and
    augmentation-consistency term; prior_correction: "logits" (the public code multiplies the logits
    by the smoothed batch prior), "probabilities" (the paper: re-weight the softmax) or "none";
    hidden_momentum (α), ensemble_momentum (γ) in [0, 1]; process_noise q0 >= 0, scaled by
    (adapted parameter count / process_noise_reference_size); seed of the augmentation generator.
    """

    nesterov: bool = True
    prediction_momentum: float = 0.9
    weight_temperature: float = 1.0 / 3.0
    use_weighting: bool = True
    use_consistency: bool = True
    prior_correction: Literal["logits", "probabilities", "none"] = "logits"
    hidden_momentum: float = 0.99
    ensemble_momentum: float = 0.99
    process_noise: float = 0.005
    process_noise_reference_size: int = 38400
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in_range("prediction_momentum", self.prediction_momentum, 0.0, 1.0, include_high=False)
        check_positive("weight_temperature", self.weight_temperature)
        check_choice("prior_correction", self.prior_correction, ("logits", "probabilities", "none"))
        check_in_range("hidden_momentum", self.hidden_momentum, 0.0, 1.0)
        check_in_range("ensemble_momentum", self.ensemble_momentum, 0.0, 1.0)
        check_non_negative("process_noise", self.process_noise)
        check_positive_int("process_noise_reference_size", self.process_noise_reference_size)
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


class CMF(NormalizationGradientMethod):
    """CMF over the affine parameters of every normalisation layer (BatchNorm with batch statistics).

    Per batch: logits z; loss = Σ_kept w_n · SLR(z_n) / N + Σ_kept w_n · SCE(z_aug_n, z_n) / N
    (``roid_sample_weights``; z_aug from one reflect-padded augmentation draw of the kept images,
    gradients through both arguments); p̄ ← m p̄ + (1 − m) mean softmax (p̄ starts uniform); one SGD
    step; then the filter over the adapted parameters θ with source values θ0 and hidden state h:
    h ← α h + (1 − α) θ0; v ← α² v + q; β = clip((1 − q) / (v + 1 − q)) (at least 0.89, 1 from 0.9999
    on); v ← β v; h ← β h + (1 − β) θ; θ ← γ θ + (1 − γ) h. Returns z corrected by the batch prior.
    """

    method_name = "cmf"

    def __init__(self, model: nn.Module, config: CMFConfig) -> None:
        super().__init__(model, config, excluded_modules="")
        self.source_parameters = TensorStore(self.adapted_parameters)
        self.hidden_parameters = TensorStore(self.adapted_parameters)
        self.register_buffer("hidden_variance", torch.zeros((), dtype=torch.float64))
        adapted_count = sum(parameter.numel() for parameter in self.adapted_parameters)
        self.process_noise = config.process_noise * adapted_count / config.process_noise_reference_size
        self.class_average: torch.Tensor | None = None
        self.generator = torch.Generator().manual_seed(config.seed)
        self._initial_generator_state = self.generator.get_state()
        self._remember_initial_state()

    def _reset_method_buffers(self) -> None:
        self.class_average = None
        self.generator.set_state(self._initial_generator_state)

    def _loss(self, images: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, int]:
        config: CMFConfig = self.config
        count, classes = logits.shape
        if self.class_average is None:
            self.class_average = torch.full((classes,), 1.0 / classes, dtype=logits.dtype, device=logits.device)
        if config.use_weighting:
            with torch.no_grad():
                weights, kept_mask = roid_sample_weights(logits.detach(), self.class_average, config.weight_temperature)
                momentum = config.prediction_momentum
                self.class_average = momentum * self.class_average + (1.0 - momentum) * logits.detach().softmax(1).mean(0)
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

    @torch.no_grad()
    def _filter_parameters(self) -> None:
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

    def _corrected(self, logits: torch.Tensor) -> torch.Tensor:
        mode = self.config.prior_correction
        if mode == "none":
            return logits
        prior = smoothed_batch_prior(logits)
        if mode == "logits":
            return logits * prior
        return logits.log_softmax(1) + prior.log()

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Prior-corrected logits (N×C) for images in [0, 1] (N×3×H×W), then one update and filtering."""
        logits = self.model(images)
        loss, kept = self._loss(images, logits)
        step: StepInfo = self._take_step(loss, kept)
        if step.updated:
            self._filter_parameters()
        self.last_step = step
        return self._corrected(logits.detach())


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
