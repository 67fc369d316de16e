"""Fidelity of ROID: one update on a tiny CNN against a re-derivation by hand (loss value, parameter
update, returned outputs), and the weight ensembling and prior correction formulas in isolation."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from tests.tta_eval.method_helpers import batch_statistics_copy
from tests.tta_eval.tta_helpers import make_batches
from tta_eval.methods import create, get_method
from tta_eval.methods.augmentation import augment_batch
from tta_eval.methods.layers import normalization_affine_parameters
from tta_eval.methods.roid import ensemble_with_source, prior_corrected, smoothed_batch_prior


def test_published_ccc_defaults():
    defaults = get_method("roid").defaults()
    expected = {
        "learning_rate": 2.5e-4,
        "momentum": 0.9,
        "nesterov": True,
        "weight_decay": 0.0,
        "prediction_momentum": 0.9,
        "weight_temperature": 1 / 3,
        "ensemble_momentum": 0.99,
        "use_weighting": True,
        "use_consistency": True,
        "prior_correction": "logits",
    }
    assert {name: defaults[name] for name in expected} == expected


def hand_loss(
    model: torch.nn.Module, images: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """ROID's first-batch loss written out: (loss, logits, kept count), p̄ uniform, seed-0 augmentation."""
    logits = model(images)
    count, classes = logits.shape
    probabilities = logits.softmax(1)
    with torch.no_grad():
        uniform = torch.full((classes,), 1.0 / classes)
        cosine = (probabilities @ uniform) / (probabilities.norm(dim=1) * uniform.norm())
        diversity = 1.0 - cosine
        diversity = (diversity - diversity.min()) / (diversity.max() - diversity.min())
        kept = diversity >= diversity.mean()
        certainty = (probabilities * probabilities.log()).sum(1)
        certainty = (certainty - certainty.min()) / (certainty.max() - certainty.min())
        weights = torch.exp(diversity * certainty / temperature)
    clipped = probabilities.clamp(max=0.99)
    likelihood_ratio = -(clipped * torch.log(clipped / (1.0 - clipped) + 1e-5)).sum(1)
    loss = (likelihood_ratio * weights)[kept].sum() / count
    augmented_images = augment_batch(
        images[kept], torch.Generator().manual_seed(0), 0.0, padding_mode="reflect", blur=False
    )
    augmented = model(augmented_images)
    teacher = logits[kept]
    symmetric = -0.5 * (teacher.softmax(1) * augmented.log_softmax(1)).sum(1) - 0.5 * (
        augmented.softmax(1) * teacher.log_softmax(1)
    ).sum(1)
    loss = loss + (symmetric * weights[kept]).sum() / count
    return loss, logits, int(kept.sum())


def test_one_step_equals_the_update_rule_by_hand(tiny_cnn):
    learning_rate, momentum, ensemble = 0.05, 0.9, 0.99
    images = make_batches(1, batch_size=16)[0][0]
    method = create("roid", tiny_cnn, learning_rate=learning_rate)
    returned = method(images)

    reference = batch_statistics_copy(tiny_cnn)
    named = normalization_affine_parameters(reference, ())
    assert [name for name, _ in named] == method.adapted_parameter_names
    sources = [parameter.detach().clone() for _, parameter in named]
    loss, logits, kept = hand_loss(reference, images, 1 / 3)
    gradients = torch.autograd.grad(loss, [parameter for _, parameter in named])

    assert method.last_step.updated and method.last_step.samples_adapted == kept
    assert math.isclose(method.last_step.loss, float(loss.detach()), rel_tol=1e-5)
    # Nesterov SGD from zero momentum: buffer = g, step direction g + m·g; then θ ← γ θ + (1 − γ) θ0.
    for (name, _), source, gradient, adapted in zip(named, sources, gradients, method.adapted_parameters):
        stepped = source - learning_rate * (gradient + momentum * gradient)
        expected = ensemble * stepped + (1.0 - ensemble) * source
        assert not torch.allclose(expected, source, atol=1e-5), f"{name} must move visibly"
        torch.testing.assert_close(adapted.detach(), expected, rtol=1e-5, atol=1e-6, msg=name)
    prior = logits.detach().softmax(1).mean(0)
    smoothing = max(1 / 16, 1 / 10) / prior.max()
    torch.testing.assert_close(
        returned, logits.detach() * (prior + smoothing) / (1 + 10 * smoothing), rtol=1e-5, atol=1e-6
    )


def test_without_ensembling_or_prior_correction_the_step_is_plain_sgd(tiny_cnn):
    images = make_batches(1)[0][0]
    method = create("roid", tiny_cnn, learning_rate=0.05, ensemble_momentum=1.0, prior_correction="none")
    reference = batch_statistics_copy(tiny_cnn)
    named = normalization_affine_parameters(reference, ())
    loss, logits, _ = hand_loss(reference, images, 1 / 3)
    gradients = torch.autograd.grad(loss, [parameter for _, parameter in named])
    torch.testing.assert_close(method(images), logits.detach(), rtol=1e-5, atol=1e-6)
    for (_, source), gradient, adapted in zip(named, gradients, method.adapted_parameters):
        torch.testing.assert_close(adapted.detach(), source.detach() - 0.05 * 1.9 * gradient, rtol=1e-5, atol=1e-6)


def test_weight_ensembling_formula():
    generator = torch.Generator().manual_seed(3)
    parameters = [torch.randn(5, generator=generator), torch.randn(2, 3, generator=generator)]
    sources = [torch.randn(5, generator=generator), torch.randn(2, 3, generator=generator)]
    before = copy.deepcopy(parameters)
    ensemble_with_source(parameters, sources, 0.99)
    for value, old, source in zip(parameters, before, sources):
        torch.testing.assert_close(value, 0.99 * old + 0.01 * source)
    ensemble_with_source(parameters, sources, 0.0)
    for value, source in zip(parameters, sources):
        torch.testing.assert_close(value, source)


@pytest.mark.parametrize("count, classes", [(4, 3), (2, 5)])
def test_prior_correction_formulas(count, classes):
    logits = torch.randn(count, classes, generator=torch.Generator().manual_seed(count))
    batch_mean = logits.softmax(1).mean(0)
    smoothing = max(1.0 / count, 1.0 / classes) / float(batch_mean.max())
    prior = (batch_mean + smoothing) / (1.0 + smoothing * classes)
    torch.testing.assert_close(smoothed_batch_prior(logits), prior)
    torch.testing.assert_close(smoothed_batch_prior(logits).sum(), torch.tensor(1.0))
    torch.testing.assert_close(prior_corrected(logits, "logits"), logits * prior)
    torch.testing.assert_close(prior_corrected(logits, "probabilities"), (logits.softmax(1) * prior).log())
    assert torch.equal(prior_corrected(logits, "none"), logits)
