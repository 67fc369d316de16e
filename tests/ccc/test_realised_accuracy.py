"""A stream's realised accuracy against its target: the numbers (``ccc.realised_accuracy``) and
``ccc-verify --accuracy`` on a small stream, a mirror-like folder without manifest and bad options."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from ccc.cli.generate import main as generate_main
from ccc.cli.verify import main as verify_main
from ccc.load import open_stream
from ccc.realised_accuracy import describe_realised, summarise_realised
from tests.builders import cli_user_error, make_calibration_table, make_image_folder

PREDICTED_CLASS = 1
"""The class ``constant_model`` always predicts."""


class _Constant(nn.Module):
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(len(images), 1000)
        logits[:, PREDICTED_CLASS] = 1.0
        return logits


def constant_model() -> nn.Module:
    """A classifier that predicts ``PREDICTED_CLASS`` for every image (a ``module:function`` factory)."""
    return _Constant()


def test_the_summary_counts_windows_differences_and_pairs() -> None:
    correct = [True, False, True, True] * 5 + [False] * 3  # 23 samples: 4 full windows of 5
    calibrated = [50.0] * 23
    pairs = ["fog->snow"] * 10 + ["snow->jpeg"] * 13
    result = summarise_realised(correct, window=5, target=40.0, calibrated=calibrated, pairs=pairs)
    assert result.samples == 23 and result.windows == 4
    assert result.realised == pytest.approx(100 * 15 / 23)
    means = np.array([80.0, 60.0, 80.0, 80.0])  # windows of 5: TFTTT, FTTTF, TTTFT, TTFTT
    assert result.standard_error == pytest.approx(means.std(ddof=1) / 2)
    assert result.target_difference == pytest.approx(100 * 15 / 23 - 40)
    assert result.calibrated == 50.0 and result.calibrated_difference_error == pytest.approx(result.standard_error)
    assert list(result.pairs) == ["fog->snow", "snow->jpeg"]
    assert result.pairs["fog->snow"].samples == 10 and result.pairs["fog->snow"].realised == pytest.approx(70.0)
    assert result.pairs["snow->jpeg"].realised == pytest.approx(100 * 8 / 13)
    lines = describe_realised(result, "m")
    assert lines[0].startswith("realised accuracy of m: 65.2 % ± ") and "over 23 samples" in lines[0]
    assert lines[1] == f"  against the target 40 %: +25.2 ± {result.standard_error:.1f} points"
    assert "furthest pair from its calibration: fog->snow, 70.0 % over 10 samples (+20.0 points; 2 pairs" in lines[3]
    assert json.loads(json.dumps(result.to_json_dict()))["pairs"]["fog->snow"]["samples"] == 10


def test_the_summary_without_target_calibration_or_windows() -> None:
    result = summarise_realised([True, False, False], window=1_000)
    assert result.standard_error is None and result.windows == 0 and result.target_difference is None
    assert result.calibrated is None and result.pairs == {}
    lines = describe_realised(result, "m")
    assert lines[0] == "realised accuracy of m: 33.3 % over 3 samples (standard error over 0 windows of 1,000)"
    assert "give one with --target PERCENT" in lines[1] and len(lines) == 2


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"correct": []}, "the stream is empty"),
        ({"correct": [True], "window": 0}, "window must be >= 1"),
        ({"correct": [True], "target": 101.0}, "target accuracy must be a percentage"),
        ({"correct": [True], "target": math.nan}, "target accuracy must be a percentage"),
        ({"correct": [True, False], "calibrated": [1.0]}, "calibrated has 1 entries for 2 samples"),
    ],
)
def test_bad_input_is_one_line(arguments: dict, message: str) -> None:
    correct = arguments.pop("correct")
    with pytest.raises(ValueError, match=message):
        summarise_realised(correct, **arguments)


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("realised")
    table = root / "table.npz"
    make_calibration_table().save(table)
    argv = [
        "--calibration", str(table), "--imagenet", str(make_image_folder(root / "val")), "--difficulty", "medium",
        "--speed", "4", "--num-images", "24", "--shard-size", "10", "--out", str(root / "shards"), "--workers", "1",
        "--no-progress",
    ]  # fmt: skip
    assert generate_main(argv) == 0
    (folder,) = (root / "shards").iterdir()
    return folder


def test_verify_reports_the_realised_accuracy_against_the_manifests_target(stream: Path, tmp_path, capsys) -> None:
    labels = np.array([int(sample.label) for sample in open_stream(stream)])
    calibrated = np.array([sample.metadata["calibrated_accuracy"] for sample in open_stream(stream)])
    report = tmp_path / "report.json"
    model = f"{__name__}:constant_model"
    argv = [str(stream), "--no-decode", "--no-progress", "--accuracy", "--model", model, "--window", "5"]
    assert verify_main([*argv, "--json", str(report)]) == 0
    out = capsys.readouterr().out
    realised = 100 * float(np.mean(labels == PREDICTED_CLASS))
    assert f"realised accuracy of {model}: {realised:.1f} % ± " in out
    assert "over 24 samples (standard error over 4 windows of 5)" in out
    assert "against the target 30 %:" in out and "against the calibrated accuracy of its samples" in out
    written = json.loads(report.read_text())["realised_accuracy"]
    assert written["model"] == model and written["samples"] == 24 and written["target"] == 30.0
    assert written["realised"] == pytest.approx(realised)
    assert written["calibrated"] == pytest.approx(float(calibrated.mean()))

    assert verify_main([*argv, "--max-samples", "7", "--target", "12.5"]) == 0
    out = capsys.readouterr().out
    assert "over 7 samples" in out and "against the target 12.5 %:" in out


def test_a_mirror_without_manifest_needs_a_target(stream: Path, tmp_path, capsys) -> None:
    from ccc.cli.mirror import main as mirror_main
    from tests.ccc.shards.fault_server import FaultServer

    shards = {f"/s/{path.name}": path.read_bytes() for path in sorted(stream.glob("serial_*.tar"))}
    mirror = tmp_path / "mirror"
    with FaultServer(shards) as server:
        pattern = server.url(f"/s/serial_{{00000..{len(shards) - 1:05d}}}.tar")
        assert mirror_main([pattern, str(mirror), "--no-progress"]) == 0
    capsys.readouterr()
    model = f"{__name__}:constant_model"
    report = tmp_path / "report.json"
    argv = [str(mirror), "--no-progress", "--accuracy", "--model", model, "--json", str(report)]
    assert verify_main(argv) == 0
    out = capsys.readouterr().out
    assert "over 24 samples" in out
    assert "no target: the stream records none (published shards, cin-c and gradual streams)" in out
    written = json.loads(report.read_text())
    assert written["intact_shards"] == len(shards) and written["realised_accuracy"]["target"] is None
    assert verify_main([*argv, "--target", "30"]) == 0
    assert "against the target 30 %:" in capsys.readouterr().out


def test_a_damaged_stream_is_not_scored(stream: Path, tmp_path, capsys) -> None:
    damaged = tmp_path / stream.name
    shutil.copytree(stream, damaged)
    shard = damaged / "serial_00001.tar"
    shard.write_bytes(shard.read_bytes()[:-1024])
    model = f"{__name__}:constant_model"
    assert verify_main([str(damaged), "--no-decode", "--no-progress", "--accuracy", "--model", model]) == 1
    out = capsys.readouterr().out
    assert "serial_00001.tar: truncated" in out
    assert "realised accuracy not measured: the stream has shards that are not intact" in out
    assert "realised accuracy of" not in out


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--model", "resnet18"], "--model set(s) up the realised-accuracy check: add --accuracy"),
        (["--target", "30", "--max-samples", "5"], "--target, --max-samples set(s) up"),
        (["--accuracy", "--target", "130"], "--target is an accuracy in percent, in [0, 100], got 130"),
        (["--accuracy", "--model", "no_such_model"], "--model no_such_model: unknown model 'no_such_model'"),
        (["--accuracy", "--device", "gpu"], "--device: "),
    ],
)
def test_bad_accuracy_options_are_one_line(stream: Path, capsys, extra: list[str], expected: str) -> None:
    line = cli_user_error(verify_main, capsys, [str(stream), "--no-decode", "--no-progress", *extra])
    assert expected in line
