"""``scripts/bench/render.py`` and ``scripts/bench/gpu_check.sh`` run end to end on tiny sizes (CPU) and write
their results with the keys BENCHMARKS.md quotes; no timing is asserted."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import REPOSITORY, load_script

SCRIPT = REPOSITORY / "scripts" / "bench" / "render.py"
RATE_KEYS = {"wall", "cpu_time"}


def _environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")]))}


def _bench(*arguments: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *arguments],
        cwd=REPOSITORY,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _assert_rates(rates: dict) -> None:
    # The wall rate of a quick run times a few milliseconds, and this shared virtual machine's monotonic clock
    # has been seen to step back by more than that between two readings (a rate of -1,601 images/s): only
    # the CPU rate's sign is the bench's to guarantee.
    assert set(rates) == RATE_KEYS
    assert rates["cpu_time"] > 0 and math.isfinite(rates["wall"]) and rates["wall"] != 0


def test_render_part_writes_every_case_batch_size_and_path(tmp_path: Path) -> None:
    output = tmp_path / "render.json"
    result = _bench(
        "--corruptions", "gaussian_noise,contrast", "--images", "4", "--cpu-images", "2", "--batch-sizes", "2,4",
        "--json", str(output),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    written = json.loads(output.read_text())
    assert written["settings"]["batch_sizes"] == [2, 4]
    assert written["settings"]["clock"] == "cpu"
    render = written["render"]
    _assert_rates(render["decoding"])
    assert render["medium_mix_pairs"] and all("+" in pair for pair in render["medium_mix_pairs"])
    cases = {"medium mix", "crop only", "gaussian_noise", "contrast"}
    assert set(render["cpu_path"]) == set(render["torch_path"]) == cases
    for case in cases:
        assert set(render["cpu_path"][case]) == {
            "without_jpeg",
            "with_jpeg",
            "without_jpeg_excluding_decoding",
            "with_jpeg_excluding_decoding",
        }
        for rates in render["cpu_path"][case].values():
            _assert_rates(rates)
        assert set(render["torch_path"][case]) == {"2", "4"}
        for batch in render["torch_path"][case].values():
            assert set(batch) == {"without_jpeg", "jpeg_only", "with_jpeg"}
            for rates in batch.values():
                _assert_rates(rates)
    table_rows = [line for line in result.stdout.splitlines() if line.startswith("| ")]
    assert [row.split(" | ")[0] for row in table_rows[1:]] == [
        "| medium mix",
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
def test_gpu_check_quick_runs_every_part_on_the_cpu(tmp_path: Path) -> None:
    result = subprocess.run(
        ["bash", str(REPOSITORY / "scripts" / "bench" / "gpu_check.sh"), "--quick", str(tmp_path)],
        cwd=REPOSITORY,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, (tmp_path / "log.txt").read_text()[-2000:]
    check = json.loads((tmp_path / "check.json").read_text())
    for precision in ("float64", "float32"):
        rows = check["cases"][precision]
        assert set(rows) == {"medium mix", "crop only", "gaussian_noise", "contrast"}
        # on the CPU the device is the CPU: same bytes, and the same bytes run to run
        assert all(row["status"] == "ok" and row["deterministic"] for row in rows.values())
        assert all(row["max_levels"] == row["before_jpeg"]["max_levels"] == 0 for row in rows.values())
    mix = json.loads((tmp_path / "mix.json").read_text())
    assert set(mix["render"]["torch_path"]) == {"medium mix", "crop only"} and not mix["render"]["torch_path_errors"]
    each = json.loads((tmp_path / "corruptions.json").read_text())
    assert set(each["render"]["torch_path"]) == {"medium mix", "crop only", "gaussian_noise", "contrast"}
    tta = json.loads((tmp_path / "tta.json").read_text())["tta"]
    assert [(run["stream"], run["method"], run["precision"]) for run in tta["runs"]] == [
        ("shards", "source", "fp32"),
        ("device", "source", "fp32"),
        ("device_fast", "source", "fp32"),
    ]
    assert all(run["seconds_whole_run"] > 0 for run in tta["runs"])
    assert set(tta["ratios"]) == {"device / shards, source fp32", "device_fast / shards, source fp32"}
    mix32 = json.loads((tmp_path / "mix_float32.json").read_text())
    assert mix32["settings"]["render_precision"] == "float32"
    profile = json.loads((tmp_path / "profile.json").read_text())
    assert {"crop", "jpeg", "rest"} <= set(profile["steps"]) and len(profile["profiled_batch"]["top"]) == 5
    assert 0 < profile["profiled_batch"]["device_busy_ms"]
    feed = json.loads((tmp_path / "feed.json").read_text())
    assert {"per_core", "workers_needed"} <= set(feed)
    log = (tmp_path / "log.txt").read_text()
    assert [line.split(":")[0] for line in log.splitlines() if line.startswith("== ") and "done in" in line] == [
        f"== {part}" for part in ("check", "mix", "mix_float32", "profile", "tta", "corruptions", "feed")
    ]
    assert len(list(tmp_path.iterdir())) <= 8  # what a device lease returns
