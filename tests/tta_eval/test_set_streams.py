"""tta-eval on streams of another corruption set: the stream's world is its set, a run without a model for
its images is one line naming one, and a CIFAR backbone with the CIFAR method settings evaluates it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ccc.corruptions import list_corruption_sets
from ccc.execution import SerialExecutor
from ccc.generate import generate_stream
from ccc.stream.plan import plan_stream
from ccc.stream.spec import SET_MODEL_OPTIONS
from tests.builders import make_image_folder
from tests.tta_eval.tta_helpers import run_cli
from tta_eval.streams.options import StreamOptions
from tta_eval.streams.registry import describe_stream_source


@pytest.fixture(scope="module")
def cifar_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = make_image_folder(tmp_path_factory.mktemp("images") / "val", images_per_class=2, size=(32, 32))
    definition = {"kind": "gradual", "corruptions": ["fog"], "speed": 2, "corruption_set": "cifar"}
    run_dir = tmp_path_factory.mktemp("shards") / "cifar_gradual"
    generate_stream(plan_stream(definition, None, folder), run_dir, SerialExecutor(), progress=False)
    return run_dir


def test_every_other_set_names_the_model_its_images_need() -> None:
    assert set(SET_MODEL_OPTIONS) == set(list_corruption_sets()) - {"imagenet"}


def test_the_streams_world_is_its_set(cifar_run: Path) -> None:
    assert describe_stream_source(f"ccc:{cifar_run}", StreamOptions()).world == "cifar"


def test_a_run_without_a_model_for_its_images_is_one_line(cifar_run: Path, capsys) -> None:
    code, _, err = run_cli(capsys, "run", "--stream", f"ccc:{cifar_run}", "--method", "source")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "holds cifar images (corruption_set cifar): choose a model for them, e.g. --model cifar10:wrn28_10" in err


def test_a_cifar_backbone_evaluates_it(cifar_run: Path, tmp_path: Path, capsys) -> None:
    arguments = ["run", "--stream", f"ccc:{cifar_run}", "--method", "tent", "--out", str(tmp_path)]
    arguments += ["--model", "cifar10:wrn40_2", "--weights", "none", "--settings", "cifar10", "--batch-size", "6"]
    code, _, err = run_cli(capsys, *arguments)
    assert code == 0, err
    config = json.loads(next(tmp_path.glob("*/config.json")).read_text())
    assert config["model"]["name"] == "cifar10:wrn40_2" and config["method_settings"]["name"] == "cifar10"
