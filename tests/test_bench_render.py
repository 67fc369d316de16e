"""``scripts/bench/render.py`` and ``scripts/bench/gpu_check.sh`` run end to end on tiny sizes (CPU) and write
their results with the keys BENCHMARKS.md quotes; no timing is asserted."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from tests.builders import REPOSITORY, load_script

RATE_KEYS = {"wall", "cpu_time"}


def _environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")]))}


def _assert_rates(rates: dict) -> None:
    # The wall rate of a quick run times a few milliseconds, and this shared virtual machine's monotonic clock
    # has been seen to step back by more than that between two readings (a rate of -1,601 images/s): only
    # the CPU rate's sign is the bench's to guarantee.
    assert set(rates) == RATE_KEYS
    assert rates["cpu_time"] > 0 and math.isfinite(rates["wall"]) and rates["wall"] != 0


@pytest.fixture(scope="module")
def gpu_check_quick(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of one ``gpu_check.sh --quick`` run (every part on the CPU, tiny sizes), its exit status checked."""
    folder = tmp_path_factory.mktemp("gpu_check")
    result = subprocess.run(
        ["bash", str(REPOSITORY / "scripts" / "bench" / "gpu_check.sh"), "--quick", str(folder)],
        cwd=REPOSITORY,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, (folder / "log.txt").read_text()[-2000:]
    return folder


def _part_output(log: str, part: str) -> list[str]:
    """The lines a part of ``gpu_check.sh`` printed, from its ``log.txt``."""
    lines = log.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith(f"== {part}: "))
    end = next(k for k in range(start + 1, len(lines)) if lines[k].startswith(f"== {part}: done"))
    return lines[start + 1 : end]


@pytest.mark.slow
def test_render_part_writes_every_case_batch_size_and_path(gpu_check_quick: Path) -> None:
    # gpu_check.sh's "corruptions" part: render.py --part render on the CPU, two corruptions, batches of 2 and 4
    written = json.loads((gpu_check_quick / "corruptions.json").read_text())
    assert written["settings"]["batch_sizes"] == [2, 4]
    assert written["settings"]["clock"] == "cpu"
    render = written["render"]
    _assert_rates(render["decoding"])
    assert render["medium_mix_pairs"] and all("+" in pair for pair in render["medium_mix_pairs"])
    cases = {"medium mix", "crop only", "gaussian_noise", "contrast"}
    assert set(render["cpu_path"]) == cases  # the stream's order matters to the torch path's batches alone
    assert set(render["torch_path"]) == cases | {"medium stream"}
    # 4 windows of 4 consecutive samples (the largest batch): one corruption pair each
    assert len(render["medium_stream_pairs"]) == 4 and all(len(pairs) == 1 for pairs in render["medium_stream_pairs"])
    for case in cases | {"medium stream"}:
        assert set(render["torch_path"][case]) == {"2", "4"}
        for batch in render["torch_path"][case].values():
            assert set(batch) == {"without_jpeg", "jpeg_only", "with_jpeg"}
            for rates in batch.values():
                _assert_rates(rates)
    for case in cases:
        assert set(render["cpu_path"][case]) == {
            "without_jpeg",
            "with_jpeg",
            "without_jpeg_excluding_decoding",
            "with_jpeg_excluding_decoding",
        }
        for rates in render["cpu_path"][case].values():
            _assert_rates(rates)
    printed = _part_output((gpu_check_quick / "log.txt").read_text(), "corruptions")
    table_rows = [line for line in printed if line.startswith("| ")]
    assert [row.split(" | ")[0] for row in table_rows[1:]] == [
        "| medium mix",
        "| medium stream",
        "| crop only",
        "| gaussian_noise",
        "| contrast",
    ]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--batch-sizes", "64,0"], "--batch-sizes must be comma-separated positive integers, got '64,0'"),
        (["--corruptions", "fogg"], "--corruptions must be 'all', 'main' or a comma-separated list"),
        (
            ["--tta-streams", "disk"],
            "--tta-streams must be a comma list of shards, device, device_fast, workers, got 'disk'",
        ),
        (["--precision", "bf16"], "reduced precision needs a CUDA device"),
        (["--device", "gpu"], "render device: device must be 'cpu' or 'cuda[:index]', got 'gpu'"),
    ],
)
def test_a_usage_mistake_is_one_line(
    arguments: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # in this process: the exit code and stderr line are run_and_write's, as when the script runs alone
    assert load_script("scripts/bench/render.py", monkeypatch).main(arguments) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("error: ")
    assert message in error


@pytest.mark.slow
def test_gpu_check_quick_runs_every_part_on_the_cpu(gpu_check_quick: Path) -> None:
    check = json.loads((gpu_check_quick / "check.json").read_text())
    for precision in ("float64", "float32"):
        rows = check["cases"][precision]
        assert set(rows) == {"medium mix", "crop only", "gaussian_noise", "contrast"}  # render_check.py's cases
        # on the CPU the device is the CPU: same bytes, and the same bytes run to run
        assert all(row["status"] == "ok" and row["deterministic"] for row in rows.values())
        assert all(row["max_levels"] == row["before_jpeg"]["max_levels"] == 0 for row in rows.values())
    mix = json.loads((gpu_check_quick / "mix.json").read_text())
    assert set(mix["render"]["torch_path"]) == {"medium mix", "medium stream", "crop only"}
    assert not mix["render"]["torch_path_errors"]
    each = json.loads((gpu_check_quick / "corruptions.json").read_text())
    assert set(each["render"]["torch_path"]) == {
        "medium mix",
        "medium stream",
        "crop only",
        "gaussian_noise",
        "contrast",
    }
    tta = json.loads((gpu_check_quick / "tta.json").read_text())["tta"]
    assert [(run["stream"], run["method"], run["precision"]) for run in tta["runs"]] == [
        ("shards", "source", "fp32"),
        ("device", "source", "fp32"),
        ("device_fast", "source", "fp32"),
    ]
    assert all(run["seconds_whole_run"] > 0 for run in tta["runs"])
    assert set(tta["ratios"]) == {"device / shards, source fp32", "device_fast / shards, source fp32"}
    mix32 = json.loads((gpu_check_quick / "mix_float32.json").read_text())
    assert mix32["settings"]["render_precision"] == "float32"
    profile = json.loads((gpu_check_quick / "profile.json").read_text())
    assert {"crop", "jpeg", "rest"} <= set(profile["steps"]) and len(profile["profiled_batch"]["top"]) == 5
    assert 0 < profile["profiled_batch"]["device_busy_ms"]
    assert (
        set(profile["back_to_back_ms_per_batch"])
        == set(profile["back_to_back_enqueue_ms_per_batch"])
        == {
            "pinned",
            "pageable",
        }
    )
    for memory, milliseconds in profile["back_to_back_ms_per_batch"].items():
        assert 0 < profile["back_to_back_enqueue_ms_per_batch"][memory] <= milliseconds
    feed = json.loads((gpu_check_quick / "feed.json").read_text())
    assert {"per_core", "workers_needed"} <= set(feed)
    log = (gpu_check_quick / "log.txt").read_text()
    assert [line.split(":")[0] for line in log.splitlines() if line.startswith("== ") and "done in" in line] == [
        f"== {part}" for part in ("check", "mix", "mix_float32", "profile", "tta", "corruptions", "feed")
    ]
    assert len(list(gpu_check_quick.iterdir())) <= 8  # what a device lease returns
