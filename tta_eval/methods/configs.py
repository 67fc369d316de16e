"""Frozen hyper-parameter dataclasses of every method, defaults as in the CCC paper (Press et al. 2023).

Every value a method uses is a field here; ``docs/methods.md`` lists where each default comes from
and where public implementations differ. Validation happens in ``__post_init__`` so a bad override
fails when the config is built, with the field name in the message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from ccc.validation import check_choice, check_in_range, check_non_negative, check_positive, check_positive_int

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


# --- methods of the time-constrained papers (Alfarra et al. 2024; Tempora) ------------------------


def _check_seed(seed: int) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")


@dataclass(frozen=True)
class AdaBNConfig:
    """AdaBN: BatchNorm normalises with running statistics of the target stream.

    momentum in (0, 1]: weight of the current batch in the running estimate (0.1 = PyTorch default).
    """

    momentum: float = 0.1

    def __post_init__(self) -> None:
        check_in_range("momentum", self.momentum, 0.0, 1.0, include_low=False)


@dataclass(frozen=True)
class LAMEConfig:
    """LAME: Laplacian-regularised maximum likelihood on the outputs; the model is never changed.

    affinity: "knn" (W_ij = 1 for the knn nearest neighbours j of i), "rbf" (Gaussian kernel) or
    "linear" (cosine similarity) over L2-normalised penultimate features; knn >= 1 neighbours;
    rbf_sigma >= 0: kernel width, 0 = mean distance to the knn-th nearest sample (LAME's code);
    max_iterations >= 1 of the bound optimiser; force_symmetry: use (W + Wᵀ)/2.
    """

    affinity: Literal["knn", "rbf", "linear"] = "knn"
    knn: int = 5
    rbf_sigma: float = 0.0
    max_iterations: int = 100
    force_symmetry: bool = False

    def __post_init__(self) -> None:
        check_choice("affinity", self.affinity, ("knn", "rbf", "linear"))
        check_positive_int("knn", self.knn)
        check_non_negative("rbf_sigma", self.rbf_sigma)
        check_positive_int("max_iterations", self.max_iterations)


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


@dataclass(frozen=True)
class PLConfig(SGDConfig):
    """PL: cross-entropy to the arg-max of samples whose max probability exceeds confidence_threshold
    (in [0, 1)); BN affine parameters; lr 0.01 as in the time-constrained paper's code."""

    learning_rate: float = 0.01
    confidence_threshold: float = 0.9

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in_range("confidence_threshold", self.confidence_threshold, 0.0, 1.0, include_high=False)


@dataclass(frozen=True)
class SHOTIMConfig(SGDConfig):
    """SHOT-IM: mean entropy − diversity_weight · entropy of the batch-mean prediction (>= 0), over
    every parameter except the classifier head's."""

    diversity_weight: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_non_negative("diversity_weight", self.diversity_weight)


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


@dataclass(frozen=True)
class SARConfig(SGDConfig):
    """SAR: sharpness-aware, reliable entropy minimisation with model recovery.

    entropy_margin_fraction in (0, 1]: E0 = fraction · ln C; sam_radius (ρ) >= 0; the model is
    restored when the moving average (recovery_momentum in [0, 1)) of the second-pass loss falls below
    recovery_threshold >= 0; excluded_modules: "+"-separated module names whose normalisation layers
    are not adapted ("layer4": the last ResNet stage).
    """

    entropy_margin_fraction: float = DEFAULT_ENTROPY_MARGIN_FRACTION
    sam_radius: float = 0.05
    recovery_threshold: float = 0.2
    recovery_momentum: float = 0.9
    excluded_modules: str = "layer4"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in_range("entropy_margin_fraction", self.entropy_margin_fraction, 0.0, 1.0, include_low=False)
        check_non_negative("sam_radius", self.sam_radius)
        check_non_negative("recovery_threshold", self.recovery_threshold)
        check_in_range("recovery_momentum", self.recovery_momentum, 0.0, 1.0, include_high=False)

    def entropy_margin(self, num_classes: int) -> float:
        """E0 in nats for a ``num_classes``-way classifier."""
        return self.entropy_margin_fraction * math.log(num_classes)


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
        _check_seed(self.seed)


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
        _check_seed(self.seed)


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
        check_positive("learning_rate", self.learning_rate)
        check_in_range("adam_beta1", self.adam_beta1, 0.0, 1.0, include_high=False)
        check_in_range("adam_beta2", self.adam_beta2, 0.0, 1.0, include_high=False)
        check_non_negative("weight_decay", self.weight_decay)
        check_in_range("robust_bn_momentum", self.robust_bn_momentum, 0.0, 1.0, include_low=False)
        check_positive_int("memory_capacity", self.memory_capacity)
        check_positive_int("update_every", self.update_every)
        check_in_range("teacher_momentum", self.teacher_momentum, 0.0, 1.0)
        check_non_negative("timeliness_weight", self.timeliness_weight)
        check_non_negative("uncertainty_weight", self.uncertainty_weight)
        check_non_negative("noise_std", self.noise_std)
        _check_seed(self.seed)


@dataclass(frozen=True)
class CMFConfig(SGDConfig):
    """CMF: continual momentum filtering of the adapted parameters, ROID's loss.

    prediction_momentum in [0, 1): weight of the old class-probability average in the diversity
    weight; weight_temperature > 0; use_weighting / use_consistency: ROID's sample weights and
    augmentation-consistency term; prior_correction: "logits" (the public code multiplies the logits
    by the smoothed batch prior), "probabilities" (the paper: re-weight the softmax) or "none";
    hidden_momentum (α), ensemble_momentum (γ) in [0, 1]; process_noise q0 >= 0, scaled by
    (adapted parameter count / process_noise_reference_size); seed of the augmentation generator.
    """

    nesterov: bool = True
    prediction_momentum: float = 0.9
    weight_temperature: float = 1.0 / 3.0
    use_weighting: bool = True
    use_consistency: bool = True
    prior_correction: Literal["logits", "probabilities", "none"] = "logits"
    hidden_momentum: float = 0.99
    ensemble_momentum: float = 0.99
    process_noise: float = 0.005
    process_noise_reference_size: int = 38400
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in_range("prediction_momentum", self.prediction_momentum, 0.0, 1.0, include_high=False)
        check_positive("weight_temperature", self.weight_temperature)
        check_choice("prior_correction", self.prior_correction, ("logits", "probabilities", "none"))
        check_in_range("hidden_momentum", self.hidden_momentum, 0.0, 1.0)
        check_in_range("ensemble_momentum", self.ensemble_momentum, 0.0, 1.0)
        check_non_negative("process_noise", self.process_noise)
        check_positive_int("process_noise_reference_size", self.process_noise_reference_size)
        _check_seed(self.seed)


@dataclass(frozen=True)
class TTACNQConfig(SGDConfig):
    """TTAC without queue: anchored clustering of penultimate features to source statistics.

    source_statistics: path of a file written by ``SourceFeatureStatistics.save`` (required);
    confidence_threshold in [0, 1): samples used for class-wise alignment; class_ema_length >= 1 and
    global_ema_length >= 1: effective window (samples) of the target statistics; loss_scale >= 0;
    covariance_bias_fraction > 0: the ridge added to both covariances is fraction · max(source cov).
    learning_rate 1e-3/√2 is TTAC's 1e-3 at batch 128 scaled to batch 64 (Alfarra et al.'s code).
    """

    learning_rate: float = 0.001 / math.sqrt(2.0)
    source_statistics: str = ""
    confidence_threshold: float = 0.9
    class_ema_length: int = 64
    global_ema_length: int = 1280
    loss_scale: float = 0.05
    covariance_bias_fraction: float = 1.0 / 30.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in_range("confidence_threshold", self.confidence_threshold, 0.0, 1.0, include_high=False)
        check_positive_int("class_ema_length", self.class_ema_length)
        check_positive_int("global_ema_length", self.global_ema_length)
        check_non_negative("loss_scale", self.loss_scale)
        check_positive("covariance_bias_fraction", self.covariance_bias_fraction)
