"""PeTTA (Hoang, Vo, Do, NeurIPS 2024, "Persistent test-time adaptation in recurring testing
scenarios"): RoTTA's robust BatchNorm, category-balanced memory and mean teacher, with a collapse
score on class prototypes of the teacher's features that scales the regulariser towards the source
parameters and slows the teacher's update, plus an anchor loss to the source model's predictions.

Like TTAC, PeTTA needs per-class statistics of the source features (``source_statistics``, a file
written by ``SourceFeatureStatistics.save``; see ``ttac_nq``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from ccc.validation import check_choice, check_in_range, check_non_negative
from tta_eval.methods.augmentation import augment_batch
from tta_eval.methods.base import AdaptationMethod, StepInfo, require_batchnorm
from tta_eval.methods.layers import find_classifier_head, forward_with_features
from tta_eval.methods.losses import cross_entropy_to_teacher, symmetric_cross_entropy
from tta_eval.methods.registry import MethodEntry, register_method
from tta_eval.methods.roid import ensemble_with_source
from tta_eval.methods.rotta import (
    UNCERTAINTY_LOG_FLOOR,
    CategoryBalancedMemory,
    check_robust_memory_options,
    robust_batchnorm_parameters,
    set_robust_training,
)
from tta_eval.methods.ttac_nq import SourceFeatureStatistics, matching_source_statistics

DIVERGENCE_VARIANCE_FLOOR = 1e-6
REGULARIZERS = ("cosine", "l2", "none")
CLASSIFICATION_LOSSES = ("ce", "sce")


@dataclass(frozen=True)
class PeTTAConfig:
    """PeTTA: RoTTA's robust BN, memory and mean teacher; collapse-sensing λ and α; anchor loss.

    learning_rate > 0, adam_beta1/adam_beta2 in [0, 1), weight_decay >= 0: Adam over the robust BN
    affine parameters; robust_bn_momentum in (0, 1]; memory_capacity >= 1 samples;
    timeliness_weight, uncertainty_weight >= 0 (the memory's eviction score); noise_std >= 0 of the
    strong augmentation; teacher_update_rate α0 in [0, 1]: weight of the student in the teacher's
    moving average; regularization_weight λ0 >= 0; regularizer: "cosine", "l2" or "none" distance of
    the adapted parameters to their source values; anchor_weight >= 0 of the anchor loss;
    adaptive_lambda / adaptive_alpha: scale λ by γ and α by 1 − γ (γ the collapse score);
    prototype_rate in [0, 1]: weight of a batch in the class prototypes; classification_loss: "ce"
    (teacher → student on the augmented memory) or "sce" (the symmetric self-training loss);
    source_statistics: path of a ``SourceFeatureStatistics`` file (required); seed of the
    augmentation generator.
    """

    learning_rate: float = 1e-3
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    weight_decay: float = 0.0
    robust_bn_momentum: float = 0.05
    memory_capacity: int = 64
    timeliness_weight: float = 1.0
    uncertainty_weight: float = 1.0
    noise_std: float = 0.005
    teacher_update_rate: float = 0.001
    regularization_weight: float = 10.0
    regularizer: Literal["cosine", "l2", "none"] = "cosine"
    anchor_weight: float = 1.0
    adaptive_lambda: bool = True
    adaptive_alpha: bool = True
    prototype_rate: float = 0.05
    classification_loss: Literal["ce", "sce"] = "ce"
    source_statistics: str = ""
    seed: int = 0

    def __post_init__(self) -> None:
        check_robust_memory_options(self)
        check_in_range("teacher_update_rate", self.teacher_update_rate, 0.0, 1.0)
        check_non_negative("regularization_weight", self.regularization_weight)
        check_choice("regularizer", self.regularizer, REGULARIZERS)
        check_non_negative("anchor_weight", self.anchor_weight)
        check_in_range("prototype_rate", self.prototype_rate, 0.0, 1.0)
        check_choice("classification_loss", self.classification_loss, CLASSIFICATION_LOSSES)


def collapse_score(
    prototypes: torch.Tensor, source_means: torch.Tensor, source_variances: torch.Tensor
) -> torch.Tensor:
    """PeTTA's γ = 1 − exp(−D) in [0, 1) with D = mean over the K×D entries of (μ̂ − μ)² / (σ² + 1e-6).

    prototypes μ̂, source_means μ, source_variances σ²: K×D rows of the classes predicted in the
    batch. γ is 0 when the prototypes sit on the source means and tends to 1 as they drift away.
    """
    divergence = ((prototypes - source_means) ** 2 / (source_variances + DIVERGENCE_VARIANCE_FLOOR)).mean()
    return 1.0 - torch.exp(-divergence)


@torch.no_grad()
def update_prototypes(prototypes: torch.Tensor, features: torch.Tensor, labels: torch.Tensor, rate: float) -> None:
    """In place, for each class k in ``labels``: μ̂_k ← (1 − rate) μ̂_k + rate · mean of the features
    (N×D) of the samples labelled k; the other rows of ``prototypes`` (K×D) are unchanged."""
    for label in torch.unique(labels).tolist():
        batch_mean = features[labels == label].mean(0)
        prototypes[label] = (1.0 - rate) * prototypes[label] + rate * batch_mean


def parameter_regularizer(parameters: list[torch.Tensor], sources: list[torch.Tensor], kind: str) -> torch.Tensor:
    """PeTTA's R(θ) averaged over the parameter tensors: "cosine": −cos(θ, θ0) of each tensor as one
    vector; "l2": Σ (θ − θ0)²; "none": 0. ``parameters`` and their source values ``sources`` pair up."""
    if kind == "none" or not parameters:
        return torch.zeros((), device=sources[0].device if sources else None)
    if kind == "l2":
        terms = [((parameter - source) ** 2).sum() for parameter, source in zip(parameters, sources)]
    else:
        terms = [
            -F.cosine_similarity(parameter.reshape(1, -1), source.reshape(1, -1)).squeeze(0)
            for parameter, source in zip(parameters, sources)
        ]
    return torch.stack(terms).mean()


class PeTTA(AdaptationMethod):
    """PeTTA: BatchNorm layers become RobustBatchNorm; a teacher (moving average of the student)
    predicts; a frozen copy of the source model (the anchor) gives the anchor targets.

    Per batch: the teacher (evaluation mode) gives logits z, penultimate features f and pseudo-labels
    ŷ = argmax z; each sample enters RoTTA's memory with ŷ and its entropy. Then one update on the
    memory batch M (all networks' robust statistics absorb M, in the order teacher(M), student(M),
    anchor(M), student(aug(M))): loss = mean CE(teacher(M) → student(aug(M))) (or the symmetric
    self-training loss) + λ R(θ) + w_AL mean CE(anchor(M) → student(aug(M))). With the classes K of
    ŷ, γ = ``collapse_score`` of the prototypes of K (before this batch's prototype update), then
    prototypes ← (1 − ν) prototypes + ν · class means of f; λ = γ λ0 and α = (1 − γ) α0 (adaptive).
    One Adam step, then teacher ← (1 − α) teacher + α student (parameters). Returns z.
    ``last_collapse_score`` holds the last γ (None before the first adaptive update).
    """

    method_name = "petta"

    def __init__(
        self, model: nn.Module, config: PeTTAConfig, source_statistics: SourceFeatureStatistics | None = None
    ) -> None:
        require_batchnorm(model, self.method_name)
        super().__init__(model, config)
        self.head_name = find_classifier_head(model, self.method_name)
        statistics = matching_source_statistics(
            model, self.head_name, self.method_name, config.source_statistics, source_statistics
        )
        device = model.get_submodule(self.head_name).weight.device
        parameters = robust_batchnorm_parameters(model, config.robust_bn_momentum)
        self.teacher = copy.deepcopy(model).requires_grad_(False)
        self.anchor = copy.deepcopy(model).requires_grad_(False)
        self.optimizer = torch.optim.Adam(
            parameters,
            lr=config.learning_rate,
            betas=(config.adam_beta1, config.adam_beta2),
            weight_decay=config.weight_decay,
            foreach=True,
        )
        self.register_buffer("source_class_means", statistics.class_means.float().to(device))
        self.register_buffer("source_class_variances", statistics.class_variances.float().to(device))
        self.register_buffer("prototypes", statistics.class_means.float().clone().to(device))
        self._seeded_generator(config.seed)
        self.memory: CategoryBalancedMemory | None = None
        self.last_collapse_score: float | None = None
        self._remember_initial_state()

    @property
    def prediction_network(self) -> nn.Module:
        """The teacher: it makes PeTTA's predictions (and the protocols' ones without adaptation)."""
        return self.teacher

    def _reset_method_buffers(self) -> None:
        self.memory = None
        self.last_collapse_score = None

    def _set_robust_training(self, training: bool) -> None:
        set_robust_training((self.model, self.teacher, self.anchor), training)

    def _apply_layer_modes(self) -> None:
        self._set_robust_training(False)

    def _regularization(self) -> torch.Tensor:
        pairs = [
            (parameter, source)
            for parameter, source in zip(self.model.parameters(), self.anchor.parameters())
            if parameter.requires_grad
        ]
        return parameter_regularizer([p for p, _ in pairs], [s for _, s in pairs], self.config.regularizer)

    def _classification_loss(
        self, teacher_logits: torch.Tensor, clean_logits: torch.Tensor, augmented_logits: torch.Tensor
    ) -> torch.Tensor:
        if self.config.classification_loss == "sce":
            return (
                0.5 * symmetric_cross_entropy(clean_logits, teacher_logits)
                + 0.5 * symmetric_cross_entropy(augmented_logits, teacher_logits)
            ).mean()
        return cross_entropy_to_teacher(augmented_logits, teacher_logits).mean()

    def _update(self, pseudo_labels: torch.Tensor, features: torch.Tensor) -> StepInfo:
        config: PeTTAConfig = self.config
        images, _ = self.memory.contents()
        memory_batch = torch.stack(images)
        self._set_robust_training(True)
        try:
            with torch.no_grad():
                teacher_logits = self.teacher(memory_batch)
            with torch.set_grad_enabled(config.classification_loss == "sce"):
                clean_logits = self.model(memory_batch)
            with torch.no_grad():
                anchor_logits = self.anchor(memory_batch)
            augmented_logits = self.model(augment_batch(memory_batch, self.generator, config.noise_std))
        finally:
            self._set_robust_training(False)
        regularization_weight: float | torch.Tensor = config.regularization_weight
        teacher_rate: float | torch.Tensor = config.teacher_update_rate
        if config.adaptive_lambda or config.adaptive_alpha:
            classes = torch.unique(pseudo_labels)
            score = collapse_score(
                self.prototypes[classes], self.source_class_means[classes], self.source_class_variances[classes]
            )
            update_prototypes(self.prototypes, features, pseudo_labels, config.prototype_rate)
            self.last_collapse_score = float(score)
            if config.adaptive_lambda:
                regularization_weight = score * config.regularization_weight
            if config.adaptive_alpha:
                teacher_rate = (1.0 - score) * config.teacher_update_rate
        loss = (
            self._classification_loss(teacher_logits, clean_logits, augmented_logits)
            + regularization_weight * self._regularization()
            + config.anchor_weight * cross_entropy_to_teacher(augmented_logits, anchor_logits).mean()
        )
        step = self._take_step(loss, len(images))
        ensemble_with_source(list(self.teacher.parameters()), list(self.model.parameters()), 1.0 - float(teacher_rate))
        return step

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Teacher logits (N×C) for images in [0, 1] (N×3×H×W); then one update from the memory."""
        config: PeTTAConfig = self.config
        with torch.no_grad():
            teacher_logits, features = forward_with_features(self.teacher, self.head_name, images)
            probabilities = teacher_logits.softmax(1)
            uncertainties = -(probabilities * torch.log(probabilities + UNCERTAINTY_LOG_FLOOR)).sum(1)
            pseudo_labels = probabilities.argmax(1)
        if self.memory is None:
            self.memory = CategoryBalancedMemory(
                config.memory_capacity, teacher_logits.shape[1], config.timeliness_weight, config.uncertainty_weight
            )
        for image, label, uncertainty in zip(images, pseudo_labels.tolist(), uncertainties.tolist()):
            self.memory.add(image.detach().clone(), label, uncertainty)
        self.last_step = self._update(pseudo_labels, features.detach())
        return teacher_logits


register_method(
    MethodEntry(
        "petta",
        PeTTA,
        PeTTAConfig,
        "RoTTA + collapse-sensing regulariser/teacher rate and anchor loss (needs source_statistics)",
        sources="Hoang, Vo, Do NeurIPS 2024; hthieu166/petta src/adapter/petta.py, configs/adapter/petta/imagenetc",
        colour="#c51b7d",
    )
)
