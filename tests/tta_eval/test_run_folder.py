"""A run folder says whether it is complete and for which config; outputs that cannot be written end in
one line (issue 19: stopped runs, --overwrite after a crash, full disks, unwritable outputs)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time

import pytest
import torch

import tta_eval.run
import tta_eval.run_folder
from tests.builders import REPOSITORY
from tests.image_fixtures import bomb_png, truncated_jpeg
from tests.tta_eval.tta_helpers import SMALL_STREAM, TINY_FACTORY, run_cli
from tta_eval.cli import main
from tta_eval.records import CsvRecordWriter
from tta_eval.run_folder import LOCK_FILE
from tta_eval.streams import register_stream_source


def run_arguments(out, name: str, stream: str = SMALL_STREAM, *extra: str) -> list[str]:
    return [
        "run",
        "--stream",
        stream,
        "--model",
        TINY_FACTORY,
        "--method",
        "bn",
        "--out",
        str(out),
        "--name",
        name,
        "--no-progress",
        *extra,
    ]


def assert_one_line(code: int, err: str, message: str) -> None:
    assert code == 2, err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


OBSERVED_LINES: list[int] = []


def observing_stream(location, options):
    """Four batches; before yielding the fourth, note how many lines records/bn.csv holds on disk, then
    fail (a run killed after three batches)."""
    folder = location
    for index in range(4):
        if index == 3:
            with open(f"{folder}/records/bn.csv") as handle:
                OBSERVED_LINES.append(len(handle.read().splitlines()))
            raise RuntimeError("the stream broke")
        yield torch.rand(8, 3, 16, 16, generator=torch.Generator().manual_seed(index)), torch.zeros(8, dtype=torch.long)


@pytest.fixture
def observing_scheme(scratch_stream_sources):
    register_stream_source("observing", observing_stream)
    OBSERVED_LINES.clear()


def test_a_stopped_run_is_refused_by_compare_and_rescore(tmp_path, capsys, observing_scheme):
    with pytest.raises(RuntimeError, match="the stream broke"):
        main(run_arguments(tmp_path, "r", f"observing:{tmp_path / 'r'}", "--collapse-reference", "none"))
    capsys.readouterr()
    # Rows reach the file as they are written: a run killed after 3 batches leaves them.
    assert OBSERVED_LINES == [4]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert (
        summary["status"] == "stopped"
        and summary["stopped"] == "RuntimeError: the stream broke"
        and summary["samples"] == 24
    )
    code, _, err = run_cli(capsys, "compare", str(tmp_path / "r"), "--out", str(tmp_path / "cmp"))
    assert_one_line(
        code,
        err,
        f"run folder '{tmp_path / 'r'}' is incomplete: it stopped after 24 samples (RuntimeError: the stream broke)",
    )
    code, _, err = run_cli(capsys, "rescore", str(tmp_path / "r"), "--threshold-ms", "50", "--baseline-latency-ms", "1")
    assert_one_line(code, err, "is incomplete: it stopped after 24 samples")


def test_overwrite_clears_the_previous_run_before_writing_the_new_config(tmp_path, capsys, monkeypatch):
    assert run_cli(capsys, *run_arguments(tmp_path, "r"))[0] == 0
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "complete" and len(summary["config_sha256"]) == 64

    def crash(*args, **kwargs):
        raise RuntimeError("the run crashed")

    monkeypatch.setattr(tta_eval.run, "run_protocol", crash)
    with pytest.raises(RuntimeError, match="the run crashed"):
        main(run_arguments(tmp_path, "r", SMALL_STREAM, "--overwrite"))
    capsys.readouterr()
    assert sorted(path.name for path in (tmp_path / "r").iterdir()) == ["config.json", "records"]
    code, _, err = run_cli(capsys, "compare", str(tmp_path / "r"))
    assert_one_line(code, err, "is incomplete: it has config.json but no summary.json")


def test_a_refused_overwrite_keeps_the_previous_run(tmp_path, capsys):
    assert run_cli(capsys, *run_arguments(tmp_path, "r"))[0] == 0
    before = sorted(path.name for path in (tmp_path / "r").iterdir())
    code, _, err = run_cli(capsys, *run_arguments(tmp_path, "r", SMALL_STREAM + ",num_classes=20", "--overwrite"))
    assert_one_line(code, err, "predicts 10 classes, but the stream's labels come from 20 classes")
    assert sorted(path.name for path in (tmp_path / "r").iterdir()) == before


def test_a_summary_of_another_config_is_refused(tmp_path, capsys):
    assert run_cli(capsys, *run_arguments(tmp_path, "r"))[0] == 0
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    config["window"] = 7
    (tmp_path / "r" / "config.json").write_text(json.dumps(config))
    code, _, err = run_cli(capsys, "compare", str(tmp_path / "r"), "--out", str(tmp_path / "cmp"))
    assert_one_line(
        code,
        err,
        f"run folder '{tmp_path / 'r'}' is inconsistent: its summary.json was written for another config.json",
    )
    (tmp_path / "r" / "summary.json").unlink()
    code, _, err = run_cli(capsys, "compare", str(tmp_path / "r"), "--out", str(tmp_path / "cmp"))
    assert_one_line(code, err, "is incomplete: it has config.json but no summary.json")


def test_a_full_disk_during_a_run_is_one_line_and_the_run_is_marked_incomplete(tmp_path, capsys, monkeypatch):
    real_write = CsvRecordWriter.write
    calls = []

    def write_until_full(self, record):
        calls.append(record)
        if len(calls) > 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(self, record)

    monkeypatch.setattr(CsvRecordWriter, "write", write_until_full)
    code, _, err = run_cli(capsys, *run_arguments(tmp_path, "r", SMALL_STREAM, "--collapse-reference", "none"))
    assert_one_line(
        code, err, f"{tmp_path / 'r' / 'records' / 'bn.csv'}: No space left on device; run 'r' is incomplete"
    )
    code, _, err = run_cli(capsys, "compare", str(tmp_path / "r"), "--out", str(tmp_path / "cmp"))
    assert_one_line(code, err, "is incomplete: it stopped after 48 samples (OSError")


def test_a_full_disk_for_the_summary_leaves_the_run_unfinished(tmp_path, capsys, monkeypatch):
    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    real_write_json = tta_eval.run_folder.write_json
    monkeypatch.setattr(
        tta_eval.run_folder,
        "write_json",
        lambda path, data: (full if path.name == "summary.json" else real_write_json)(path, data),
    )
    code, _, err = run_cli(capsys, *run_arguments(tmp_path, "r"))
    assert_one_line(code, err, f"{tmp_path / 'r' / 'summary.json'}: No space left on device")
    code, _, err = run_cli(capsys, "compare", str(tmp_path / "r"), "--out", str(tmp_path / "cmp"))
    assert_one_line(code, err, "is incomplete: it has config.json but no summary.json")


def test_outputs_that_cannot_be_written_give_one_line(tmp_path, capsys, monkeypatch):
    assert run_cli(capsys, *run_arguments(tmp_path, "r"))[0] == 0
    run_dir = str(tmp_path / "r")
    (tmp_path / "a_file").write_text("not a folder")
    (tmp_path / "a_folder").mkdir()
    cases = [
        (
            run_arguments(tmp_path / "a_file", "x"),
            f"'{tmp_path / 'a_file'}' is an existing file, not a folder; choose another --out or --name",
        ),
        (run_arguments(tmp_path, "a_file"), "is an existing file, not a folder; choose another --out or --name"),
        (["compare", run_dir, "--out", str(tmp_path / "a_file")], f"{tmp_path / 'a_file'}: File exists"),
        (
            [
                "rescore",
                run_dir,
                "--threshold-ms",
                "50",
                "--baseline-latency-ms",
                "1",
                "--json",
                str(tmp_path / "a_folder"),
            ],
            f"{tmp_path / 'a_folder'}: Is a directory",
        ),
        (
            [
                "rescore",
                run_dir,
                "--threshold-ms",
                "50",
                "--baseline-latency-ms",
                "1",
                "--json",
                str(tmp_path / "a_file" / "x.json"),
            ],
            "Not a directory",
        ),
    ]
    for arguments, message in cases:
        code, _, err = run_cli(capsys, *arguments)
        assert_one_line(code, err, message)
    # A read-only folder (the tests may run as root, who may write anyway: the error is injected).
    real_mkdir = type(tmp_path).mkdir

    def read_only_mkdir(self, *args, **kwargs):
        if "readonly" in str(self):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(type(tmp_path), "mkdir", read_only_mkdir)
    code, _, err = run_cli(capsys, *run_arguments(tmp_path / "readonly", "x"))
    assert_one_line(code, err, f"{tmp_path / 'readonly' / 'x'}: Permission denied")  # created first, to be locked
    code, _, err = run_cli(capsys, "compare", run_dir, "--out", str(tmp_path / "readonly"))
    assert_one_line(code, err, f"{tmp_path / 'readonly'}: Permission denied")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--batch-size", "100000000000"], "batch_size must be an integer in [1, 65,536], got 100,000,000,000"),
        (
            ["--window", "100000000000000000000"],
            "window must be an integer in [1, 1,000,000,000,000,000], got 100,000,000,000,000,000,000",
        ),
        (
            ["--collapse-span", "100000000000000000000"],
            "collapse_span must be an integer in [1, 1,000,000,000,000,000]",
        ),
        (["--max-samples", "100000000000000000000"], "max_samples must be an integer in [1, 1,000,000,000,000,000]"),
        (["--image-size", "100000000"], "image_size must be an integer in [1, 16,384], got 100,000,000"),
    ],
)
def test_huge_values_give_one_line(tmp_path, capsys, arguments, message):
    stream = tmp_path / "images"
    (stream / "a").mkdir(parents=True)
    code, _, err = run_cli(capsys, *run_arguments(tmp_path, "r", str(stream), *arguments))
    assert_one_line(code, err, message)
    code, _, err = run_cli(capsys, *run_arguments(tmp_path, "r", "synthetic:batch_size=100000000000"))
    assert_one_line(code, err, "batch_size must be an integer in [1, 65,536], got 100,000,000,000")


def image_folder_with(tmp_path, name: str, content: bytes):
    from PIL import Image

    root = tmp_path / "images"
    for class_name in ("a", "b"):
        (root / class_name).mkdir(parents=True, exist_ok=True)
        for index in range(3):
            Image.new("RGB", (40, 30), color=(index * 40, 10, 200)).save(root / class_name / f"{index}.png")
    (root / "b" / name).write_bytes(content)
    return root


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("bomb.png", bomb_png(), "exceeds limit"),
        ("truncated.jpg", truncated_jpeg(), "truncated"),
        ("empty.jpg", b"", "cannot identify image file"),
        ("notes.jpg", b"these are notes, not an image\n", "cannot identify image file"),
    ],
)
def test_unreadable_images_in_a_folder_stream_are_named_or_skipped(tmp_path, capsys, name, content, problem):
    root = image_folder_with(tmp_path, name, content)
    common = ["--batch-size", "4", "--image-size", "16", "--collapse-reference", "none"]
    code, _, err = run_cli(capsys, *run_arguments(tmp_path, "r", str(root), *common))
    assert_one_line(code, err, f"unreadable image {root / 'b' / name}: ")
    assert problem in err and "--skip-bad-images" in err
    code, _, err = run_cli(capsys, *run_arguments(tmp_path, "s", str(root), *common, "--skip-bad-images"))
    assert code == 0, err
    assert json.loads((tmp_path / "s" / "summary.json").read_text())["samples"] == 6


def test_an_unreadable_image_read_by_a_worker_process_is_one_line(tmp_path, capsys):
    root = image_folder_with(tmp_path, "bomb.png", bomb_png())
    code, _, err = run_cli(
        capsys,
        *run_arguments(tmp_path, "r", str(root), "--batch-size", "4", "--image-size", "16", "--num-workers", "1"),
    )
    assert_one_line(
        code, err, f"unreadable image {root / 'b' / 'bomb.png'}: Image size (400000000 pixels) exceeds limit"
    )


def folder_labels(root, **options) -> dict[str, int]:
    """Class folder → label of a folder stream's images."""
    from pathlib import Path

    from tta_eval.streams import StreamOptions, open_image_folder

    dataset = open_image_folder(str(root), StreamOptions(batch_size=2, image_size=16, **options)).loader.dataset
    return {Path(path).parent.name: label for path, label in dataset.samples}


def test_folder_stream_class_indices_follow_ccc_generate(tmp_path, capsys):
    from PIL import Image

    def add_images(folder, count: int = 2) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(count):
            Image.new("RGB", (40, 30), color=(index * 40, 10, 200)).save(folder / f"{index}.JPEG")

    root = tmp_path / "val"
    for wnid in ("n01440764", "n01443537"):  # standard ImageNet classes 0 and 1
        add_images(root / wnid)
    assert folder_labels(root) == {"n01440764": 0, "n01443537": 1}
    add_images(root / "lost+found")
    (root / "empty").mkdir()
    assert folder_labels(root) == {"n01440764": 0, "n01443537": 1}, "non-class and empty folders shift nothing"
    second = tmp_path / "second"
    add_images(second / "n01443537")
    assert folder_labels(second) == {"n01443537": 1}, "a subset of ImageNet keeps the standard index"
    add_images(root / "extra")
    common = ["--batch-size", "2", "--image-size", "16", "--collapse-reference", "none"]
    code, _, err = run_cli(capsys, *run_arguments(tmp_path, "r", str(root), *common))
    assert_one_line(code, err, "looks like ImageNet but has 1 folder(s) that are not ImageNet classes: extra")
    assert "--classes FILE" in err
    (tmp_path / "classes.txt").write_text("extra\nn01440764\nn01443537\n")
    assert folder_labels(root, classes=str(tmp_path / "classes.txt")) == {"extra": 0, "n01440764": 1, "n01443537": 2}
    code, _, err = run_cli(
        capsys, *run_arguments(tmp_path, "r", str(root), *common, "--classes", str(tmp_path / "classes.txt"))
    )
    assert code == 0, err
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["samples"] == 6
    code, _, err = run_cli(
        capsys, *run_arguments(tmp_path, "m", str(root), *common, "--classes", str(tmp_path / "missing.txt"))
    )
    assert_one_line(code, err, f"--classes {tmp_path / 'missing.txt'}: cannot read the class list")


def test_a_folder_another_run_is_writing_is_refused_in_one_line_naming_it(tmp_path, capsys):
    """Two identical `tta-eval run --out X --name Y` once both wrote X/Y; the run (and the sweep)
    folder is locked as ccc-generate locks its folders, and the lock names its holder."""
    from ccc.folder_lock import FolderLock

    run_dir = tmp_path / "r"
    run_dir.mkdir()
    with FolderLock.acquire(run_dir, LOCK_FILE):  # what a running `tta-eval run` holds
        holder = (run_dir / LOCK_FILE).read_text()
        assert holder.startswith(f"process {os.getpid()} on ")
        code, _, err = run_cli(capsys, *run_arguments(tmp_path, "r"))
        assert_one_line(
            code,
            err,
            f"run folder '{run_dir}' is being written by another tta-eval run ({holder}); "
            "wait for it to end, or choose another --name",
        )
        sweep = ["sweep", *run_arguments(tmp_path, "r")[1:], "--speeds", "1"]
        code, _, err = run_cli(capsys, *sweep)
        assert_one_line(code, err, f"sweep folder '{run_dir}' is being written by another tta-eval sweep ({holder})")
    assert [path.name for path in run_dir.iterdir()] == [LOCK_FILE], "the refused runs wrote nothing"
    assert run_cli(capsys, *run_arguments(tmp_path, "r"))[0] == 0
    assert not (run_dir / LOCK_FILE).exists(), "a finished run leaves no lock file"


@pytest.mark.slow
def test_a_second_identical_command_stops_at_once_naming_the_first(tmp_path):
    command = [
        sys.executable,
        "-m",
        "tta_eval.cli",
        *run_arguments(tmp_path, "r", "synthetic:num_batches=20000,batch_size=4,image_size=8"),
    ]
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    first = subprocess.Popen(command, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not (tmp_path / "r" / "records" / "bn.csv").is_file():  # the first run is recording
            assert first.poll() is None, "the first run ended before it recorded anything"
            time.sleep(0.2)
        second = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600)
    finally:
        first.terminate()
        first.wait(timeout=60)
    assert second.returncode == 2, second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"tta-eval: error: run folder '{tmp_path / 'r'}' is being written by another tta-eval run "
        f"(process {first.pid} on "
    ), second.stderr
