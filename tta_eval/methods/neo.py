"""neo (Murphy et al. 2025): subtract the running centroid of the penultimate features before the
classifier; nothing learned."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from ccc.validation import check_choice, check_in_range
from tta_eval.methods.base import AdaptationMethod, StepInfo
from tta_eval.methods.layers import find_classifier_head, forward_with_features
from tta_eval.methods.registry import MethodEntry, register_method


@dataclass(frozen=True)
class NEOConfig:
    """NEO: subtract the centroid of all penultimate features seen so far before the classifier.

    centroid_update: "cumulative" (exact mean over the stream, NEO) or "ema" (centroid ← (1 - r)
    centroid + r · batch mean, NEO's continual variant); ema_rate r in (0, 1].
    """

    centroid_update: Literal["cumulative", "ema"] = "cumulative"
    ema_rate: float = 0.1

    def __post_init__(self) -> None:
        check_choice("centroid_update", self.centroid_update, ("cumulative", "ema"))
        check_in_range("ema_rate", self.ema_rate, 0.0, 1.0, include_low=False)


class CentredClassifier(nn.Module):
    """A classifier whose head sees z − μ instead of its penultimate features z (NEO).

    ``forward(images, update=True)`` first moves the centroid μ with the batch's features
    ("cumulative": exact mean over every sample seen; "ema": μ ← (1 − r) μ + r · batch mean), then
    classifies; ``update=False`` classifies with the current μ. μ (starting at 0) and the sample
    count are buffers.
    """

    def __init__(self, network: nn.Module, head_name: str, config: NEOConfig) -> None:
        super().__init__()
        self.network = network
        self.head_name = head_name
        self.config = config
        head = network.get_submodule(head_name)
        weight = head.weight
        self.register_buffer("centroid", torch.zeros(head.in_features, dtype=weight.dtype, device=weight.device))
        self.register_buffer("samples_seen", torch.zeros((), dtype=torch.long, device=weight.device))

    def _update_centroid(self, features: torch.Tensor) -> None:
        batch_mean = features.mean(0)
        if self.config.centroid_update == "cumulative":
            count = features.shape[0]
            self.samples_seen += count
            new_weight = count / float(self.samples_seen)
            self.centroid.mul_(1.0 - new_weight).add_(batch_mean, alpha=new_weight)
        else:
            rate = self.config.ema_rate
            self.centroid.mul_(1.0 - rate).add_(batch_mean, alpha=rate)

    def _centre(self, features: torch.Tensor, update: bool) -> torch.Tensor:
        if update:
            self._update_centroid(features)
        return features - self.centroid

    @torch.no_grad()
    def forward(self, images: torch.Tensor, update: bool = False) -> torch.Tensor:
        """Logits (N×C) of the re-centred features for images (N×C×H×W)."""
        logits, _ = forward_with_features(
            self.network, self.head_name, images, replace_features=lambda features: self._centre(features, update)
        )
        return logits


class NEO(AdaptationMethod):
    """NEO (Murphy et al. 2025): classify z − μ instead of z, μ the centroid of the features seen.

    z is the input of the classifier head (last nn.Linear). ``model`` is a CentredClassifier around
    the source model (evaluation mode); each batch updates μ and is then classified, predictions
    without adaptation use the current μ. ``reset()`` clears μ and the sample count.
    """

    def __init__(self, model: nn.Module, config: NEOConfig) -> None:
        head_name = find_classifier_head(model, "neo")
        model.requires_grad_(False)
        super().__init__(CentredClassifier(model, head_name, config), config)
        self._remember_initial_state()

    @property
    def centroid(self) -> torch.Tensor:
        """The current centroid μ (D,)."""
        return self.model.centroid

    @property
    def samples_seen(self) -> torch.Tensor:
        """Number of samples μ averages (a 0-d tensor)."""
        return self.model.samples_seen

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W) after updating the centroid with them."""
        logits = self.model(images, update=True)
        self.last_step = StepInfo(samples_adapted=images.shape[0])
        return logits


register_method(
    MethodEntry(
        "neo",
        NEO,
        NEOConfig,
        "subtract the running centroid of the penultimate features before the classifier",
        needs_batchnorm=False,
        sources="Murphy et al. 2025; awesomealex1/NEO neo_layers.py",
        colour="#7b4173",
    )
)
