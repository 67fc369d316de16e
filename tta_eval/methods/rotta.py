"""RoTTA (Yuan et al. CVPR 2023): robust BatchNorm, category-balanced memory bank with timeliness and
uncertainty, time-aware re-weighting, mean teacher."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ccc.validation import (
    check_in_range,
    check_non_negative,
    check_non_negative_int,
    check_positive,
    check_positive_int,
)
from tta_eval.methods.augmentation import augment_batch
from tta_eval.methods.base import BATCHNORM_TYPES, AdaptationMethod, StepInfo, require_batchnorm
from tta_eval.methods.layers import batch_statistics
from tta_eval.methods.losses import cross_entropy_to_teacher
from tta_eval.methods.registry import MethodEntry, register_method

UNCERTAINTY_LOG_FLOOR = 1e-6


@dataclass(frozen=True)
class RoTTAConfig:
    """RoTTA: robust BatchNorm, category-balanced memory bank, time-aware re-weighting, mean teacher.

    learning_rate > 0 and adam_beta1/adam_beta2 in [0, 1) of Adam (weight_decay >= 0) over the robust
    BN affine parameters; robust_bn_momentum in (0, 1]: weight of a batch in the global statistics;
    memory_capacity >= 1 samples; update_every >= 1: one update per that many stream samples;
    teacher_momentum in [0, 1]: weight of the old teacher; timeliness_weight (λt) and
    uncertainty_weight (λu) >= 0 of the memory's eviction score; noise_std >= 0 of the strong
    augmentation; seed of the augmentation generator.
    """

    learning_rate: float = 1e-3
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    weight_decay: float = 0.0
    robust_bn_momentum: float = 0.05
    memory_capacity: int = 64
    update_every: int = 64
    teacher_momentum: float = 0.999
    timeliness_weight: float = 1.0
    uncertainty_weight: float = 1.0
    noise_std: float = 0.005
    seed: int = 0

    def __post_init__(self) -> None:
        check_robust_memory_options(self)
        check_positive_int("update_every", self.update_every)
        check_in_range("teacher_momentum", self.teacher_momentum, 0.0, 1.0)


def check_robust_memory_options(config: Any) -> None:
    """Check the options RoTTA shares with the methods built on it (PeTTA): Adam's learning_rate > 0,
    adam_beta1/adam_beta2 in [0, 1) and weight_decay >= 0, robust_bn_momentum in (0, 1],
    memory_capacity >= 1, timeliness_weight, uncertainty_weight and noise_std >= 0, seed >= 0;
    ValueError naming the first bad one."""
    check_positive("learning_rate", config.learning_rate)
    check_in_range("adam_beta1", config.adam_beta1, 0.0, 1.0, include_high=False)
    check_in_range("adam_beta2", config.adam_beta2, 0.0, 1.0, include_high=False)
    check_non_negative("weight_decay", config.weight_decay)
    check_in_range("robust_bn_momentum", config.robust_bn_momentum, 0.0, 1.0, include_low=False)
    check_positive_int("memory_capacity", config.memory_capacity)
    check_non_negative("timeliness_weight", config.timeliness_weight)
    check_non_negative("uncertainty_weight", config.uncertainty_weight)
    check_non_negative("noise_std", config.noise_std)
    check_non_negative_int("seed", config.seed)


class RobustBatchNorm(nn.Module):
    """RoTTA's robust BatchNorm: global statistics updated by every training-mode batch.

    Training mode: μ ← (1 − α) μ + α μ_batch and σ² ← (1 − α) σ² + α σ²_batch (biased batch
    variance); the input is normalised with the updated values, with gradient through the batch
    statistics. Evaluation mode: normalises with μ, σ². Initialised from a BatchNorm layer's running
    statistics and affine parameters; α = ``momentum``.
    """

    def __init__(self, layer: nn.Module, momentum: float) -> None:
        super().__init__()
        if layer.running_mean is None or not layer.affine:
            raise ValueError("robust BatchNorm needs BatchNorm layers with running statistics and affine parameters")
        self.momentum = momentum
        self.eps = layer.eps
        self.weight = nn.Parameter(layer.weight.detach().clone())
        self.bias = nn.Parameter(layer.bias.detach().clone())
        self.register_buffer("running_mean", layer.running_mean.detach().clone())
        self.register_buffer("running_var", layer.running_var.detach().clone())

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """Normalised and affinely transformed ``inputs`` (N×C, N×C×L or N×C×H×W)."""
        if self.training:
            batch_mean, batch_variance = batch_statistics(inputs, unbiased=False)
            mean = (1.0 - self.momentum) * self.running_mean + self.momentum * batch_mean
            variance = (1.0 - self.momentum) * self.running_var + self.momentum * batch_variance
            with torch.no_grad():
                self.running_mean.copy_(mean)
                self.running_var.copy_(variance)
        else:
            mean, variance = self.running_mean, self.running_var
        shape = (1, -1) + (1,) * (inputs.dim() - 2)
        normalized = (inputs - mean.view(shape)) / torch.sqrt(variance.view(shape) + self.eps)
        return normalized * self.weight.view(shape) + self.bias.view(shape)


def replace_batchnorm_with_robust(model: nn.Module, momentum: float) -> list[str]:
    """Replace every BatchNorm layer of ``model`` in place by a RobustBatchNorm; returns their names."""
    names = [name for name, module in model.named_modules() if isinstance(module, BATCHNORM_TYPES)]
    for name in names:
        parent_name, _, child_name = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child_name, RobustBatchNorm(parent.get_submodule(child_name), momentum))
    return names


def robust_batchnorm_parameters(model: nn.Module, momentum: float) -> list[nn.Parameter]:
    """Freeze ``model``, replace its BatchNorm layers by RobustBatchNorm (``momentum``) in place and
    return the robust layers' affine parameters, the only trainable ones (RoTTA's and PeTTA's student)."""
    model.requires_grad_(False)
    replace_batchnorm_with_robust(model, momentum)
    parameters = [
        parameter
        for module in model.modules()
        if isinstance(module, RobustBatchNorm)
        for parameter in (module.weight, module.bias)
    ]
    for parameter in parameters:
        parameter.requires_grad_(True)
    return parameters


def set_robust_training(networks: tuple[nn.Module, ...], training: bool) -> None:
    """Put every layer of ``networks`` in evaluation mode, then their RobustBatchNorm layers in
    training mode if ``training`` (they then absorb the statistics of each batch they see)."""
    for network in networks:
        network.eval()
        for module in network.modules():
            if isinstance(module, RobustBatchNorm):
                module.train(training)


def timeliness_weights(ages: torch.Tensor) -> torch.Tensor:
    """RoTTA's time-aware weights exp(−a) / (1 + exp(−a)) for ages a >= 0 (in units of the capacity)."""
    return torch.exp(-ages) / (1.0 + torch.exp(-ages))


@dataclass
class MemoryItem:
    """One stored sample: image (C×H×W), uncertainty (entropy, nats) and age (insertions since added)."""

    image: torch.Tensor
    uncertainty: float
    age: int = 0


class CategoryBalancedMemory:
    """RoTTA's category-balanced sampling with timeliness and uncertainty (CSTU).

    Capacity ``capacity`` shared by ``num_classes`` classes (``capacity / num_classes`` each, not
    rounded). Each item has the score λt · sigmoid(age / capacity) + λu · uncertainty / ln C; higher
    scores are evicted first. A new sample of predicted class k is stored if class k is below its
    share and the memory is not full; if k is below its share but the memory is full, it replaces
    the highest-scoring item of the currently largest classes, provided that score exceeds its own;
    if k is at its share, it replaces the highest-scoring item of class k on the same condition.
    After each insertion attempt every stored item ages by one.
    """

    def __init__(self, capacity: int, num_classes: int, timeliness_weight: float, uncertainty_weight: float) -> None:
        self.capacity = capacity
        self.num_classes = num_classes
        self.per_class = capacity / num_classes
        self.timeliness_weight = timeliness_weight
        self.uncertainty_weight = uncertainty_weight
        self.items: list[list[MemoryItem]] = [[] for _ in range(num_classes)]

    def __len__(self) -> int:
        return sum(len(class_items) for class_items in self.items)

    def score(self, age: int, uncertainty: float) -> float:
        """Eviction score of an item (higher = evicted first)."""
        return self.timeliness_weight / (
            1.0 + math.exp(-age / self.capacity)
        ) + self.uncertainty_weight * uncertainty / math.log(self.num_classes)

    def _evict_from(self, classes: list[int], new_score: float) -> bool:
        """Remove the highest-scoring item (last one on ties) of ``classes`` if it scores above ``new_score``."""
        best: tuple[int, int] | None = None
        best_score = -math.inf
        for class_index in classes:
            for position, item in enumerate(self.items[class_index]):
                item_score = self.score(item.age, item.uncertainty)
                if item_score >= best_score:
                    best_score, best = item_score, (class_index, position)
        if best is None:
            return True
        if best_score > new_score:
            del self.items[best[0]][best[1]]
            return True
        return False

    def add(self, image: torch.Tensor, predicted_class: int, uncertainty: float) -> None:
        """Offer one sample; store it if the policy admits it; age every stored item by one."""
        new_score = self.score(0, uncertainty)
        if len(self.items[predicted_class]) < self.per_class:
            if len(self) < self.capacity:
                admitted = True
            else:
                sizes = [len(class_items) for class_items in self.items]
                largest = max(sizes)
                admitted = self._evict_from([index for index, size in enumerate(sizes) if size == largest], new_score)
        else:
            admitted = self._evict_from([predicted_class], new_score)
        if admitted:
            self.items[predicted_class].append(MemoryItem(image, uncertainty))
        for class_items in self.items:
            for item in class_items:
                item.age += 1

    def contents(self) -> tuple[list[torch.Tensor], list[int]]:
        """Stored images and their ages, class by class in insertion order."""
        images = [item.image for class_items in self.items for item in class_items]
        ages = [item.age for class_items in self.items for item in class_items]
        return images, ages

    def state_dict(self) -> dict[str, Any]:
        """The settings and the stored items as plain values: per class, lists of images (C×H×W),
        uncertainties (nats) and ages."""
        return {
            "settings": (self.capacity, self.num_classes, self.timeliness_weight, self.uncertainty_weight),
            "images": [[item.image for item in class_items] for class_items in self.items],
            "uncertainties": [[item.uncertainty for item in class_items] for class_items in self.items],
            "ages": [[item.age for item in class_items] for class_items in self.items],
        }

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> CategoryBalancedMemory:
        """The memory ``state_dict`` described."""
        memory = cls(*state["settings"])
        memory.load_state_dict(state)
        return memory

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the items ``state_dict`` returned (a memory of the same number of classes)."""
        self.items = [
            [
                MemoryItem(image, uncertainty, age)
                for image, uncertainty, age in zip(images, uncertainties, ages, strict=True)
            ]
            for images, uncertainties, ages in zip(state["images"], state["uncertainties"], state["ages"], strict=True)
        ]


class RoTTA(AdaptationMethod):
    """RoTTA: BatchNorm layers become RobustBatchNorm; a teacher (EMA of the student) predicts.

    Per batch: the teacher (evaluation mode, global statistics) predicts; each sample is offered to
    the memory with its arg-max class and entropy −Σ p ln(p + 1e-6); after every ``update_every``-th
    stream sample the student takes one Adam step on mean_i w_i · CE(teacher(m_i) → student(aug(m_i)))
    over the memory, w_i = timeliness_weights(age_i / capacity), aug = CoTTA's strong augmentation
    (one draw per update), both networks in training mode (their robust statistics absorb the
    memory batch); then teacher ← m · teacher + (1 − m) · student (parameters). Returns the
    teacher's logits computed before the update.
    """

    def __init__(self, model: nn.Module, config: RoTTAConfig) -> None:
        require_batchnorm(model, "rotta")
        super().__init__(model, config)
        parameters = robust_batchnorm_parameters(model, config.robust_bn_momentum)
        self.teacher = copy.deepcopy(model).requires_grad_(False)
        self.optimizer = torch.optim.Adam(
            parameters,
            lr=config.learning_rate,
            betas=(config.adam_beta1, config.adam_beta2),
            weight_decay=config.weight_decay,
            foreach=True,
        )
        self._seeded_generator(config.seed)
        self.memory: CategoryBalancedMemory | None = None
        self.samples_seen = 0
        self._remember_initial_state()

    @property
    def prediction_network(self) -> nn.Module:
        """The teacher: it makes RoTTA's predictions (and the protocols' ones without adaptation)."""
        return self.teacher

    def _reset_method_buffers(self) -> None:
        self.memory = None
        self.samples_seen = 0

    def _set_robust_training(self, training: bool) -> None:
        set_robust_training((self.model, self.teacher), training)

    def _apply_layer_modes(self) -> None:
        self._set_robust_training(False)

    def _update(self) -> StepInfo:
        config: RoTTAConfig = self.config
        images, ages = self.memory.contents()
        if not images:
            return StepInfo()
        memory_batch = torch.stack(images)
        weights = timeliness_weights(
            torch.tensor(ages, dtype=memory_batch.dtype, device=memory_batch.device) / config.memory_capacity
        )
        self._set_robust_training(True)
        try:
            with torch.no_grad():
                teacher_logits = self.teacher(memory_batch)
            student_logits = self.model(augment_batch(memory_batch, self.generator, config.noise_std))
        finally:
            self._set_robust_training(False)
        loss = (cross_entropy_to_teacher(student_logits, teacher_logits) * weights).mean()
        step = self._take_step(loss, len(images))
        with torch.no_grad():
            for teacher_parameter, student_parameter in zip(self.teacher.parameters(), self.model.parameters()):
                teacher_parameter.mul_(config.teacher_momentum).add_(
                    student_parameter, alpha=1.0 - config.teacher_momentum
                )
        return step

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Teacher logits (N×C) for images in [0, 1] (N×3×H×W); the student updates from the memory."""
        config: RoTTAConfig = self.config
        with torch.no_grad():
            teacher_logits = self.teacher(images)
            probabilities = teacher_logits.softmax(1)
            uncertainties = -(probabilities * torch.log(probabilities + UNCERTAINTY_LOG_FLOOR)).sum(1)
        if self.memory is None:
            self.memory = CategoryBalancedMemory(
                config.memory_capacity, teacher_logits.shape[1], config.timeliness_weight, config.uncertainty_weight
            )
        labels = probabilities.argmax(1).tolist()
        step = StepInfo()
        for image, label, uncertainty in zip(images, labels, uncertainties.tolist()):
            self.memory.add(image.detach().clone(), label, uncertainty)
            self.samples_seen += 1
            if self.samples_seen % config.update_every == 0:
                step = self._update()
        self.last_step = step
        return teacher_logits


register_method(
    MethodEntry(
        "rotta",
        RoTTA,
        RoTTAConfig,
        "robust BN, category-balanced memory, time-aware weights, mean teacher (Adam 1e-3)",
        sources="Yuan et al. CVPR 2023; BIT-DA/RoTTA core/adapter/rotta.py",
        colour="tab:pink",
    )
)
