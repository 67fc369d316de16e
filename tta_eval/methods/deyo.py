"""deyo (Lee et al. ICLR 2024): entropy minimisation on samples whose prediction drops when their image
patches are shuffled (PLPD), over the normalisation layers outside the excluded modules."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ccc.validation import check_in_range, check_non_negative_int, check_positive_int
from tta_eval.methods.base import SGDConfig, StepInfo
from tta_eval.methods.layers import NormalizationGradientMethod, batchnorm_statistics_frozen
from tta_eval.methods.losses import DEFAULT_ENTROPY_MARGIN_FRACTION, entropy_weights, select_reliable, softmax_entropy
from tta_eval.methods.registry import MethodEntry, register_method


@dataclass(frozen=True)
class DeYOConfig(SGDConfig):
    """DeYO: entropy filter, PLPD filter (confidence drop after patch shuffling) and re-weighting.

    filter_margin_fraction in (0, 1]: keep samples with entropy < fraction · ln C;
    weight_margin_fraction in (0, 1]: E0 of the entropy weight 1/exp(H − E0); plpd_threshold in
    [-1, 1]: keep samples whose PLPD exceeds it; patch_grid >= 1: images are cut into patch_grid ×
    patch_grid patches that are shuffled; reweight_entropy / reweight_plpd: add the weights
    1/exp(H − E0) and 1/exp(−PLPD); excluded_modules as in SAR; seed of the shuffling generator.
    """

    filter_margin_fraction: float = 0.5
    weight_margin_fraction: float = DEFAULT_ENTROPY_MARGIN_FRACTION
    plpd_threshold: float = 0.2
    patch_grid: int = 4
    reweight_entropy: bool = True
    reweight_plpd: bool = True
    excluded_modules: str = "layer4"
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in_range("filter_margin_fraction", self.filter_margin_fraction, 0.0, 1.0, include_low=False)
        check_in_range("weight_margin_fraction", self.weight_margin_fraction, 0.0, 1.0, include_low=False)
        check_in_range("plpd_threshold", self.plpd_threshold, -1.0, 1.0)
        check_positive_int("patch_grid", self.patch_grid)
        check_non_negative_int("seed", self.seed)


def shuffle_patches(images: torch.Tensor, grid: int, generator: torch.Generator) -> torch.Tensor:
    """DeYO's patch shuffling: cut each image (N×C×H×W) into grid × grid patches and permute them.

    Images whose sides are not multiples of ``grid`` are resized (bilinear, antialiased) to the next
    lower multiples first and back afterwards. Each image gets its own permutation from ``generator``.
    """
    import torchvision.transforms.v2.functional as TF  # torchvision's import costs seconds: only when used

    count, channels, height, width = images.shape
    if height < grid or width < grid:
        raise ValueError(f"patch_grid must be <= the image height and width, got {grid} for {height}×{width} images")
    patch_height, patch_width = height // grid, width // grid
    resized = (patch_height * grid, patch_width * grid) != (height, width)
    working = TF.resize(images, [patch_height * grid, patch_width * grid], antialias=True) if resized else images
    patches = working.reshape(count, channels, grid, patch_height, grid, patch_width).permute(0, 2, 4, 1, 3, 5)
    patches = patches.reshape(count, grid * grid, channels, patch_height, patch_width)
    order = torch.argsort(torch.rand(count, grid * grid, generator=generator), dim=1).to(images.device)
    shuffled = patches[torch.arange(count, device=images.device).unsqueeze(1), order]
    shuffled = shuffled.reshape(count, grid, grid, channels, patch_height, patch_width).permute(0, 3, 1, 4, 2, 5)
    shuffled = shuffled.reshape(count, channels, patch_height * grid, patch_width * grid)
    return TF.resize(shuffled, [height, width], antialias=True) if resized else shuffled


def pseudo_label_probability_difference(
    probabilities: torch.Tensor, transformed_probabilities: torch.Tensor
) -> torch.Tensor:
    """PLPD = p(ŷ | x) − p(ŷ | x'), ŷ = arg-max of p(· | x); both N×C softmax outputs; values in [−1, 1]."""
    labels = probabilities.argmax(1, keepdim=True)
    return (probabilities.gather(1, labels) - transformed_probabilities.gather(1, labels)).squeeze(1)


class DeYO(NormalizationGradientMethod):
    """DeYO (Lee et al. ICLR 2024): destroy your object — entropy minimisation on samples whose
    prediction depends on the object's shape.

    Per batch: keep samples with entropy H < filter_margin_fraction · ln C; shuffle their image
    patches and predict again (no gradient, running statistics untouched); keep those with PLPD >
    plpd_threshold; loss mean(H · (1/exp(H − E0) + 1/exp(−PLPD))) over the kept samples with
    E0 = weight_margin_fraction · ln C (each term only if its reweight_* flag is set; no weights if
    neither). One SGD step; none when no sample is kept.
    """

    method_name = "deyo"

    def __init__(self, model: nn.Module, config: DeYOConfig) -> None:
        super().__init__(model, config, config.excluded_modules)
        self._seeded_generator(config.seed)
        self._remember_initial_state()

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W), then one SGD step on the filtered, weighted entropy."""
        config: DeYOConfig = self.config
        logits = self.model(images)
        classes = logits.shape[1]
        entropies = softmax_entropy(logits)
        reliable = select_reliable(entropies, config.filter_margin_fraction * math.log(classes))
        if reliable.numel() == 0:
            self.last_step = StepInfo()
            return logits.detach()
        shuffled = shuffle_patches(images[reliable].detach(), config.patch_grid, self.generator)
        with torch.no_grad(), batchnorm_statistics_frozen(self.model):
            shuffled_probabilities = self.model(shuffled).softmax(1)
        plpd = pseudo_label_probability_difference(logits[reliable].detach().softmax(1), shuffled_probabilities)
        kept = torch.nonzero(plpd > config.plpd_threshold, as_tuple=True)[0]
        if kept.numel() == 0:
            self.last_step = StepInfo()
            return logits.detach()
        kept_entropies = entropies[reliable][kept]
        if config.reweight_entropy or config.reweight_plpd:
            weights = torch.zeros_like(kept_entropies)
            if config.reweight_entropy:
                weights = weights + entropy_weights(kept_entropies, config.weight_margin_fraction * math.log(classes))
            if config.reweight_plpd:
                weights = weights + torch.exp(plpd[kept])
            kept_entropies = kept_entropies * weights
        self.last_step = self._take_step(kept_entropies.mean(), int(kept.numel()))
        return logits.detach()


register_method(
    MethodEntry(
        "deyo",
        DeYO,
        DeYOConfig,
        "entropy + patch-shuffle PLPD filters and weights, norm layers outside layer4",
        needs_batchnorm=False,
        sources="Lee et al. ICLR 2024; Jhyun17/DeYO methods/deyo.py",
        colour="#756bb1",
    )
)
