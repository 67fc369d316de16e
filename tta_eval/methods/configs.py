"""Frozen hyper-parameter dataclasses of every method, defaults as in the CCC paper (Press et al. 2023).

Every value a method uses is a field here; ``docs/methods.md`` lists where each default comes from
and where public implementations differ. Validation happens in ``__post_init__`` so a bad override
fails when the config is built, with the field name in the message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from tta_eval.validation import check_choice, check_in_range, check_non_negative, check_positive, check_positive_int

DEFAULT_ENTROPY_MARGIN_FRACTION = 0.4


@dataclass(frozen=True)
class SourceConfig:
    """The unadapted model in evaluation mode; nothing to configure."""


@dataclass(frozen=True)
class BatchNormConfig:
    """Test-batch statistics in every BatchNorm layer; nothing is learned."""


@dataclass(frozen=True)
class SGDConfig:
    """Optimiser fields shared by the SGD-based methods.

    learning_rate: > 0; momentum: in [0, 1); nesterov: Nesterov momentum; weight_decay: >= 0.
    """

    learning_rate: float = 2.5e-4
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        check_positive("learning_rate", self.learning_rate)
        check_in_range("momentum", self.momentum, 0.0, 1.0, include_high=False)
        check_non_negative("weight_decay", self.weight_decay)
        if self.nesterov and self.momentum == 0:
            raise ValueError("nesterov=True needs momentum > 0, got momentum=0")


@dataclass(frozen=True)
class TentConfig(SGDConfig):
    """Tent: entropy minimisation over BN affine parameters (lr 2.5e-4 as in the CCC code)."""


@dataclass(frozen=True)
class RPLConfig(SGDConfig):
    """RPL: generalised cross-entropy on hard pseudo-labels; q in (0, 1]."""

    learning_rate: float = 5e-4
    q: float = 0.8

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in_range("q", self.q, 0.0, 1.0, include_low=False)


@dataclass(frozen=True)
class CPLConfig(SGDConfig):
    """Conjugate pseudo-labels with the PolyLoss; poly_epsilon >= 0, temperature > 0."""

    learning_rate: float = 1e-3
    poly_epsilon: float = 8.0
    temperature: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_non_negative("poly_epsilon", self.poly_epsilon)
        check_positive("temperature", self.temperature)


@dataclass(frozen=True)
class SLRConfig:
    """SLR (Mummadi et al. 2021) with Adam over BN affine parameters.

    learning_rate: Adam step size > 0; adam_beta1/adam_beta2 in [0, 1); diversity_weight >= 0 scales
    KL(p̄ ‖ uniform) where p̄ is a moving average (momentum diversity_momentum in [0, 1)) of the
    batch-mean prediction; soft_labels: "soft" uses the (constant) prediction as labels, "hard"
    its one-hot arg-max.
    """

    learning_rate: float = 6e-4
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    diversity_weight: float = 1.0
    diversity_momentum: float = 0.9
    soft_labels: Literal["soft", "hard"] = "soft"

    def __post_init__(self) -> None:
        check_positive("learning_rate", self.learning_rate)
        check_in_range("adam_beta1", self.adam_beta1, 0.0, 1.0, include_high=False)
        check_in_range("adam_beta2", self.adam_beta2, 0.0, 1.0, include_high=False)
        check_non_negative("diversity_weight", self.diversity_weight)
        check_in_range("diversity_momentum", self.diversity_momentum, 0.0, 1.0, include_high=False)
        check_choice("soft_labels", self.soft_labels, ("soft", "hard"))


@dataclass(frozen=True)
class CoTTAConfig(SGDConfig):
    """CoTTA: mean teacher, augmentation-averaged teacher predictions, stochastic restore.

    teacher_momentum in [0, 1]: EMA weight of the old teacher; restore_probability in [0, 1]: chance
    per weight element and step to be restored to its source value; augmentation_count >= 1 views;
    augmentation_threshold in [0, 1]: augment when the source model's mean max-probability on the
    batch is below it; noise_std >= 0: std of the Gaussian noise of the augmentation (images in
    [0, 1]); adapted_parameters: "batchnorm" (CCC code) or "all" (CoTTA code); loss: "symmetric"
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
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")


@dataclass(frozen=True)
class ETAConfig(SGDConfig):
    """ETA: entropy minimisation on reliable, non-redundant samples.

    entropy_margin_fraction in (0, 1]: E0 = fraction · ln C (C = number of classes; 0.4 · ln 1000
    on ImageNet); redundancy_margin in [0, 1]: a sample is kept when |cos(p, p̄)| < margin;
    prediction_momentum in [0, 1): weight of the old value in the moving average p̄.
    """

    entropy_margin_fraction: float = DEFAULT_ENTROPY_MARGIN_FRACTION
    redundancy_margin: float = 0.05
    prediction_momentum: float = 0.9

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in_range("entropy_margin_fraction", self.entropy_margin_fraction, 0.0, 1.0, include_low=False)
        check_in_range("redundancy_margin", self.redundancy_margin, 0.0, 1.0)
        check_in_range("prediction_momentum", self.prediction_momentum, 0.0, 1.0, include_high=False)

    def entropy_margin(self, num_classes: int) -> float:
        """E0 in nats for a ``num_classes``-way classifier."""
        return self.entropy_margin_fraction * math.log(num_classes)


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
