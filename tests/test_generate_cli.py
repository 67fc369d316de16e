"""Tests of ``ccc-generate`` (ccc.cli.generate): one-line errors that say what to provide, the dry
run, a real run with the default run name, refusal of a folder holding another stream, and a run
killed with SIGKILL and restarted ending byte-identical to an uninterrupted one."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import make_calibration_table, make_image_folder

from ccc.calibration import CalibrationTable
from ccc.cli.generate import main

RUN_NAME = "baseline_30_transition+speed_4_seed_43"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("inputs")
    table_path = root / "table.npz"
    make_calibration_table().save(table_path)
    return {"images": make_image_folder(root / "val"), "table": table_path, "root": root}


def arguments(inputs: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return [
        "--calibration", str(inputs["table"]), "--imagenet", str(inputs["images"]), "--difficulty", "medium",
        "--speed", "4", "--out", str(out), "--workers", "1", "--no-progress", *extra,
    ]  # fmt: skip


def run_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run the CLI expecting a user error (exit code 2, one line on stderr, no traceback); return that line."""
    try:
        code = main(argv)
    except SystemExit as exit_request:
        code = exit_request.code
    captured = capsys.readouterr()
    assert code == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


def test_missing_calibration_says_what_to_provide(inputs, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    argv = [a for a in arguments(inputs, tmp_path) if a not in ("--calibration", str(inputs["table"]))]
    line = run_error(capsys, argv)
    assert "no calibration table: pass --calibration FILE" in line
    assert "ccc-calibrate import URL_OR_PICKLE --out calibration/resnet50.npz" in line
    assert "ccc-calibrate compute" in line
    line = run_error(capsys, ["--calibration", "missing.npz", *argv])
    assert "calibration table missing.npz does not exist" in line


def test_the_default_calibration_table_is_found(inputs, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "calibration").mkdir()
    (tmp_path / "calibration" / "resnet50.npz").write_bytes(inputs["table"].read_bytes())
    argv = [a for a in arguments(inputs, tmp_path / "out") if a not in ("--calibration", str(inputs["table"]))]
    assert main([*argv, "--dry-run", "--num-images", "100"]) == 0
    assert "pair 0:" in capsys.readouterr().out


def test_missing_imagenet_says_what_to_provide(inputs, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CCC_IMAGENET", raising=False)
    argv = [a for a in arguments(inputs, tmp_path) if a not in ("--imagenet", str(inputs["images"]))]
    line = run_error(capsys, argv)
    assert "no ImageNet folder given: pass --imagenet PATH" in line and "CCC_IMAGENET=PATH" in line and "--demo" in line


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (["--difficulty", "extreme"], "unknown difficulty 'extreme'; the calibration table defines: medium"),
        (["--corruptions", "fog,jpeg"], "unknown corruption 'fog'; available: brightness, jpeg, pixelate, contrast"),
        (["--baseline-accuracy", "130"], "argument --baseline-accuracy: must be an accuracy in percent in [0, 100], got 130"),
        (["--speed", "0"], "argument --speed: must be an integer >= 1, got 0"),
        (["--speed", "13"], "speed must be at most the number of source images (12)"),
        (["--num-images", "-5"], "argument --num-images: must be an integer >= 1, got -5"),
    ],
)
def test_bad_arguments_give_one_line(inputs, tmp_path: Path, capsys, change: list[str], expected: str) -> None:
    assert expected in run_error(capsys, arguments(inputs, tmp_path, *change))


def test_a_table_lacking_a_pair_is_named(inputs, tmp_path: Path, capsys) -> None:
    table = CalibrationTable.load(inputs["table"])
    grids = {pair: table.grid(*pair) for pair in table.pairs() if pair != ("pixelate", "brightness")}
    partial = CalibrationTable.from_grids(
        table.corruptions, grids, image_counts=100, metadata=table.metadata, difficulty_presets=dict(table.difficulty_presets)
    )
    partial.save(tmp_path / "partial.npz")
    line = run_error(capsys, [*arguments(inputs, tmp_path), "--calibration", str(tmp_path / "partial.npz")])
    assert "lacks 1 of the 12 ordered pairs these corruptions need: (pixelate, brightness)" in line


def test_bad_image_folders_fail_fast_or_are_skipped(inputs, tmp_path: Path, capsys) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "image.JPEG").write_bytes((inputs["images"] / "n00000000" / "ILSVRC2012_val_00000001.JPEG").read_bytes())
    assert "not in ImageNet layout" in run_error(capsys, [*arguments(inputs, tmp_path), "--imagenet", str(flat)])
    broken = make_image_folder(tmp_path / "broken")
    victim = broken / "n00000001" / "ILSVRC2012_val_00000005.JPEG"
    victim.write_bytes(victim.read_bytes()[:300])
    line = run_error(capsys, [*arguments(inputs, tmp_path), "--imagenet", str(broken)])
    assert "1 unreadable image(s)" in line and "n00000001/ILSVRC2012_val_00000005.JPEG" in line and "--skip-bad-images" in line
    assert main([*arguments(inputs, tmp_path / "out"), "--imagenet", str(broken), "--skip-bad-images", "--num-images", "4"]) == 0
    records = [json.loads(line) for line in _json_records(tmp_path / "out" / RUN_NAME / "serial_00000.tar")]
    assert all(record["source_path"] != "n00000001/ILSVRC2012_val_00000005.JPEG" for record in records)


def _json_records(path: Path) -> list[bytes]:
    import tarfile

    with tarfile.open(path) as archive:
        return [archive.extractfile(member).read() for member in archive.getmembers() if member.name.endswith(".json")]  # type: ignore[union-attr]


def test_dry_run_prints_the_schedule_and_plots_it(inputs, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    argv = [a for a in arguments(inputs, tmp_path / "out") if a not in ("--imagenet", str(inputs["images"]))]
    assert main([*argv, "--dry-run", "--num-images", "1000", "--shard-size", "300"]) == 0
    output = capsys.readouterr().out
    assert "target accuracy: 30 %" in output and "speed: 4 images per step" in output
    assert "pair 0: " in output and " = " in output
    assert "shards to write (4): serial_00000.tar, serial_00001.tar, serial_00002.tar, serial_00003.tar" in output
    plot = tmp_path / f"{RUN_NAME}_schedule.png"
    assert f"plot: {plot}" in output, "the plot lands in the current folder and its path is printed"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "out").exists(), "a dry run writes nothing into the output folder"


def test_a_run_and_a_conflicting_rerun(inputs, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CCC_IMAGENET", str(inputs["images"]))
    argv = [a for a in arguments(inputs, tmp_path) if a not in ("--imagenet", str(inputs["images"]))]
    assert main([*argv, "--num-images", "6", "--shard-size", "4"]) == 0
    output = capsys.readouterr().out
    assert "wrote 2 shards (6 images" in output
    run_dir = tmp_path / RUN_NAME
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["stream"]["difficulty"] == "medium" and manifest["complete"]
    line = run_error(capsys, [*argv, "--num-images", "8", "--shard-size", "4"])
    assert "holds a different stream (num_images: 6 -> 8)" in line and "--overwrite" in line
    assert main([*argv, "--num-images", "8", "--shard-size", "4", "--overwrite"]) == 0


def _sha256_of_shards(run_dir: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(run_dir.glob("serial_*.tar"))}


@pytest.mark.slow
def test_a_killed_run_resumes_to_identical_shards(inputs, tmp_path: Path) -> None:
    """SIGKILL a running ccc-generate after its second shard, restart it, compare with an uninterrupted run."""
    base = [sys.executable, "-m", "ccc.cli.generate", *arguments(inputs, tmp_path / "x"), "--num-images", "96", "--shard-size", "8"]
    killed_out, clean_out = tmp_path / "killed", tmp_path / "clean"
    command = [*base, "--out", str(killed_out)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    manifest_path = killed_out / RUN_NAME / "manifest.json"
    finished: list = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if manifest_path.exists():
            with open(manifest_path) as handle:
                finished = json.load(handle)["shards"]
            if len(finished) >= 2:
                break
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    process.stderr.close()  # type: ignore[union-attr]
    assert process.returncode == -signal.SIGKILL, "the run must be killed, not finish"
    recorded = json.loads(manifest_path.read_text())["shards"]
    assert 2 <= len(recorded) < 12, f"killed after {len(recorded)} of 12 shards"
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(recorded)} shards were already finished" in resumed.stdout
    clean = subprocess.run([*base, "--out", str(clean_out)], capture_output=True, text=True, timeout=300)
    assert clean.returncode == 0, clean.stderr
    resumed_hashes = _sha256_of_shards(killed_out / RUN_NAME)
    assert len(resumed_hashes) == 12
    assert resumed_hashes == _sha256_of_shards(clean_out / RUN_NAME)
    assert not [name for name in os.listdir(killed_out / RUN_NAME) if name.endswith(".partial")]
    assert json.loads(manifest_path.read_text()) == json.loads((clean_out / RUN_NAME / "manifest.json").read_text())


@pytest.mark.slow
def test_workers_two_from_the_command_line_gives_the_serial_shards(inputs, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--workers 2`` starts a local Ray cluster of 2 CPUs; its shards equal those of ``--workers 1``."""
    from ccc.cli.verify import main as verify_main

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    serial = [*arguments(inputs, tmp_path / "serial"), "--num-images", "24", "--shard-size", "8"]
    assert main(serial) == 0
    parallel = [*arguments(inputs, tmp_path / "ray"), "--num-images", "24", "--shard-size", "8"]
    parallel[parallel.index("--workers") + 1] = "2"
    assert main(parallel) == 0
    assert "wrote 3 shards (24 images" in capsys.readouterr().out
    assert _sha256_of_shards(tmp_path / "ray" / RUN_NAME) == _sha256_of_shards(tmp_path / "serial" / RUN_NAME)
    assert verify_main([str(tmp_path / "ray" / RUN_NAME), "--no-progress", "--calibration", str(inputs["table"]), "--imagenet", str(inputs["images"])]) == 0
    assert "plan hash matches" in capsys.readouterr().out
