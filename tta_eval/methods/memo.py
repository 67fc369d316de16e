"""MEMO (Zhang et al. NeurIPS 2022): per-image marginal entropy minimisation over AugMix views.

The augmentations follow MEMO's ImageNet code (itself AugMix without the operations that overlap
ImageNet-C): random resized crop and flip, then three chains of 1–3 operations from autocontrast,
equalize, rotate, solarize, shear x/y, translate x/y and posterize at AugMix severity 1, mixed with
Dirichlet(1, 1, 1) weights and blended with the cropped image by m ~ Beta(1, 1). They run on tensors
(uint8 values, as PIL does) with the method's own generator; geometric operations use PIL's
coordinate conventions with bilinear sampling and grey fill, so they match PIL's geometry but not
its bytes.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ccc.validation import check_non_negative, check_non_negative_int, check_positive_int
from tta_eval.methods.augmentation import uniform
from tta_eval.methods.base import AdaptationMethod, SGDConfig, StepInfo, make_optimizer
from tta_eval.methods.layers import BatchNormPriorNetwork, attach_prediction_network, batchnorm_prior
from tta_eval.methods.registry import MethodEntry, register_method

AUGMIX_WIDTH = 3
AUGMIX_MAX_DEPTH = 3
AUGMIX_SEVERITY = 1.0
PIL_FILL = 128.0
CROP_SCALE = (0.08, 1.0)
CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)


@dataclass(frozen=True)
class MEMOConfig(SGDConfig):
    """MEMO: per image, adaptation_steps SGD steps on the marginal entropy of augmentation_count >= 1
    AugMix views, then prediction; every parameter; episodic (restored before each image).

    prior_strength N >= 0: BatchNorm uses N/(N+1) · source + 1/(N+1) · batch statistics; seed of the
    augmentation generator.
    """

    momentum: float = 0.0
    augmentation_count: int = 64
    adaptation_steps: int = 1
    prior_strength: float = 16.0
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_int("augmentation_count", self.augmentation_count)
        check_positive_int("adaptation_steps", self.adaptation_steps)
        check_non_negative("prior_strength", self.prior_strength)
        check_non_negative_int("seed", self.seed)


def marginal_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of the marginal prediction p̄ = mean_b softmax(logits_b) over the B views (B×C)."""
    log_probabilities = logits.log_softmax(1)
    log_marginal = torch.logsumexp(log_probabilities, dim=0) - math.log(logits.shape[0])
    log_marginal = log_marginal.clamp_min(torch.finfo(log_marginal.dtype).min)
    return -(log_marginal * log_marginal.exp()).sum()


def _randint(generator: torch.Generator, low: int, high: int) -> int:
    """Integer in [low, high)."""
    return int(torch.randint(low, high, (), generator=generator))


def random_resized_crop_box(height: int, width: int, generator: torch.Generator) -> tuple[int, int, int, int]:
    """(top, left, crop height, crop width) of torchvision's RandomResizedCrop (scale 0.08–1, ratio 3/4–4/3)."""
    area = height * width
    log_ratio = (math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1]))
    for _ in range(10):
        target_area = area * uniform(generator, *CROP_SCALE)
        aspect = math.exp(uniform(generator, *log_ratio))
        crop_width = int(round(math.sqrt(target_area * aspect)))
        crop_height = int(round(math.sqrt(target_area / aspect)))
        if 0 < crop_width <= width and 0 < crop_height <= height:
            return (
                _randint(generator, 0, height - crop_height + 1),
                _randint(generator, 0, width - crop_width + 1),
                crop_height,
                crop_width,
            )
    ratio = width / height
    if ratio < CROP_RATIO[0]:
        crop_width, crop_height = width, int(round(width / CROP_RATIO[0]))
    elif ratio > CROP_RATIO[1]:
        crop_height, crop_width = height, int(round(height * CROP_RATIO[1]))
    else:
        crop_height, crop_width = height, width
    return (height - crop_height) // 2, (width - crop_width) // 2, crop_height, crop_width


def pil_affine(image: torch.Tensor, coefficients: tuple[float, float, float, float, float, float]) -> torch.Tensor:
    """PIL's ``Image.transform(AFFINE, (a, b, c, d, e, f), BILINEAR, fillcolor=128)`` on a uint8 C×H×W tensor.

    The output pixel centred at (x, y) (pixel centres at i + ½) samples the input at
    (a x + b y + c, d x + e y + f); points outside the image take the grey fill.
    """
    channels, height, width = image.shape
    a, b, c, d, e, f = coefficients
    # The same map in the normalised coordinates of affine_grid (pixel centres, align_corners=False).
    theta = torch.tensor(
        [
            [a, b * height / width, a + b * height / width + 2.0 * c / width - 1.0],
            [d * width / height, e, d * width / height + e + 2.0 * f / height - 1.0],
        ],
        dtype=torch.float32,
        device=image.device,
    )
    grid = F.affine_grid(theta.unsqueeze(0), [1, channels + 1, height, width], align_corners=False)
    values = torch.cat([image.float(), torch.ones(1, height, width, device=image.device)]).unsqueeze(0)
    sampled = F.grid_sample(values, grid, mode="bilinear", padding_mode="zeros", align_corners=False)[0]
    coverage = sampled[-1:]
    result = sampled[:-1] + (1.0 - coverage) * PIL_FILL
    return result.round().clamp(0, 255).to(torch.uint8)


def _level(generator: torch.Generator) -> float:
    """AugMix's random level at severity 1: uniform in [0.1, severity]."""
    return uniform(generator, 0.1, AUGMIX_SEVERITY)


def _signed(value: float, generator: torch.Generator) -> float:
    return -value if uniform(generator, 0.0, 1.0) > 0.5 else value


def _rotate(image: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    degrees = _signed(float(int(_level(generator) * 30 / 10)), generator)
    angle = -math.radians(degrees)
    cosine, sine = math.cos(angle), math.sin(angle)
    height, width = image.shape[-2:]
    centre_x, centre_y = width / 2.0, height / 2.0
    # PIL's Image.rotate: rotation about the centre, output → input coordinates.
    offset_x = cosine * -centre_x + sine * -centre_y + centre_x
    offset_y = -sine * -centre_x + cosine * -centre_y + centre_y
    return pil_affine(image, (cosine, sine, offset_x, -sine, cosine, offset_y))


def _shear_x(image: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    shear = _signed(_level(generator) * 0.3 / 10, generator)
    return pil_affine(image, (1.0, shear, 0.0, 0.0, 1.0, 0.0))


def _shear_y(image: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    shear = _signed(_level(generator) * 0.3 / 10, generator)
    return pil_affine(image, (1.0, 0.0, 0.0, shear, 1.0, 0.0))


def _translate_x(image: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    shift = _signed(float(int(_level(generator) * (image.shape[-1] / 3) / 10)), generator)
    return pil_affine(image, (1.0, 0.0, shift, 0.0, 1.0, 0.0))


def _translate_y(image: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    shift = _signed(float(int(_level(generator) * (image.shape[-2] / 3) / 10)), generator)
    return pil_affine(image, (1.0, 0.0, 0.0, 0.0, 1.0, shift))


def _autocontrast(image: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    import torchvision.transforms.v2.functional as TF  # torchvision's import costs seconds: only when used

    return TF.autocontrast(image)


def _equalize(image: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    import torchvision.transforms.v2.functional as TF  # torchvision's import costs seconds: only when used

    return TF.equalize(image)


def _solarize(image: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    import torchvision.transforms.v2.functional as TF  # torchvision's import costs seconds: only when used

    return TF.solarize(image, 256 - int(_level(generator) * 256 / 10))


def _posterize(image: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    import torchvision.transforms.v2.functional as TF  # torchvision's import costs seconds: only when used

    return TF.posterize(image, 4 - int(_level(generator) * 4 / 10))


AUGMIX_OPERATIONS = (
    _autocontrast,
    _equalize,
    _rotate,
    _solarize,
    _shear_x,
    _shear_y,
    _translate_x,
    _translate_y,
    _posterize,
)


def augmix_view(image: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One MEMO view of ``image`` (3×H×W float in [0, 1]); same shape, values in [0, 1]."""
    import torchvision.transforms.v2.functional as TF  # torchvision's import costs seconds: only when used

    height, width = image.shape[-2:]
    top, left, crop_height, crop_width = random_resized_crop_box(height, width, generator)
    cropped = TF.resized_crop(image, top, left, crop_height, crop_width, [height, width], antialias=True)
    if uniform(generator, 0.0, 1.0) < 0.5:
        cropped = TF.horizontal_flip(cropped)
    base = (cropped.clamp(0.0, 1.0) * 255).round().to(torch.uint8)
    exponentials = -torch.log(1.0 - torch.rand(AUGMIX_WIDTH, generator=generator))
    chain_weights = (exponentials / exponentials.sum()).tolist()
    blend = uniform(generator, 0.0, 1.0)
    mixed = torch.zeros(base.shape, dtype=torch.float32, device=image.device)
    for weight in chain_weights:
        chain = base
        for _ in range(_randint(generator, 1, AUGMIX_MAX_DEPTH + 1)):
            chain = AUGMIX_OPERATIONS[_randint(generator, 0, len(AUGMIX_OPERATIONS))](chain, generator)
        mixed += weight * chain.float() / 255.0
    return (blend * base.float() / 255.0 + (1.0 - blend) * mixed).to(image.dtype)


class MEMO(AdaptationMethod):
    """MEMO: for each image of the batch, restore the initial weights and optimiser state, take
    ``adaptation_steps`` SGD steps over every parameter on the marginal entropy of
    ``augmentation_count`` AugMix views, then predict the image. BatchNorm layers stay in evaluation
    mode and normalise with N/(N+1) · running + 1/(N+1) · batch statistics (N = prior_strength),
    for the views and for the prediction. After the batch the model is restored again (episodic).
    ``prediction_network`` (the source model with that BatchNorm rule) serves the protocols'
    predictions without adaptation; it is not called by ``forward``, whose predictions exist only
    when the call returns. ``last_step.loss`` is the mean over the batch's images of the marginal
    entropy at their last step.
    """

    def __init__(self, model: nn.Module, config: MEMOConfig) -> None:
        super().__init__(model, config)
        parameters = list(model.parameters())
        if not parameters:
            raise ValueError("method 'memo' found no parameter to adapt")
        model.requires_grad_(True)
        self.optimizer = make_optimizer(parameters, config)
        self._seeded_generator(config.seed)
        attach_prediction_network(self, BatchNormPriorNetwork(model, self.prior))
        self._remember_initial_state()

    @property
    def prior(self) -> float:
        """Weight N/(N+1) of the source statistics in BatchNorm (N = prior_strength)."""
        return self.config.prior_strength / (self.config.prior_strength + 1.0)

    def _restore_weights(self) -> None:
        self.load_state_dict(self._initial_state)
        self.optimizer.load_state_dict(copy.deepcopy(self._initial_optimizer_state))

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images in [0, 1] (N×3×H×W), each predicted after its own adaptation."""
        config: MEMOConfig = self.config
        prior = self.prior
        outputs = []
        losses = []
        updated = False
        nonfinite = False
        for image in images:
            self._restore_weights()
            step = StepInfo()
            for _ in range(config.adaptation_steps):
                views = torch.stack([augmix_view(image, self.generator) for _ in range(config.augmentation_count)])
                with batchnorm_prior(self.model, prior):
                    loss = marginal_entropy(self.model(views))
                step = self._take_step(loss, config.augmentation_count)
                updated = updated or step.updated
                nonfinite = nonfinite or step.nonfinite_loss
            losses.append(step.loss)
            with torch.no_grad(), batchnorm_prior(self.model, prior):
                outputs.append(self.model(image.unsqueeze(0)))
        self._restore_weights()
        self.last_step = StepInfo(
            samples_adapted=images.shape[0],
            loss=sum(losses) / len(losses) if losses else math.nan,
            updated=updated,
            nonfinite_loss=nonfinite,
        )
        return torch.cat(outputs)


register_method(
    MethodEntry(
        "memo",
        MEMO,
        MEMOConfig,
        "per image: marginal entropy over 64 AugMix views, one step on all parameters, episodic",
        needs_batchnorm=False,
        sources="Zhang et al. NeurIPS 2022; zhangmarvin/memo imagenet-exps",
        colour="#636363",
    )
)
