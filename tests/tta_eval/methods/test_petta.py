"""Fidelity of PeTTA: the collapse score, prototype update and regulariser on hand-computed tensors, one
full update on a tiny CNN against a step-by-step re-derivation (robust BN, memory order, losses, Adam,
adaptive λ and α, teacher average, prototypes), checkpointing with torch.save, and a `tta-eval run`."""

from __future__ import annotations

import copy
import io
import json
import math

import pytest
import torch
from torch import nn

from tests.tta_eval.tta_helpers import SMALL_STREAM, TINY_FACTORY, make_batches, run_cli
from tta_eval.methods import SourceFeatureStatistics, compute_source_statistics, create, get_method
from tta_eval.methods.augmentation import augment_batch
from tta_eval.methods.petta import PeTTA, PeTTAConfig, collapse_score, parameter_regularizer, update_prototypes
from tta_eval.records import RecordTable
from tta_eval.run_folder import records_path

BATCHNORM_POSITIONS = (1, 4)
"""Indices of the BatchNorm layers in ``make_tiny_cnn``'s Sequential."""


def test_published_imagenet_c_defaults():
    defaults = get_method("petta").defaults()
    expected = {
        "learning_rate": 1e-3,
        "adam_beta1": 0.9,
        "adam_beta2": 0.999,
        "weight_decay": 0.0,
        "robust_bn_momentum": 0.05,
        "memory_capacity": 64,
        "timeliness_weight": 1.0,
        "uncertainty_weight": 1.0,
        "noise_std": 0.005,
        "teacher_update_rate": 0.001,
        "regularization_weight": 10.0,
        "regularizer": "cosine",
        "anchor_weight": 1.0,
        "adaptive_lambda": True,
        "adaptive_alpha": True,
        "prototype_rate": 0.05,
        "classification_loss": "ce",
        "source_statistics": "",
        "reset_every": None,
    }
    assert {name: defaults[name] for name in expected} == expected


def test_collapse_score_on_hand_computed_values():
    prototypes = torch.tensor([[1.0, 2.0], [0.5, 0.0]])
    means = torch.tensor([[0.0, 0.0], [0.5, 1.0]])
    variances = torch.tensor([[1.0, 3.0], [2.0, 0.0]])
    # squared distances over variance + 1e-6: 1/1, 4/3, 0/2, 1/1e-6; their mean D; γ = 1 − e^(−D)
    divergence = (1.0 / (1.0 + 1e-6) + 4.0 / (3.0 + 1e-6) + 0.0 + 1.0 / 1e-6) / 4.0
    assert math.isclose(float(collapse_score(prototypes, means, variances)), 1.0 - math.exp(-divergence), rel_tol=1e-6)
    first_row = (1.0 / (1.0 + 1e-6) + 4.0 / (3.0 + 1e-6)) / 2.0
    assert math.isclose(
        float(collapse_score(prototypes[:1], means[:1], variances[:1])), 1.0 - math.exp(-first_row), rel_tol=1e-6
    )
    assert float(collapse_score(means, means, variances)) == 0.0


def test_prototypes_move_towards_the_class_means_of_the_batch():
    prototypes = torch.tensor([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])
    features = torch.tensor([[4.0, 0.0], [2.0, 2.0], [6.0, -2.0]])
    labels = torch.tensor([0, 2, 0])
    update_prototypes(prototypes, features, labels, 0.25)
    expected = torch.tensor([[0.75 * 0 + 0.25 * 5.0, 0.75 * 0 + 0.25 * -1.0], [1.0, 1.0], [0.75 * 2 + 0.25 * 2.0] * 2])
    torch.testing.assert_close(prototypes, expected)


def test_regularizers_on_hand_computed_values():
    parameters = [torch.tensor([1.0, 0.0]), torch.tensor([2.0, 2.0, 0.0])]
    sources = [torch.tensor([1.0, 1.0]), torch.tensor([0.0, 0.0, 3.0])]
    # cosines 1/√2 and 0; l2 distances 1 and 4 + 4 + 9
    assert math.isclose(
        float(parameter_regularizer(parameters, sources, "cosine")), -(1 / math.sqrt(2) + 0.0) / 2, rel_tol=1e-6
    )
    assert math.isclose(float(parameter_regularizer(parameters, sources, "l2")), (1.0 + 17.0) / 2, rel_tol=1e-6)
    assert float(parameter_regularizer(parameters, sources, "none")) == 0.0


def hand_statistics(classes: int = 10, dimension: int = 8) -> SourceFeatureStatistics:
    generator = torch.Generator().manual_seed(5)
    return SourceFeatureStatistics(
        mean=torch.zeros(dimension),
        covariance=torch.eye(dimension),
        class_means=torch.randn(classes, dimension, generator=generator),
        class_variances=0.5 + 1.5 * torch.rand(classes, dimension, generator=generator),
        class_counts=torch.ones(classes, dtype=torch.long),
    )


def hand_forward(model: nn.Sequential, images: torch.Tensor, statistics: dict, affine: dict, training: bool):
    """The tiny CNN with RoTTA's robust BN written out: (logits, penultimate features); in training mode
    the statistics (position → [mean, variance]) absorb the batch with weight 0.05 first."""
    values = images
    features = images
    for position, layer in enumerate(model):
        if isinstance(layer, nn.BatchNorm2d):
            mean, variance = statistics[position]
            if training:
                mean = 0.95 * mean + 0.05 * values.mean((0, 2, 3))
                variance = 0.95 * variance + 0.05 * values.var((0, 2, 3), unbiased=False)
                statistics[position] = [mean.detach(), variance.detach()]
            weight, bias = affine[position]
            values = (values - mean.view(1, -1, 1, 1)) / torch.sqrt(variance.view(1, -1, 1, 1) + layer.eps)
            values = values * weight.view(1, -1, 1, 1) + bias.view(1, -1, 1, 1)
        else:
            if isinstance(layer, nn.Linear):
                features = values
            values = layer(values)
    return values, features


def cross_entropy(teacher: torch.Tensor, student: torch.Tensor) -> torch.Tensor:
    return -(teacher.softmax(1) * student.log_softmax(1)).sum(1).mean()


def test_one_update_equals_the_rule_written_out(tiny_cnn):
    learning_rate, teacher_rate, weight, anchor_weight = 0.01, 0.5, 10.0, 1.0
    statistics = hand_statistics()
    config = PeTTAConfig(learning_rate=learning_rate, memory_capacity=160, teacher_update_rate=teacher_rate)
    method = PeTTA(copy.deepcopy(tiny_cnn), config, source_statistics=statistics)
    offset = torch.randn(10, 8, generator=torch.Generator().manual_seed(8))
    method.prototypes.add_(offset)
    images = make_batches(1)[0][0]
    returned = method(images)

    source = {p: [tiny_cnn[p].running_mean.clone(), tiny_cnn[p].running_var.clone()] for p in BATCHNORM_POSITIONS}
    affine = {p: (tiny_cnn[p].weight.detach().clone(), tiny_cnn[p].bias.detach().clone()) for p in BATCHNORM_POSITIONS}
    with torch.no_grad():
        logits, features = hand_forward(tiny_cnn, images, copy.deepcopy(source), affine, training=False)
        labels = logits.argmax(1)
        # capacity 160 = 16 per class: every sample is stored, class by class in arrival order
        memory = images[torch.sort(labels, stable=True).indices]
        teacher_statistics, student_statistics, anchor_statistics = (copy.deepcopy(source) for _ in range(3))
        teacher_logits, _ = hand_forward(tiny_cnn, memory, teacher_statistics, affine, training=True)
        hand_forward(tiny_cnn, memory, student_statistics, affine, training=True)
        anchor_logits, _ = hand_forward(tiny_cnn, memory, anchor_statistics, affine, training=True)
    augmented = augment_batch(memory, torch.Generator().manual_seed(0), 0.005)
    student = {p: (w.clone().requires_grad_(True), b.clone().requires_grad_(True)) for p, (w, b) in affine.items()}
    student_logits, _ = hand_forward(tiny_cnn, augmented, student_statistics, student, training=True)

    classes = torch.unique(labels)
    prototypes = statistics.class_means + offset
    squared = (prototypes[classes] - statistics.class_means[classes]) ** 2
    gamma = 1.0 - torch.exp(-(squared / (statistics.class_variances[classes] + 1e-6)).mean())
    parameters = [tensor for p in BATCHNORM_POSITIONS for tensor in student[p]]
    initial = [tensor for p in BATCHNORM_POSITIONS for tensor in affine[p]]
    cosines = [(theta * theta0).sum() / (theta.norm() * theta0.norm()) for theta, theta0 in zip(parameters, initial)]
    regularizer = -torch.stack(cosines).mean()
    loss = (
        cross_entropy(teacher_logits, student_logits)
        + gamma * weight * regularizer
        + anchor_weight * cross_entropy(anchor_logits, student_logits)
    )
    gradients = torch.autograd.grad(loss, parameters)

    assert 0.05 < float(gamma) < 0.95, "the test needs a collapse score away from 0 and 1"
    torch.testing.assert_close(returned, logits, rtol=1e-5, atol=1e-6)
    assert method.last_step.updated and method.last_step.samples_adapted == 16
    assert math.isclose(method.last_step.loss, float(loss.detach()), rel_tol=1e-5)
    assert math.isclose(method.last_collapse_score, float(gamma), rel_tol=1e-5)
    alpha = (1.0 - float(gamma)) * teacher_rate
    for index, position in enumerate(BATCHNORM_POSITIONS):
        for offset_in_layer, name in enumerate(("weight", "bias")):
            k = 2 * index + offset_in_layer
            # Adam's first step from zero moments: θ − lr · g / (|g| + 1e-8); on gradients below 1e-5 (dead
            # channels) that ratio is float32 noise, so there only the step bound |Δθ| <= lr is checked
            stepped = initial[k] - learning_rate * gradients[k] / (gradients[k].abs() + 1e-8)
            expected_teacher = (1.0 - alpha) * initial[k] + alpha * stepped
            clear = gradients[k].abs() > 1e-5
            assert clear.sum() >= 2 and not torch.allclose(expected_teacher[clear], initial[k][clear], atol=1e-4)
            adapted = getattr(method.model[position], name).detach()
            torch.testing.assert_close(adapted[clear], stepped[clear], rtol=1e-5, atol=1e-6)
            assert ((adapted - initial[k]).abs() <= learning_rate * (1 + 1e-5)).all()
            teacher = getattr(method.teacher[position], name)
            torch.testing.assert_close(teacher[clear], expected_teacher[clear], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(teacher, (1.0 - alpha) * initial[k] + alpha * adapted, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(getattr(method.anchor[position], name), initial[k])
        for network, expected in (
            (method.model, student_statistics),
            (method.teacher, teacher_statistics),
            (method.anchor, anchor_statistics),
        ):
            torch.testing.assert_close(network[position].running_mean, expected[position][0], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(network[position].running_var, expected[position][1], rtol=1e-5, atol=1e-6)
    updated = prototypes.clone()
    for label in classes.tolist():
        updated[label] = 0.95 * prototypes[label] + 0.05 * features[labels == label].mean(0)
    torch.testing.assert_close(method.prototypes, updated, rtol=1e-5, atol=1e-6)


def test_fixed_lambda_and_alpha_leave_the_prototypes_alone(tiny_cnn):
    statistics = hand_statistics()
    method = PeTTA(
        copy.deepcopy(tiny_cnn), PeTTAConfig(adaptive_lambda=False, adaptive_alpha=False), source_statistics=statistics
    )
    method(make_batches(1)[0][0])
    assert method.last_step.updated and method.last_collapse_score is None
    torch.testing.assert_close(method.prototypes, statistics.class_means)


def test_symmetric_self_training_loss_is_the_public_four_term_form(tiny_cnn):
    method = PeTTA(copy.deepcopy(tiny_cnn), PeTTAConfig(classification_loss="sce"), source_statistics=hand_statistics())
    generator = torch.Generator().manual_seed(2)
    teacher, clean, augmented = (torch.randn(5, 10, generator=generator) for _ in range(3))

    def cross(target: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        return -(target.softmax(1) * output.log_softmax(1)).sum(1)

    expected = (
        0.25 * (cross(teacher, clean) + cross(clean, teacher) + cross(teacher, augmented) + cross(augmented, teacher))
    ).mean()
    torch.testing.assert_close(method._classification_loss(teacher, clean, augmented), expected)
    method(make_batches(1)[0][0])
    assert method.last_step.updated


def test_missing_statistics_are_explained_in_one_line(tiny_cnn, tmp_path):
    with pytest.raises(
        ValueError, match=r"^method 'petta' needs source feature statistics: compute them .*compute_source_statistics"
    ):
        create("petta", tiny_cnn)
    with pytest.raises(ValueError, match=r"source_statistics file '.*missing.pt' does not exist"):
        create("petta", tiny_cnn, source_statistics=str(tmp_path / "missing.pt"))
    with pytest.raises(ValueError, match=r"^regularizer must be one of cosine, l2, none; got 'l1'"):
        create("petta", tiny_cnn, source_statistics="x", regularizer="l1")


def test_a_checkpoint_written_with_torch_save_continues_identically(tiny_cnn):
    method = PeTTA(copy.deepcopy(tiny_cnn), PeTTAConfig(), source_statistics=hand_statistics())
    batches = make_batches(3)
    for images, _ in batches[:2]:
        method(images)
    buffer = io.BytesIO()
    torch.save(method, buffer)
    buffer.seek(0)
    restored = torch.load(buffer, weights_only=False)
    torch.testing.assert_close(restored(batches[2][0]), method(batches[2][0]), rtol=0, atol=0)
    assert restored.last_step == method.last_step
    torch.testing.assert_close(restored.prototypes, method.prototypes, rtol=0, atol=0)


def test_tta_eval_runs_petta_next_to_rotta(tmp_path, capsys):
    from ccc.models import ModelSpec, load_model

    model = load_model(ModelSpec(TINY_FACTORY))
    clean = [torch.rand(32, 3, 8, 8, generator=torch.Generator().manual_seed(seed)) for seed in range(2)]
    path = tmp_path / "tiny.ttac.pt"
    compute_source_statistics(model, clean).save(path)
    petta = f"petta:source_statistics={path}"
    code, _, err = run_cli(
        capsys,
        "run",
        "--stream",
        SMALL_STREAM,
        "--model",
        TINY_FACTORY,
        "--method",
        "rotta:update_every=8",
        "--method",
        petta,
        "--window",
        "32",
        "--out",
        str(tmp_path / "results"),
        "--name",
        "petta",
        "--no-progress",
    )
    assert code == 0, err
    run_dir = tmp_path / "results" / "petta"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["methods"][petta]["samples"] == 96
    records = RecordTable.read_csv(records_path(run_dir, petta))
    assert len(records) == 6 and records.column("samples_adapted").sum() > 0
    config = json.loads((run_dir / "config.json").read_text())
    assert config["methods"][petta]["config"]["regularization_weight"] == 10.0

    code, _, err = run_cli(
        capsys,
        "run",
        "--stream",
        SMALL_STREAM,
        "--model",
        TINY_FACTORY,
        "--method",
        "petta",
        "--out",
        str(tmp_path / "results"),
        "--no-progress",
    )
    assert code == 2 and "method 'petta' needs source feature statistics" in err and "Traceback" not in err
