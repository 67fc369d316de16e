"""``--model timm:NAME``: the optional timm extra, its one-line error when timm is missing, weights from
a local file and the input normalisation from the model's own ``pretrained_cfg``."""

from __future__ import annotations

import sys

import pytest
import torch

from ccc.models import IMAGENET_MEAN, ModelSpec, NormalizedClassifier, load_model


def test_a_missing_timm_is_named_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)
    with pytest.raises(ValueError, match=r"^timm is not installed: pip install timm$"):
        load_model(ModelSpec("timm:vit_base_patch16_224", weights="none"))


def test_timm_names_are_not_factories():
    spec = ModelSpec("timm:test_vit")
    assert spec.is_timm and not spec.is_factory and spec.kind == "timm"
    assert ModelSpec("package.module:make").kind == "factory" and ModelSpec("resnet50").kind == "torchvision"


def test_timm_model_uses_the_normalisation_of_its_pretrained_cfg():
    timm = pytest.importorskip("timm")
    model = load_model(ModelSpec("timm:test_vit", weights="none"))
    expected = timm.create_model("test_vit", pretrained=False).pretrained_cfg
    assert isinstance(model, NormalizedClassifier)
    assert model.mean.flatten().tolist() == pytest.approx(list(expected["mean"]))
    assert model.std.flatten().tolist() == pytest.approx(list(expected["std"]))
    imagenet = load_model(ModelSpec("timm:test_vit", weights="none", normalization="imagenet"))
    assert imagenet.mean.flatten().tolist() == pytest.approx(list(IMAGENET_MEAN))
    assert not isinstance(
        load_model(ModelSpec("timm:test_vit", weights="none", normalization="none")), NormalizedClassifier
    )


def test_timm_weights_come_from_a_local_file(tmp_path):
    timm = pytest.importorskip("timm")
    source = timm.create_model("test_vit", pretrained=False).eval()
    path = tmp_path / "test_vit.pt"
    torch.save({"state_dict": source.state_dict()}, path)
    model = load_model(ModelSpec("timm:test_vit", weights=str(path), normalization="none"))
    images = torch.rand(2, 3, 160, 160)
    assert torch.equal(model(images), source(images))


@pytest.mark.parametrize(
    ("name", "weights", "message"),
    [
        ("timm:no_such_model", "none", r"^unknown timm model 'no_such_model'; timm.list_models\(\) lists the names$"),
        (
            "timm:test_vit",
            "IMAGENET1K_V1",
            r"^weights for timm model 'timm:test_vit' must be an existing file or 'none', got 'IMAGENET1K_V1'$",
        ),
    ],
)
def test_timm_mistakes_are_named_in_one_line(name, weights, message):
    pytest.importorskip("timm")
    with pytest.raises(ValueError, match=message):
        load_model(ModelSpec(name, weights=weights))
