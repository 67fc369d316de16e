"""Fidelity of SAR, DeYO, MEMO, RoTTA, CMF and TTAC-NQ: update rules against independent reference
computations on tiny models, filters on constructed inputs, hand-computed loss values, resets."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from tests.tta_eval.method_helpers import batch_statistics_copy, make_staged_cnn
from tests.tta_eval.tta_helpers import make_batches, states_equal
from tta_eval.methods import SourceFeatureStatistics, compute_source_statistics, create
from tta_eval.methods.augmentation import augment_batch
from tta_eval.methods.deyo import pseudo_label_probability_difference, shuffle_patches
from tta_eval.methods.layers import batchnorm_prior, batchnorm_statistics_frozen, normalization_affine_parameters
from tta_eval.methods.losses import cross_entropy_to_teacher, softmax_entropy
from tta_eval.methods.memo import augmix_view, marginal_entropy, pil_affine
from tta_eval.methods.roid import clipped_soft_likelihood_ratio, roid_sample_weights, smoothed_batch_prior
from tta_eval.methods.rotta import CategoryBalancedMemory, RobustBatchNorm, timeliness_weights
from tta_eval.methods.ttac_nq import symmetric_diagonal_gaussian_kl, symmetric_gaussian_kl


def midpoint_threshold(values: torch.Tensor) -> float:
    """A threshold strictly between the two middle values of ``values`` (so about half pass a filter)."""
    ordered = values.detach().sort().values
    middle = ordered.shape[0] // 2
    return float(0.5 * (ordered[middle - 1] + ordered[middle]))


# --- SAR ------------------------------------------------------------------------------------------


def reference_sar_update(model, images, margin, radius, learning_rate):
    """One SAR step written from the paper's equations (SAM with SGD, momentum buffer empty)."""
    reference = batch_statistics_copy(model)
    named = normalization_affine_parameters(reference, ("layer4",))
    parameters = [parameter for _, parameter in named]
    entropies = softmax_entropy(reference(images))
    reliable = entropies < margin
    gradients = torch.autograd.grad(entropies[reliable].mean(), parameters)
    norm = torch.sqrt(sum((gradient**2).sum() for gradient in gradients))
    originals = [parameter.detach().clone() for parameter in parameters]
    with torch.no_grad():
        for parameter, gradient in zip(parameters, gradients):
            parameter.add_(radius * gradient / (norm + 1e-12))
    with batchnorm_statistics_frozen(reference):
        second = softmax_entropy(reference(images))[reliable]
    kept = second < margin
    second_loss = second[kept].mean()
    second_gradients = torch.autograd.grad(second_loss, parameters)
    expected = {
        name: original - learning_rate * gradient
        for (name, _), original, gradient in zip(named, originals, second_gradients)
    }
    return expected, float(second_loss.detach()), int(reliable.sum()), int(kept.sum()), reference


def test_sar_takes_a_sharpness_aware_step_on_the_twice_filtered_samples():
    model = make_staged_cnn()
    images = make_batches(1)[0][0]
    with torch.no_grad():
        entropies = softmax_entropy(batch_statistics_copy(model)(images))
    margin = midpoint_threshold(entropies)
    radius, learning_rate = 2.0, 0.5
    method = create(
        "sar", model, entropy_margin_fraction=margin / math.log(10), sam_radius=radius, learning_rate=learning_rate
    )
    expected, second_loss, reliable, kept, reference = reference_sar_update(
        model, images, margin, radius, learning_rate
    )
    assert reliable == 8 and kept < reliable, "both filters should remove samples in this construction"

    logits = method(images)

    assert method.last_step.samples_adapted == kept and method.last_step.updated
    assert math.isclose(method.last_step.loss, second_loss, rel_tol=1e-5)
    assert math.isclose(method.loss_average, second_loss, rel_tol=1e-5)
    assert method.adapted_parameter_names == list(expected)
    source = dict(model.named_parameters())
    for name, parameter in method.model.named_parameters():
        assert torch.allclose(parameter, expected.get(name, source[name]), atol=1e-6), name
    assert not torch.equal(method.model.layer40[1].weight, source["layer40.1.weight"]), "GroupNorm is adapted"
    # Running statistics absorbed the batch once (first pass), not the perturbed second pass.
    for name, buffer in reference.named_buffers():
        assert torch.allclose(method.model.get_buffer(name), buffer), name
    assert torch.allclose(logits, batch_statistics_copy(model)(images), atol=1e-6)


def test_sar_model_recovery_resets_after_the_batch_and_reports_it_on_the_next(tiny_cnn):
    method = create("sar", tiny_cnn, entropy_margin_fraction=1.0, recovery_threshold=10.0)
    initial = copy.deepcopy(method.state_dict())
    first, second = (images for images, _ in make_batches(2))
    method(first)
    assert method.last_step.updated and not method.last_step.reset
    assert method.loss_average is None and states_equal(method.state_dict(), initial)
    assert method.optimizer.state_dict()["state"] == {}
    method(second)
    assert method.last_step.reset

    wrapped = create("sar", tiny_cnn, entropy_margin_fraction=1.0, recovery_threshold=10.0, reset_every=100)
    wrapped(first)
    wrapped(second)
    assert wrapped.last_step.reset, "a periodic-reset wrapper keeps the method's own reset flag"


def test_sar_loss_average_is_an_exponential_moving_average(tiny_cnn):
    method = create("sar", tiny_cnn, entropy_margin_fraction=1.0)
    losses = []
    for images, _ in make_batches(3):
        method(images)
        losses.append(method.last_step.loss)
    expected = 0.9 * (0.9 * losses[0] + 0.1 * losses[1]) + 0.1 * losses[2]
    assert math.isclose(method.loss_average, expected, rel_tol=1e-9)


def test_sar_without_a_reliable_sample_takes_no_step(tiny_cnn):
    method = create("sar", tiny_cnn, entropy_margin_fraction=0.01)
    before = copy.deepcopy(dict(method.named_parameters()))
    method(make_batches(1)[0][0])
    assert method.last_step.samples_adapted == 0 and not method.last_step.updated and method.loss_average is None
    assert states_equal(dict(method.named_parameters()), before)


# --- DeYO -----------------------------------------------------------------------------------------


def test_shuffle_patches_permutes_whole_patches_with_the_method_generator():
    image = torch.arange(4.0).view(1, 1, 2, 2).repeat_interleave(3, dim=2).repeat_interleave(3, dim=3)
    assert image.shape == (1, 1, 6, 6)
    shuffled = shuffle_patches(image, 2, torch.Generator().manual_seed(11))
    order = torch.argsort(torch.rand(1, 4, generator=torch.Generator().manual_seed(11)), dim=1)[0]
    patch_values = [float(shuffled[0, 0, 3 * (k // 2), 3 * (k % 2)]) for k in range(4)]
    assert patch_values == order.float().tolist()
    for k in range(4):
        patch = shuffled[0, 0, 3 * (k // 2) : 3 * (k // 2) + 3, 3 * (k % 2) : 3 * (k % 2) + 3]
        assert torch.all(patch == patch_values[k])
    odd = shuffle_patches(torch.rand(2, 3, 10, 10), 4, torch.Generator().manual_seed(0))
    assert odd.shape == (2, 3, 10, 10)
    with pytest.raises(ValueError, match=r"patch_grid must be <= the image height and width, got 4 for 3×3 images"):
        shuffle_patches(torch.rand(1, 3, 3, 3), 4, torch.Generator())


def test_plpd_is_the_confidence_drop_of_the_original_label():
    probabilities = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    shuffled = torch.tensor([[0.3, 0.5, 0.2], [0.1, 0.0, 0.9]])
    assert torch.allclose(pseudo_label_probability_difference(probabilities, shuffled), torch.tensor([0.4, -0.1]))


def test_deyo_keeps_no_sample_when_the_prediction_ignores_the_object_shape():
    # Per-channel normalisation and max pooling: patch shuffling cannot change the prediction (PLPD 0).
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = nn.Sequential(nn.GroupNorm(3, 3), nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(3, 10)).eval()
    images = make_batches(1)[0][0]
    method = create("deyo", model, filter_margin_fraction=1.0)
    before = copy.deepcopy(dict(method.named_parameters()))
    method(images)
    assert method.last_step.samples_adapted == 0 and not method.last_step.updated
    assert states_equal(dict(method.named_parameters()), before)
    method = create("deyo", model, filter_margin_fraction=1.0, plpd_threshold=-0.5)
    method(images)
    assert method.last_step.samples_adapted == 16 and method.last_step.updated


def test_deyo_update_matches_the_papers_filters_and_weights(tiny_cnn):
    images = make_batches(1)[0][0]
    reference = batch_statistics_copy(tiny_cnn)
    logits = reference(images)
    entropies = softmax_entropy(logits)
    filter_margin = midpoint_threshold(entropies)
    reliable = torch.nonzero(entropies < filter_margin, as_tuple=True)[0]
    shuffled = shuffle_patches(images[reliable], 4, torch.Generator().manual_seed(5))
    with torch.no_grad(), batchnorm_statistics_frozen(reference):
        shuffled_probabilities = reference(shuffled).softmax(1)
    probabilities = logits[reliable].detach().softmax(1)
    labels = probabilities.argmax(1, keepdim=True)
    plpd = (probabilities.gather(1, labels) - shuffled_probabilities.gather(1, labels)).squeeze(1)
    plpd_threshold = midpoint_threshold(plpd)
    kept = plpd > plpd_threshold
    kept_entropies = entropies[reliable][kept]
    weights = 1 / torch.exp(kept_entropies.detach() - 0.4 * math.log(10)) + 1 / torch.exp(-plpd[kept])
    loss = (kept_entropies * weights).mean()
    affine = dict(normalization_affine_parameters(reference))
    gradients = dict(zip(affine, torch.autograd.grad(loss, list(affine.values()))))

    learning_rate = 0.5
    method = create(
        "deyo",
        tiny_cnn,
        filter_margin_fraction=filter_margin / math.log(10),
        plpd_threshold=plpd_threshold,
        learning_rate=learning_rate,
        seed=5,
    )
    method(images)

    assert reliable.numel() == 8 and 0 < int(kept.sum()) < 8
    assert method.last_step.samples_adapted == int(kept.sum())
    assert math.isclose(method.last_step.loss, float(loss.detach()), rel_tol=1e-5)
    source = dict(tiny_cnn.named_parameters())
    for name, parameter in method.model.named_parameters():
        expected = source[name] - learning_rate * gradients[name] if name in gradients else source[name]
        assert torch.allclose(parameter, expected, atol=1e-6), name


def test_deyo_skips_layer4_like_sar():
    method = create("deyo", make_staged_cnn())
    assert method.adapted_parameter_names == ["layer1.1.weight", "layer1.1.bias", "layer40.1.weight", "layer40.1.bias"]


# --- MEMO -----------------------------------------------------------------------------------------


def test_marginal_entropy_by_hand():
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    expected = -(0.625 * math.log(0.625) + 0.375 * math.log(0.375))
    assert math.isclose(float(marginal_entropy(logits)), expected, rel_tol=1e-6)


def test_batchnorm_prior_mixes_statistics_without_gradient_and_restores_buffers():
    layer = nn.BatchNorm2d(3).eval()
    with torch.no_grad():
        layer.running_mean.copy_(torch.tensor([0.5, -0.5, 0.0]))
        layer.running_var.copy_(torch.tensor([2.0, 0.5, 1.0]))
        layer.weight.copy_(torch.tensor([1.5, 0.5, 1.0]))
    inputs = torch.randn(4, 3, 5, 5, generator=torch.Generator().manual_seed(0), requires_grad=True)
    prior = 16 / 17
    mean = prior * layer.running_mean + (1 - prior) * inputs.detach().mean((0, 2, 3))
    variance = prior * layer.running_var + (1 - prior) * inputs.detach().var((0, 2, 3), unbiased=True)
    scale = (layer.weight / torch.sqrt(variance + layer.eps)).detach()
    with batchnorm_prior(layer, prior):
        output = layer(inputs)
    expected = (inputs - mean.view(1, 3, 1, 1)) * scale.view(1, 3, 1, 1) + layer.bias.view(1, 3, 1, 1)
    assert torch.allclose(output, expected, atol=1e-6)
    (gradient,) = torch.autograd.grad(output.sum(), inputs)
    assert torch.allclose(gradient, scale.view(1, 3, 1, 1).expand_as(inputs), atol=1e-6)
    assert torch.equal(layer.running_mean, torch.tensor([0.5, -0.5, 0.0]))
    assert not layer._forward_pre_hooks and not layer._forward_hooks


def test_pil_affine_translates_exactly_and_follows_pil_geometry():
    generator = np.random.default_rng(0)
    array = generator.integers(0, 256, size=(12, 16, 3), dtype=np.uint8)
    image = torch.from_numpy(array).permute(2, 0, 1).contiguous()
    shifted = pil_affine(image, (1.0, 0.0, 2.0, 0.0, 1.0, 0.0))
    assert torch.equal(shifted[:, :, :-2], image[:, :, 2:]) and torch.all(shifted[:, :, -2:] == 128)
    for coefficients in [(1.0, 0.03, 0.0, 0.0, 1.0, 0.0), (0.9994, 0.0349, -0.4, -0.0349, 0.9994, 0.4)]:
        expected = np.asarray(
            Image.fromarray(array).transform(
                (16, 12), Image.AFFINE, coefficients, resample=Image.BILINEAR, fillcolor=(128,) * 3
            )
        ).astype(int)
        ours = pil_affine(image, coefficients).permute(1, 2, 0).numpy().astype(int)
        # Inside the one-pixel border every value is within 1 of PIL's; PIL's edge rule differs.
        assert np.abs(ours - expected)[1:-1, 1:-1].max() <= 1


def test_augmix_views_are_reproducible_images_in_range():
    image = make_batches(1)[0][0][0]
    first = augmix_view(image, torch.Generator().manual_seed(3))
    again = augmix_view(image, torch.Generator().manual_seed(3))
    other = augmix_view(image, torch.Generator().manual_seed(4))
    assert first.shape == image.shape and first.dtype == image.dtype
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert float(first.min()) >= 0.0 and float(first.max()) <= 1.0


def test_memo_adapts_each_image_from_the_source_weights_and_predicts_after_the_step(tiny_cnn):
    learning_rate, views, prior = 0.5, 3, 16 / 17
    method = create("memo", tiny_cnn, augmentation_count=views, learning_rate=learning_rate, seed=2)
    initial = copy.deepcopy(method.state_dict())
    images = make_batches(1)[0][0][:2]
    generator = torch.Generator().manual_seed(2)
    expected_logits, losses = [], []
    for image in images:
        reference = copy.deepcopy(tiny_cnn).eval()
        batch = torch.stack([augmix_view(image, generator) for _ in range(views)])
        with batchnorm_prior(reference, prior):
            loss = marginal_entropy(reference(batch))
        parameters = list(reference.parameters())
        gradients = torch.autograd.grad(loss, parameters)
        with torch.no_grad():
            for parameter, gradient in zip(parameters, gradients):
                parameter.sub_(learning_rate * gradient)
            with batchnorm_prior(reference, prior):
                expected_logits.append(reference(image.unsqueeze(0)))
        losses.append(float(loss.detach()))

    logits = method(images)

    assert torch.allclose(logits, torch.cat(expected_logits), atol=1e-5)
    assert math.isclose(method.last_step.loss, sum(losses) / 2, rel_tol=1e-5)
    assert method.last_step.samples_adapted == 2 and method.last_step.updated
    assert states_equal(method.state_dict(), initial), "episodic: the source weights are back after the batch"
    assert not torch.allclose(logits, tiny_cnn(images))


# --- RoTTA ----------------------------------------------------------------------------------------


def test_robust_batchnorm_mixes_global_and_batch_statistics_with_gradient():
    layer = nn.BatchNorm2d(3)
    with torch.no_grad():
        layer.running_mean.copy_(torch.tensor([0.5, -0.5, 0.0]))
        layer.running_var.copy_(torch.tensor([2.0, 0.5, 1.0]))
        layer.weight.copy_(torch.tensor([1.5, 0.5, 1.0]))
    robust = RobustBatchNorm(layer, 0.05).train()
    inputs = torch.randn(4, 3, 5, 5, generator=torch.Generator().manual_seed(0), requires_grad=True)
    mean = 0.95 * layer.running_mean + 0.05 * inputs.mean((0, 2, 3))
    variance = 0.95 * layer.running_var + 0.05 * inputs.var((0, 2, 3), unbiased=False)
    expected = (
        (inputs - mean.view(1, 3, 1, 1)) / torch.sqrt(variance.view(1, 3, 1, 1) + 1e-5) * layer.weight.view(1, 3, 1, 1)
    )
    output = robust(inputs)
    assert torch.allclose(output, expected, atol=1e-6)
    weights = torch.rand(output.shape, generator=torch.Generator().manual_seed(1))
    (ours,) = torch.autograd.grad((output * weights).sum(), inputs)
    (theirs,) = torch.autograd.grad((expected * weights).sum(), inputs)
    assert torch.allclose(ours, theirs, atol=1e-6)
    assert torch.allclose(robust.running_mean, mean.detach()) and torch.allclose(robust.running_var, variance.detach())
    robust.eval()
    frozen = robust(inputs)
    assert torch.allclose(frozen, robust(inputs)) and torch.allclose(robust.running_mean, mean.detach())


def test_timeliness_weights_by_hand():
    weights = timeliness_weights(torch.tensor([0.0, 1.0]))
    assert torch.allclose(weights, torch.tensor([0.5, math.exp(-1) / (1 + math.exp(-1))]))


def test_category_balanced_memory_evicts_by_timeliness_and_uncertainty():
    memory = CategoryBalancedMemory(capacity=4, num_classes=2, timeliness_weight=1.0, uncertainty_weight=1.0)
    samples = {name: torch.full((1,), float(index)) for index, name in enumerate("ABCDEFG")}
    # Scores: sigmoid(age / 4) + uncertainty / ln 2. C replaces A (score 1.34 > 0.79); D (1.80) is
    # rejected since the worst of class 0 is C (0.85); G (0.50) replaces E (1.06) in class 1.
    for name, label, uncertainty in [
        ("A", 0, 0.5),
        ("B", 0, 0.1),
        ("C", 0, 0.2),
        ("D", 0, 0.9),
        ("E", 1, 0.3),
        ("F", 1, 0.3),
        ("G", 1, 0.0),
    ]:
        memory.add(samples[name], label, uncertainty)
    images, ages = memory.contents()
    assert [int(image) for image in images] == [1, 2, 5, 6]  # B, C, F, G
    assert ages == [6, 5, 2, 1]
    assert math.isclose(memory.score(2, 0.3), 1 / (1 + math.exp(-0.5)) + 0.3 / math.log(2))


def test_category_balanced_memory_makes_room_in_the_largest_classes():
    memory = CategoryBalancedMemory(capacity=2, num_classes=4, timeliness_weight=1.0, uncertainty_weight=1.0)
    for value, label, uncertainty in [(0, 0, 0.9), (1, 1, 0.1), (2, 2, 0.2)]:
        memory.add(torch.full((1,), float(value)), label, uncertainty)
    images, _ = memory.contents()
    assert [int(image) for image in images] == [1, 2] and len(memory) == 2


def test_rotta_update_matches_the_papers_loss_and_teacher_rule(tiny_cnn):
    method = create("rotta", tiny_cnn, update_every=8, memory_capacity=8, teacher_momentum=0.5, seed=6)
    teacher, student = copy.deepcopy(method.teacher), copy.deepcopy(method.model)
    images = make_batches(1, batch_size=8)[0][0]
    with torch.no_grad():
        expected_logits = teacher(images)

    logits = method(images)

    assert torch.allclose(logits, expected_logits)
    memory_images, ages = method.memory.contents()
    memory_batch = torch.stack(memory_images)
    for network in (teacher, student):
        for module in network.modules():
            if isinstance(module, RobustBatchNorm):
                module.train()
    with torch.no_grad():
        teacher_logits = teacher(memory_batch)
    student_logits = student(augment_batch(memory_batch, torch.Generator().manual_seed(6), 0.005))
    weights = timeliness_weights(torch.tensor(ages, dtype=torch.float32) / 8)
    loss = (cross_entropy_to_teacher(student_logits, teacher_logits) * weights).mean()
    optimizer = torch.optim.Adam([parameter for parameter in student.parameters() if parameter.requires_grad], lr=1e-3)
    loss.backward()
    optimizer.step()

    assert method.last_step.updated and method.last_step.samples_adapted == len(memory_images)
    assert math.isclose(method.last_step.loss, float(loss.detach()), rel_tol=1e-5)
    for (name, parameter), expected in zip(method.model.named_parameters(), student.parameters()):
        assert torch.allclose(parameter, expected, atol=1e-6), name
    for (name, parameter), initial, updated in zip(
        method.teacher.named_parameters(), teacher.parameters(), student.parameters()
    ):
        assert torch.allclose(parameter, 0.5 * initial + 0.5 * updated, atol=1e-7), name
    assert not torch.equal(method.teacher[1].weight, teacher[1].weight)
    assert torch.allclose(method.teacher[1].running_mean, teacher[1].running_mean)


def test_rotta_updates_once_per_update_every_samples(tiny_cnn):
    method = create("rotta", tiny_cnn, update_every=32)
    flags = []
    for images, _ in make_batches(3):
        method(images)
        flags.append(method.last_step.updated)
    assert flags == [False, True, False] and method.samples_seen == 48


# --- CMF ------------------------------------------------------------------------------------------


def test_clipped_soft_likelihood_ratio_by_hand():
    logits = torch.tensor([[math.log(4.0), 0.0], [20.0, 0.0]])
    first = -(0.8 * math.log(4.0 + 1e-5) + 0.2 * math.log(0.25 + 1e-5))
    p = 1 / (1 + math.exp(-20.0))
    second = -(0.99 * math.log(0.99 / 0.01 + 1e-5) + (1 - p) * math.log((1 - p) / p + 1e-5))
    assert torch.allclose(clipped_soft_likelihood_ratio(logits), torch.tensor([first, second]), rtol=1e-5)


def test_roid_weights_drop_samples_similar_to_the_class_average():
    classes = 3
    average = torch.tensor([0.6, 0.2, 0.2])
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 3.0], [0.0, 0.0, 0.0]])
    probabilities = logits.softmax(1).numpy()
    cosine = probabilities @ average.numpy() / (np.linalg.norm(probabilities, axis=1) * np.linalg.norm(average.numpy()))
    diversity = 1 - cosine
    diversity = (diversity - diversity.min()) / (diversity.max() - diversity.min())
    certainty = (probabilities * np.log(probabilities)).sum(1)
    certainty = (certainty - certainty.min()) / (certainty.max() - certainty.min())
    kept = diversity >= diversity.mean()
    expected = np.where(kept, np.exp(diversity * certainty * 3), 0.0)
    weights, mask = roid_sample_weights(logits, average, 1 / 3)
    assert mask.tolist() == kept.tolist() == [False, True, True, False]
    assert np.allclose(weights.numpy(), expected, atol=1e-6)
    assert classes == logits.shape[1]


def test_smoothed_batch_prior_by_hand():
    logits = torch.tensor([[math.log(3.0), 0.0], [0.0, 0.0]])
    prior = np.array([0.625, 0.375])
    smoothing = max(1 / 2, 1 / 2) / 0.625
    expected = (prior + smoothing) / (1 + 2 * smoothing)
    assert np.allclose(smoothed_batch_prior(logits).numpy(), expected)


def test_cmf_filters_the_parameters_after_the_sgd_step(tiny_cnn):
    adapted_count = sum(parameter.numel() for parameter in create("cmf", tiny_cnn).adapted_parameters)
    options = {
        "use_weighting": False,
        "use_consistency": False,
        "prior_correction": "none",
        "learning_rate": 0.5,
        "process_noise": 0.05,
        "process_noise_reference_size": adapted_count,
    }
    method = create("cmf", tiny_cnn, **options)
    images = make_batches(1)[0][0]
    reference = batch_statistics_copy(tiny_cnn)
    named = normalization_affine_parameters(reference)
    optimizer = torch.optim.SGD([parameter for _, parameter in named], lr=0.5, momentum=0.9, nesterov=True)
    loss = clipped_soft_likelihood_ratio(reference(images)).sum() / 16
    loss.backward()
    optimizer.step()

    logits = method(images)

    beta = 0.95  # q = 0.05, v = q, β = (1 − q) / (v + 1 − q)
    assert math.isclose(float(method.hidden_variance), beta * 0.05, rel_tol=1e-9)
    source = dict(tiny_cnn.named_parameters())
    for (name, stepped), hidden in zip(named, method.hidden_parameters.tensors()):
        expected_hidden = beta * source[name] + (1 - beta) * stepped
        assert torch.allclose(hidden, expected_hidden, atol=1e-6), name
        assert torch.allclose(method.model.get_parameter(name), 0.99 * stepped + 0.01 * expected_hidden, atol=1e-6), (
            name
        )
    assert math.isclose(method.last_step.loss, float(loss.detach()), rel_tol=1e-5)
    assert torch.allclose(logits, batch_statistics_copy(tiny_cnn)(images), atol=1e-6)


def test_cmf_default_step_weights_samples_and_keeps_running_statistics_single(tiny_cnn):
    method = create("cmf", tiny_cnn)
    images = make_batches(1)[0][0]
    reference = batch_statistics_copy(tiny_cnn)
    logits = reference(images)
    weights, kept = roid_sample_weights(logits.detach(), torch.full((10,), 0.1), 1 / 3)
    corrected = logits.detach() * smoothed_batch_prior(logits.detach())
    output = method(images)
    assert torch.allclose(output, corrected, atol=1e-6)
    assert method.last_step.samples_adapted == int(kept.sum())
    for name, buffer in reference.named_buffers():
        assert torch.allclose(method.model.get_buffer(name), buffer), name
    assert torch.allclose(method.class_average, 0.9 * 0.1 + 0.1 * logits.detach().softmax(1).mean(0))
    probabilities_mode = create("cmf", tiny_cnn, prior_correction="probabilities")
    expected = logits.detach().log_softmax(1) + smoothed_batch_prior(logits.detach()).log()
    assert torch.allclose(probabilities_mode(images), expected, atol=1e-6)


# --- TTAC-NQ --------------------------------------------------------------------------------------


def test_source_statistics_are_population_statistics_by_predicted_class():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Flatten(), nn.Linear(3, 4)).train()
    generator = torch.Generator().manual_seed(1)
    batches = [(torch.randn(25, 3, generator=generator), torch.zeros(25)) for _ in range(3)]
    statistics = compute_source_statistics(model, batches)
    assert model.training and model[1].training, "layer modes are restored"
    features = torch.cat([images for images, _ in batches]).double().numpy()
    with torch.no_grad():
        labels = model(torch.cat([images for images, _ in batches])).argmax(1).numpy()
    assert np.allclose(statistics.mean.numpy(), features.mean(0), atol=1e-6)
    assert np.allclose(statistics.covariance.numpy(), np.cov(features, rowvar=False, bias=True), atol=1e-5)
    for label in range(4):
        members = features[labels == label]
        assert int(statistics.class_counts[label]) == len(members)
        if len(members):
            assert np.allclose(statistics.class_means[label].numpy(), members.mean(0), atol=1e-6)
            assert np.allclose(statistics.class_variances[label].numpy(), members.var(0), atol=1e-5)
        else:
            assert not statistics.class_means[label].any()
    assert statistics.sample_count == 75 and (statistics.feature_dim, statistics.num_classes) == (3, 4)


def test_source_statistics_files_round_trip_and_bad_files_are_explained(tiny_cnn, tmp_path):
    statistics = compute_source_statistics(tiny_cnn, (images for images, _ in make_batches(2)))
    statistics.save(tmp_path / "stats.pt")
    loaded = SourceFeatureStatistics.load(tmp_path / "stats.pt")
    for field in ("mean", "covariance", "class_means", "class_variances", "class_counts"):
        assert torch.equal(getattr(loaded, field), getattr(statistics, field)), field
    torch.save({"mean": torch.zeros(3)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match=r"is not a statistics file written by SourceFeatureStatistics.save"):
        SourceFeatureStatistics.load(tmp_path / "other.pt")
    with pytest.raises(ValueError, match=r"source statistics field covariance must have shape \(3, 3\), got \(3, 2\)"):
        SourceFeatureStatistics(torch.zeros(3), torch.zeros(3, 2), torch.zeros(4, 3), torch.zeros(4, 3), torch.zeros(4))
    with pytest.raises(ValueError, match=r"needs at least one clean image, got none"):
        compute_source_statistics(tiny_cnn, [])
    other = nn.Sequential(nn.Flatten(), nn.BatchNorm1d(192), nn.Linear(192, 5))
    with pytest.raises(
        ValueError,
        match=r"source statistics have 8 features and 10 classes, "
        r"but the model's head '2' maps 192 features to 5 classes",
    ):
        create("ttac_nq", other, source_statistics=str(tmp_path / "stats.pt"))


def test_symmetric_kl_matches_torch_distributions():
    generator = torch.Generator().manual_seed(0)
    factor_p, factor_q = (torch.randn(4, 4, generator=generator, dtype=torch.float64) for _ in range(2))
    covariance_p = factor_p @ factor_p.t() + 0.5 * torch.eye(4, dtype=torch.float64)
    covariance_q = factor_q @ factor_q.t() + 0.5 * torch.eye(4, dtype=torch.float64)
    mean_p, mean_q = (torch.randn(4, generator=generator, dtype=torch.float64) for _ in range(2))
    p = torch.distributions.MultivariateNormal(mean_p, covariance_p)
    q = torch.distributions.MultivariateNormal(mean_q, covariance_q)
    expected = torch.distributions.kl_divergence(p, q) + torch.distributions.kl_divergence(q, p)
    ours = symmetric_gaussian_kl(mean_p, covariance_p, mean_q, covariance_q)
    assert torch.allclose(ours, expected, rtol=1e-10)
    given_factor = symmetric_gaussian_kl(
        mean_p, covariance_p, mean_q, covariance_q, torch.linalg.cholesky(covariance_p)
    )
    assert torch.allclose(given_factor, expected, rtol=1e-10)
    variance_p, variance_q = covariance_p.diagonal(), covariance_q.diagonal()
    diagonal_p = torch.distributions.MultivariateNormal(mean_p, torch.diag(variance_p))
    diagonal_q = torch.distributions.MultivariateNormal(mean_q, torch.diag(variance_q))
    expected = torch.distributions.kl_divergence(diagonal_p, diagonal_q) + torch.distributions.kl_divergence(
        diagonal_q, diagonal_p
    )
    assert torch.allclose(symmetric_diagonal_gaussian_kl(mean_p, variance_p, mean_q, variance_q), expected, rtol=1e-10)


def symmetric_kl(mean_p, covariance_p, mean_q, covariance_q):
    p = torch.distributions.MultivariateNormal(mean_p, covariance_p)
    q = torch.distributions.MultivariateNormal(mean_q, covariance_q)
    return torch.distributions.kl_divergence(p, q) + torch.distributions.kl_divergence(q, p)


def test_ttac_loss_aligns_class_and_global_feature_statistics(tiny_cnn, tmp_path):
    statistics = compute_source_statistics(tiny_cnn, (images for images, _ in make_batches(4, seed=9)))
    statistics.save(tmp_path / "stats.pt")
    method = create("ttac_nq", tiny_cnn, source_statistics=str(tmp_path / "stats.pt"), confidence_threshold=0.0)
    images = make_batches(1)[0][0]
    reference = batch_statistics_copy(tiny_cnn)
    with torch.no_grad():
        features = reference[:-1](images)
        labels = reference[-1](features).argmax(1)
    bias = float(statistics.covariance.max()) / 30
    ridge = bias * torch.eye(8)
    class_loss = torch.zeros(())
    expected_means = statistics.class_means.clone()
    for label in labels.unique().tolist():
        members = features[labels == label]
        source_mean, source_variance = statistics.class_means[label], statistics.class_variances[label]
        shift = ((members - source_mean).sum(0)) / 64
        mean = source_mean + shift
        variance = (
            source_variance + (((members - source_mean) ** 2).sum(0) - len(members) * source_variance) / 64 - shift**2
        )
        expected_means[label] = mean
        class_loss = class_loss + symmetric_kl(
            source_mean, torch.diag(source_variance) + ridge, mean, torch.diag(variance) + ridge
        )
    batch_mean = features.mean(0)
    batch_covariance = (features - batch_mean).t() @ (features - batch_mean) / 16
    global_loss = symmetric_kl(statistics.mean, statistics.covariance + ridge, batch_mean, batch_covariance + ridge)
    expected_loss = 0.05 * float(class_loss + global_loss)

    logits = method(images)

    assert method.last_step.updated and method.last_step.samples_adapted == 16
    assert math.isclose(method.last_step.loss, expected_loss, rel_tol=1e-4)
    assert torch.allclose(method.target_class_means, expected_means, atol=1e-5)
    assert torch.allclose(method.target_mean, batch_mean, atol=1e-6)
    assert torch.allclose(method.target_covariance, batch_covariance, atol=1e-5)
    assert torch.equal(method.target_class_counts, 64 + torch.bincount(labels, minlength=10).float())
    assert torch.equal(method.model[8].weight, tiny_cnn[8].weight), "the classifier head is not adapted"
    assert not torch.equal(method.model[0].weight, tiny_cnn[0].weight)
    evaluation = copy.deepcopy(method.model).eval()
    assert torch.allclose(logits, evaluation(images), atol=1e-6), "prediction after the step, evaluation mode"


def test_batchnorm_prior_keeps_running_statistics_for_a_single_value_per_channel():
    layer = nn.BatchNorm2d(3).eval()
    with torch.no_grad():
        layer.running_var.fill_(2.0)
    inputs = torch.randn(1, 3, 1, 1, generator=torch.Generator().manual_seed(0))
    with batchnorm_prior(layer, 16 / 17):
        output = layer(inputs)
    assert torch.allclose(output, layer(inputs)) and torch.isfinite(output).all()


def test_adabn_refuses_a_single_value_per_channel():
    model = nn.Sequential(nn.Flatten(), nn.BatchNorm1d(12), nn.Linear(12, 3))
    method = create("adabn", model)
    with pytest.raises(
        ValueError, match=r"BatchNorm batch statistics need more than 1 value per channel, got input shape \(1, 12\)"
    ):
        method(torch.rand(1, 3, 2, 2))


# --- RDumb++ ----------------------------------------------------------------------------------------


class AuthorsRDumbPP:
    """RDumb++ as himans-iitk/Rdumbpp ``CCC/models/rdumbpp.py`` (commit 409ba05) runs it, re-derived from
    a reading of that code for this test: BatchNorm with batch statistics only, SGD on the BN affine
    parameters; per batch the outputs of the current model are scored (after the warm-up and cool-down
    counts), a score above the threshold restores the initial weights and optimiser state (full) or
    pulls the weights towards them (soft) and the batch is predicted again; then ETA with the 20 %
    lowest-entropy fallback adapts on that prediction. Statistics are tensors, as in the author's code."""

    def __init__(
        self,
        model,
        *,
        signal,
        mode,
        margin,
        redundancy,
        learning_rate,
        threshold,
        mean_weight,
        warmup,
        cooldown,
        strength,
    ):
        self.model = copy.deepcopy(model).train().requires_grad_(False)
        parameters = []
        for module in self.model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.requires_grad_(True)
                module.track_running_stats, module.running_mean, module.running_var = False, None, None
                parameters += [module.weight, module.bias]
        self.optimizer = torch.optim.SGD(parameters, lr=learning_rate, momentum=0.9)
        self.initial_model = copy.deepcopy(self.model.state_dict())
        self.initial_optimizer = copy.deepcopy(self.optimizer.state_dict())
        self.signal, self.mode, self.margin, self.redundancy = signal, mode, margin, redundancy
        self.threshold, self.mean_weight, self.warmup, self.cooldown, self.strength = (
            threshold,
            mean_weight,
            warmup,
            cooldown,
            strength,
        )
        self.mean = self.variance = self.reference = self.class_average = None
        self.batches = self.since_reset = 0
        self.reset_batches: list[int] = []

    def score(self, outputs):
        if self.signal == "entropy":
            value = softmax_entropy(outputs).mean().detach()
            if self.mean is None:
                self.mean, self.variance = value, torch.tensor(1e-6)
                return 0.0
        else:
            average = outputs.softmax(1).detach().mean(0)
            if self.reference is None:
                self.reference, self.mean, self.variance = average, torch.tensor(0.0), torch.tensor(1e-6)
                return 0.0
            reference, current = self.reference.clamp(min=1e-6), average.clamp(min=1e-6)
            value = (reference * (reference.log() - current.log())).sum() / len(current)
        deviation = value - self.mean
        self.variance = 0.6 * self.variance + 0.4 * deviation**2
        score = float(deviation.abs() / (torch.sqrt(self.variance + 1e-6) + 1e-6))
        self.mean = self.mean_weight * self.mean + (1 - self.mean_weight) * value
        if self.signal == "kl":
            self.reference = 0.9 * self.reference + 0.1 * average
        return score

    def __call__(self, images):
        with torch.enable_grad():
            outputs = self.model(images)
            if (
                self.batches >= self.warmup
                and self.since_reset >= self.cooldown
                and self.score(outputs) > self.threshold
            ):
                if self.mode == "full":
                    self.model.load_state_dict(self.initial_model)
                    self.optimizer.load_state_dict(copy.deepcopy(self.initial_optimizer))
                else:
                    with torch.no_grad():
                        for name, value in self.model.state_dict().items():
                            if value.is_floating_point():
                                value.copy_(self.strength * self.initial_model[name] + (1 - self.strength) * value)
                self.since_reset = 0
                self.reset_batches.append(self.batches)
                outputs = self.model(images)
            entropies = softmax_entropy(outputs)
            reliable = entropies < self.margin
            if not reliable.any():
                reliable = torch.zeros_like(reliable)
                reliable[entropies.topk(max(1, int(0.2 * len(entropies))), largest=False).indices] = True
            selected = entropies[reliable]
            probabilities = outputs.softmax(1)[reliable].detach()
            if self.class_average is not None:
                similar = (
                    F.cosine_similarity(self.class_average.unsqueeze(0), probabilities, dim=1).abs() < self.redundancy
                )
                selected, probabilities = selected[similar], probabilities[similar]
            if len(probabilities):
                average = probabilities.mean(0)
                self.class_average = average if self.class_average is None else 0.9 * self.class_average + 0.1 * average
            if selected.numel():
                (selected * torch.exp(-(selected.detach() - self.margin))).mean().backward()
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        self.batches += 1
        self.since_reset += 1
        return outputs.detach()


@pytest.mark.parametrize(
    ("signal", "mode", "threshold", "resets"),
    [("entropy", "full", 1.3, 4), ("entropy", "soft", 1.25, 7), ("kl", "full", 1.1, 2), ("kl", "soft", 1.0, 5)],
)
def test_rdumbpp_replays_the_authors_code_batch_by_batch(tiny_cnn, signal, mode, threshold, resets):
    """Predictions, BN affine parameters and reset batches of ``rdumbpp`` against ``AuthorsRDumbPP`` on
    the tiny CNN over 24 batches (10 classes: E0 = 0.608 · ln 10 = 1.40 nats, below every entropy here,
    so the fallback selects the samples). A reachable threshold (the score stays below 1/√0.4 = 1.58;
    each one at least 0.04 from every score of the run), a large learning rate and short warm-up and
    cool-down make the detector fire."""
    options = {
        "signal": signal,
        "mode": mode,
        "threshold": threshold,
        "momentum": 0.75,
        "warmup": 2,
        "cooldown": 3,
        "strength": 0.4,
    }
    policy = ":".join(["rdumbpp"] + [f"{key}={value}" for key, value in options.items()])
    ours = create("rdumbpp", tiny_cnn, redundancy_margin=0.999, learning_rate=2.0, reset=policy)
    margin = ours.method.config.entropy_margin(10)
    authors = AuthorsRDumbPP(
        tiny_cnn,
        signal=signal,
        mode=mode,
        margin=margin,
        redundancy=0.999,
        learning_rate=2.0,
        threshold=threshold,
        mean_weight=0.75,
        warmup=2,
        cooldown=3,
        strength=0.4,
    )
    reset_batches = []
    for index, (images, _) in enumerate(make_batches(24)):
        torch.testing.assert_close(ours(images), authors(images), rtol=1e-4, atol=1e-5)
        if ours.last_step.reset:
            reset_batches.append(index)
        expected = dict(authors.model.named_parameters())
        for name in ours.method.adapted_parameter_names:
            torch.testing.assert_close(ours.method.model.get_parameter(name), expected[name], rtol=1e-4, atol=1e-6)
    assert reset_batches == authors.reset_batches and ours.resets == len(reset_batches) == resets
