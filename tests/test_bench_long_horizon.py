"""``scripts/bench/long_horizon.py``: a stream rendered by ``ccc-generate`` and evaluated by ``tta-eval run``, each
killed (SIGKILL to its process group) and run again to the end, memory sampled over its process tree; no timing
is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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


def test_memory_is_told_apart_per_kind_of_process(tmp_path: Path) -> None:
    bench = _bench()
    assert bench.process_kind(os.getpid(), os.getpid()) == "driver"
    script = tmp_path / "helper.py"
    script.write_text("import sys\nprint('ready', flush=True)\nsys.stdin.read()\n")
    with subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE) as helper:
        assert helper.stdout.readline() == b"ready\n"  # type: ignore[union-attr]
        assert bench.process_kind(helper.pid, os.getpid()) == "helper.py"
        sample = bench.memory_sample(os.getpid())
        helper.stdin.close()  # type: ignore[union-attr]
    assert bench.process_kind(helper.pid, os.getpid()) == "gone"
    # this process and its helper at least (a test worker may hold other children); the kinds add up to the tree
    by_kind = sample["pss_mb_by_process"]
    assert by_kind["driver"] > 0 and by_kind["helper.py"] > 0
    assert sum(by_kind.values()) == pytest.approx(sample["tree_pss_mb"], abs=0.1 * len(by_kind))
    # 16 samples over 100,000 images: the GCS grows by 1 MB a sample, the workers are flat, the raylet only
    # appears in the last quarter
    samples = [{"pss_mb_by_process": {"gcs_server": 40.0 + k, "workers": 400.0}} for k in range(16)]
    for sample in samples[12:]:
        sample["pss_mb_by_process"]["raylet"] = 30.0
    growth = bench.growth_by_process(samples, 100_000)
    assert growth["gcs_server"] == {"second_quarter_mb": 45.5, "last_quarter_mb": 53.5, "mb_per_100k_images": 16.0}
    assert growth["workers"]["mb_per_100k_images"] == 0 and growth["raylet"]["second_quarter_mb"] == 0
    assert bench.growth_by_process(samples[:7], 100_000) == {}


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
