"""adabn (Li et al. ICLR-W 2017), online: BatchNorm normalises with running statistics of the target
stream, nothing learned."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from ccc.validation import check_in_range
from tta_eval.methods.base import AdaptationMethod, StepInfo, batchnorm_layers, require_batchnorm
from tta_eval.methods.layers import batch_statistics
from tta_eval.methods.registry import MethodEntry, register_method


@dataclass(frozen=True)
class AdaBNConfig:
    """AdaBN: BatchNorm normalises with running statistics of the target stream.

    momentum in (0, 1]: weight of the current batch in the running estimate (0.1 = PyTorch default).
    """

    momentum: float = 0.1

    def __post_init__(self) -> None:
        check_in_range("momentum", self.momentum, 0.0, 1.0, include_low=False)


@contextmanager
def running_statistics_updated_first(model: nn.Module, momentum: float) -> Iterator[None]:
    """Inside this context every evaluation-mode BatchNorm layer first moves its running statistics
    toward the statistics of its current input (running ← (1 − m) running + m batch, unbiased
    variance, as PyTorch does) and then normalises with the updated running statistics."""

    def update(layer: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        with torch.no_grad():
            mean, variance = batch_statistics(inputs[0], unbiased=True)
            layer.running_mean.mul_(1.0 - momentum).add_(mean, alpha=momentum)
            layer.running_var.mul_(1.0 - momentum).add_(variance, alpha=momentum)
            if layer.num_batches_tracked is not None:
                layer.num_batches_tracked.add_(1)

    handles = [
        layer.register_forward_pre_hook(update) for layer in batchnorm_layers(model) if layer.running_mean is not None
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


class AdaBN(AdaptationMethod):
    """AdaBN (Li et al. 2017), online: BatchNorm statistics are running estimates over the stream.

    Per batch, in one forward pass, each BatchNorm layer updates its running mean and variance with
    the statistics of its input (momentum ``config.momentum``) and normalises with the updated
    running statistics; deeper layers therefore see inputs normalised as at inference. Nothing is
    learned; a frozen copy predicts with the same statistics.
    """

    def __init__(self, model: nn.Module, config: AdaBNConfig) -> None:
        require_batchnorm(model, "adabn")
        super().__init__(model, config)
        model.requires_grad_(False)
        self._remember_initial_state()

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W) normalised with running statistics updated by this batch."""
        with running_statistics_updated_first(self.model, self.config.momentum):
            logits = self.model(images)
        self.last_step = StepInfo(samples_adapted=images.shape[0])
        return logits


register_method(
    MethodEntry(
        "adabn",
        AdaBN,
        AdaBNConfig,
        "BatchNorm normalises with running target statistics (momentum 0.1), nothing learned",
        sources="Li et al. ICLR-W 2017; fiveai/LAME src/adaptation/ada_bn.py",
        colour="#843c39",
    )
)
