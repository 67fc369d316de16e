"""Real SIGKILLs (issue 22 §1): the tta-eval console script is killed at several moments (while a
checkpoint is being written, between checkpoints, right after one) and re-run with the same command
until it completes; under deterministic timing its records are byte-identical to an uninterrupted
run's, for cotta (random augmentations), rotta (memory bank), eata (Fisher from the stream head) and
rdumb (resets), under the offline protocol and Alfarra et al.'s."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tta_eval.cli import main
from tta_eval.run_folder import CHECKPOINT_FILE, RECORDS_FOLDER

REPOSITORY = Path(__file__).resolve().parents[2]
FACTORY = "tests.tta_eval.tta_helpers:make_tiny_cnn"
METHODS = ("cotta", "rotta", "eata:fisher_samples=32", "rdumb:reset_every=5")
COSTS = ("cotta=3", "rotta=1+1", "eata=2", "rdumb=2")
POLL_SECONDS = 0.001


def command(out: Path, protocol: str, batches: int) -> list[str]:
    arguments = [
        "tta-eval",
        "run",
        "--stream",
        f"synthetic:num_batches={batches},domain_length=8,image_size=8",
        "--model",
        FACTORY,
    ]
    arguments += ["--batch-size", "16", "--out", str(out), "--name", "run", "--no-progress", "--checkpoint-every", "64"]
    arguments += ["--baseline-latency-ms", "10", "--protocol", protocol, "--domain-key", "domain"]
    for method in METHODS:
        arguments += ["--method", method]
    for cost in COSTS:
        arguments += ["--cost", cost]
    return arguments


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPOSITORY)}


def records(run_dir: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((run_dir / RECORDS_FOLDER).glob("*.csv"))}


def rows(run_dir: Path) -> int:
    path = run_dir / RECORDS_FOLDER / "source.csv"
    return len(path.read_bytes().splitlines()) - 1 if path.is_file() else 0


Moment = Callable[[Path, float], bool]
"""moment(run folder, start time of the process): True when the process is to be killed."""


def writing_checkpoint(run_dir: Path, started: float) -> bool:
    return (run_dir / f".{CHECKPOINT_FILE}.tmp").exists()


def after_rows(count: int) -> Moment:
    """Between checkpoints: once this process has written ``count`` rows of the source model."""

    def moment(run_dir: Path, started: float) -> bool:
        path = run_dir / RECORDS_FOLDER / "source.csv"
        return path.is_file() and path.stat().st_mtime >= started and rows(run_dir) >= count

    return moment


def after_a_checkpoint(run_dir: Path, started: float) -> bool:
    path = run_dir / CHECKPOINT_FILE
    return path.is_file() and path.stat().st_mtime >= started


def run_and_kill(arguments: list[str], run_dir: Path, moment: Moment) -> bool:
    """Start the command, SIGKILL it at ``moment``; True if it was killed (False: it finished first)."""
    started = time.time()
    log = run_dir.parent / "stderr.txt"
    with open(log, "wb") as stderr:
        process = subprocess.Popen(arguments, stdout=subprocess.DEVNULL, stderr=stderr, env=environment())
        try:
            while process.poll() is None:
                if moment(run_dir, started):
                    process.send_signal(signal.SIGKILL)
                    break
                time.sleep(POLL_SECONDS)
            process.wait(timeout=300)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert process.returncode in (0, -signal.SIGKILL), log.read_text()
    return process.returncode == -signal.SIGKILL


def check_kills(tmp_path: Path, protocol: str, batches: int, moments: list[Moment], must_kill: list[bool]) -> None:
    reference = tmp_path / "reference"
    # The uninterrupted run in this process: the killed ones are console scripts, as a user runs them.
    assert main(command(reference, protocol, batches)[1:]) == 0
    arguments = command(tmp_path / "killed", protocol, batches)
    (tmp_path / "killed").mkdir()
    run_dir = tmp_path / "killed" / "run"
    for moment, must in zip(moments, must_kill, strict=True):
        if not run_and_kill(arguments, run_dir, moment):
            assert not must, "the run ended before the moment to kill it"
            break
    else:
        finished = subprocess.run(arguments, env=environment(), capture_output=True, text=True, check=False)
        assert finished.returncode == 0, finished.stderr
    assert records(run_dir) == records(reference / "run")
    assert not (run_dir / CHECKPOINT_FILE).exists()


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["offline", "alfarra"])
def test_a_run_killed_at_several_moments_resumes_to_identical_records(tmp_path, protocol) -> None:
    # while a checkpoint is written, between two (a checkpoint every 4 batches: rows 11 and 26), right after one
    moments = [writing_checkpoint, after_rows(11), after_a_checkpoint, after_rows(26)]
    # A checkpoint write is brief: the poll may miss all of them, and the run then ends uninterrupted.
    check_kills(tmp_path, protocol, 40, moments, [False, True, True, True])
