"""Methods without gradient steps: AdaBN (target BatchNorm statistics), LAME (output correction) and
NEO (re-centred penultimate features)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from tta_eval.methods.base import AdaptationMethod, StepInfo, batchnorm_layers, require_batchnorm
from tta_eval.methods.configs import AdaBNConfig, LAMEConfig, NEOConfig
from tta_eval.methods.layers import batch_statistics, find_classifier_head, forward_with_features
from ccc.validation import check_positive_int

LAME_PROBABILITY_FLOOR = 1e-10
LAME_RELATIVE_TOLERANCE = 1e-8


@contextmanager
def running_statistics_updated_first(model: nn.Module, momentum: float) -> Iterator[None]:
    """Inside this context every evaluation-mode BatchNorm layer first moves its running statistics
    toward the statistics of its current input (running ← (1 − m) running + m batch, unbiased
    variance, as PyTorch does) and then normalises with the updated running statistics."""

    def update(layer: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        with torch.no_grad():
            mean, variance = batch_statistics(inputs[0], unbiased=True)
            layer.running_mean.mul_(1.0 - momentum).add_(mean, alpha=momentum)
            layer.running_var.mul_(1.0 - momentum).add_(variance, alpha=momentum)
            if layer.num_batches_tracked is not None:
                layer.num_batches_tracked.add_(1)

    handles = [layer.register_forward_pre_hook(update) for layer in batchnorm_layers(model) if layer.running_mean is not None]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


class AdaBN(AdaptationMethod):
    """AdaBN (Li et al. 2017), online: BatchNorm statistics are running estimates over the stream.

    Per batch, in one forward pass, each BatchNorm layer updates its running mean and variance with
    the statistics of its input (momentum ``config.momentum``) and normalises with the updated
    running statistics; deeper layers therefore see inputs normalised as at inference. Nothing is
    learned; a frozen copy predicts with the same statistics.
    """

    def __init__(self, model: nn.Module, config: AdaBNConfig) -> None:
        require_batchnorm(model, "adabn")
        super().__init__(model, config)
        model.requires_grad_(False)
        self._remember_initial_state()

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W) normalised with running statistics updated by this batch."""
        with running_statistics_updated_first(self.model, self.config.momentum):
            logits = self.model(images)
        self.last_step = StepInfo(samples_adapted=images.shape[0])
        return logits


def knn_affinity(features: torch.Tensor, neighbours: int) -> torch.Tensor:
    """N×N matrix with W_ij = 1 if j is one of the ``neighbours`` nearest samples of i (j ≠ i), else 0.

    features: N×D; Euclidean distances; with N − 1 < neighbours every other sample is a neighbour.
    """
    count = features.shape[0]
    distances = torch.cdist(features, features)
    distances.fill_diagonal_(-1.0)  # the sample itself is always ranked first and then dropped
    wanted = min(neighbours + 1, count)
    nearest = distances.topk(wanted, dim=1, largest=False).indices[:, 1:]
    affinity = torch.zeros(count, count, dtype=features.dtype, device=features.device)
    return affinity.scatter_(1, nearest, 1.0)


def rbf_affinity(features: torch.Tensor, sigma: float, neighbours: int) -> torch.Tensor:
    """N×N Gaussian kernel exp(−d_ij² / (2σ²)); σ = ``sigma`` if > 0, else the mean distance of each
    sample to its ``neighbours``-th nearest sample counting itself (LAME's code)."""
    distances = torch.cdist(features, features)
    if sigma <= 0:
        wanted = min(neighbours, features.shape[0])
        sigma_tensor = distances.topk(wanted, dim=1, largest=False).values[:, -1].mean()
    else:
        sigma_tensor = torch.tensor(sigma, dtype=features.dtype, device=features.device)
    return torch.exp(-(distances**2) / (2 * sigma_tensor**2))


def laplacian_energy(assignments: torch.Tensor, unary: torch.Tensor, pairwise: torch.Tensor) -> torch.Tensor:
    """LAME's bound energy Σ (unary·Y − pairwise·Y + Y ln Y) over the batch (pairwise = W Y_previous)."""
    return (unary * assignments - pairwise * assignments + assignments * torch.log(assignments.clamp_min(1e-20))).sum()


def laplacian_optimization(
    unary: torch.Tensor, affinity: torch.Tensor, max_iterations: int
) -> tuple[torch.Tensor, float, int]:
    """LAME's bound optimiser: Y ← softmax(−unary + W Y), starting from softmax(−unary).

    unary: N×K (−ln p); affinity: N×N. Stops after ``max_iterations`` or when the energy changes by
    at most 1e-8 of its value (checked from the third iteration on, as LAME's code does). Returns
    the log of the final assignments (N×K, a valid logit matrix), the final energy and the number of
    iterations run. Raises ValueError unless max_iterations >= 1.
    """
    check_positive_int("max_iterations", max_iterations)
    assignments = (-unary).softmax(1)
    previous_energy = math.inf
    for iteration in range(max_iterations):
        pairwise = affinity @ assignments
        exponent = -unary + pairwise
        log_assignments = exponent.log_softmax(1)
        assignments = log_assignments.exp()
        energy = float(laplacian_energy(assignments, unary, pairwise))
        if iteration > 1 and abs(energy - previous_energy) <= LAME_RELATIVE_TOLERANCE * abs(previous_energy):
            break
        previous_energy = energy
    return log_assignments, energy, iteration + 1


class LaplacianAdjustedClassifier(nn.Module):
    """The source model followed by LAME's output correction; ``forward(images)`` returns ln Y (N×K).

    p = softmax(logits), unary −ln(p + 1e-10), affinity W over the L2-normalised penultimate
    features (input of the head ``head_name``), then ``laplacian_optimization``. Holds no state that
    changes; ``last_energy`` is the final energy of the last call.
    """

    def __init__(self, network: nn.Module, head_name: str, config: LAMEConfig) -> None:
        super().__init__()
        self.network = network
        self.head_name = head_name
        self.config = config
        self.last_energy = math.nan

    def _affinity(self, features: torch.Tensor) -> torch.Tensor:
        config = self.config
        if config.affinity == "knn":
            affinity = knn_affinity(features, config.knn)
        elif config.affinity == "rbf":
            affinity = rbf_affinity(features, config.rbf_sigma, config.knn)
        else:
            affinity = features @ features.t()
        if config.force_symmetry:
            affinity = 0.5 * (affinity + affinity.t())
        return affinity

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """ln Y (N×K) for images (N×C×H×W): the network's probabilities corrected over the batch."""
        logits, features = forward_with_features(self.network, self.head_name, images)
        unary = -torch.log(logits.softmax(1) + LAME_PROBABILITY_FLOOR)
        affinity = self._affinity(F.normalize(features, p=2, dim=1))
        log_assignments, self.last_energy, _ = laplacian_optimization(unary, affinity, self.config.max_iterations)
        return log_assignments


class LAME(AdaptationMethod):
    """LAME (Boudiaf et al. 2022): Laplacian-adjusted maximum likelihood over the batch's outputs.

    ``model`` is a LaplacianAdjustedClassifier around the source model (evaluation mode, never
    changed), so predictions without adaptation in the time-constrained protocols are LAME's too.
    ``last_step.loss`` is the final energy divided by the batch size.
    """

    def __init__(self, model: nn.Module, config: LAMEConfig) -> None:
        head_name = find_classifier_head(model, "lame")
        model.requires_grad_(False)
        super().__init__(LaplacianAdjustedClassifier(model, head_name, config), config)
        self._remember_initial_state()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """ln Y (N×K) for images (N×C×H×W)."""
        log_assignments = self.model(images)
        self.last_step = StepInfo(samples_adapted=images.shape[0], loss=self.model.last_energy / images.shape[0])
        return log_assignments


class CentredClassifier(nn.Module):
    """A classifier whose head sees z − μ instead of its penultimate features z (NEO).

    ``forward(images, update=True)`` first moves the centroid μ with the batch's features
    ("cumulative": exact mean over every sample seen; "ema": μ ← (1 − r) μ + r · batch mean), then
    classifies; ``update=False`` classifies with the current μ. μ (starting at 0) and the sample
    count are buffers.
    """

    def __init__(self, network: nn.Module, head_name: str, config: NEOConfig) -> None:
        super().__init__()
        self.network = network
        self.head_name = head_name
        self.config = config
        head = network.get_submodule(head_name)
        weight = head.weight
        self.register_buffer("centroid", torch.zeros(head.in_features, dtype=weight.dtype, device=weight.device))
        self.register_buffer("samples_seen", torch.zeros((), dtype=torch.long, device=weight.device))

    def _update_centroid(self, features: torch.Tensor) -> None:
        batch_mean = features.mean(0)
        if self.config.centroid_update == "cumulative":
            count = features.shape[0]
            self.samples_seen += count
            new_weight = count / float(self.samples_seen)
            self.centroid.mul_(1.0 - new_weight).add_(batch_mean, alpha=new_weight)
        else:
            rate = self.config.ema_rate
            self.centroid.mul_(1.0 - rate).add_(batch_mean, alpha=rate)

    def _centre(self, features: torch.Tensor, update: bool) -> torch.Tensor:
        if update:
            self._update_centroid(features)
        return features - self.centroid

    @torch.no_grad()
    def forward(self, images: torch.Tensor, update: bool = False) -> torch.Tensor:
        """Logits (N×C) of the re-centred features for images (N×C×H×W)."""
        logits, _ = forward_with_features(
            self.network, self.head_name, images, replace_features=lambda features: self._centre(features, update)
        )
        return logits


class NEO(AdaptationMethod):
    """NEO (Murphy et al. 2025): classify z − μ instead of z, μ the centroid of the features seen.

    z is the input of the classifier head (last nn.Linear). ``model`` is a CentredClassifier around
    the source model (evaluation mode); each batch updates μ and is then classified, predictions
    without adaptation use the current μ. ``reset()`` clears μ and the sample count.
    """

    def __init__(self, model: nn.Module, config: NEOConfig) -> None:
        head_name = find_classifier_head(model, "neo")
        model.requires_grad_(False)
        super().__init__(CentredClassifier(model, head_name, config), config)
        self._remember_initial_state()

    @property
    def centroid(self) -> torch.Tensor:
        """The current centroid μ (D,)."""
        return self.model.centroid

    @property
    def samples_seen(self) -> torch.Tensor:
        """Number of samples μ averages (a 0-d tensor)."""
        return self.model.samples_seen

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W) after updating the centroid with them."""
        logits = self.model(images, update=True)
        self.last_step = StepInfo(samples_adapted=images.shape[0])
        return logits
