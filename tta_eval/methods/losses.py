"""Adaptation losses as pure functions of logits (N×C tensors); each returns one value per sample.
The entropy filter and weights shared by ETA, EATA, SAR and DeYO are here too.

All take raw logits; probabilities are softmax(logits) over dimension 1. Entropies use natural
logarithms (nats), so the entropy of a C-class prediction lies in [0, ln C].
"""

from __future__ import annotations

import torch

DEFAULT_ENTROPY_MARGIN_FRACTION = 0.4
"""E0 = fraction · ln C: the entropy margin of ETA/EATA, SAR and DeYO's weights (0.4 · ln 1000 on ImageNet)."""


def softmax_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy H(p) = -Σ_c p_c ln p_c of softmax(logits), per sample, in [0, ln C] nats."""
    return -(logits.softmax(1) * logits.log_softmax(1)).sum(1)


def generalized_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, q: float) -> torch.Tensor:
    """Generalised cross-entropy (Zhang & Sabuncu 2018): (1 - p_target^q) / q per sample.

    targets: class indices (N,); q in (0, 1]; q → 0 recovers cross-entropy, q = 1 the MAE.
    """
    target_probability = logits.softmax(1).gather(1, targets.view(-1, 1)).squeeze(1)
    return (1.0 - target_probability.pow(q)) / q


def conjugate_pseudo_labels(probabilities: torch.Tensor, poly_epsilon: float) -> torch.Tensor:
    """Conjugate pseudo-labels y* = (I + ε diag(p) - ε p pᵀ)⁻¹ p of the PolyLoss, per sample (N×C).

    Solved in O(C) with the Sherman–Morrison formula: with u = p / (1 + ε p) and s = pᵀu,
    y* = u / (1 - ε s). The denominator is > 0 for any probability vector and ε >= 0.
    """
    scaled = probabilities / (1.0 + poly_epsilon * probabilities)
    inner = (probabilities * scaled).sum(1, keepdim=True)
    return scaled / (1.0 - poly_epsilon * inner)


def conjugate_polyloss(logits: torch.Tensor, poly_epsilon: float, temperature: float = 1.0) -> torch.Tensor:
    """Conjugate pseudo-label loss of the PolyLoss (Goyal et al. 2022), per sample.

    With z = logits / temperature, p = softmax(z) and y* = conjugate_pseudo_labels(p):
    loss = logsumexp(z) - Σ_c (y*_c z_c - ε y*_c (1 - p_c)). Gradients flow through y*, as in the
    CCC paper's code.
    """
    scaled_logits = logits / temperature
    probabilities = scaled_logits.softmax(1)
    pseudo_labels = conjugate_pseudo_labels(probabilities, poly_epsilon)
    return torch.logsumexp(scaled_logits, dim=1) - (
        pseudo_labels * scaled_logits - poly_epsilon * pseudo_labels * (1.0 - probabilities)
    ).sum(1)


def soft_likelihood_ratio(logits: torch.Tensor, soft_labels: torch.Tensor) -> torch.Tensor:
    """Soft likelihood ratio loss (Mummadi et al. 2021), per sample.

    loss = -Σ_c y_c ln(p_c / Σ_{j≠c} p_j) with y the (constant) soft labels. ln(p_c / (1 - p_c))
    equals z_c - logsumexp_{j≠c} z_j. It is computed in O(N·C): ln(1 - p_c) = log1p(-p_c) is accurate
    for p_c < ½, and the only class that can exceed ½, the arg-max, gets the exact log-sum-exp of
    the other logits, so confident predictions do not underflow to an infinite loss.
    """
    log_probabilities = logits.log_softmax(1)
    log_one_minus = torch.log1p(-log_probabilities.exp().clamp(max=0.5))
    top_class = logits.argmax(1, keepdim=True)
    others = logits.scatter(1, top_class, float("-inf"))
    top_log_one_minus = torch.logsumexp(others, dim=1, keepdim=True) - torch.logsumexp(logits, dim=1, keepdim=True)
    log_one_minus = log_one_minus.scatter(1, top_class, top_log_one_minus)
    log_odds = log_probabilities - log_one_minus
    return -(soft_labels * log_odds).sum(1)


def kl_to_uniform(mean_probabilities: torch.Tensor) -> torch.Tensor:
    """KL(p̄ ‖ uniform) = Σ_c p̄_c ln p̄_c + ln C of a probability vector p̄ (C,), in [0, ln C]."""
    classes = mean_probabilities.shape[0]
    return (mean_probabilities * mean_probabilities.clamp_min(1e-12).log()).sum() + torch.log(
        torch.tensor(float(classes), device=mean_probabilities.device)
    )


def symmetric_cross_entropy(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """CoTTA's consistency loss: ½ CE(teacher → student) + ½ CE(student → teacher), per sample."""
    return -0.5 * (teacher_logits.softmax(1) * student_logits.log_softmax(1)).sum(1) - 0.5 * (
        student_logits.softmax(1) * teacher_logits.log_softmax(1)
    ).sum(1)


def cross_entropy_to_teacher(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """CE(teacher → student) = -Σ_c softmax(teacher)_c ln softmax(student)_c, per sample."""
    return -(teacher_logits.softmax(1) * student_logits.log_softmax(1)).sum(1)


def select_reliable(entropies: torch.Tensor, entropy_margin: float) -> torch.Tensor:
    """Indices of samples whose entropy (nats) is strictly below ``entropy_margin`` (ETA's first filter)."""
    return torch.nonzero(entropies < entropy_margin, as_tuple=True)[0]


def entropy_weights(entropies: torch.Tensor, entropy_margin: float) -> torch.Tensor:
    """ETA's sample weights 1 / exp(H - E0), computed without gradient."""
    return torch.exp(-(entropies.detach() - entropy_margin))
