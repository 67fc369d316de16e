"""sar (Niu et al. ICLR 2023): sharpness-aware, reliable entropy minimisation with model recovery, over
the normalisation layers outside the excluded modules."""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from ccc.validation import check_choice, check_in_range, check_non_negative
from tta_eval.methods.base import SGDConfig, StepInfo, backward, optimizer_step
from tta_eval.methods.layers import NormalizationGradientMethod, batchnorm_statistics_frozen
from tta_eval.methods.losses import DEFAULT_ENTROPY_MARGIN_FRACTION, select_reliable, softmax_entropy
from tta_eval.methods.registry import MethodEntry, register_method

SAM_NORM_FLOOR = 1e-12


@dataclass(frozen=True)
class SARConfig(SGDConfig):
    """SAR: sharpness-aware, reliable entropy minimisation with model recovery.

    entropy_margin_fraction in (0, 1]: E0 = fraction · ln C; sam_radius (ρ) >= 0; the model is
    restored when the moving average (recovery_momentum in [0, 1)) of the second-pass loss falls below
    recovery_threshold >= 0; excluded_modules: "+"-separated module names whose normalisation layers
    are not adapted ("layer4": the last ResNet stage). recovery: "full" restores the initial state
    (weights, BatchNorm buffers, SGD momentum, the loss average e); "public" restores weights and
    BatchNorm buffers only and keeps the SGD momentum buffers and e, as SAR's public code does.
    """

    entropy_margin_fraction: float = DEFAULT_ENTROPY_MARGIN_FRACTION
    sam_radius: float = 0.05
    recovery_threshold: float = 0.2
    recovery_momentum: float = 0.9
    excluded_modules: str = "layer4"
    recovery: Literal["full", "public"] = "full"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in_range("entropy_margin_fraction", self.entropy_margin_fraction, 0.0, 1.0, include_low=False)
        check_non_negative("sam_radius", self.sam_radius)
        check_non_negative("recovery_threshold", self.recovery_threshold)
        check_in_range("recovery_momentum", self.recovery_momentum, 0.0, 1.0, include_high=False)
        check_choice("recovery", self.recovery, ("full", "public"))

    def entropy_margin(self, num_classes: int) -> float:
        """E0 in nats for a ``num_classes``-way classifier."""
        return self.entropy_margin_fraction * math.log(num_classes)


class SAR(NormalizationGradientMethod):
    """SAR (Niu et al. ICLR 2023): sharpness-aware and reliable entropy minimisation.

    Per batch: entropies H of the forward pass; reliable samples H < E0; gradient g of their mean
    entropy; weights moved to θ + ρ g/‖g‖ (SAM's ascent step, ‖·‖ the L2 norm over all adapted
    parameters); second forward pass; among the reliable samples those still below E0 give the loss
    L2 = mean H; its gradient at the perturbed point is applied at θ by the SGD step. The moving
    average e ← m e + (1 − m) L2 (first value: L2) drives model recovery: when e < threshold after a
    batch, the method restores its initial state (weights, optimiser, e; with ``recovery="public"``
    only weights and BatchNorm buffers), and ``last_step.reset`` is True on the next batch. No step
    is taken when a filter keeps no sample.
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
            second_value
            if self.loss_average is None
            else momentum * self.loss_average + (1.0 - momentum) * second_value
        )
        backward(second_loss)
        self._restore(originals)
        updated = optimizer_step(self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)
        return StepInfo(samples_adapted=int(kept.numel()), loss=second_value, updated=updated)

    def _recover(self) -> None:
        """Model recovery: ``reset()``; with ``recovery="public"`` the SGD momentum buffers and the loss
        average e of before the recovery are put back (SAR's code restores only the model and SAM's own
        state, and re-assigns the stale e after its reset)."""
        if self.config.recovery == "full":
            self.reset()
            return
        optimizer_state = copy.deepcopy(self.optimizer.state_dict())
        loss_average = self.loss_average
        self.reset()
        self.optimizer.load_state_dict(optimizer_state)
        self.loss_average = loss_average

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) of the first forward pass for images (N×C×H×W), then one SAM update."""
        recovered_before = self._recovered_after_last_batch
        self._recovered_after_last_batch = False
        logits = self.model(images)
        margin = self.config.entropy_margin(logits.shape[1])
        step = self._sharpness_aware_step(images, softmax_entropy(logits), margin)
        if self.loss_average is not None and self.loss_average < self.config.recovery_threshold:
            self._recover()
            self._recovered_after_last_batch = True
        self.last_step = dataclasses.replace(step, reset=recovered_before)
        return logits.detach()


register_method(
    MethodEntry(
        "sar",
        SAR,
        SARConfig,
        "sharpness-aware reliable entropy minimisation with model recovery, norm layers outside layer4",
        needs_batchnorm=False,
        sources="Niu et al. ICLR 2023; mr-eggplant/SAR sar.py, sam.py",
        colour="tab:olive",
    )
)
