"""shot (Liang et al. ICML 2020), online: SHOT-IM plus cross-entropy to nearest-centroid pseudo-labels."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ccc.validation import check_non_negative, check_positive_int
from tta_eval.methods.registry import MethodEntry, register_method
from tta_eval.methods.shot_im import SHOTIM, SHOTIMConfig


@dataclass(frozen=True)
class SHOTConfig(SHOTIMConfig):
    """SHOT: SHOT-IM + pseudo_label_weight (>= 0) · cross-entropy to centroid pseudo-labels obtained
    with clustering_rounds >= 1 rounds of nearest-centroid assignment (cosine distance)."""

    pseudo_label_weight: float = 0.3
    clustering_rounds: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        check_non_negative("pseudo_label_weight", self.pseudo_label_weight)
        check_positive_int("clustering_rounds", self.clustering_rounds)


def centroid_pseudo_labels(features: torch.Tensor, probabilities: torch.Tensor, rounds: int) -> torch.Tensor:
    """SHOT's self-supervised pseudo-labels (class indices, N) from nearest class centroids.

    Features (N×D) get a constant 1 appended and are L2-normalised. Round 1 weighs samples by their
    probabilities (N×K): c_k = Σ_n p_nk f_n / (1e-8 + Σ_n p_nk); each sample takes the class of the
    nearest centroid (cosine distance) among the classes that are currently someone's label (at
    first: the model's arg-max). Later rounds use the previous labels as one-hot weights.
    """
    ones = torch.ones(features.shape[0], 1, dtype=features.dtype, device=features.device)
    normalized = F.normalize(torch.cat([features, ones], dim=1), p=2, dim=1)
    labels = probabilities.argmax(1)
    weights = probabilities
    classes = probabilities.shape[1]
    for _ in range(rounds):
        centroids = weights.t() @ normalized / (1e-8 + weights.sum(0).unsqueeze(1))
        label_set = torch.unique(labels)
        similarity = normalized @ F.normalize(centroids[label_set], p=2, dim=1).t()
        labels = label_set[similarity.argmax(1)]
        weights = F.one_hot(labels, classes).to(normalized.dtype)
    return labels


class SHOT(SHOTIM):
    """SHOT: SHOT-IM + ``pseudo_label_weight`` · cross-entropy to ``centroid_pseudo_labels`` computed
    on the batch's (detached) penultimate features and probabilities."""

    method_name = "shot"

    def _loss(self, logits: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        config: SHOTConfig = self.config
        labels = centroid_pseudo_labels(features.detach(), logits.detach().softmax(1), config.clustering_rounds)
        return super()._loss(logits, features) + config.pseudo_label_weight * F.cross_entropy(logits, labels)


register_method(
    MethodEntry(
        "shot",
        SHOT,
        SHOTConfig,
        "SHOT-IM + cross-entropy (weight 0.3) to nearest-centroid pseudo-labels",
        needs_batchnorm=False,
        sources="Liang et al. ICML 2020; tim-learn/SHOT object/image_target.py",
        colour="#31a354",
    )
)
