"""Every method on the CIFAR backbones of ``ccc.cifar_models`` (RobustBench's WideResNet and ResNeXt),
at small width and depth (WRN-10-2, ResNeXt-11 with 2 groups of 4 channels) on 32×32 images: one
adaptation step gives finite logits and moves exactly the parameters the method adapts (BN: none, its
running statistics; the normalisation-layer methods: the BatchNorm affine parameters, all of them, as
"layer4", SAR's and DeYO's default exclusion, names no layer of these backbones; SHOT and TTAC: all but
the classifier; MEMO: all, restored after each image); the methods that read penultimate features
find the classifier head (``fc``, ``classifier``); TTAC's covariance stays positive semi-definite on
ResNeXt's features. And Tent adapts the full-size ResNeXt-29 as ``load_model`` gives it (inside the
input normalisation)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ccc.cifar_models import CifarResNeXt, WideResNet
from ccc.models import ModelSpec, NormalizedClassifier, load_model
from tests.tta_eval.method_helpers import build
from tests.tta_eval.tta_helpers import randomise_batchnorm
from tta_eval.methods import compute_source_statistics, get_method, list_methods
from tta_eval.methods.layers import (
    find_classifier_head,
    forward_with_features,
    normalization_affine_parameters,
    parameters_outside,
)
from tta_eval.methods.ttac_nq import update_mean_and_covariance

BACKBONES = {
    "wrn": (lambda: WideResNet(depth=10, widen_factor=2, num_classes=10), "fc", 128),
    "resnext": (lambda: CifarResNeXt(depth=11, cardinality=2, base_width=4, num_classes=10), "classifier", 1024),
}
"""Constructor, classifier head and feature width of each small backbone."""
BATCH_SIZE = 8
WITHOUT_GRADIENTS = {"source", "bn", "adabn", "lame", "neo"}
"""Methods that learn no parameter (their adaptation is BatchNorm statistics or an output correction)."""
ALL_BUT_THE_HEAD = {"shot", "shot_im", "ttac_nq"}
"""Methods that adapt every parameter outside the classifier head."""
EPISODIC = {"memo"}
"""Methods that adapt every parameter for one image and restore the model after it."""


def cifar_images(count: int = BATCH_SIZE, seed: int = 0) -> torch.Tensor:
    """``count`` random images in [0, 1], N×3×32×32."""
    return torch.rand(count, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def make_backbone(kind: str) -> nn.Module:
    """The small backbone ``kind`` with random weights and BatchNorm statistics (as if trained), in eval mode."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = BACKBONES[kind][0]()
        randomise_batchnorm(model, mean=0.1, variance=(0.5, 1.5), bias=0.1)
    return model.eval()


def adapted_method(name: str, model: nn.Module, tmp_path) -> nn.Module:
    """``name`` built on ``model`` with the test options (TTAC's source statistics and EATA's Fisher from
    32×32 images), after one adaptation step on a batch of BATCH_SIZE."""
    statistics_path = None
    if "source_statistics" in get_method(name).option_names():
        statistics_path = str(tmp_path / "source.ttac.pt")
        compute_source_statistics(model, [cifar_images(seed=7), cifar_images(seed=8)]).save(statistics_path)
    method = build(name, model, statistics_path)
    if getattr(method, "preparation_samples", 0):
        method.prepare(iter([cifar_images(24, seed=99)]))
    logits = method(cifar_images())
    assert logits.shape == (BATCH_SIZE, 10) and torch.isfinite(logits).all()
    return method


@pytest.mark.parametrize("kind", sorted(BACKBONES))
@pytest.mark.parametrize("name", list_methods())
def test_one_step_moves_what_the_method_adapts(name, kind, tmp_path):
    model = make_backbone(kind)
    source = {key: value.clone() for key, value in model.state_dict().items()}
    method = adapted_method(name, model, tmp_path)
    inner = getattr(method, "method", method)  # RDumb and the reset policies wrap the method
    assert all(torch.equal(value, source[key]) for key, value in model.state_dict().items())  # the user's model
    if name in WITHOUT_GRADIENTS:  # LAME and NEO wrap the network: its parameters come first, in order
        parameters = list(inner.model.parameters())
        assert len(parameters) == len(list(model.parameters()))
        assert all(torch.equal(value, source[key]) for value, (key, _) in zip(parameters, model.named_parameters()))
        if name in ("bn", "adabn"):  # the running statistics follow the stream
            assert any(not torch.equal(value, source[key]) for key, value in inner.model.named_buffers())
        return
    moved = {key for key, value in inner.model.named_parameters() if not torch.equal(value, source[key])}
    trained = {key for key, parameter in inner.model.named_parameters() if parameter.requires_grad}
    if name in EPISODIC:
        assert trained == set(source) - {key for key, _ in model.named_buffers()} and not moved
    elif name in ALL_BUT_THE_HEAD:
        assert trained == {key for key, _ in parameters_outside(model, BACKBONES[kind][1])}
        assert moved and moved <= trained
    else:
        assert trained == {key for key, _ in normalization_affine_parameters(model)}, "every BatchNorm affine one"
        assert moved and moved <= trained


@pytest.mark.parametrize("kind", sorted(BACKBONES))
def test_the_classifier_head_and_its_features_are_found(kind):
    model = make_backbone(kind)
    head = find_classifier_head(model, "shot")
    assert head == BACKBONES[kind][1]
    with torch.no_grad():
        logits, features = forward_with_features(model, head, cifar_images(4))
    assert logits.shape == (4, 10) and features.shape == (4, BACKBONES[kind][2])


def test_tent_adapts_the_full_size_resnext_inside_its_input_normalisation():
    model = load_model(ModelSpec("cifar100:resnext29", weights="none"))
    assert isinstance(model, NormalizedClassifier)
    source = {key: value.clone() for key, value in model.named_parameters()}
    method = build("tent", model)
    logits = method(cifar_images(4))
    assert logits.shape == (4, 100) and torch.isfinite(logits).all()
    moved = {key for key, value in method.model.named_parameters() if not torch.equal(value, source[key])}
    batchnorm_affine = {key for key, _ in normalization_affine_parameters(model)}
    assert moved and moved <= batchnorm_affine and all(key.startswith("classifier.") for key in batchnorm_affine)
    assert len(batchnorm_affine) == 2 * (1 + 3 * 3 * 3 + 3 * 1)  # bn_1, 3 per bottleneck, 1 per downsample


def test_ttac_covariance_update_stays_positive_semi_definite_on_resnext_features():
    model = make_backbone("resnext").train()  # TTAC's features: BatchNorm with batch statistics
    with torch.no_grad():
        batches = [forward_with_features(model, "classifier", cifar_images(16, seed=seed))[1] for seed in (0, 1)]
    assert float(batches[0].mean()) > 4 * float(batches[0].std(0).mean())  # post-ReLU: a mean above the spread
    mean, covariance = torch.zeros(1024), torch.zeros(1024, 1024)
    reference_mean, reference = mean.double(), covariance.double()
    for features, rate in zip(batches, (1 / 16, 1 / 32)):
        mean, covariance = update_mean_and_covariance(mean, covariance, features, rate)
        differences = features.double() - reference_mean  # the textbook form, in float64
        shift = rate * differences.sum(0)
        reference_mean = reference_mean + shift
        reference = (
            reference + rate * (differences.t() @ differences - len(features) * reference) - torch.outer(shift, shift)
        )
        assert torch.allclose(mean.double(), reference_mean, atol=1e-6)
        assert torch.allclose(covariance.double(), reference, atol=1e-7)
        assert float(torch.linalg.eigvalsh(covariance.double()).min()) > -1e-7
        torch.linalg.cholesky(covariance + 1e-6 * torch.eye(1024))  # positive definite with a small ridge
