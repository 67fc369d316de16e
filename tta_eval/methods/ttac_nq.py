"""TTAC without queue (Su et al. NeurIPS 2022, "TTAC-NQ"): anchored clustering of the penultimate
features of the test stream to feature statistics of the source domain.

The source statistics come from clean, labelled-domain images the user provides (TTAC uses the
ImageNet validation set); they are computed once and stored in a file:

>>> statistics = compute_source_statistics(model, clean_batches)  # doctest: +SKIP
>>> statistics.save("resnet50_imagenet_val.ttac.pt")  # doctest: +SKIP
>>> method = create("ttac_nq", model, source_statistics="resnet50_imagenet_val.ttac.pt")  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ccc.pickles import load_torch_file
from ccc.validation import check_in_range, check_non_negative, check_positive, check_positive_int
from tta_eval.methods.base import AdaptationMethod, SGDConfig, make_optimizer, set_batchnorm_batch_statistics
from tta_eval.methods.layers import (
    EvaluationModeNetwork,
    attach_prediction_network,
    find_classifier_head,
    forward_with_features,
    parameters_outside_head,
)
from tta_eval.methods.registry import MethodEntry, register_method

STATISTICS_FORMAT = "tta_eval.ttac.source_statistics/1"


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


@dataclass(frozen=True, eq=False)
class SourceFeatureStatistics:
    """Statistics of the penultimate features (input of the classifier head) on clean source images.

    mean: D; covariance: D×D population covariance; class_means, class_variances: K×D per-class mean
    and population variance of the features of the images the model assigns to each class (its
    arg-max, as TTAC does; zeros for classes never predicted); class_counts: K images per class.
    """

    mean: torch.Tensor
    covariance: torch.Tensor
    class_means: torch.Tensor
    class_variances: torch.Tensor
    class_counts: torch.Tensor

    def __post_init__(self) -> None:
        dimension = self.mean.shape[0] if self.mean.dim() == 1 else -1
        classes = self.class_means.shape[0] if self.class_means.dim() == 2 else -1
        expected = {
            "mean": (dimension,),
            "covariance": (dimension, dimension),
            "class_means": (classes, dimension),
            "class_variances": (classes, dimension),
            "class_counts": (classes,),
        }
        for name, shape in expected.items():
            actual = tuple(getattr(self, name).shape)
            if dimension < 1 or classes < 1 or actual != shape:
                raise ValueError(f"source statistics field {name} must have shape {shape}, got {actual}")

    @property
    def feature_dim(self) -> int:
        """D, the number of penultimate features."""
        return int(self.mean.shape[0])

    @property
    def num_classes(self) -> int:
        """K, the number of classes."""
        return int(self.class_means.shape[0])

    @property
    def sample_count(self) -> int:
        """Number of source images the statistics were computed from."""
        return int(self.class_counts.sum())

    def save(self, path: str | Path) -> None:
        """Write the statistics to ``path`` (a torch file of plain tensors, loadable with weights_only)."""
        fields = {field.name: getattr(self, field.name).detach().cpu() for field in dataclasses.fields(self)}
        torch.save({"format": STATISTICS_FORMAT, **fields}, Path(path))

    @classmethod
    def load(cls, path: str | Path) -> SourceFeatureStatistics:
        """Read statistics written by ``save`` (``ccc.pickles.load_torch_file``: bounded, nothing in the file
        runs); ValueError of one line if the file is missing or not such a file."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"source_statistics file {str(path)!r} does not exist")
        stored: Any = load_torch_file(path, "source_statistics file")
        if not isinstance(stored, dict) or stored.get("format") != STATISTICS_FORMAT:
            raise ValueError(
                f"source_statistics file {str(path)!r} is not a statistics file written by SourceFeatureStatistics.save"
            )
        return cls(**{field.name: stored[field.name] for field in dataclasses.fields(cls)})


def _images_of(batch: Any) -> torch.Tensor:
    return batch[0] if isinstance(batch, (tuple, list)) else batch


@torch.no_grad()
def compute_source_statistics(
    model: nn.Module, image_batches: Iterable[Any], device: str | torch.device | None = None
) -> SourceFeatureStatistics:
    """Feature statistics of ``model`` on clean images, as TTAC's offline step computes them.

    image_batches: float image tensors N×C×H×W in the model's input range, or tuples/lists whose
    first element is such a tensor (e.g. a DataLoader of (images, labels); labels are not used).
    The model runs in evaluation mode (its layer modes are restored afterwards); sums are
    accumulated in float64. Raises ValueError when no image is given.
    """
    head_name = find_classifier_head(model, "ttac_nq")
    head = model.get_submodule(head_name)
    device = torch.device(device) if device is not None else head.weight.device
    dimension, classes = head.in_features, head.out_features
    total = torch.zeros(dimension, dtype=torch.float64, device=device)
    outer = torch.zeros(dimension, dimension, dtype=torch.float64, device=device)
    class_sums = torch.zeros(classes, dimension, dtype=torch.float64, device=device)
    class_squares = torch.zeros(classes, dimension, dtype=torch.float64, device=device)
    class_counts = torch.zeros(classes, dtype=torch.long, device=device)
    modes = [module.training for module in model.modules()]
    model.eval()
    try:
        for batch in image_batches:
            logits, features = forward_with_features(model, head_name, _images_of(batch).to(device))
            features = features.double()
            labels = logits.argmax(1)
            total += features.sum(0)
            outer += features.t() @ features
            class_sums.index_add_(0, labels, features)
            class_squares.index_add_(0, labels, features**2)
            class_counts += torch.bincount(labels, minlength=classes)
    finally:
        for module, mode in zip(model.modules(), modes):
            module.training = mode
    count = int(class_counts.sum())
    if count == 0:
        raise ValueError("compute_source_statistics needs at least one clean image, got none")
    mean = total / count
    covariance = outer / count - torch.outer(mean, mean)
    per_class = class_counts.clamp_min(1).unsqueeze(1).double()
    class_means = class_sums / per_class
    class_variances = (class_squares / per_class - class_means**2).clamp_min(0.0)
    return SourceFeatureStatistics(
        mean=mean.float(),
        covariance=covariance.float(),
        class_means=class_means.float(),
        class_variances=class_variances.float(),
        class_counts=class_counts,
    )


def matching_source_statistics(
    model: nn.Module,
    head_name: str,
    method_name: str,
    path: str,
    statistics: SourceFeatureStatistics | None = None,
) -> SourceFeatureStatistics:
    """``statistics``, or those loaded from ``path``, checked against the model's classifier head.

    Raises ValueError naming ``method_name`` when neither is given, when the file cannot be read, or
    when the feature dimension or class count differs from the head ``head_name`` of ``model``.
    """
    if statistics is None:
        if not path:
            raise ValueError(
                f"method '{method_name}' needs source feature statistics: compute them from clean images with "
                "tta_eval.methods.compute_source_statistics(model, batches), save them with .save(path) "
                "and pass source_statistics=<path>"
            )
        statistics = SourceFeatureStatistics.load(path)
    head = model.get_submodule(head_name)
    if (statistics.feature_dim, statistics.num_classes) != (head.in_features, head.out_features):
        raise ValueError(
            f"source statistics have {statistics.feature_dim} features and {statistics.num_classes} "
            f"classes, but the model's head {head_name!r} maps {head.in_features} features to "
            f"{head.out_features} classes"
        )
    return statistics


def symmetric_gaussian_kl(
    mean_p: torch.Tensor,
    covariance_p: torch.Tensor,
    mean_q: torch.Tensor,
    covariance_q: torch.Tensor,
    cholesky_p: torch.Tensor | None = None,
) -> torch.Tensor:
    """KL(P‖Q) + KL(Q‖P) of multivariate normals P = N(μp, Σp), Q = N(μq, Σq), in nats.

    Equals ½ [tr(Σq⁻¹Σp) + tr(Σp⁻¹Σq) + Δᵀ(Σp⁻¹ + Σq⁻¹)Δ] − D with Δ = μq − μp (the log-determinants
    cancel). cholesky_p: the Cholesky factor of Σp if already known (the source side is constant).
    """
    dimension = mean_p.shape[0]
    if cholesky_p is None:
        cholesky_p = torch.linalg.cholesky(covariance_p)
    cholesky_q = torch.linalg.cholesky(covariance_q)
    trace_q_inverse_p = torch.cholesky_solve(covariance_p, cholesky_q).diagonal().sum()
    trace_p_inverse_q = torch.cholesky_solve(covariance_q, cholesky_p).diagonal().sum()
    difference = (mean_q - mean_p).unsqueeze(1)
    quadratic = (
        difference * (torch.cholesky_solve(difference, cholesky_p) + torch.cholesky_solve(difference, cholesky_q))
    ).sum()
    return 0.5 * (trace_q_inverse_p + trace_p_inverse_q + quadratic) - dimension


def symmetric_diagonal_gaussian_kl(
    mean_p: torch.Tensor, variance_p: torch.Tensor, mean_q: torch.Tensor, variance_q: torch.Tensor
) -> torch.Tensor:
    """Symmetric KL of normals with diagonal covariances, one value per row of the K×D inputs (nats)."""
    squared_difference = (mean_q - mean_p) ** 2
    return (
        0.5
        * (
            variance_p / variance_q
            + variance_q / variance_p
            + squared_difference * (1.0 / variance_p + 1.0 / variance_q)
        ).sum(-1)
        - mean_p.shape[-1]
    )


def update_mean_and_covariance(
    mean: torch.Tensor, covariance: torch.Tensor, features: torch.Tensor, rate: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exponential moving mean (D) and covariance (D×D) after the N×D ``features``, each sample with
    weight ``rate`` in (0, 1 / N]: μ' = μ + s with s = r Σ (x − μ), and Σ' = Σ + r (DᵀD − N Σ) − s sᵀ
    (D: the features minus μ), computed as (1 − rN)(Σ + s sᵀ) + r (x − μ')ᵀ(x − μ'), a sum of positive
    semi-definite terms. The first form subtracts terms of the size of |μ|²: in float32 it lost positive
    definiteness on ResNeXt-29's post-ReLU features (mean 0.57, standard deviation 0.10)."""
    shift = rate * (features - mean).sum(0)
    updated_mean = mean + shift
    centred = features - updated_mean
    kept = 1.0 - rate * features.shape[0]
    return updated_mean, kept * (covariance + torch.outer(shift, shift)) + rate * (centred.t() @ centred)


class TTACNQ(AdaptationMethod):
    """TTAC-NQ: SGD over every parameter except the classifier head's on the anchored-clustering loss.

    Per batch (BatchNorm with batch statistics): features f (N×D) and predictions. Class-wise: the
    confident samples (max probability > ``confidence_threshold``) update per-class target means and
    variances (initialised with the source ones, counts with ``class_ema_length``) with rate
    1/min(count, class_ema_length); each class present contributes the symmetric KL between
    N(μs_k, diag σ²s_k + bI) and N(μt_k, diag σ²t_k + bI). Global: the batch updates a target mean and
    covariance (from zero) with rate 1/min(samples seen, global_ema_length); the symmetric KL between
    N(μs, Σs + bI) and N(μt, Σt + bI) is added. b = covariance_bias_fraction · max Σs; the sum is
    scaled by ``loss_scale``; gradients flow through the current batch's contribution. After the
    step the batch is predicted again in evaluation mode (running statistics), as TTAC's code does,
    by ``prediction_network`` (the model in evaluation mode), which also serves the protocols'
    predictions without adaptation.
    """

    method_name = "ttac_nq"

    def __init__(
        self, model: nn.Module, config: TTACNQConfig, source_statistics: SourceFeatureStatistics | None = None
    ) -> None:
        super().__init__(model, config)
        self.head_name = find_classifier_head(model, self.method_name)
        source_statistics = matching_source_statistics(
            model, self.head_name, self.method_name, config.source_statistics, source_statistics
        )
        head = model.get_submodule(self.head_name)
        parameters = self._adapt_only(parameters_outside_head(model, self.head_name, self.method_name))
        self.optimizer = make_optimizer(parameters, config)
        self._register_statistics(source_statistics, head.weight.device)
        attach_prediction_network(self, EvaluationModeNetwork(model))
        self._remember_initial_state()

    def _register_statistics(self, statistics: SourceFeatureStatistics, device: torch.device) -> None:
        config: TTACNQConfig = self.config
        dimension, classes = statistics.feature_dim, statistics.num_classes
        bias = config.covariance_bias_fraction * float(statistics.covariance.max())
        source_covariance = statistics.covariance.float() + bias * torch.eye(dimension)
        self.register_buffer("covariance_bias", torch.tensor(bias, device=device))
        self.register_buffer("source_mean", statistics.mean.float().to(device))
        self.register_buffer("source_covariance", source_covariance.to(device))
        self.register_buffer("source_cholesky", torch.linalg.cholesky(source_covariance).to(device))
        self.register_buffer("source_class_means", statistics.class_means.float().to(device))
        self.register_buffer("source_class_variances", statistics.class_variances.float().to(device))
        self.register_buffer("target_class_means", statistics.class_means.float().clone().to(device))
        self.register_buffer("target_class_variances", statistics.class_variances.float().clone().to(device))
        self.register_buffer(
            "target_class_counts", torch.full((classes,), float(config.class_ema_length), device=device)
        )
        self.register_buffer("target_mean", torch.zeros(dimension, device=device))
        self.register_buffer("target_covariance", torch.zeros(dimension, dimension, device=device))
        self.register_buffer("target_samples", torch.zeros((), dtype=torch.float64, device=device))

    def _apply_layer_modes(self) -> None:
        set_batchnorm_batch_statistics(self.model)

    def _class_alignment(self, features: torch.Tensor, logits: torch.Tensor) -> torch.Tensor | None:
        config: TTACNQConfig = self.config
        confidence, labels = logits.detach().softmax(1).max(1)
        confident = torch.nonzero(confidence > config.confidence_threshold, as_tuple=True)[0]
        if confident.numel() == 0:
            return None
        features, labels = features[confident], labels[confident]
        classes = self.target_class_means.shape[0]
        batch_counts = torch.bincount(labels, minlength=classes).to(features.dtype)
        counts = self.target_class_counts + batch_counts
        length = config.class_ema_length
        rates = torch.where(counts > length, torch.full_like(counts, 1.0 / length), 1.0 / (counts + 1e-10))
        differences = features - self.target_class_means[labels]
        difference_sums = torch.zeros_like(self.target_class_means).index_add(0, labels, differences)
        square_sums = torch.zeros_like(self.target_class_means).index_add(0, labels, differences**2)
        shift = rates.unsqueeze(1) * difference_sums
        means = self.target_class_means + shift
        variances = (
            self.target_class_variances
            + rates.unsqueeze(1) * (square_sums - batch_counts.unsqueeze(1) * self.target_class_variances)
            - shift**2
        )
        present = torch.nonzero((batch_counts > 0) & (counts > length), as_tuple=True)[0]
        with torch.no_grad():
            self.target_class_means.copy_(means)
            self.target_class_variances.copy_(variances)
            self.target_class_counts.copy_(counts)
        if present.numel() == 0:
            return None
        bias = self.covariance_bias
        return symmetric_diagonal_gaussian_kl(
            self.source_class_means[present],
            self.source_class_variances[present] + bias,
            means[present],
            variances[present] + bias,
        ).sum()

    def _global_alignment(self, features: torch.Tensor) -> torch.Tensor:
        config: TTACNQConfig = self.config
        count = features.shape[0]
        self.target_samples += count
        seen = float(self.target_samples)
        rate = 1.0 / config.global_ema_length if seen > config.global_ema_length else 1.0 / seen
        mean, covariance = update_mean_and_covariance(self.target_mean, self.target_covariance, features, rate)
        with torch.no_grad():
            self.target_mean.copy_(mean)
            self.target_covariance.copy_(covariance)
        ridge = self.covariance_bias * torch.eye(features.shape[1], dtype=features.dtype, device=features.device)
        return symmetric_gaussian_kl(
            self.source_mean, self.source_covariance, mean, covariance + ridge, self.source_cholesky
        )

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W) predicted in evaluation mode after one SGD step."""
        logits, features = forward_with_features(self.model, self.head_name, images)
        class_loss = self._class_alignment(features, logits)
        global_loss = self._global_alignment(features)
        loss = global_loss if class_loss is None else class_loss + global_loss
        self.last_step = self._take_step(self.config.loss_scale * loss, images.shape[0])
        with torch.no_grad():
            return self.prediction_network(images)


register_method(
    MethodEntry(
        "ttac_nq",
        TTACNQ,
        TTACNQConfig,
        "anchored clustering of features to source statistics (needs source_statistics), no queue",
        needs_batchnorm=False,
        sources="Su et al. NeurIPS 2022; Gorilla-Lab-SCUT/TTAC imagenet/TTAC_onepass_without_queue.py",
        colour="#e7969c",
    )
)
