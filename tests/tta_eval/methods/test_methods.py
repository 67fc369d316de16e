"""Registry behaviour, exact reset and fidelity of every method on tiny models and constructed inputs."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.tta_eval.method_helpers import TEST_OPTIONS, build, prepared
from tests.tta_eval.tta_helpers import (
    ConstructedLogits,
    make_batches,
    make_tiny_cnn,
    optimizer_of,
    optimizer_states_equal,
    states_equal,
)
from tta_eval.methods import (
    ETA,
    RDUMB_RESET_EVERY,
    PeriodicReset,
    create,
    get_method,
    list_methods,
)
from tta_eval.methods.eta import select_non_redundant
from tta_eval.methods.layers import normalization_affine_parameters
from tta_eval.methods.losses import (
    conjugate_polyloss,
    conjugate_pseudo_labels,
    entropy_weights,
    generalized_cross_entropy,
    select_reliable,
    soft_likelihood_ratio,
    softmax_entropy,
)

PAPER_METHODS = ["source", "bn", "tent", "rpl", "slr", "cpl", "cotta", "eta", "eata", "rdumb"]
"""The CCC paper's methods (the contract tests in test_methods_contract.py run over every registered one)."""


# --- registry -------------------------------------------------------------------------------------


def test_registry_holds_the_papers_methods_in_alphabetical_order():
    assert set(PAPER_METHODS) <= set(list_methods())
    assert list_methods() == sorted(list_methods())
    assert list_methods("e*") == ["eata", "eta"]


def test_rdumb_is_eta_with_a_periodic_reset_of_1000(tiny_cnn):
    entry = get_method("rdumb")
    assert issubclass(entry.method_class, ETA) and entry.reset_every == RDUMB_RESET_EVERY == 1000
    assert entry.defaults() == {**get_method("eta").defaults(), "reset": "periodic:every=1000", "reset_every": 1000}
    method = create("rdumb", tiny_cnn)
    assert isinstance(method, PeriodicReset) and method.every == 1000 and isinstance(method.method, ETA)


def test_published_defaults():
    assert get_method("tent").defaults()["learning_rate"] == 2.5e-4
    assert get_method("rpl").defaults()["learning_rate"] == 5e-4
    assert get_method("rpl").defaults()["q"] == 0.8
    assert get_method("cpl").defaults()["poly_epsilon"] == 8.0
    assert get_method("slr").defaults()["learning_rate"] == 6e-4
    cotta = get_method("cotta").defaults()
    assert (cotta["learning_rate"], cotta["teacher_momentum"], cotta["restore_probability"]) == (0.01, 0.999, 0.001)
    assert (cotta["augmentation_count"], cotta["augmentation_threshold"], cotta["nesterov"]) == (32, 0.1, True)
    eata = get_method("eata").defaults()
    assert (eata["fisher_weight"], eata["fisher_samples"], eata["redundancy_margin"]) == (2000.0, 2000, 0.05)
    assert eata["entropy_margin_fraction"] == 0.4 and eata["prediction_momentum"] == 0.9


# --- bad input ------------------------------------------------------------------------------------


def test_unknown_method_lists_the_available_ones(tiny_cnn):
    with pytest.raises(ValueError, match=r"unknown method 'tentt'; available: adabn, asr, bn, .*, tent, .*ttac_nq"):
        create("tentt", tiny_cnn)


def test_unknown_option_lists_the_valid_ones(tiny_cnn):
    with pytest.raises(
        ValueError, match=r"unknown option 'lr' for method 'tent'; valid options: learning_rate, momentum"
    ):
        create("tent", tiny_cnn, lr=0.1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"learning_rate": "fast"}, r"option 'learning_rate' of method 'tent' must be a number, got 'fast'"),
        ({"learning_rate": -1.0}, r"learning_rate must be a finite number > 0, got -1.0"),
        ({"momentum": 1.0}, r"momentum must be in \[0, 1\), got 1.0"),
        ({"nesterov": 1}, r"option 'nesterov' of method 'tent' must be a boolean, got 1"),
        ({"reset_every": 0}, r"reset_every must be an integer >= 1, got 0"),
    ],
)
def test_bad_option_values_name_the_option(tiny_cnn, options, message):
    with pytest.raises(ValueError, match=message):
        create("tent", tiny_cnn, **options)


def test_choice_options_list_their_choices(tiny_cnn):
    with pytest.raises(ValueError, match=r"adapted_parameters must be one of all, batchnorm; got 'everything'"):
        create("cotta", tiny_cnn, adapted_parameters="everything")


@pytest.mark.parametrize("name", ["tent", "cotta", "memo", "shot_im", "sar"])
def test_the_optimizer_option_builds_adam_with_momentum_as_beta1(name, tiny_cnn):
    options = {"optimizer": "adam", "learning_rate": 1e-3, "momentum": 0.8, "weight_decay": 0.01, "nesterov": False}
    method = create(name, tiny_cnn, **options)
    assert isinstance(method.optimizer, torch.optim.Adam)
    group = method.optimizer.param_groups[0]
    assert (group["lr"], group["betas"], group["weight_decay"]) == (1e-3, (0.8, 0.999), 0.01)
    assert isinstance(create(name, tiny_cnn).optimizer, torch.optim.SGD)


def test_adam_steps_and_resets_exactly(tiny_cnn):
    method = create("tent", tiny_cnn, optimizer="adam", learning_rate=1e-2)
    before = [parameter.detach().clone() for parameter in method.optimizer.param_groups[0]["params"]]
    method(make_batches(1)[0][0])
    after = method.optimizer.param_groups[0]["params"]
    assert method.optimizer.state and any(not torch.equal(old, new) for old, new in zip(before, after))
    method.reset()
    assert not method.optimizer.state and all(torch.equal(old, new) for old, new in zip(before, after))


def test_nesterov_needs_sgd(tiny_cnn):
    with pytest.raises(ValueError, match=r"^nesterov=True needs optimizer='sgd', got optimizer='adam'$"):
        create("roid", tiny_cnn, optimizer="adam")
    with pytest.raises(ValueError, match=r"optimizer must be one of adam, sgd; got 'rmsprop'"):
        create("tent", tiny_cnn, optimizer="rmsprop")


def test_source_accepts_a_model_without_batchnorm():
    model = nn.Sequential(nn.Flatten(), nn.Linear(192, 10))
    assert create("source", model)(torch.rand(2, 3, 8, 8)).shape == (2, 10)


def test_eata_without_prepare_explains_what_is_missing(tiny_cnn):
    method = create("eata", tiny_cnn, **TEST_OPTIONS["eata"])
    with pytest.raises(RuntimeError, match="eata has no Fisher information yet: call prepare"):
        method(make_batches(1)[0][0])


def test_eata_prepare_with_too_few_images(tiny_cnn):
    method = create("eata", tiny_cnn, fisher_samples=100)
    with pytest.raises(ValueError, match="eata needs fisher_samples=100 stream images to estimate the Fisher, got 32"):
        method.prepare(images for images, _ in make_batches(2))


# --- source and BN --------------------------------------------------------------------------------


def test_source_never_changes_a_parameter_or_buffer(tiny_cnn):
    method = create("source", tiny_cnn)
    before = copy.deepcopy(method.state_dict())
    for images, _ in make_batches(5):
        assert torch.equal(method(images), tiny_cnn(images))
    assert states_equal(method.state_dict(), before)
    assert method.last_step.samples_adapted == 0 and math.isnan(method.last_step.loss)


def test_bn_uses_batch_statistics_and_tracks_running_statistics(tiny_cnn):
    method = create("bn", tiny_cnn)
    images, _ = make_batches(1)[0]
    reference = copy.deepcopy(tiny_cnn).train()
    expected = reference(images)
    assert torch.allclose(method(images), expected)
    assert not torch.allclose(expected, tiny_cnn(images))
    for name, buffer in reference.state_dict().items():
        assert torch.equal(method.model.state_dict()[name], buffer), name
    assert all(not parameter.requires_grad for parameter in method.parameters())


# --- Tent -----------------------------------------------------------------------------------------


def test_tent_updates_only_batchnorm_affine_parameters_with_one_sgd_step(tiny_cnn):
    learning_rate = 0.1
    method = create("tent", tiny_cnn, learning_rate=learning_rate)
    images, _ = make_batches(1)[0]
    reference = copy.deepcopy(tiny_cnn).train()
    reference_logits = reference(images)
    entropy = softmax_entropy(reference_logits).mean()
    affine = dict(normalization_affine_parameters(reference))
    gradients = dict(zip(affine, torch.autograd.grad(entropy, list(affine.values()))))

    logits = method(images)

    assert torch.allclose(logits, reference_logits.detach()), "prediction from the batch-statistics forward pass"
    assert math.isclose(method.last_step.loss, float(entropy.detach()), rel_tol=1e-6)
    before = dict(tiny_cnn.named_parameters())
    for name, parameter in method.model.named_parameters():
        if name in affine:
            assert torch.allclose(parameter, before[name] - learning_rate * gradients[name], atol=1e-7), name
            assert not torch.equal(parameter, before[name]), name
        else:
            assert torch.equal(parameter, before[name]), name
    assert set(method.adapted_parameter_names) == set(affine)


# --- ETA / EATA -----------------------------------------------------------------------------------


def confident(classes: int, target: int, margin: float) -> torch.Tensor:
    logits = torch.zeros(classes)
    logits[target] = margin
    return logits


def test_eta_reliability_filter_keeps_exactly_the_low_entropy_samples():
    classes = 10
    margin = 0.4 * math.log(classes)
    logits = torch.stack(
        [confident(classes, 0, 10.0), torch.zeros(classes), confident(classes, 3, 5.0), confident(classes, 5, 3.0)]
    )
    entropies = softmax_entropy(logits)
    expected = [index for index in range(4) if float(entropies[index]) < margin]
    assert expected == [0, 2]
    assert select_reliable(entropies, margin).tolist() == expected


def test_eta_redundancy_filter_uses_absolute_cosine_below_the_margin():
    classes = 10
    mean_prediction = confident(classes, 0, 20.0).softmax(0)
    probabilities = torch.stack(
        [confident(classes, 0, 20.0).softmax(0), confident(classes, 1, 20.0).softmax(0), torch.full((classes,), 0.1)]
    )
    assert select_non_redundant(probabilities, mean_prediction, 0.05).tolist() == [1]
    assert select_non_redundant(probabilities, None, 0.05).tolist() == [0, 1, 2]


def test_eta_weights_are_one_over_exp_of_entropy_minus_margin():
    entropies = torch.tensor([0.1, 0.5, 2.0])
    margin = 0.4 * math.log(1000)
    expected = [1.0 / math.exp(value - margin) for value in entropies.tolist()]
    assert torch.allclose(entropy_weights(entropies, margin), torch.tensor(expected))


def test_eta_forward_adapts_on_exactly_the_filtered_samples_with_the_weighted_loss():
    classes = 10
    method = create("eta", ConstructedLogits(classes))
    margin = 0.4 * math.log(classes)
    first = torch.stack([confident(classes, 0, 12.0), torch.zeros(classes), confident(classes, 2, 8.0)])
    method(first)
    entropies = softmax_entropy(first)
    kept = [0, 2]
    expected_loss = float((entropies[kept] * torch.exp(margin - entropies[kept])).mean())
    assert method.last_step.samples_adapted == 2
    assert math.isclose(method.last_step.loss, expected_loss, rel_tol=1e-5)
    expected_mean = first[kept].softmax(1).mean(0)
    assert torch.allclose(method.mean_prediction, expected_mean)

    # Batch 2: sample 0 repeats the running mean's direction (redundant), sample 1 predicts class 7.
    second = torch.stack([confident(classes, 0, 12.0), confident(classes, 7, 12.0), torch.zeros(classes)])
    method(second)
    assert method.last_step.samples_adapted == 1
    assert torch.allclose(method.mean_prediction, 0.9 * expected_mean + 0.1 * second[1].softmax(0))


def test_eta_without_any_reliable_sample_takes_no_step(tiny_cnn):
    method = create("eta", tiny_cnn, entropy_margin_fraction=0.01)
    before = copy.deepcopy(method.state_dict())
    method(make_batches(1)[0][0])
    assert method.last_step.samples_adapted == 0 and not method.last_step.updated
    parameters = dict(method.named_parameters())
    assert all(torch.equal(parameters[name], before[name]) for name in parameters)


def reference_fisher(model: nn.Module, image_batches: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Fisher as the EATA paper defines it, written independently of the library."""
    network = copy.deepcopy(model).train()
    affine = dict(normalization_affine_parameters(network))
    totals = {name: torch.zeros_like(parameter) for name, parameter in affine.items()}
    for images in image_batches:
        logits = network(images)
        loss = F.cross_entropy(logits, logits.argmax(1))
        for name, gradient in zip(affine, torch.autograd.grad(loss, list(affine.values()))):
            totals[name] += gradient**2
    return {name: total / len(image_batches) for name, total in totals.items()}


def test_eata_fisher_comes_from_exactly_the_first_n_stream_samples(tiny_cnn):
    stream = [images for images, _ in make_batches(4)]  # 16 images per batch
    method = create("eata", tiny_cnn, fisher_samples=40)
    buffers_before = {name: buffer.clone() for name, buffer in method.model.named_buffers()}
    method.prepare(iter(stream))
    expected = reference_fisher(tiny_cnn, [stream[0], stream[1], stream[2][:8]])
    assert expected.keys() == method.fisher.keys()
    for name in expected:
        assert torch.allclose(method.fisher[name], expected[name], rtol=1e-5, atol=1e-12), name
    assert all(torch.equal(buffer, buffers_before[name]) for name, buffer in method.model.named_buffers())


def test_eata_penalty_is_alpha_times_fisher_weighted_squared_distance(tiny_cnn):
    options = {"entropy_margin_fraction": 1.0, "redundancy_margin": 1.0, "learning_rate": 0.5}
    batches = [images for images, _ in make_batches(3)]
    eata = create("eata", tiny_cnn, fisher_samples=16, fisher_weight=1e6, **options)
    eta = create("eta", tiny_cnn, **options)
    eata.prepare(iter(batches[:1]))
    source = dict(tiny_cnn.named_parameters())

    eata(batches[1])
    eta(batches[1])  # the penalty and its gradient are 0 at the source weights: identical first step
    assert torch.equal(eata.model[1].weight, eta.model[1].weight)

    parameters = dict(eata.model.named_parameters())
    with torch.no_grad():
        expected = 1e6 * sum(
            float((eata.fisher[name] * (parameters[name] - source[name]) ** 2).sum()) for name in eata.fisher
        )
    assert expected > 0
    assert math.isclose(float(eata.fisher_penalty().detach()), expected, rel_tol=1e-5)
    eata(batches[2])
    eta(batches[2])
    assert math.isclose(eata.last_step.loss - eta.last_step.loss, expected, rel_tol=1e-3)


def test_eata_reset_keeps_the_fisher(tiny_cnn):
    method = prepared(build("eata", tiny_cnn))
    fisher = {name: value.clone() for name, value in method.fisher.items()}
    method(make_batches(1)[0][0])
    method.reset()
    assert all(torch.equal(method.fisher[name], fisher[name]) for name in fisher)
    assert method.mean_prediction is None


# --- RDumb / periodic reset -----------------------------------------------------------------------


def test_rdumb_resets_at_exactly_every_kth_step(tiny_cnn):
    options = {"entropy_margin_fraction": 1.0, "redundancy_margin": 1.0, "learning_rate": 0.05, "reset_every": 3}
    batches = [images for images, _ in make_batches(8)]
    method = create("rdumb", tiny_cnn, **options)
    initial = copy.deepcopy(method.state_dict())
    flags = []
    for index, images in enumerate(batches):
        logits = method(images)
        flags.append(method.last_step.reset)
        if index % 3 == 0:
            fresh = create("rdumb", tiny_cnn, **options)
            assert torch.equal(logits, fresh(images)), f"batch {index} must see the initial weights"
            assert optimizer_states_equal(method.method.optimizer.state_dict(), fresh.method.optimizer.state_dict())
            assert states_equal(method.state_dict(), fresh.state_dict())
        else:
            assert not states_equal(method.state_dict(), initial)
    assert flags == [False, False, False, True, False, False, True, False]


def test_periodic_reset_clears_the_prediction_average(tiny_cnn):
    method = create("eta", tiny_cnn, entropy_margin_fraction=1.0, redundancy_margin=1.0, reset_every=2)
    batches = [images for images, _ in make_batches(3)]
    method(batches[0])
    method(batches[1])
    assert method.method.mean_prediction is not None
    method(batches[2])
    fresh = create("eta", tiny_cnn, entropy_margin_fraction=1.0, redundancy_margin=1.0)
    fresh(batches[2])
    assert torch.equal(method.method.mean_prediction, fresh.mean_prediction)


# --- CoTTA ----------------------------------------------------------------------------------------


def test_cotta_stochastic_restore_and_ema_teacher(tiny_cnn):
    options = {
        "adapted_parameters": "all",
        "learning_rate": 0.5,
        "augmentation_threshold": 0.0,
        "teacher_momentum": 0.75,
        "seed": 3,
    }
    probability = 0.3
    method = create("cotta", tiny_cnn, restore_probability=probability, **options)
    twin = create("cotta", tiny_cnn, restore_probability=0.0, **options)
    images, _ = make_batches(1)[0]
    generator = torch.Generator().manual_seed(3)

    teacher_logits = method(images)
    twin(images)

    source = dict(tiny_cnn.named_parameters())
    stepped = dict(twin.model.named_parameters())
    restored = dict(method.model.named_parameters())
    restored_elements = 0
    total_elements = 0
    for name in method.adapted_parameter_names:
        mask = torch.rand(source[name].shape, generator=generator) < probability
        assert torch.equal(restored[name], torch.where(mask, source[name], stepped[name])), name
        restored_elements += int(mask.sum())
        total_elements += mask.numel()
    fraction = restored_elements / total_elements
    standard_error = math.sqrt(probability * (1 - probability) / total_elements)
    assert total_elements > 500 and abs(fraction - probability) < 4 * standard_error

    for name, teacher_parameter in method.teacher.named_parameters():
        assert torch.allclose(teacher_parameter, 0.75 * source[name] + 0.25 * stepped[name], atol=1e-6), name
    assert torch.allclose(teacher_logits, copy.deepcopy(tiny_cnn).train()(images), atol=1e-6)


def test_cotta_default_adapts_batchnorm_only(tiny_cnn):
    method = create("cotta", tiny_cnn)
    assert set(method.adapted_parameter_names) == {name for name, _ in normalization_affine_parameters(tiny_cnn)}


def test_cotta_augments_when_the_anchor_is_unsure(tiny_cnn):
    images, _ = make_batches(1)[0]
    with_augmentation = create("cotta", tiny_cnn, augmentation_threshold=1.0, augmentation_count=3)
    without = create("cotta", tiny_cnn, augmentation_threshold=0.0)
    assert not torch.allclose(with_augmentation(images), without(images))


# --- RPL, CPL, SLR losses -------------------------------------------------------------------------


def test_generalized_cross_entropy_formula():
    logits = torch.tensor([[2.0, 0.5, -1.0], [0.0, 0.0, 3.0]])
    targets = torch.tensor([0, 1])
    probabilities = logits.softmax(1)
    expected = torch.stack([(1 - probabilities[i, targets[i]] ** 0.8) / 0.8 for i in range(2)])
    assert torch.allclose(generalized_cross_entropy(logits, targets, 0.8), expected)


def test_rpl_loss_is_gce_to_the_arg_max_of_the_batch_statistics_forward(tiny_cnn):
    method = create("rpl", tiny_cnn)
    images, _ = make_batches(1)[0]
    logits = copy.deepcopy(tiny_cnn).train()(images).detach()
    expected = float(((1 - logits.softmax(1).max(1).values ** 0.8) / 0.8).mean())
    method(images)
    assert math.isclose(method.last_step.loss, expected, rel_tol=1e-5)


def reference_conjugate_loss(logits: torch.Tensor, epsilon: float) -> torch.Tensor:
    """The CCC code's formula with an explicit linear solve (float64)."""
    logits = logits.double()
    probabilities = logits.softmax(1)
    classes = logits.shape[1]
    matrix = (
        torch.eye(classes, dtype=torch.float64).expand(logits.shape[0], classes, classes)
        + epsilon * torch.diag_embed(probabilities)
        - epsilon * probabilities.unsqueeze(2) @ probabilities.unsqueeze(1)
    )
    pseudo = torch.linalg.solve(matrix, probabilities.unsqueeze(2)).squeeze(2)
    return torch.logsumexp(logits, 1) - (pseudo * logits - epsilon * pseudo * (1 - probabilities)).sum(1)


@pytest.mark.parametrize("epsilon", [0.0, 1.0, 8.0])
def test_conjugate_loss_matches_the_linear_solve_formula(epsilon):
    logits = torch.randn(6, 12, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3
    assert torch.allclose(conjugate_polyloss(logits, epsilon), reference_conjugate_loss(logits, epsilon), atol=1e-10)


def test_conjugate_pseudo_labels_solve_the_system():
    probabilities = torch.randn(4, 7, dtype=torch.float64).softmax(1)
    pseudo = conjugate_pseudo_labels(probabilities, 8.0)
    matrix = (
        torch.eye(7, dtype=torch.float64)
        + 8.0 * torch.diag_embed(probabilities)
        - 8.0 * probabilities.unsqueeze(2) @ probabilities.unsqueeze(1)
    )
    assert torch.allclose((matrix @ pseudo.unsqueeze(2)).squeeze(2), probabilities, atol=1e-12)


def test_conjugate_loss_with_epsilon_zero_is_the_entropy():
    logits = torch.randn(5, 9, dtype=torch.float64)
    assert torch.allclose(conjugate_polyloss(logits, 0.0), softmax_entropy(logits), atol=1e-12)


def test_cpl_method_uses_the_conjugate_loss(tiny_cnn):
    method = create("cpl", tiny_cnn)
    images, _ = make_batches(1)[0]
    logits = copy.deepcopy(tiny_cnn).train()(images).detach()
    method(images)
    assert math.isclose(method.last_step.loss, float(reference_conjugate_loss(logits, 8.0).mean()), rel_tol=1e-5)


def test_soft_likelihood_ratio_formula_and_no_saturation():
    logits = torch.randn(5, 6, dtype=torch.float64)
    probabilities = logits.softmax(1)
    expected = -(probabilities * torch.log(probabilities / (1 - probabilities))).sum(1)
    assert torch.allclose(soft_likelihood_ratio(logits, probabilities), expected, atol=1e-10)
    confident_logits = torch.tensor([[60.0, 0.0, 0.0]], requires_grad=True)
    loss = soft_likelihood_ratio(confident_logits, confident_logits.softmax(1).detach()).sum()
    loss.backward()
    assert math.isfinite(float(loss.detach())) and float(confident_logits.grad.abs().max()) > 0.5


def test_slr_adapts_with_adam_on_batchnorm_parameters(tiny_cnn):
    method = create("slr", tiny_cnn)
    assert isinstance(method.optimizer, torch.optim.Adam)
    assert method.optimizer.defaults["lr"] == 6e-4
    method(make_batches(1)[0][0])
    assert method.last_step.updated and method.mean_prediction is not None


# --- non-finite losses ----------------------------------------------------------------------------


def test_nonfinite_loss_skips_the_update(tiny_cnn):
    method = create("tent", tiny_cnn)
    before = copy.deepcopy(method.state_dict())
    images = make_batches(1)[0][0]
    images[0, 0, 0, 0] = float("nan")
    method(images)
    assert method.last_step.nonfinite_loss and not method.last_step.updated
    parameters = dict(method.named_parameters())
    assert all(torch.equal(parameters[name], before[name]) for name in parameters)
    assert optimizer_of(method).state_dict()["state"] == {}


def test_models_with_other_class_counts(tiny_cnn):
    model = make_tiny_cnn(num_classes=1000)
    method = create("eta", model)
    logits = method(make_batches(1)[0][0])
    assert logits.shape == (16, 1000)
    assert method.config.entropy_margin(1000) == pytest.approx(0.4 * math.log(1000))
