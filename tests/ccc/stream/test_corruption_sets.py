"""Streams of a corruption set (``StreamSpec.corruption_set``): its defaults (whole images; PNG for CIFAR,
JPEG for the 64-pixel sets), the samples it plans and renders, its run names, and what is refused (a ccc
stream with a table of another set, the centre crop, the torch renderer); ``imagenet`` streams keep their
manifests, samples and names."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from ccc.cli.generate import main as generate_main
from ccc.corruptions import corrupt_pair, get_corruption_set, list_corruption_sets
from ccc.corruptions.apply import DEFAULT_CORRUPTION_SET as CORRUPTIONS_DEFAULT_SET
from ccc.render import render_pixels, render_sample
from ccc.render_torch import render_batch
from ccc.stream.plan import plan_sample, plan_stream
from ccc.stream.sources import index_image_folder, load_source_images
from ccc.stream.spec import (
    DEFAULT_CORRUPTION_SET,
    SET_DEFAULTS,
    PlanError,
    StreamSpec,
    domain_run_name,
    resolve_stream_spec,
    run_name,
)
from tests.builders import cli_user_error, make_calibration_table, make_image_folder


def _plan(folder: Path, **definition):
    mapping = {"kind": "gradual", "corruptions": ["fog", "snow"], "speed": 3, **definition}
    return plan_stream(mapping, None, folder)


def _source(plan, spec) -> bytes:
    return (Path(plan.sources.root) / spec.source_path).read_bytes()


@pytest.fixture(scope="module")
def cifar_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("cifar") / "images", images_per_class=2, size=(32, 32))


def test_every_set_has_stream_defaults_and_the_default_set_is_the_corruptions() -> None:
    assert set(SET_DEFAULTS) == set(list_corruption_sets())
    assert DEFAULT_CORRUPTION_SET == CORRUPTIONS_DEFAULT_SET == list_corruption_sets()[0]
    assert SET_DEFAULTS[DEFAULT_CORRUPTION_SET] == ("random", "jpeg")


def test_a_cifar_stream_renders_whole_images_with_the_sets_parameters(cifar_folder: Path) -> None:
    plan = _plan(cifar_folder, corruption_set="cifar")
    assert (plan.spec.crop, plan.spec.image_encoding, plan.spec.corruption_set) == ("whole", "png", "cifar")
    document = plan.spec.to_json_dict()
    assert (document["crop"], document["image_encoding"], document["corruption_set"]) == ("whole", "png", "cifar")
    for index in (0, 7, 20):
        spec = plan_sample(plan, index)
        assert (spec.crop_box, spec.flip, spec.corruption_set) == ((0, 0, 32, 32), False, "cifar")
        assert spec.to_json_dict()["corruption_set"] == "cifar"
        source = np.asarray(Image.open(io.BytesIO(_source(plan, spec))).convert("RGB"))
        expected = corrupt_pair(
            source, spec.n1, spec.s1, spec.n2, spec.s2, rng=np.random.default_rng(spec.seed), corruption_set="cifar"
        )
        pixels = render_pixels(spec, _source(plan, spec))
        assert pixels.shape == (32, 32, 3) and np.array_equal(pixels, expected)
        rendered = render_sample(spec, _source(plan, spec), plan.spec.image_encoding)
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(rendered.image))), pixels)


def test_the_sets_parameters_make_a_difference(cifar_folder: Path) -> None:
    plan = _plan(cifar_folder, corruption_set="cifar", speed=1, corruptions=["contrast"])
    spec = plan_sample(plan, 4)
    source = np.asarray(Image.open(io.BytesIO(_source(plan, spec))).convert("RGB"))
    imagenet = corrupt_pair(source, spec.n1, spec.s1, spec.n2, spec.s2, rng=np.random.default_rng(spec.seed))
    assert not np.array_equal(render_pixels(spec, _source(plan, spec)), imagenet)


def test_a_64_pixel_stream_resizes_whole_images_and_keeps_jpeg(tmp_path: Path) -> None:
    folder = make_image_folder(tmp_path / "tiny", classes=2, images_per_class=2, size=(80, 60))
    plan = _plan(folder, corruption_set="tinyimagenet")
    assert (plan.spec.crop, plan.spec.image_encoding) == ("whole", "jpeg")
    assert "image_encoding" not in plan.spec.to_json_dict()
    spec = plan_sample(plan, 0)
    assert spec.crop_box == (0, 0, 80, 60)
    source = Image.open(io.BytesIO(_source(plan, spec))).convert("RGB")
    resized = np.asarray(source.resize((64, 64), Image.Resampling.BILINEAR))
    expected = corrupt_pair(
        resized, spec.n1, spec.s1, spec.n2, spec.s2, rng=np.random.default_rng(spec.seed), corruption_set="tinyimagenet"
    )
    assert np.array_equal(render_pixels(spec, _source(plan, spec)), expected)
    assert get_corruption_set("tinyimagenet").image_size == 64


def test_imagenet_streams_are_unchanged(cifar_folder: Path) -> None:
    plan = _plan(cifar_folder)
    document = plan.spec.to_json_dict()
    assert "corruption_set" not in document and "image_encoding" not in document and document["crop"] == "random"
    spec = plan_sample(plan, 3)
    assert spec.corruption_set is None and "corruption_set" not in spec.to_json_dict()
    assert StreamSpec.from_json_dict(document) == plan.spec


def test_a_ccc_stream_may_take_whole_images_and_records_it(cifar_folder: Path) -> None:
    table = make_calibration_table()
    sources = load_source_images(index_image_folder(cifar_folder, progress=False))
    spec = resolve_stream_spec({"difficulty": "medium", "speed": 2, "crop": "whole"}, table, sources.index_checksum)
    assert spec.to_json_dict()["crop"] == "whole"
    plain = resolve_stream_spec({"difficulty": "medium", "speed": 2}, table, sources.index_checksum)
    assert "crop" not in plain.to_json_dict() and plain.crop == "random"
    sample = plan_sample(plan_stream(spec, table, cifar_folder), 5)
    assert (sample.crop_box, sample.flip) == ((0, 0, 32, 32), False)


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        ({"corruption_set": "mnist"}, "corruption_set must be one of imagenet, cifar, tinyimagenet, imagenet64"),
        ({"corruption_set": "cifar", "crop": "center"}, "crop 'center' is ImageNet-C's"),
        (
            {"kind": "ccc", "corruption_set": "cifar", "difficulty": "medium", "corruptions": None},
            "the calibration table was measured on corruption set 'imagenet', the stream asks for 'cifar'",
        ),
    ],
)
def test_what_a_set_refuses(cifar_folder: Path, definition: dict, message: str) -> None:
    table = make_calibration_table()
    with pytest.raises(PlanError, match=message):
        resolve_stream_spec({"kind": "gradual", "corruptions": ["fog"], "speed": 2, **definition}, table, "0" * 64, 6)


def test_run_names_name_the_set_and_an_encoding_other_than_its_default() -> None:
    assert run_name(30, 100, 43, corruption_set="cifar") == "cifar_baseline_30_transition+speed_100_seed_43"
    assert run_name(30, 100, 43, image_encoding="png", corruption_set="cifar").endswith("seed_43")
    assert run_name(30, 100, 43, image_encoding="jpeg", corruption_set="cifar").endswith("seed_43_jpeg")
    assert run_name(30, 100, 43, crop="whole") == "baseline_30_transition+speed_100_seed_43_crop_whole"
    assert run_name(30, 100, 43, crop="random") == run_name(30, 100, 43)
    name = domain_run_name("cin-c", 5, 10, "whole", 43, "png", "cifar")
    assert name == "cifar_cin-c_severity_5_images_10_crop_whole_seed_43"


def test_the_torch_renderer_refuses_another_set(cifar_folder: Path, capsys) -> None:
    plan = _plan(cifar_folder, corruption_set="cifar")
    spec = plan_sample(plan, 0)
    image = np.asarray(Image.open(io.BytesIO(_source(plan, spec))).convert("RGB"))
    with pytest.raises(ValueError, match="implements corruption_set 'imagenet' only, got cifar"):
        render_batch([spec], [image], torch.device("cpu"))
    argv = ["--kind", "gradual", "--corruption-set", "cifar", "--imagenet", str(cifar_folder), "--render-device", "cpu"]
    assert "implements corruption_set 'imagenet' only" in cli_user_error(generate_main, capsys, argv)


def test_ccc_generate_writes_a_cifar_stream(
    cifar_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["--kind", "gradual", "--corruption-set", "cifar", "--imagenet", str(cifar_folder)]
    argv += ["--corruptions", "fog", "--images-per-domain", "2", "--no-progress"]
    assert generate_main(argv) == 0
    run_dir = tmp_path / "shards" / "cifar_gradual_images_2_crop_whole_seed_43"
    stream = json.loads((run_dir / "manifest.json").read_text())["stream"]
    assert (stream["corruption_set"], stream["crop"], stream["image_encoding"]) == ("cifar", "whole", "png")
