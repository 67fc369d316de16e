"""The whole pipeline on the demo world, as a newcomer runs it: calibrate → generate → verify → load → tta-eval.

Small scale (two corruptions, 8 calibration images, a 400-image stream in two shards, rendered where
``ccc-generate`` renders it by default: in its own process at this size) so that CI runs it; marked slow.
Rendering by Ray workers has its own tests (``tests/ccc/test_generate.py``, ``tests/ccc/cli/test_generate.py``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from ccc.calibration import CalibrationTable
from ccc.cli.calibrate import main as calibrate_main
from ccc.cli.generate import main as generate_main
from ccc.cli.verify import main as verify_main
from ccc.load import open_stream, stream_loader
from tests.builders import load_script
from tta_eval.cli import main as tta_main

CORRUPTIONS = ("contrast", "gaussian_noise")
STREAM_IMAGES = 400
CALIBRATION_IMAGES = 8
SHARD_SIZE = 200
CROP_ALLOWANCE = 10.0
"""Points by which the stream's random-resized crops may lower accuracy below the calibrated
(centre-crop) numbers: the demo classes lose accuracy on small crops, as ImageNet models do."""


def test_the_report_refuses_a_difficulty_given_twice(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    demo_report = load_script("scripts/demo_report.py", monkeypatch)  # its dataclasses look their module up
    with pytest.raises(SystemExit) as exit_info:
        demo_report.main(["--stream", "easy=a", "--stream", "easy=b", "--results", "easy=r"])
    assert exit_info.value.code == 2
    assert "--stream easy is given twice (easy=a and easy=b); give it once" in capsys.readouterr().err


@pytest.mark.slow
def test_demo_world_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    table_path = tmp_path / "demo_small.npz"
    assert calibrate_main([
        "compute", "--demo", "--corruptions", ",".join(CORRUPTIONS), "--images", str(CALIBRATION_IMAGES), "--adaptive",
        "--workers", "0", "--out", str(table_path), "--no-progress",
    ]) == 0  # fmt: skip
    table = CalibrationTable.load(table_path)
    assert table.corruptions == CORRUPTIONS and "medium" in table.difficulty_presets
    assert "factory ccc.demo:demo_model" in table.metadata.model_name

    shards = tmp_path / "shards"
    assert generate_main([
        "--demo", "--calibration", str(table_path), "--difficulty", "medium", "--speed", "50",
        "--num-images", str(STREAM_IMAGES), "--shard-size", str(SHARD_SIZE), "--out", str(shards), "--no-progress",
    ]) == 0  # fmt: skip
    output = capsys.readouterr().out
    runs = list(shards.iterdir())
    assert len(runs) == 1 and runs[0].name.startswith("demo_baseline_")
    run = runs[0]
    assert f"ccc-verify {run}" in output
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["complete"] and [entry["name"] for entry in manifest["shards"]] == [
        "serial_00000.tar",
        "serial_00001.tar",
    ]

    assert verify_main([str(run), "--no-progress"]) == 0
    assert "2 of 2 shards intact" in capsys.readouterr().out

    from ccc.demo import demo_model

    model = demo_model()
    correct = 0
    calibrated = []
    with torch.inference_mode():
        for images, labels, metadata in stream_loader(
            open_stream(run, image_format="float"), batch_size=100, num_workers=2
        ):
            correct += int((model(images).argmax(dim=1) == labels).sum())
            calibrated += [entry["calibrated_accuracy"] for entry in metadata]
    assert len(calibrated) == STREAM_IMAGES
    realised = 100.0 * correct / STREAM_IMAGES
    target = sum(calibrated) / len(calibrated)
    # Binomial noise of the stream (400 images) and of the calibration cells (≥ 8 images, or a
    # prediction from neighbours), four standard errors each, plus the crop allowance below.
    spread = target * (100 - target)
    noise = 4 * math.sqrt(spread / STREAM_IMAGES) + 4 * math.sqrt(spread / CALIBRATION_IMAGES)
    assert target - CROP_ALLOWANCE - noise <= realised <= target + noise, (realised, target, noise)

    results = tmp_path / "results"
    assert tta_main([
        "run", "--stream", f"ccc:{run}", "--demo", "--method", "source", "--method", "bn", "--method", "rdumb",
        "--batch-size", "50", "--out", str(results), "--name", "demo", "--no-progress",
    ]) == 0  # fmt: skip
    folder = results / "demo"
    summary = json.loads((folder / "summary.json").read_text())
    assert json.dumps(summary).count("source") >= 1
    assert (folder / "accuracy.png").stat().st_size > 0
    records = sorted((folder / "records").glob("*.csv"))
    assert len(records) == 3
    source_records = next(path for path in records if path.stem.startswith("source")).read_text().splitlines()
    assert len(source_records) == 1 + STREAM_IMAGES // 50

    # The report docs/demo.md is made with, on this run: the same realised and calibrated numbers.
    demo_report = load_script("scripts/demo_report.py", monkeypatch)  # its dataclasses look their module up
    report_folder = tmp_path / "report"
    assert demo_report.main([
        "--stream", f"medium={run}", "--results", f"medium={folder}", "--calibration", str(table_path),
        "--window", "100", "--edge", "100", "--difference-window", "100",
        "--out", str(report_folder),
    ]) == 0  # fmt: skip
    assert "| medium | 400 |" in capsys.readouterr().out
    report = json.loads((report_folder / "report.json").read_text())["medium"]
    assert report["stream"]["calibrated"] == pytest.approx(target, abs=1e-9)
    assert abs(report["stream"]["realised"] - realised) <= 0.5
    assert sum(entry["samples"] for entry in report["stream"]["per_pair"].values()) == STREAM_IMAGES
    assert sum(entry["samples"] for entry in report["stream"]["per_cell_kind"].values()) == STREAM_IMAGES
    assert set(report["methods"]) == {"source", "bn", "rdumb"}
    for name in ("realised_vs_calibrated.png", "tta_medium.png", "tta_medium_minus_bn.png"):
        assert (report_folder / name).stat().st_size > 1000
