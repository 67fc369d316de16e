"""CoTTA (Wang et al. 2022): mean teacher, augmentation-averaged pseudo-labels, stochastic restore."""

from __future__ import annotations

import copy

import torch
import torchvision.transforms.v2.functional as TF
from torch import nn
from torchvision.transforms import InterpolationMode

from tta_eval.methods.base import (
    AdaptationMethod,
    StepInfo,
    batchnorm_affine_parameters,
    make_sgd,
    require_batchnorm,
    require_trainable,
    set_batchnorm_batch_statistics,
)
from tta_eval.methods.configs import CoTTAConfig
from tta_eval.methods.losses import cross_entropy_to_teacher, symmetric_cross_entropy


def _uniform(generator: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * float(torch.rand((), generator=generator))


def augment_batch(
    images: torch.Tensor,
    generator: torch.Generator,
    noise_std: float,
    padding_mode: str = "edge",
    blur: bool = True,
) -> torch.Tensor:
    """CoTTA's ImageNet augmentation, one random draw for the whole batch; images in [0, 1], N×3×H×W.

    Colour jitter in random order (brightness [0.6, 1.4], contrast [0.7, 1.3], saturation
    [0.5, 1.5], hue [-0.06, 0.06], gamma [0.7, 1.3]); padding by H/2 (``padding_mode`` "edge", or
    "reflect" as in ROID/CMF); random affine (±15°, translation up to 1/16 of the padded size, scale
    [0.9, 1.1], bilinear); Gaussian blur (kernel 5, σ in [0.001, 0.5]; skipped when ``blur`` is
    False, as in ROID/CMF); centre crop back to H×W; horizontal flip with probability ½; Gaussian
    noise (std ``noise_std``); clipping to [0, 1]. All randomness comes from ``generator``.
    """
    height, width = images.shape[-2:]
    augmented = images.clamp(0.0, 1.0)
    for operation in torch.randperm(5, generator=generator).tolist():
        if operation == 0:
            augmented = TF.adjust_brightness(augmented, _uniform(generator, 0.6, 1.4))
        elif operation == 1:
            augmented = TF.adjust_contrast(augmented, _uniform(generator, 0.7, 1.3))
        elif operation == 2:
            augmented = TF.adjust_saturation(augmented, _uniform(generator, 0.5, 1.5))
        elif operation == 3:
            augmented = TF.adjust_hue(augmented, _uniform(generator, -0.06, 0.06))
        else:
            # Clamping away from 0 keeps the gamma gradient finite (as CoTTA's code does).
            augmented = TF.adjust_gamma(augmented.clamp(1e-8, 1.0), _uniform(generator, 0.7, 1.3))
    padding = height // 2
    augmented = TF.pad(augmented, [padding], padding_mode=padding_mode)
    padded_height, padded_width = augmented.shape[-2:]
    translate = [
        round(_uniform(generator, -padded_width / 16, padded_width / 16)),
        round(_uniform(generator, -padded_height / 16, padded_height / 16)),
    ]
    augmented = TF.affine(
        augmented,
        angle=_uniform(generator, -15.0, 15.0),
        translate=translate,
        scale=_uniform(generator, 0.9, 1.1),
        shear=[0.0, 0.0],
        interpolation=InterpolationMode.BILINEAR,
    )
    if blur:
        sigma = _uniform(generator, 0.001, 0.5)
        augmented = TF.gaussian_blur(augmented, kernel_size=[5, 5], sigma=[sigma, sigma])
    augmented = TF.center_crop(augmented, [height, width])
    if float(torch.rand((), generator=generator)) < 0.5:
        augmented = TF.horizontal_flip(augmented)
    noise = torch.randn(augmented.shape, generator=generator).to(augmented.device) * noise_std
    return (augmented + noise).clamp(0.0, 1.0)


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
        require_batchnorm(model, self.method_name)
        super().__init__(model, config)
        if config.adapted_parameters == "batchnorm":
            named = batchnorm_affine_parameters(model)
        else:
            named = [(name, parameter) for name, parameter in model.named_parameters()]
        require_trainable([parameter for _, parameter in named], self.method_name)
        self.optimizer = make_sgd(
            self._adapt_only(named),
            config.learning_rate,
            config.momentum,
            config.nesterov,
            config.weight_decay,
        )
        self.teacher = copy.deepcopy(model).requires_grad_(False)
        self.anchor = copy.deepcopy(model).requires_grad_(False)
        self.source_values = {name: parameter.detach().clone() for name, parameter in named}
        self.generator = torch.Generator().manual_seed(config.seed)
        self._initial_generator_state = self.generator.get_state()
        self._remember_initial_state()

    def _apply_layer_modes(self) -> None:
        for network in (self.model, self.teacher, self.anchor):
            set_batchnorm_batch_statistics(network)

    def _reset_method_buffers(self) -> None:
        self.generator.set_state(self._initial_generator_state)

    @torch.no_grad()
    def _teacher_logits(self, images: torch.Tensor) -> torch.Tensor:
        config: CoTTAConfig = self.config
        anchor_confidence = self.anchor(images).softmax(1).max(1).values.mean()
        teacher_logits = self.teacher(images)
        if float(anchor_confidence) < config.augmentation_threshold:
            views = [self.teacher(augment_batch(images, self.generator, config.noise_std)) for _ in range(config.augmentation_count)]
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

