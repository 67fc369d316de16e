"""CoTTA (Wang et al. 2022): mean teacher, augmentation-averaged pseudo-labels, stochastic restore."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from ccc.validation import check_choice, check_in_range, check_non_negative, check_non_negative_int, check_positive_int
from tta_eval.methods.augmentation import augment_batch
from tta_eval.methods.base import (
    AdaptationMethod,
    SGDConfig,
    StepInfo,
    make_optimizer,
    require_trainable,
    set_batchnorm_batch_statistics,
)
from tta_eval.methods.layers import normalization_affine_parameters, require_normalization_parameters
from tta_eval.methods.losses import cross_entropy_to_teacher, symmetric_cross_entropy
from tta_eval.methods.registry import MethodEntry, register_method


@dataclass(frozen=True)
class CoTTAConfig(SGDConfig):
    """CoTTA: mean teacher, augmentation-averaged teacher predictions, stochastic restore.

    teacher_momentum in [0, 1]: EMA weight of the old teacher; restore_probability in [0, 1]: chance
    per weight element and step to be restored to its source value; augmentation_count >= 1 views;
    augmentation_threshold in [0, 1]: augment when the source model's mean max-probability on the
    batch is below it; noise_std >= 0: std of the Gaussian noise of the augmentation (images in
    [0, 1]); adapted_parameters: "batchnorm" (CCC code: the affine parameters of the normalisation
    layers, BatchNorm and also LayerNorm/GroupNorm on models that have them) or "all" (CoTTA code, and
    mariodoebler/test-time-adaptation's CoTTA on every backbone: every parameter named ``weight`` or
    ``bias``, see ``weight_and_bias_parameters``); loss: "symmetric"
    (both public codes for ImageNet) or "cross_entropy"; seed: of the method's own generator.
    """

    learning_rate: float = 0.01
    nesterov: bool = True
    teacher_momentum: float = 0.999
    restore_probability: float = 0.001
    augmentation_count: int = 32
    augmentation_threshold: float = 0.1
    noise_std: float = 0.005
    adapted_parameters: Literal["batchnorm", "all"] = "batchnorm"
    loss: Literal["symmetric", "cross_entropy"] = "symmetric"
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in_range("teacher_momentum", self.teacher_momentum, 0.0, 1.0)
        check_in_range("restore_probability", self.restore_probability, 0.0, 1.0)
        check_positive_int("augmentation_count", self.augmentation_count)
        check_in_range("augmentation_threshold", self.augmentation_threshold, 0.0, 1.0)
        check_non_negative("noise_std", self.noise_std)
        check_choice("adapted_parameters", self.adapted_parameters, ("batchnorm", "all"))
        check_choice("loss", self.loss, ("symmetric", "cross_entropy"))
        check_non_negative_int("seed", self.seed)


def weight_and_bias_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(name, parameter) of every parameter of ``model`` whose own name is ``weight`` or ``bias``, in
    ``named_parameters`` order: CoTTA's "all" (the public ``collect_params`` of qinenergy/cotta and
    mariodoebler/test-time-adaptation), which leaves out e.g. a ViT's class token, position embedding
    and the attention's ``in_proj_weight``/``in_proj_bias``."""
    return [
        (name, parameter)
        for name, parameter in model.named_parameters()
        if name.rsplit(".", 1)[-1] in ("weight", "bias")
    ]


class CoTTA(AdaptationMethod):
    """Continual test-time adaptation with a mean teacher.

    Per batch: the student predicts; a frozen copy of the source model (the anchor) measures its
    mean max-probability; if below ``augmentation_threshold`` the teacher's prediction is the mean
    of its logits over ``augmentation_count`` augmented views, else its logits on the batch. The
    student takes one SGD step on the consistency loss to the teacher; the teacher becomes
    m · teacher + (1 - m) · student (parameters only); each adapted weight element is restored to its
    source value with probability ``restore_probability``. Returns the teacher's logits.
    """

    method_name = "cotta"

    def __init__(self, model: nn.Module, config: CoTTAConfig) -> None:
        super().__init__(model, config)
        if config.adapted_parameters == "batchnorm":
            named = normalization_affine_parameters(model)
            require_normalization_parameters(named, model, self.method_name)
        else:
            named = weight_and_bias_parameters(model)
            require_trainable([parameter for _, parameter in named], self.method_name)
        self.optimizer = make_optimizer(self._adapt_only(named), config)
        self.teacher = copy.deepcopy(model).requires_grad_(False)
        self.anchor = copy.deepcopy(model).requires_grad_(False)
        self.source_values = {name: parameter.detach().clone() for name, parameter in named}
        self._seeded_generator(config.seed)
        self._remember_initial_state()

    def _apply_layer_modes(self) -> None:
        for network in (self.model, self.teacher, self.anchor):
            set_batchnorm_batch_statistics(network)

    @torch.no_grad()
    def _teacher_logits(self, images: torch.Tensor) -> torch.Tensor:
        config: CoTTAConfig = self.config
        anchor_confidence = self.anchor(images).softmax(1).max(1).values.mean()
        teacher_logits = self.teacher(images)
        if float(anchor_confidence) < config.augmentation_threshold:
            views = [
                self.teacher(augment_batch(images, self.generator, config.noise_std))
                for _ in range(config.augmentation_count)
            ]
            teacher_logits = torch.stack(views).mean(0)
        return teacher_logits

    @torch.no_grad()
    def _update_teacher(self) -> None:
        momentum = self.config.teacher_momentum
        for teacher_parameter, student_parameter in zip(self.teacher.parameters(), self.model.parameters()):
            teacher_parameter.mul_(momentum).add_(student_parameter, alpha=1.0 - momentum)

    @torch.no_grad()
    def _stochastic_restore(self) -> None:
        probability = self.config.restore_probability
        parameters = dict(self.model.named_parameters())
        for name in self.adapted_parameter_names:
            parameter = parameters[name]
            if self.source_values[name].device != parameter.device:
                self.source_values[name] = self.source_values[name].to(parameter.device)
            mask = (torch.rand(parameter.shape, generator=self.generator) < probability).to(parameter.device)
            parameter.copy_(torch.where(mask, self.source_values[name], parameter))

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Teacher logits (N×C) for images in [0, 1] (N×3×H×W), after one student update."""
        student_logits = self.model(images)
        teacher_logits = self._teacher_logits(images)
        if self.config.loss == "symmetric":
            per_sample = symmetric_cross_entropy(student_logits, teacher_logits)
        else:
            per_sample = cross_entropy_to_teacher(student_logits, teacher_logits)
        step: StepInfo = self._take_step(per_sample.mean(), images.shape[0])
        if step.updated:
            self._update_teacher()
            self._stochastic_restore()
        self.last_step = step
        return teacher_logits


register_method(
    MethodEntry(
        "cotta",
        CoTTA,
        CoTTAConfig,
        "mean teacher with augmentation-averaged pseudo-labels and stochastic restore",
        needs_batchnorm=False,
        sources="Wang et al. CVPR 2022; qinenergy/cotta imagenet/cotta.py; CCC code models/cotta.py",
        colour="tab:brown",
    )
)
