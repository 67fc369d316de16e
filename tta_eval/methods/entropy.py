"""Entropy-minimisation methods over BatchNorm affine parameters: Tent, ETA and EATA."""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from tta_eval.methods.base import (
    AdaptationMethod,
    StepInfo,
    batchnorm_affine_parameters,
    make_sgd,
    require_batchnorm,
    require_trainable,
    set_batchnorm_batch_statistics,
)
from tta_eval.methods.configs import EATAConfig, ETAConfig, SGDConfig, TentConfig
from tta_eval.methods.losses import softmax_entropy


class BatchNormGradientMethod(AdaptationMethod):
    """Base of methods that train BN affine parameters with SGD while normalising with batch statistics."""

    method_name = "batchnorm-gradient"

    def __init__(self, model: nn.Module, config: SGDConfig) -> None:
        require_batchnorm(model, self.method_name)
        super().__init__(model, config)
        named = batchnorm_affine_parameters(model)
        require_trainable([parameter for _, parameter in named], self.method_name)
        self.optimizer = self._make_optimizer(self._adapt_only(named))

    def _make_optimizer(self, parameters: list[nn.Parameter]) -> torch.optim.Optimizer:
        config = self.config
        return make_sgd(parameters, config.learning_rate, config.momentum, config.nesterov, config.weight_decay)

    def _apply_layer_modes(self) -> None:
        set_batchnorm_batch_statistics(self.model)


class Tent(BatchNormGradientMethod):
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


def select_reliable(entropies: torch.Tensor, entropy_margin: float) -> torch.Tensor:
    """Indices of samples whose entropy (nats) is strictly below ``entropy_margin`` (ETA's first filter)."""
    return torch.nonzero(entropies < entropy_margin, as_tuple=True)[0]


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


def entropy_weights(entropies: torch.Tensor, entropy_margin: float) -> torch.Tensor:
    """ETA's sample weights 1 / exp(H - E0), computed without gradient."""
    return torch.exp(-(entropies.detach() - entropy_margin))


class ETA(BatchNormGradientMethod):
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

    def _regularisation(self) -> torch.Tensor | None:
        """Extra loss term added to the entropy loss (none for ETA)."""
        return None

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W), then one SGD step on the filtered, weighted entropy."""
        logits = self.model(images)
        config: ETAConfig = self.config
        margin = config.entropy_margin(logits.shape[1])
        entropies = softmax_entropy(logits)
        reliable = select_reliable(entropies, margin)
        reliable_probabilities = logits[reliable].softmax(1).detach()
        kept_within_reliable = select_non_redundant(reliable_probabilities, self.mean_prediction, config.redundancy_margin)
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


class EATA(ETA):
    """EATA: ETA plus the anti-forgetting penalty α Σ_i F_i (θ_i - θ0_i)² on the adapted parameters.

    The diagonal Fisher F is estimated before adaptation from the first ``fisher_samples`` images of
    the stream (``prepare``): for each batch the squared gradient of the mean cross-entropy to the
    model's own arg-max labels, averaged over batches (the last batch is cut to reach exactly
    ``fisher_samples`` images). θ0 are the source values. ``reset()`` keeps F and θ0.
    """

    method_name = "eata"

    def __init__(self, model: nn.Module, config: EATAConfig) -> None:
        super().__init__(model, config)
        self.preparation_samples = config.fisher_samples
        self.fisher: dict[str, torch.Tensor] = {}
        self.anchor: dict[str, torch.Tensor] = {}

    def prepare(self, image_batches: Iterator[torch.Tensor]) -> None:
        """Estimate the Fisher information from the first ``fisher_samples`` images of ``image_batches``.

        image_batches: float tensors N×C×H×W on the model's device. Raises ValueError when they hold
        fewer images than required. Parameters and buffers are left unchanged.
        """
        named = [(name, parameter) for name, parameter in self.model.named_parameters() if parameter.requires_grad]
        buffers_before = {name: buffer.clone() for name, buffer in self.model.named_buffers()}
        squared_gradient_sums = [torch.zeros_like(parameter) for _, parameter in named]
        seen = 0
        batches = 0
        wanted = self.config.fisher_samples
        for images in image_batches:
            images = images[: wanted - seen]
            with torch.enable_grad():
                logits = self.model(images)
                loss = F.cross_entropy(logits, logits.argmax(1))
                gradients = torch.autograd.grad(loss, [parameter for _, parameter in named])
            for total, gradient in zip(squared_gradient_sums, gradients):
                total += gradient.detach() ** 2
            seen += images.shape[0]
            batches += 1
            if seen >= wanted:
                break
        with torch.no_grad():
            for name, buffer in self.model.named_buffers():
                buffer.copy_(buffers_before[name])
        if seen < wanted:
            raise ValueError(f"eata needs fisher_samples={wanted} stream images to estimate the Fisher, got {seen}")
        self.fisher = {name: total / batches for (name, _), total in zip(named, squared_gradient_sums)}
        self.anchor = {name: parameter.detach().clone() for name, parameter in named}

    def fisher_penalty(self) -> torch.Tensor:
        """α Σ F (θ - θ0)² over the adapted parameters (a scalar tensor with gradient)."""
        if not self.fisher:
            raise RuntimeError(
                "eata has no Fisher information yet: call prepare() with the first "
                f"{self.config.fisher_samples} stream images (the protocols do this)"
            )
        parameters = dict(self.model.named_parameters())
        penalty = sum(
            (self.fisher[name] * (parameters[name] - self.anchor[name]) ** 2).sum() for name in self.fisher
        )
        return self.config.fisher_weight * penalty

    def _regularisation(self) -> torch.Tensor:
        return self.fisher_penalty()
