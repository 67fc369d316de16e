"""``scripts/fidelity_torch_accuracy.py``: the demo model scored on images rendered by both backends."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "fidelity_torch_accuracy.py"


def _run(tmp_path: Path, *arguments: str) -> dict:
    out = tmp_path / "result.json"
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), *arguments, "--out", str(out)], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(out.read_text())


@pytest.mark.slow
def test_deterministic_cells_score_the_same_under_both_backends(tmp_path: Path) -> None:
    result = _run(tmp_path, "--part", "grid", "--images", "8", "--corruptions", "contrast,pixelate")
    assert result["images_per_cell"] == 8 and len(result["cells"]) == 2 * 5 + 2
    assert all(row["difference"] == 0 for row in result["cells"])
    assert result["mean_absolute_difference"] == 0
    assert {row["cpu"] for row in result["cells"]} != {100.0}  # the severities do cost accuracy


@pytest.mark.slow
def test_the_stream_part_scores_the_same_samples_twice(tmp_path: Path) -> None:
    result = _run(tmp_path, "--part", "stream", "--stream-images", "12", "--batch-size", "6", "--workers", "0")
    assert result["images"] == 12 and result["device"] == "cpu"
    assert result["difference"] == pytest.approx(result["torch"] - result["cpu"])
