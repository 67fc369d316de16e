"""Methods on models without BatchNorm: a tiny torchvision ViT (LayerNorm) and a GroupNorm CNN.

The methods that train normalisation affine parameters adapt exactly the LayerNorm / GroupNorm weight
and bias there (as mariodoebler/test-time-adaptation does for ViTs), reset exactly, and run through
``tta-eval run``; the methods whose rule needs BatchNorm refuse the model in one line; EATA's Fisher
and anchors cover the LayerNorm parameters.
"""

from __future__ import annotations

import copy
import json
import sys

import pytest
import torch
from torch import nn

from tests.tta_eval.method_helpers import TEST_OPTIONS, build
from tests.tta_eval.tta_helpers import (
    TINY_VIT_FACTORY,
    VIT_STREAM,
    assert_reset_matches_fresh,
    make_groupnorm_cnn,
    make_tiny_vit,
    run_cli,
)
from tta_eval.methods import create, get_method, list_methods
from tta_eval.methods.layers import (
    NormalizationGradientMethod,
    normalization_affine_parameters,
)
from tta_eval.records import RecordTable
from tta_eval.run_folder import records_path

MODELS = {"vit": (make_tiny_vit, 32), "groupnorm": (make_groupnorm_cnn, 8)}
NORM_TYPES = {"vit": nn.LayerNorm, "groupnorm": nn.GroupNorm}
NORMALIZATION_METHODS = sorted(
    name for name in list_methods() if issubclass(get_method(name).method_class, NormalizationGradientMethod)
)
"""Methods that train the affine parameters of the normalisation layers (and nothing else)."""
BATCHNORM_ONLY = sorted(name for name in list_methods() if get_method(name).needs_batchnorm)
SUPPORTING = sorted(
    name
    for name in list_methods()
    if not get_method(name).needs_batchnorm and "source_statistics" not in get_method(name).option_names()
)
"""Methods that run on a ViT without extra inputs (TTAC-NQ needs a source statistics file)."""


def images(model_kind: str, count: int = 8, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    size = MODELS[model_kind][1]
    return torch.rand(count, 3, size, size, generator=generator)


def prepare_on(method: nn.Module, model_kind: str) -> nn.Module:
    """EATA's Fisher from 24 images of the model's size (``prepared`` uses 8×8 images)."""
    if getattr(method, "preparation_samples", 0):
        method.prepare(iter([images(model_kind, 24, seed=99)]))
    return method


def test_the_expected_methods_support_layernorm_and_groupnorm():
    assert {"tent", "eta", "eata", "rdumb", "rpl", "cpl", "pl", "slr", "sar", "deyo", "cmf"} <= set(
        NORMALIZATION_METHODS
    )
    assert set(BATCHNORM_ONLY) == {"bn", "adabn", "rotta", "petta"}
    assert "cotta" in SUPPORTING


@pytest.mark.parametrize("model_kind", sorted(MODELS))
@pytest.mark.parametrize("name", [*NORMALIZATION_METHODS, "cotta"])
def test_norm_methods_move_only_the_norm_affine_parameters(name, model_kind):
    model = MODELS[model_kind][0]()
    extra = {"reset": "asr:a0=0.01"} if name == "asr" else {}  # ASR's trigger fires on the random tiny ViT
    method = prepare_on(build(name, model, **extra), model_kind)
    inner = getattr(method, "method", method)
    expected = {name for name, _ in normalization_affine_parameters(model)}
    norm_parameter_names = {
        f"{module_name}.{parameter_name}"
        for module_name, module in model.named_modules()
        if isinstance(module, NORM_TYPES[model_kind])
        for parameter_name, _ in module.named_parameters(recurse=False)
    }
    assert expected == norm_parameter_names and expected
    if name not in ("sar", "deyo", "cmf"):  # their defaults exclude the last blocks of ResNets / ViT-B
        assert set(inner.adapted_parameter_names) == expected
    for step in range(3):
        logits = method(images(model_kind, seed=step))
        assert torch.isfinite(logits).all()
    assert method.last_step.updated
    source = dict(model.named_parameters())
    moved = {key for key, value in inner.model.named_parameters() if not torch.equal(value, source[key])}
    assert moved and moved <= set(inner.adapted_parameter_names)
    buffers = dict(model.named_buffers())
    assert all(torch.equal(value, buffers[key]) for key, value in inner.model.named_buffers())


@pytest.mark.parametrize("model_kind", sorted(MODELS))
@pytest.mark.parametrize("name", SUPPORTING)
def test_supporting_methods_reset_exactly(name, model_kind):
    model = MODELS[model_kind][0]()
    used = prepare_on(build(name, model), model_kind)
    fresh = prepare_on(build(name, model), model_kind)
    initial = copy.deepcopy(used.state_dict())
    for step in range(2):
        used(images(model_kind, seed=step))
    used.reset()
    assert_reset_matches_fresh(used, fresh, initial, images(model_kind, seed=5))


@pytest.mark.parametrize("model_kind", sorted(MODELS))
@pytest.mark.parametrize("name", BATCHNORM_ONLY)
def test_batchnorm_rules_refuse_in_one_line(name, model_kind):
    with pytest.raises(ValueError) as error:
        create(name, MODELS[model_kind][0]())
    message = str(error.value)
    assert "\n" not in message and message.startswith(
        f"method '{name}' adapts BatchNorm layers, but the model has none"
    )
    assert f"(found: {NORM_TYPES[model_kind].__name__})" in message and "LayerNorm and GroupNorm" in message


def test_a_layer_without_affine_parameters_is_named():
    model = nn.Sequential(nn.Flatten(), nn.LayerNorm(192, elementwise_affine=False), nn.Linear(192, 10))
    with pytest.raises(
        ValueError, match=r"^method 'tent' adapts the affine parameters .* none of them has affine parameters"
    ):
        create("tent", model)


def test_eata_fisher_and_anchors_cover_the_vit_layernorm_parameters():
    model = make_tiny_vit()
    method = prepare_on(build("eata", model), "vit")
    layernorm = dict(normalization_affine_parameters(model))
    assert set(method.fisher) == set(method.anchor) == set(layernorm)
    for key, parameter in layernorm.items():
        assert torch.equal(method.anchor[key], parameter)
        assert method.fisher[key].shape == parameter.shape and (method.fisher[key] >= 0).all()
    assert any(bool((fisher > 0).any()) for fisher in method.fisher.values())
    assert float(method.fisher_penalty().detach()) == 0.0
    method(images("vit"))
    assert method.last_step.updated
    penalty = method.fisher_penalty().detach()
    adapted = dict(method.model.named_parameters())
    expected = sum(
        (method.fisher[key] * (adapted[key].detach() - method.anchor[key]) ** 2).sum() for key in method.fisher
    )
    assert float(penalty) > 0 and torch.allclose(penalty, method.config.fisher_weight * expected)


def method_spec(name: str) -> str:
    options = {**TEST_OPTIONS.get(name, {}), **({"fisher_samples": 8} if name == "eata" else {})}
    return name + (":" + ",".join(f"{key}={value}" for key, value in options.items()) if options else "")


def test_every_supporting_method_runs_through_tta_eval_on_a_tiny_vit(tmp_path, capsys):
    specs = [method_spec(name) for name in SUPPORTING]
    arguments = ["run", "--stream", VIT_STREAM, "--model", TINY_VIT_FACTORY, "--window", "8", "--no-progress"]
    for spec in specs:
        arguments += ["--method", spec]
    code, _, err = run_cli(capsys, *arguments, "--out", str(tmp_path / "results"), "--name", "vit")
    assert code == 0, err
    run_dir = tmp_path / "results" / "vit"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(specs) <= set(summary["methods"])
    for name, spec in zip(SUPPORTING, specs):
        assert summary["methods"][spec]["samples"] == 24
        if name in NORMALIZATION_METHODS:
            records = RecordTable.read_csv(records_path(run_dir, spec))
            assert records.column("samples_adapted").sum() > 0, spec


def test_batchnorm_rules_are_refused_in_one_line_by_tta_eval(tmp_path, capsys):
    code, _, err = run_cli(
        capsys,
        "run",
        "--stream",
        VIT_STREAM,
        "--model",
        TINY_VIT_FACTORY,
        "--method",
        "bn",
        "--out",
        str(tmp_path / "results"),
        "--no-progress",
    )
    assert code == 2 and "method 'bn' adapts BatchNorm layers, but the model has none (found: LayerNorm)" in err
    assert "Traceback" not in err


def test_a_missing_timm_is_reported_by_tta_eval_in_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "timm", None)
    code, _, err = run_cli(
        capsys,
        "run",
        "--stream",
        VIT_STREAM,
        "--model",
        "timm:vit_base_patch16_224",
        "--weights",
        "none",
        "--method",
        "tent",
        "--out",
        str(tmp_path / "results"),
        "--no-progress",
    )
    assert code == 2 and "timm is not installed: pip install timm" in err and "Traceback" not in err


def test_tent_and_eata_adapt_the_layernorm_parameters_of_a_timm_vit():
    pytest.importorskip("timm")
    from ccc.models import ModelSpec, load_model

    model = load_model(ModelSpec("timm:test_vit", weights="none"))
    batch = torch.rand(4, 3, 160, 160, generator=torch.Generator().manual_seed(0))
    for name in ("tent", "eata"):
        method = build(name, model, **({"fisher_samples": 4} if name == "eata" else {}))
        if name == "eata":
            method.prepare(iter([batch]))
            assert set(method.fisher) == set(method.adapted_parameter_names)
        method(batch)
        layernorm = {
            f"{module_name}.{parameter_name}"
            for module_name, module in model.named_modules()
            if isinstance(module, nn.LayerNorm)
            for parameter_name, _ in module.named_parameters(recurse=False)
        }
        assert set(method.adapted_parameter_names) == layernorm and layernorm
        source = dict(model.named_parameters())
        moved = {key for key, value in method.model.named_parameters() if not torch.equal(value, source[key])}
        assert moved and moved <= layernorm


class TimmStyleViT(nn.Module):
    """The parameter layout of a timm ``VisionTransformer`` (``cls_token``, ``pos_embed``, a fused
    ``attn.qkv`` Linear), tiny: 3×32×32 inputs, patch 8, one block, hidden size 16."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, 16, kernel_size=8, stride=8)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, 16))
        self.pos_embed = nn.Parameter(torch.randn(1, 17, 16) * 0.02)
        self.norm1 = nn.LayerNorm(16)
        self.qkv = nn.Linear(16, 48)
        self.proj = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        tokens = self.patch_embed(images).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls_token.expand(len(tokens), -1, -1), tokens], 1) + self.pos_embed
        query, key, value = self.qkv(self.norm1(tokens)).chunk(3, dim=-1)
        attention = (query @ key.transpose(1, 2) / 4.0).softmax(-1)
        tokens = tokens + self.proj(attention @ value)
        return self.head(self.norm(tokens)[:, 0])


@pytest.mark.parametrize(
    ("make_model", "left_out"),
    [
        (
            make_tiny_vit,
            {
                "class_token",
                "encoder.pos_embedding",
                "encoder.layers.encoder_layer_0.self_attention.in_proj_weight",
                "encoder.layers.encoder_layer_0.self_attention.in_proj_bias",
                "encoder.layers.encoder_layer_1.self_attention.in_proj_weight",
                "encoder.layers.encoder_layer_1.self_attention.in_proj_bias",
            },
        ),
        (TimmStyleViT, {"cls_token", "pos_embed"}),
    ],
)
def test_cotta_all_adapts_the_parameters_named_weight_or_bias_as_the_public_collect_params(make_model, left_out):
    """qinenergy/cotta and mariodoebler/test-time-adaptation collect the parameters whose own name is
    ``weight`` or ``bias``: 26 of the tiny torchvision ViT's 32 tensors."""
    model = make_model()
    method = create("cotta", model, adapted_parameters="all", augmentation_count=2)
    every = {name for name, _ in model.named_parameters()}
    assert set(method.adapted_parameter_names) == every - left_out
    assert [
        name for name, parameter in method.model.named_parameters() if parameter.requires_grad
    ] == method.adapted_parameter_names
    if make_model is make_tiny_vit:
        assert (len(every), len(method.adapted_parameter_names)) == (32, 26)
    source = dict(model.named_parameters())
    method(torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(0)))
    moved = {name for name, value in method.model.named_parameters() if not torch.equal(value, source[name])}
    assert moved and moved <= set(method.adapted_parameter_names)
