"""Self-training methods of the time-constrained papers: PL (confident pseudo-labels), SHOT-IM
(information maximisation) and SHOT (information maximisation + centroid pseudo-labels)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tta_eval.methods.base import (
    AdaptationMethod,
    StepInfo,
    make_sgd,
    set_batchnorm_batch_statistics,
)
from tta_eval.methods.configs import PLConfig, SHOTConfig, SHOTIMConfig
from tta_eval.methods.entropy import BatchNormGradientMethod
from tta_eval.methods.layers import find_classifier_head, forward_with_features, parameters_outside_head
from tta_eval.methods.losses import softmax_entropy


class PL(BatchNormGradientMethod):
    """Pseudo-labelling (Lee 2013) as in the time-constrained paper: cross-entropy to the arg-max of
    the samples whose max softmax probability exceeds ``confidence_threshold``; BN affine parameters,
    batch statistics; no step when no sample is confident."""

    method_name = "pl"

    def __init__(self, model: nn.Module, config: PLConfig) -> None:
        super().__init__(model, config)
        self._remember_initial_state()

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W), then one SGD step on the confident samples."""
        logits = self.model(images)
        confidence, labels = logits.detach().softmax(1).max(1)
        confident = torch.nonzero(confidence > self.config.confidence_threshold, as_tuple=True)[0]
        if confident.numel() == 0:
            self.last_step = StepInfo()
        else:
            loss = F.cross_entropy(logits[confident], labels[confident])
            self.last_step = self._take_step(loss, int(confident.numel()))
        return logits.detach()


def information_maximization_loss(logits: torch.Tensor, diversity_weight: float) -> torch.Tensor:
    """SHOT's information-maximisation loss mean_n H(p_n) − w · H(p̄), p̄ = mean_n p_n (nats).

    It lies in [−w ln C, ln C]; low when predictions are confident and diverse across the batch.
    """
    mean_prediction = logits.softmax(1).mean(0)
    return softmax_entropy(logits).mean() - diversity_weight * torch.special.entr(mean_prediction).sum()


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


class SHOTIM(AdaptationMethod):
    """SHOT-IM (Liang et al. 2020), online: one SGD step per batch on the information-maximisation
    loss over every parameter except the classifier head's (the last nn.Linear); BatchNorm layers
    normalise with batch statistics."""

    method_name = "shot_im"

    def __init__(self, model: nn.Module, config: SHOTIMConfig) -> None:
        super().__init__(model, config)
        self.head_name = find_classifier_head(model, self.method_name)
        parameters = self._adapt_only(parameters_outside_head(model, self.head_name, self.method_name))
        self.optimizer = make_sgd(parameters, config.learning_rate, config.momentum, config.nesterov, config.weight_decay)
        self._remember_initial_state()

    def _apply_layer_modes(self) -> None:
        set_batchnorm_batch_statistics(self.model)

    def _loss(self, logits: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        return information_maximization_loss(logits, self.config.diversity_weight)

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W), then one SGD step on the loss."""
        logits, features = forward_with_features(self.model, self.head_name, images)
        self.last_step = self._take_step(self._loss(logits, features), images.shape[0])
        return logits.detach()


class SHOT(SHOTIM):
    """SHOT: SHOT-IM + ``pseudo_label_weight`` · cross-entropy to ``centroid_pseudo_labels`` computed
    on the batch's (detached) penultimate features and probabilities."""

    method_name = "shot"

    def _loss(self, logits: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        config: SHOTConfig = self.config
        labels = centroid_pseudo_labels(features.detach(), logits.detach().softmax(1), config.clustering_rounds)
        return super()._loss(logits, features) + config.pseudo_label_weight * F.cross_entropy(logits, labels)
