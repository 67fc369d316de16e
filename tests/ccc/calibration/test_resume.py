"""Resumable calibration: the work folder's log and identity, and a real SIGKILL of ``ccc-calibrate compute``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ccc.calibration import CalibrationTable
from ccc.calibration.compute.engine import Cell, UnitResult, WorkUnit
from ccc.calibration.compute.workfolder import (
    RESULTS_FILE,
    WorkFolder,
    WorkFolderError,
    decode_record,
    default_work_folder,
    encode_record,
)
from ccc.cli.calibrate import main
from tests.builders import REPOSITORY, make_texture_folder

IDENTITY = {"corruptions": ["fog", "snow"], "seed": 0}


def result(block: int, base_correct: int | None = 3, targets=((1, 4, 2), (1, 5, 0))) -> UnitResult:
    unit = WorkUnit(0, 7, block, base_correct is not None, tuple((n2, s2) for n2, s2, _ in targets))
    values = ([base_correct] if base_correct is not None else []) + [value for _, _, value in targets]
    return UnitResult(unit, tuple(values), 4)


# ----------------------------------------------------------------------------- log records
def test_record_round_trip_and_damage_detection() -> None:
    line = encode_record(result(2))
    assert line.endswith(b"\n")
    assert decode_record(line) == [(Cell(0, 7, -1, 0), 2, 3), (Cell(0, 7, 1, 4), 2, 2), (Cell(0, 7, 1, 5), 2, 0)]
    assert decode_record(encode_record(result(1, base_correct=None))) == [
        (Cell(0, 7, 1, 4), 1, 2),
        (Cell(0, 7, 1, 5), 1, 0),
    ]
    assert decode_record(line[:-1]) is None
    assert decode_record(line[:20]) is None
    flipped = line.replace(b'"block":2', b'"block":3')
    assert decode_record(flipped) is None


def test_work_folder_keeps_results_across_reopen(tmp_path: Path) -> None:
    folder_path = tmp_path / "run.work"
    with WorkFolder.open(folder_path, IDENTITY) as folder:
        folder.append(result(0))
        folder.append(result(1))
    with WorkFolder.open(folder_path, IDENTITY) as folder:
        assert folder.resumed_records == 6
        assert folder.results[(Cell(0, 7, 1, 4), 1)] == 2
        assert folder.results[(Cell(0, 7, -1, 0), 0)] == 3
        folder.remove()
    assert not folder_path.exists()


def test_an_interrupted_last_write_is_discarded(tmp_path: Path, caplog) -> None:
    folder_path = tmp_path / "run.work"
    with WorkFolder.open(folder_path, IDENTITY) as folder:
        folder.append(result(0))
    log = folder_path / RESULTS_FILE
    complete = log.read_bytes()
    log.write_bytes(complete + encode_record(result(1))[:-7])
    with WorkFolder.open(folder_path, IDENTITY) as folder:
        assert set(block for _, block in folder.results) == {0}
        folder.append(result(1))
    assert "incomplete last record" in caplog.text
    with WorkFolder.open(folder_path, IDENTITY) as folder:
        assert set(block for _, block in folder.results) == {0, 1}
    assert log.read_bytes() == complete + encode_record(result(1))


def test_damage_before_the_last_line_is_reported(tmp_path: Path) -> None:
    folder_path = tmp_path / "run.work"
    with WorkFolder.open(folder_path, IDENTITY) as folder:
        folder.append(result(0))
        folder.append(result(1))
    log = folder_path / RESULTS_FILE
    data = bytearray(log.read_bytes())
    data[12] ^= 1
    log.write_bytes(bytes(data))
    with pytest.raises(WorkFolderError, match=r"results.log line 1 is damaged"):
        WorkFolder.open(folder_path, IDENTITY)


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        (result(0, base_correct=3, targets=((1, 4, 5),)), "5 correct predictions in a block of 4 images"),
        (result(3, base_correct=0), "block 3 is outside the 10 images (blocks of 4)"),
        (result(2, base_correct=3), "3 correct predictions in a block of 2 images"),
        (result(1, base_correct=-1), "a negative block or count"),
        (result(0, targets=((2, 4, 1),)), "corruption index outside the run's 2 corruptions"),
        (result(0, targets=((1, 21, 1),)), "severity index outside 0 … 20"),
    ],
)
def test_impossible_counts_are_refused_when_read(tmp_path: Path, record: UnitResult, problem: str) -> None:
    identity = {**IDENTITY, "image_count": 10, "block_size": 4}
    folder_path = tmp_path / "run.work"
    with WorkFolder.open(folder_path, identity) as folder:
        folder.append(result(1))
        folder.append(record)
    with pytest.raises(
        WorkFolderError,
        match=rf"results.log line 2 records an impossible result for cell .*: {re.escape(problem)}; "
        r"move the folder away",
    ):
        WorkFolder.open(folder_path, identity)


def test_a_different_run_is_refused_and_its_folder_kept(tmp_path: Path) -> None:
    folder_path = tmp_path / "run.work"
    with WorkFolder.open(folder_path, IDENTITY) as folder:
        folder.append(result(0))
    other = {"corruptions": ["fog", "frost"], "seed": 0}
    with pytest.raises(WorkFolderError, match=r"corruptions: \['fog', 'snow'\] there, \['fog', 'frost'\] now"):
        WorkFolder.open(folder_path, other)
    assert (folder_path / RESULTS_FILE).stat().st_size > 0


def test_a_folder_in_use_is_refused(tmp_path: Path) -> None:
    with WorkFolder.open(tmp_path / "run.work", IDENTITY):
        with pytest.raises(WorkFolderError, match="in use by another ccc-calibrate run"):
            WorkFolder.open(tmp_path / "run.work", IDENTITY)


def test_deleting_the_lock_file_does_not_free_the_folder(tmp_path: Path) -> None:
    with WorkFolder.open(tmp_path / "run.work", IDENTITY):
        (tmp_path / "run.work" / "lock").unlink()
        with pytest.raises(WorkFolderError, match="in use by another ccc-calibrate run"):
            WorkFolder.open(tmp_path / "run.work", IDENTITY)
    with WorkFolder.open(tmp_path / "run.work", IDENTITY) as folder:
        assert folder.results == {}


def test_default_work_folder_sits_next_to_the_table() -> None:
    assert default_work_folder("calibration/vit.npz") == Path("calibration/vit.npz.work")


# ----------------------------------------------------------------------------- kill and resume
def compute_arguments(folder: Path, out: Path) -> list[str]:
    return [
        "compute", "--imagenet", str(folder), "--model", "tests.builders:tiny_texture_classifier",
        "--out", str(out), "--corruptions", "gaussian_noise,contrast", "--images", "4", "--block-size", "2",
        "--resize", "36", "--crop", "32", "--workers", "0", "--no-progress",
    ]  # fmt: skip


@pytest.mark.slow
def test_sigkill_then_restart_gives_the_uninterrupted_table(tmp_path: Path) -> None:
    folder = make_texture_folder(tmp_path / "val", images_per_class=1)
    reference_out = tmp_path / "reference.npz"
    assert main(compute_arguments(folder, reference_out)) == 0
    reference = CalibrationTable.load(reference_out)

    out = tmp_path / "killed.npz"
    log = default_work_folder(out) / RESULTS_FILE
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPOSITORY), os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "ccc.cli.calibrate", *compute_arguments(folder, out)]
    process = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if log.exists() and log.read_bytes().count(b"\n") >= 20:
            break
        time.sleep(0.05)
    assert process.poll() is None, "the run finished before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.communicate()
    assert process.returncode == -signal.SIGKILL
    assert not out.exists()
    finished = log.read_bytes().count(b"\n")
    assert 20 <= finished < 82  # of (1 clean + 2 × 20 bases) × 2 blocks units

    restarted = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=300)
    assert restarted.returncode == 0, restarted.stderr
    assert "already done" in restarted.stdout
    evaluated = int(restarted.stdout.split("evaluated ")[1].split(" images")[0].replace(",", ""))
    assert evaluated < (1 + 2 * 20 + 2 * 400) * 4  # cells × images: only the unfinished units ran
    resumed = CalibrationTable.load(out)
    assert resumed.checksum() == reference.checksum()
    np.testing.assert_array_equal(resumed.accuracy_array, reference.accuracy_array)
    assert not default_work_folder(out).exists()
