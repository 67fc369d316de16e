"""A run folder whose manifest claims 10^15 images (two shards recorded as finished) costs tta-eval
what its recorded shards cost: the run scores them, then the console script stops with one line
naming the first unfinished shard and exits (issue 27 item 11; the subprocess timeout only guards a
hang)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.builders import REPOSITORY, make_ccc_run
from tests.tta_eval.tta_helpers import TINY_FACTORY
from tta_eval.records import RecordTable
from tta_eval.run_folder import records_path

CLAIMED = 10**15
SHARD_SIZE = 64


def test_a_manifest_claiming_10_15_images_ends_the_run_in_one_line_after_its_recorded_shards(tmp_path: Path) -> None:
    run = make_ccc_run(tmp_path / "shards", num_images=2 * SHARD_SIZE, speed=8, shard_size=SHARD_SIZE)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["stream"]["num_images"] = manifest["num_images"] = CLAIMED
    manifest["num_shards"] = CLAIMED // SHARD_SIZE
    (run / "manifest.json").write_text(json.dumps(manifest))
    command = [
        sys.executable, "-c", "import sys; from tta_eval.cli import main; sys.exit(main())",
        "run", "--stream", f"ccc:{run}", "--model", TINY_FACTORY, "--method", "source", "--batch-size", "16",
        "--out", str(tmp_path / "results"), "--no-progress",
    ]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPOSITORY)}
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"tta-eval: error: shard {run / 'serial_00002.tar'} (samples 128–191) "
        "is not finished according to the manifest; run the same ccc-generate command again to finish it"
    )
    assert "Traceback" not in result.stderr
    records = RecordTable.read_csv(records_path(tmp_path / "results" / run.name, "source"))
    assert records.column("sample_start").tolist() == list(range(0, 2 * SHARD_SIZE, 16))
