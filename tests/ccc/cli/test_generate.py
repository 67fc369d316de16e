"""Tests of ``ccc-generate`` (ccc.cli.generate): one-line errors that say what to provide, the dry
run, a real run with the default run name, refusal of a folder holding another stream, and a run
killed with SIGKILL and restarted ending byte-identical to an uninterrupted one."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ccc.calibration import CalibrationTable
from ccc.cli.generate import main
from tests.builders import REPOSITORY, cli_user_error, make_calibration_table, make_image_folder
from tests.image_fixtures import bomb_png


def run_name(num_images: int) -> str:
    """The run folder name of these tests' stream of ``num_images`` images (ccc-generate names the length)."""
    return f"baseline_30_transition+speed_4_seed_43_images_{num_images}"


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
    """Run ccc-generate expecting a user error; return its one line."""
    return cli_user_error(main, capsys, argv)


def test_missing_calibration_says_what_to_provide(
    inputs, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = [a for a in arguments(inputs, tmp_path) if a not in ("--calibration", str(inputs["table"]))]
    line = run_error(capsys, argv)
    assert "no calibration table (calibration/resnet50.npz does not exist here): pass --calibration FILE" in line
    assert "the published CCC pickle or its URL" in line and "add --demo" in line
    line = run_error(capsys, ["--calibration", "missing.npz", *argv])
    assert "calibration table missing.npz does not exist" in line and "ccc-calibrate compute" in line


def test_the_headline_command_in_an_empty_folder_names_every_way_forward(tmp_path: Path) -> None:
    environment = {key: value for key, value in os.environ.items() if key != "CCC_IMAGENET"}
    result = subprocess.run(
        ["ccc-generate", "--difficulty", "medium", "--speed", "2000"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    for expected in ("--calibration FILE", "--imagenet PATH (or CCC_IMAGENET=PATH)", "--demo", "published CCC pickle"):
        assert expected in line


def test_a_published_pickle_is_accepted_as_calibration_and_converted_once(tmp_path: Path, capsys, monkeypatch) -> None:
    import pickle

    import numpy as np

    from ccc.calibration import CCC_CORRUPTIONS

    steps = np.arange(21)
    matrices = {
        f"n1_{a}_n2_{b}": 76.0 * np.exp(-0.12 * steps)[:, None] * np.exp(-0.1 * steps)[None, :]
        for a in CCC_CORRUPTIONS
        for b in CCC_CORRUPTIONS
        if a != b
    }
    source = tmp_path / "ccc_accuracy_matrix.pickle"
    source.write_bytes(pickle.dumps(matrices, protocol=4))
    monkeypatch.setenv("CCC_CACHE_DIR", str(tmp_path / "cache"))
    argv = ["--calibration", str(source), "--difficulty", "medium", "--speed", "2000", "--dry-run",
            "--num-images", "10000", "--out", str(tmp_path / "out"), "--plot", str(tmp_path / "schedule.png"),
            "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    assert "converted the published CCC pickle" in capsys.readouterr().err
    assert len(list((tmp_path / "cache" / "calibration").glob("published-*.npz"))) == 1
    assert main(argv) == 0
    assert "using the table converted earlier" in capsys.readouterr().err


def test_the_default_calibration_table_is_found(
    inputs, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
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
        (
            ["--baseline-accuracy", "130"],
            "argument --baseline-accuracy: must be an accuracy in percent in [0, 100], got 130",
        ),
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
        table.corruptions,
        grids,
        image_counts=100,
        metadata=table.metadata,
        difficulty_presets=dict(table.difficulty_presets),
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
    assert (
        "1 unreadable image(s)" in line
        and "n00000001/ILSVRC2012_val_00000005.JPEG" in line
        and "--skip-bad-images" in line
    )
    assert (
        main(
            [*arguments(inputs, tmp_path / "out"), "--imagenet", str(broken), "--skip-bad-images", "--num-images", "4"]
        )
        == 0
    )
    records = [json.loads(line) for line in _json_records(tmp_path / "out" / run_name(4) / "serial_00000.tar")]
    assert all(record["source_path"] != "n00000001/ILSVRC2012_val_00000005.JPEG" for record in records)


def test_a_decompression_bomb_is_named_or_skipped(inputs, tmp_path: Path, capsys) -> None:
    folder = make_image_folder(tmp_path / "val")
    (folder / "n00000001" / "bomb.png").write_bytes(bomb_png())
    line = run_error(capsys, [*arguments(inputs, tmp_path), "--imagenet", str(folder)])
    assert "1 unreadable image(s)" in line and "n00000001/bomb.png: Image size (400000000 pixels) exceeds limit" in line
    assert (
        main(
            [*arguments(inputs, tmp_path / "out"), "--imagenet", str(folder), "--skip-bad-images", "--num-images", "12"]
        )
        == 0
    )
    records = [json.loads(line) for line in _json_records(tmp_path / "out" / run_name(12) / "serial_00000.tar")]
    assert len(records) == 12 and all(record["source_path"] != "n00000001/bomb.png" for record in records)


def test_a_partly_imagenet_folder_is_refused_and_a_class_list_fixes_the_labels(inputs, tmp_path: Path, capsys) -> None:
    folder = make_image_folder(tmp_path / "val")
    (folder / "n00000001").rename(folder / "n01443537")  # a real WordNet id (standard class 1) among fake ones
    (folder / "lost+found").mkdir()
    line = run_error(capsys, [*arguments(inputs, tmp_path), "--imagenet", str(folder)])
    assert "looks like ImageNet but has 2 folder(s) that are not ImageNet classes: n00000000, n00000002" in line
    assert "999 of the 1,000 classes missing" in line and "--classes FILE" in line
    (tmp_path / "classes.txt").write_text("n00000000\nn01443537\nn00000002\n")
    assert (
        main(
            [
                *arguments(inputs, tmp_path / "out"),
                "--imagenet",
                str(folder),
                "--classes",
                str(tmp_path / "classes.txt"),
                "--num-images",
                "12",
            ]
        )
        == 0
    )
    records = [json.loads(line) for line in _json_records(tmp_path / "out" / run_name(12) / "serial_00000.tar")]
    assert {record["source_path"].split("/")[0]: record["class_index"] for record in records} == {
        "n00000000": 0,
        "n01443537": 1,
        "n00000002": 2,
    }
    from ccc.cli.verify import main as verify_main

    check = [
        str(tmp_path / "out" / run_name(12)),
        "--no-progress",
        "--no-decode",
        "--calibration",
        str(inputs["table"]),
        "--imagenet",
        str(folder),
    ]
    assert verify_main(check) == 2
    assert "looks like ImageNet" in capsys.readouterr().err
    assert verify_main([*check, "--classes", str(tmp_path / "classes.txt")]) == 0
    assert "plan hash matches" in capsys.readouterr().out
    (tmp_path / "other.txt").write_text("n00000002\nn01443537\nn00000000\n")
    assert verify_main([*check, "--classes", str(tmp_path / "other.txt")]) == 2
    assert "does not match the images'" in capsys.readouterr().err, "another class order is another image index"


def _json_records(path: Path) -> list[bytes]:
    import tarfile

    with tarfile.open(path) as archive:
        return [archive.extractfile(member).read() for member in archive.getmembers() if member.name.endswith(".json")]  # type: ignore[union-attr]


def test_dry_run_prints_the_schedule_and_plots_it(
    inputs, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = [a for a in arguments(inputs, tmp_path / "out") if a not in ("--imagenet", str(inputs["images"]))]
    assert main([*argv, "--dry-run", "--num-images", "1000", "--shard-size", "300"]) == 0
    output = capsys.readouterr().out
    assert "target accuracy: 30 %" in output and "speed: 4 images per step" in output
    # the deviation from the target reads as a deviation, not as an accuracy
    deviation = re.search(
        r"its path steps miss the 30 % target by ([\d.]+) points on average \(weighted by images\), "
        r"([\d.]+) at worst",
        output,
    )
    assert deviation is not None and float(deviation[1]) <= float(deviation[2]), output
    assert "|accuracy - target|" not in output
    assert "pair 0: " in output and " = " in output
    assert "shards to write (4): serial_00000.tar, serial_00001.tar, serial_00002.tar, serial_00003.tar" in output
    plot = tmp_path / f"{run_name(1000)}_schedule.png"
    assert f"plot: {plot}" in output, "the plot lands in the current folder and its path is printed"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "out").exists(), "a dry run writes nothing into the output folder"


def test_dry_run_cost_does_not_grow_with_the_stream_length(inputs, tmp_path: Path) -> None:
    """10^6 and 10^12 images: the same bounded summary (first SUMMARY_MAX_STEPS steps), within a subprocess timeout."""
    argv = [a for a in arguments(inputs, tmp_path) if a not in ("--imagenet", str(inputs["images"]))]
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    listings = {}
    for num_images in (10**6, 10**12):
        command = [
            sys.executable,
            "-m",
            "ccc.cli.generate",
            *argv,
            "--dry-run",
            "--num-images",
            str(num_images),
            "--plot",
            str(tmp_path / f"{num_images}.png"),
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment)
        assert result.returncode == 0, result.stderr
        assert (
            f"images: {num_images:,}" in result.stdout
            and "calibrated accuracy over the first 400,000 images" in result.stdout
        )
        listings[num_images] = result.stdout[
            result.stdout.index("pairs (each cell") : result.stdout.index("shards to write")
        ]
        assert (tmp_path / f"{num_images}.png").read_bytes()[:4] == b"\x89PNG"
    assert listings[10**6] == listings[10**12]
    assert "shards to write (40,000,000): serial_00000.tar … serial_39999999.tar" in result.stdout


def test_dry_run_plot_into_a_folder_or_without_suffix_prints_the_file_written(inputs, tmp_path: Path, capsys) -> None:
    argv = [a for a in arguments(inputs, tmp_path) if a not in ("--imagenet", str(inputs["images"]))]
    (tmp_path / "plots").mkdir()
    for plot, written in [
        (tmp_path / "plots", tmp_path / "plots" / "schedule.png"),
        (tmp_path / "sched", tmp_path / "sched.png"),
    ]:
        assert main([*argv, "--dry-run", "--num-images", "100", "--plot", str(plot)]) == 0
        assert capsys.readouterr().out.endswith(f"plot: {written}\n")
        assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_and_a_conflicting_rerun(inputs, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CCC_IMAGENET", str(inputs["images"]))
    argv = [a for a in arguments(inputs, tmp_path) if a not in ("--imagenet", str(inputs["images"]))]
    assert main([*argv, "--num-images", "6", "--shard-size", "4"]) == 0
    output = capsys.readouterr().out
    assert "wrote 2 shards (6 images" in output
    run_dir = tmp_path / run_name(6)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["stream"]["difficulty"] == "medium" and manifest["complete"]
    line = run_error(capsys, [*argv, "--num-images", "6", "--shard-size", "3"])
    assert "holds a different stream (shard_size: 4 -> 3)" in line and "--overwrite" in line
    assert main([*argv, "--num-images", "6", "--shard-size", "3", "--overwrite"]) == 0


def test_verify_json_that_cannot_be_written_gives_one_line(inputs, tmp_path: Path, capsys) -> None:
    from ccc.cli.verify import main as verify_main

    assert main([*arguments(inputs, tmp_path), "--num-images", "4"]) == 0
    (tmp_path / "a_folder").mkdir()
    (tmp_path / "a_file").write_text("")
    for target, reason in [("a_folder", "Is a directory"), ("a_file/report.json", "Not a directory")]:
        capsys.readouterr()
        assert verify_main([str(tmp_path / run_name(4)), "--no-progress", "--json", str(tmp_path / target)]) == 2
        err = capsys.readouterr().err
        assert err == f"ccc-verify: error: cannot write --json {tmp_path / target}: {reason}\n"


def _sha256_of_shards(run_dir: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(run_dir.glob("serial_*.tar"))}


@pytest.mark.slow
def test_a_killed_run_resumes_to_identical_shards(inputs, tmp_path: Path) -> None:
    """SIGKILL a running ccc-generate after its second shard, restart it, compare with an uninterrupted run."""
    base = [
        sys.executable,
        "-m",
        "ccc.cli.generate",
        *arguments(inputs, tmp_path / "x"),
        "--num-images",
        "96",
        "--shard-size",
        "8",
    ]
    killed_out, clean_out = tmp_path / "killed", tmp_path / "clean"
    command = [*base, "--out", str(killed_out)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    manifest_path = killed_out / run_name(96) / "manifest.json"
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
    resumed_hashes = _sha256_of_shards(killed_out / run_name(96))
    assert len(resumed_hashes) == 12
    assert resumed_hashes == _sha256_of_shards(clean_out / run_name(96))
    assert not [name for name in os.listdir(killed_out / run_name(96)) if name.endswith(".partial")]
    assert json.loads(manifest_path.read_text()) == json.loads((clean_out / run_name(96) / "manifest.json").read_text())


@pytest.mark.slow
def test_workers_two_from_the_command_line_gives_the_serial_shards(
    inputs, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--workers 2`` starts a local Ray cluster of 2 CPUs; its shards equal those of ``--workers 1``."""
    from ccc.cli.verify import main as verify_main

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    serial = [*arguments(inputs, tmp_path / "serial"), "--num-images", "24", "--shard-size", "8"]
    assert main(serial) == 0
    parallel = [*arguments(inputs, tmp_path / "ray"), "--num-images", "24", "--shard-size", "8"]
    parallel[parallel.index("--workers") + 1] = "2"
    assert main(parallel) == 0
    assert "wrote 3 shards (24 images" in capsys.readouterr().out
    assert _sha256_of_shards(tmp_path / "ray" / run_name(24)) == _sha256_of_shards(tmp_path / "serial" / run_name(24))
    assert (
        verify_main(
            [
                str(tmp_path / "ray" / run_name(24)),
                "--no-progress",
                "--calibration",
                str(inputs["table"]),
                "--imagenet",
                str(inputs["images"]),
            ]
        )
        == 0
    )
    assert "plan hash matches" in capsys.readouterr().out


def test_the_default_workers_fit_the_streams_size(inputs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``--workers``: a stream of fewer than 100 million output pixels (2,000 images at 224×224) renders
    in the process without starting Ray; a longer one on one worker per CPU, but no more than its tasks of 25
    samples."""
    import ccc.cli.generate as command

    opened = []

    class Opened(Exception):
        """Raised where the executor would start: what it was asked for is recorded, nothing is rendered."""

    def recording_open_executor(workers, address, serial):  # type: ignore[no-untyped-def]
        opened.append((workers, serial))
        raise Opened

    monkeypatch.setattr(command, "open_executor", recording_open_executor)
    monkeypatch.setattr(command.os, "cpu_count", lambda: 128)
    for images, shard_size, expected in ((20, 100, 1), (1992, 2000, 1), (2000, 2000, 80), (6000, 3000, 128)):
        given = arguments(inputs, tmp_path, "--num-images", str(images), "--shard-size", str(shard_size))
        del given[given.index("--workers") : given.index("--workers") + 2]
        with pytest.raises(Opened):
            main(given)
        assert opened[-1] == (expected, expected == 1), (images, shard_size)


def test_run_folders_are_named_by_what_makes_streams_differ(tmp_path: Path, capsys, monkeypatch) -> None:
    """The README's 224×224 demo stream keeps its name; a shorter stream or the torch renderer's bytes get their
    own run folder (and results), so that neither collides with it."""
    monkeypatch.chdir(tmp_path)
    default = "demo_baseline_30_transition+speed_100_seed_43"
    for extra, name in (
        ([], default),
        (["--num-images", "500"], f"{default}_images_500"),
        (["--render-device", "cpu"], f"{default}_torch"),
        (["--num-images", "500", "--render-device", "cpu"], f"{default}_images_500_torch"),
    ):
        assert main(["--demo", "--difficulty", "medium", "--dry-run", "--plot", "plot.png", *extra]) == 0
        assert f"run folder: shards/{name} (nothing written there" in capsys.readouterr().out
