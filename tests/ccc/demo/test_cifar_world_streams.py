"""The 32×32 demo world through the commands: ``ccc-generate --demo --corruption-set cifar`` renders its images with
its table, ``ccc-verify`` finds both, ``tta-eval run`` recognises the world and evaluates its model, and
``ccc-render:demo,corruption_set=cifar`` renders the shards' samples; a set without a demo world is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ccc.calibration import CalibrationTable
from ccc.cli.generate import main as generate_main
from ccc.cli.verify import main as verify_main
from ccc.demo import DEMO_CIFAR_MODEL_NAME, demo_calibration_path, demo_world_of
from ccc.demo.calibration import DEMO_CIFAR_DIFFICULTY_PRESETS, DEMO_TABLES
from ccc.shards.manifest import load_manifest
from tests.builders import cli_user_error
from tta_eval.streams import DEMO_CIFAR_WORLD, StreamOptions, describe_stream_source
from tta_eval.streams.ccc_render import parse_render_location

RUN = "demo_cifar_baseline_35_transition+speed_20_seed_43_images_200"


def test_the_cifar_world_has_its_own_table_of_its_set() -> None:
    table = CalibrationTable.load(demo_calibration_path("cifar"))
    assert table.corruption_set == "cifar" and table.metadata.preprocessing_kind == "stream"
    assert dict(table.difficulty_presets) == dict(DEMO_CIFAR_DIFFICULTY_PRESETS)
    assert table.corruptions == DEMO_TABLES["cifar"].corruptions
    assert table.metadata.model_name == f"factory {DEMO_CIFAR_MODEL_NAME}"


@pytest.fixture(scope="module")
def cifar_demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cifar_demo")
    argv = ["--demo", "--corruption-set", "cifar", "--difficulty", "medium", "--speed", "20", "--num-images", "200"]
    argv += ["--workers", "1", "--no-progress", "--out", str(root)]
    assert generate_main(argv) == 0
    return root / RUN


def test_ccc_generate_renders_the_worlds_images_with_its_table(cifar_demo_run: Path) -> None:
    spec = load_manifest(cifar_demo_run).stream
    assert (spec.corruption_set, spec.crop, spec.image_encoding) == ("cifar", "whole", "png")
    assert spec.calibration_checksum == CalibrationTable.load(demo_calibration_path("cifar")).checksum()
    assert demo_world_of(spec) == "cifar"
    description = describe_stream_source(f"ccc:{cifar_demo_run}", StreamOptions())
    assert description.world == DEMO_CIFAR_WORLD and description.num_classes == 16


def test_ccc_verify_finds_the_worlds_table_and_images(cifar_demo_run: Path, capsys) -> None:
    assert verify_main([str(cifar_demo_run), "--no-progress"]) == 0
    assert "plan hash matches" in capsys.readouterr().out


def test_an_on_the_fly_stream_of_the_world_is_the_shards_stream() -> None:
    request = parse_render_location("demo,corruption_set=cifar,difficulty=medium,speed=20,num_images=200")
    assert request.demo and request.demo_world == "cifar"
    assert request.calibration == str(demo_calibration_path("cifar"))
    description = describe_stream_source(
        "ccc-render:demo,corruption_set=cifar,difficulty=medium,speed=20,num_images=200", StreamOptions()
    )
    assert description.world == DEMO_CIFAR_WORLD and description.name == RUN


def test_tta_eval_evaluates_the_worlds_model(cifar_demo_run: Path, tmp_path: Path, capsys) -> None:
    from tta_eval.cli import main as tta_main

    argv = ["run", "--stream", f"ccc:{cifar_demo_run}", "--method", "source", "--method", "bn"]
    assert tta_main([*argv, "--out", str(tmp_path), "--no-progress"]) == 0
    config = json.loads((tmp_path / RUN / "config.json").read_text())
    assert DEMO_CIFAR_MODEL_NAME in json.dumps(config["model"])
    summary = json.loads((tmp_path / RUN / "summary.json").read_text())
    assert {"source", "bn"} <= set(json.dumps(summary).split('"'))
    capsys.readouterr()
    error = cli_user_error(tta_main, capsys, [*argv, "--demo", "--out", str(tmp_path / "other")])
    assert "drop --demo (its own model, ccc.demo:demo_model_cifar, is chosen)" in error


def test_a_set_without_a_demo_world_is_one_line(capsys) -> None:
    error = cli_user_error(generate_main, capsys, ["--demo", "--corruption-set", "tinyimagenet", "--dry-run"])
    assert "the demo world exists for corruption sets imagenet, cifar, not 'tinyimagenet'" in error
