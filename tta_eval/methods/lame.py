"""lame (Boudiaf et al. CVPR 2022): Laplacian-adjusted maximum likelihood on the outputs; the model is
never changed."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from ccc.validation import check_choice, check_non_negative, check_positive_int
from tta_eval.methods.base import AdaptationMethod, StepInfo
from tta_eval.methods.layers import find_classifier_head, forward_with_features
from tta_eval.methods.registry import MethodEntry, register_method

LAME_PROBABILITY_FLOOR = 1e-10
LAME_RELATIVE_TOLERANCE = 1e-8


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


register_method(
    MethodEntry(
        "lame",
        LAME,
        LAMEConfig,
        "Laplacian-adjusted maximum likelihood on the outputs (kNN affinity, k=5), model unchanged",
        needs_batchnorm=False,
        sources="Boudiaf et al. CVPR 2022; fiveai/LAME src/adaptation/lame.py",
        colour="tab:cyan",
    )
)
