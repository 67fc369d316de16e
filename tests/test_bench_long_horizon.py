"""``scripts/bench/long_horizon.py``: a stream rendered by ``ccc-generate`` and evaluated by ``tta-eval run``, each
killed (SIGKILL to its process group) and run again to the end, memory sampled over its process tree; no timing
is asserted."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ccc.shards.manifest import load_manifest
from tests.builders import load_script


def _bench():  # noqa: ANN202
    return load_script("scripts/bench/long_horizon.py")


def test_the_process_tree_and_its_memory_are_read_from_proc() -> None:
    bench = _bench()
    assert os.getpid() in bench.process_tree(os.getppid())
    sample = bench.memory_sample(os.getpid())
    assert sample["tree_pss_mb"] > 0 and sample["driver_rss_mb"] > 0 and sample["processes"] >= 1
    samples = [{"tree_pss_mb": 100.0 + (k % 2)} for k in range(16)]
    assert bench.flat(samples, "tree_pss_mb", 0.05)["flat"] is True
    growing = [{"tree_pss_mb": 100.0 * (1 + k)} for k in range(16)]
    assert bench.flat(growing, "tree_pss_mb", 0.05)["flat"] is False


@pytest.mark.slow
def test_a_killed_render_and_a_killed_evaluation_resume_to_the_end(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    report_path = tmp_path / "long_horizon.json"
    argv = ["--images", "300", "--work", str(tmp_path), "--json", str(report_path), "--sample-every", "0.2"]
    argv += ["--kill-render-at", "0.1", "--kill-eval-at", "0.1", "--tta-arg=--no-progress"]
    argv += ["--", "--demo", "--corruption-set", "cifar", "--difficulty", "medium", "--speed", "10"]
    argv += ["--workers", "1", "--no-progress"]
    assert _bench().main(argv) == 0
    report = json.loads(report_path.read_text())
    for name in ("render", "evaluate"):
        assert report[name]["first"]["killed"] and report[name]["first"]["exit_code"] != 0
        assert report[name]["resumed"]["exit_code"] == 0 and report[name]["images_per_s"] > 0
        assert report[name]["first"]["memory"] and report[name]["estimate_10m_hours"] > 0
    assert load_manifest(tmp_path / "shards" / "long_horizon").stream.num_images == 300
    summary = json.loads((tmp_path / "results" / "long_horizon" / "summary.json").read_text())
    assert "source" in json.dumps(summary) and "bn" in json.dumps(summary)
