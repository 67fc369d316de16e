"""``scripts/bench/feed.py --quick``: the JSON's keys and positive rates; the decoders' difference is
reported, not asserted (it depends on the libjpeg builds); no timing is asserted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.builders import load_script, run_quick_bench


def test_quick_run_writes_rates_workers_and_decoder_differences(tmp_path: Path) -> None:
    written, _ = run_quick_bench("feed.py", tmp_path / "feed.json")
    assert set(written) == {"settings", "per_core", "workers_needed", "loader", "fidelity", "environment"}
    assert written["settings"]["quick"] and written["settings"]["images"] == 6
    assert set(written["per_core"]) == {"pillow_worker", "pillow_decode", "torchvision_decode", "device_decoder_worker"}
    assert all(rate > 0 for rates in written["per_core"].values() for rate in rates.values())
    for counts in written["workers_needed"].values():
        assert list(counts) == ["1000", "5000", "10000", "20000"]
        assert all(count >= 1 for count in counts.values()) and list(counts.values()) == sorted(counts.values())
    assert set(written["loader"]) == {"0", "1"} and all(rate > 0 for rate in written["loader"].values())
    assert "rendered (medium mix, with JPEG)" in written["fidelity"]
    for difference in written["fidelity"].values():
        assert difference["images"] == 6 and 0 <= difference["bytes_differing"] <= 1
        assert 0 <= difference["max_difference"] <= 255


def test_a_bad_size_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # in this process: the exit code and stderr line are run_and_write's, as when the script runs alone
    assert load_script("scripts/bench/feed.py", monkeypatch).main(["--images", "0"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --images, --repeats, --loader-images and --batch-size must be >= 1"
    ]
