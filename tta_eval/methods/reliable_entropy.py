"""Entropy minimisation with reliability filters over normalisation layers: SAR (sharpness-aware,
with model recovery) and DeYO (entropy and pseudo-label-probability-difference filters)."""

from __future__ import annotations

import dataclasses
import math

import torch
import torchvision.transforms.v2.functional as TF
from torch import nn

from tta_eval.methods.base import AdaptationMethod, StepInfo, make_sgd, set_batchnorm_batch_statistics
from tta_eval.methods.configs import DeYOConfig, SARConfig, SGDConfig
from tta_eval.methods.entropy import entropy_weights, select_reliable
from tta_eval.methods.layers import (
    batchnorm_statistics_frozen,
    normalization_affine_parameters,
    parse_module_list,
    require_normalization_parameters,
)
from tta_eval.methods.losses import softmax_entropy

SAM_NORM_FLOOR = 1e-12


class NormalizationGradientMethod(AdaptationMethod):
    """Base of methods that train the affine parameters of BatchNorm, LayerNorm and GroupNorm layers
    (except ``config.excluded_modules``) with SGD; BatchNorm normalises with batch statistics."""

    method_name = "normalization-gradient"

    def __init__(self, model: nn.Module, config: SGDConfig, excluded_modules: str) -> None:
        super().__init__(model, config)
        named = normalization_affine_parameters(model, parse_module_list(excluded_modules))
        require_normalization_parameters(named, model, self.method_name)
        self.adapted_parameters = self._adapt_only(named)
        self.optimizer = make_sgd(
            self.adapted_parameters, config.learning_rate, config.momentum, config.nesterov, config.weight_decay
        )

    def _apply_layer_modes(self) -> None:
        set_batchnorm_batch_statistics(self.model)


class SAR(NormalizationGradientMethod):
    """SAR (Niu et al. ICLR 2023): sharpness-aware and reliable entropy minimisation.

    Per batch: entropies H of the forward pass; reliable samples H < E0; gradient g of their mean
    entropy; weights moved to θ + ρ g/‖g‖ (SAM's ascent step, ‖·‖ the L2 norm over all adapted
    parameters); second forward pass; among the reliable samples those still below E0 give the loss
    L2 = mean H; its gradient at the perturbed point is applied at θ by the SGD step. The moving
    average e ← m e + (1 − m) L2 (first value: L2) drives model recovery: when e < threshold after a
    batch, the method restores its initial state (weights, optimiser, e), and ``last_step.reset`` is
    True on the next batch. No step is taken when a filter keeps no sample.
    """

    method_name = "sar"

    def __init__(self, model: nn.Module, config: SARConfig) -> None:
        super().__init__(model, config, config.excluded_modules)
        self.loss_average: float | None = None
        self._recovered_after_last_batch = False
        self._remember_initial_state()

    def _reset_method_buffers(self) -> None:
        self.loss_average = None
        self._recovered_after_last_batch = False

    def _ascend(self, loss: torch.Tensor) -> list[torch.Tensor]:
        """Move the adapted parameters to θ + ρ g/(‖g‖ + 1e-12); return copies of θ."""
        gradients = [
            torch.zeros_like(parameter) if gradient is None else gradient
            for parameter, gradient in zip(
                self.adapted_parameters, torch.autograd.grad(loss, self.adapted_parameters, allow_unused=True)
            )
        ]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(gradient) for gradient in gradients]))
        scale = self.config.sam_radius / (norm + SAM_NORM_FLOOR)
        originals = [parameter.detach().clone() for parameter in self.adapted_parameters]
        with torch.no_grad():
            for parameter, gradient in zip(self.adapted_parameters, gradients):
                parameter.add_(gradient * scale)
        return originals

    def _restore(self, originals: list[torch.Tensor]) -> None:
        with torch.no_grad():
            for parameter, original in zip(self.adapted_parameters, originals):
                parameter.copy_(original)

    def _sharpness_aware_step(self, images: torch.Tensor, entropies: torch.Tensor, margin: float) -> StepInfo:
        reliable = select_reliable(entropies, margin)
        if reliable.numel() == 0:
            return StepInfo()
        first_loss = entropies[reliable].mean()
        first_value = float(first_loss.detach())
        if not math.isfinite(first_value):
            return StepInfo(samples_adapted=int(reliable.numel()), loss=first_value, nonfinite_loss=True)
        originals = self._ascend(first_loss)
        with batchnorm_statistics_frozen(self.model):
            second_entropies = softmax_entropy(self.model(images))[reliable]
        kept = torch.nonzero(second_entropies.detach() < margin, as_tuple=True)[0]
        if kept.numel() == 0:
            self._restore(originals)
            return StepInfo()
        second_loss = second_entropies[kept].mean()
        second_value = float(second_loss.detach())
        if not math.isfinite(second_value):
            self._restore(originals)
            return StepInfo(samples_adapted=int(kept.numel()), loss=second_value, nonfinite_loss=True)
        momentum = self.config.recovery_momentum
        self.loss_average = (
            second_value if self.loss_average is None else momentum * self.loss_average + (1.0 - momentum) * second_value
        )
        second_loss.backward()
        self._restore(originals)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return StepInfo(samples_adapted=int(kept.numel()), loss=second_value, updated=True)

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) of the first forward pass for images (N×C×H×W), then one SAM update."""
        recovered_before = self._recovered_after_last_batch
        self._recovered_after_last_batch = False
        logits = self.model(images)
        margin = self.config.entropy_margin(logits.shape[1])
        step = self._sharpness_aware_step(images, softmax_entropy(logits), margin)
        if self.loss_average is not None and self.loss_average < self.config.recovery_threshold:
            self.reset()
            self._recovered_after_last_batch = True
        self.last_step = dataclasses.replace(step, reset=recovered_before)
        return logits.detach()


def shuffle_patches(images: torch.Tensor, grid: int, generator: torch.Generator) -> torch.Tensor:
    """DeYO's patch shuffling: cut each image (N×C×H×W) into grid × grid patches and permute them.

    Images whose sides are not multiples of ``grid`` are resized (bilinear, antialiased) to the next
    lower multiples first and back afterwards. Each image gets its own permutation from ``generator``.
    """
    count, channels, height, width = images.shape
    if height < grid or width < grid:
        raise ValueError(f"patch_grid must be <= the image height and width, got {grid} for {height}×{width} images")
    patch_height, patch_width = height // grid, width // grid
    resized = (patch_height * grid, patch_width * grid) != (height, width)
    working = TF.resize(images, [patch_height * grid, patch_width * grid], antialias=True) if resized else images
    patches = working.reshape(count, channels, grid, patch_height, grid, patch_width).permute(0, 2, 4, 1, 3, 5)
    patches = patches.reshape(count, grid * grid, channels, patch_height, patch_width)
    order = torch.argsort(torch.rand(count, grid * grid, generator=generator), dim=1).to(images.device)
    shuffled = patches[torch.arange(count, device=images.device).unsqueeze(1), order]
    shuffled = shuffled.reshape(count, grid, grid, channels, patch_height, patch_width).permute(0, 3, 1, 4, 2, 5)
    shuffled = shuffled.reshape(count, channels, patch_height * grid, patch_width * grid)
    return TF.resize(shuffled, [height, width], antialias=True) if resized else shuffled


def pseudo_label_probability_difference(probabilities: torch.Tensor, transformed_probabilities: torch.Tensor) -> torch.Tensor:
    """PLPD = p(ŷ | x) − p(ŷ | x'), ŷ = arg-max of p(· | x); both N×C softmax outputs; values in [−1, 1]."""
    labels = probabilities.argmax(1, keepdim=True)
    return (probabilities.gather(1, labels) - transformed_probabilities.gather(1, labels)).squeeze(1)


class DeYO(NormalizationGradientMethod):
    """DeYO (Lee et al. ICLR 2024): destroy your object — entropy minimisation on samples whose
    prediction depends on the object's shape.

    Per batch: keep samples with entropy H < filter_margin_fraction · ln C; shuffle their image
    patches and predict again (no gradient, running statistics untouched); keep those with PLPD >
    plpd_threshold; loss mean(H · (1/exp(H − E0) + 1/exp(−PLPD))) over the kept samples with
    E0 = weight_margin_fraction · ln C (each term only if its reweight_* flag is set; no weights if
    neither). One SGD step; none when no sample is kept.
    """

    method_name = "deyo"

    def __init__(self, model: nn.Module, config: DeYOConfig) -> None:
        super().__init__(model, config, config.excluded_modules)
        self.generator = torch.Generator().manual_seed(config.seed)
        self._initial_generator_state = self.generator.get_state()
        self._remember_initial_state()

    def _reset_method_buffers(self) -> None:
        self.generator.set_state(self._initial_generator_state)

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W), then one SGD step on the filtered, weighted entropy."""
        config: DeYOConfig = self.config
        logits = self.model(images)
        classes = logits.shape[1]
        entropies = softmax_entropy(logits)
        reliable = select_reliable(entropies, config.filter_margin_fraction * math.log(classes))
        if reliable.numel() == 0:
            self.last_step = StepInfo()
            return logits.detach()
        shuffled = shuffle_patches(images[reliable].detach(), config.patch_grid, self.generator)
        with torch.no_grad(), batchnorm_statistics_frozen(self.model):
            shuffled_probabilities = self.model(shuffled).softmax(1)
        plpd = pseudo_label_probability_difference(logits[reliable].detach().softmax(1), shuffled_probabilities)
        kept = torch.nonzero(plpd > config.plpd_threshold, as_tuple=True)[0]
        if kept.numel() == 0:
            self.last_step = StepInfo()
            return logits.detach()
        kept_entropies = entropies[reliable][kept]
        if config.reweight_entropy or config.reweight_plpd:
            weights = torch.zeros_like(kept_entropies)
            if config.reweight_entropy:
                weights = weights + entropy_weights(kept_entropies, config.weight_margin_fraction * math.log(classes))
            if config.reweight_plpd:
                weights = weights + torch.exp(plpd[kept])
            kept_entropies = kept_entropies * weights
        self.last_step = self._take_step(kept_entropies.mean(), int(kept.numel()))
        return logits.detach()
