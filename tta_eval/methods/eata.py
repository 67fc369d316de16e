"""eata (Niu et al. ICML 2022): ETA plus a Fisher-weighted anchor to the source weights."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ccc.validation import check_non_negative, check_positive_int
from tta_eval.methods.eta import ETA, ETAConfig
from tta_eval.methods.registry import MethodEntry, register_method


@dataclass(frozen=True)
class EATAConfig(ETAConfig):
    """EATA = ETA + Fisher-weighted anchor α Σ F (θ - θ0)².

    fisher_weight (α) >= 0; fisher_samples >= 1: the Fisher is estimated from the first
    fisher_samples images of the stream (CCC paper).
    """

    fisher_weight: float = 2000.0
    fisher_samples: int = 2000

    def __post_init__(self) -> None:
        super().__post_init__()
        check_non_negative("fisher_weight", self.fisher_weight)
        check_positive_int("fisher_samples", self.fisher_samples)


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
        penalty = sum((self.fisher[name] * (parameters[name] - self.anchor[name]) ** 2).sum() for name in self.fisher)
        return self.config.fisher_weight * penalty

    def _regularisation(self) -> torch.Tensor:
        return self.fisher_penalty()


register_method(
    MethodEntry(
        "eata",
        EATA,
        EATAConfig,
        "ETA + Fisher-weighted anchor (alpha=2000, Fisher from the first 2000 stream images)",
        needs_batchnorm=False,
        sources="Niu et al. ICML 2022; mr-eggplant/EATA; CCC code models/eata.py",
        colour="tab:red",
    )
)
