"""tta-eval over a remote stream whose server drops connections and answers 503: the run's records
equal those of the same run over the local shards (issue 30's "done when")."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from ccc.cli.mirror import main as mirror_main
from ccc.shards.record import shard_name
from tests.builders import make_ccc_run
from tests.ccc.shards.fault_server import FaultServer
from tests.tta_eval.tta_helpers import TINY_FACTORY, run_cli

SHARDS = 3
TIMING_COLUMNS = {"seconds", "pickup_to_prediction", "prediction_to_ready"}
"""Measured wall times: the only record columns that differ between two runs of the same stream."""


def records(folder: Path) -> dict[str, list[dict[str, str]]]:
    """Every records CSV of a run folder, by file name, without the timing columns, losses to 6 digits."""
    tables = {}
    for path in sorted((folder / "records").glob("*.csv")):
        with path.open(newline="", encoding="utf-8") as file:
            rows = [
                {key: value for key, value in row.items() if key not in TIMING_COLUMNS} for row in csv.DictReader(file)
            ]
        for row in rows:
            row["loss"] = f"{float(row['loss']):.6g}" if row["loss"] else ""
        tables[path.name] = rows
    return tables


def run(capsys: pytest.CaptureFixture[str], stream: str, out: Path) -> dict[str, list[dict[str, str]]]:
    """tta-eval's records of source and tent on ``stream``, the tiny model initialised from seed 0."""
    torch.manual_seed(0)
    code, _, err = run_cli(
        capsys, "run", "--stream", stream, "--model", TINY_FACTORY, "--method", "source", "--method", "tent",
        "--batch-size", "4", "--out", str(out), "--name", "run", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    return records(out / "run")


def test_a_run_over_a_dropping_server_records_what_the_local_run_records(tmp_path, capsys) -> None:
    folder = make_ccc_run(tmp_path / "stream", num_images=12, speed=4, shard_size=4)
    local = run(capsys, f"ccc:{folder}", tmp_path / "local")
    assert sum(len(rows) for rows in local.values()) == 2 * 3
    files = {f"/ccc/{shard_name(index)}": (folder / shard_name(index)).read_bytes() for index in range(SHARDS)}
    with FaultServer(files) as server:
        server.add_faults("/ccc/serial_00001.tar", ("reset", 9000), ("status", 503, None))
        server.add_faults("/ccc/serial_00002.tar", ("short", 15000))
        remote = run(capsys, f"ccc:{server.base}/ccc/serial_{{00000..00002}}.tar", tmp_path / "remote")
        resumed = [headers.get("Range") for path, headers in server.requests if path.endswith("serial_00001.tar")]
    assert remote == local
    assert resumed[0] is None and resumed[-1] not in (None, "bytes=0-")


def test_a_run_over_a_mirrored_published_stream_records_what_the_local_run_records(tmp_path, capsys) -> None:
    folder = make_ccc_run(tmp_path / "stream", num_images=12, speed=4, shard_size=4)
    local = run(capsys, f"ccc:{folder}", tmp_path / "local")
    name = "baseline_20_transition+speed_2000_seed_43"
    files = {f"/ccc/{name}/{shard_name(index)}": (folder / shard_name(index)).read_bytes() for index in range(SHARDS)}
    with FaultServer(files) as server:
        server.add_faults(f"/ccc/{name}/serial_00000.tar", ("reset", 5000))
        arguments = [f"published:{name}", str(tmp_path / "mirror"), "--published-url", server.url("/ccc")]
        assert mirror_main([*arguments, "--shards", "0-2", "--backoff", "0.01", "--no-progress"]) == 0
    assert run(capsys, f"ccc:{tmp_path / 'mirror' / name}", tmp_path / "mirrored") == local
    config = json.loads((tmp_path / "mirrored" / "run" / "config.json").read_text())
    assert config["stream_verification"] == "sha256" and config["stream_name"] == name


def test_the_remote_deadline_of_a_run_ends_a_silent_server_in_one_line(tmp_path, capsys) -> None:
    folder = make_ccc_run(tmp_path / "stream", num_images=4, speed=4, shard_size=4)
    with FaultServer({"/ccc/serial_00000.tar": (folder / shard_name(0)).read_bytes()}) as server:
        server.always["/ccc/serial_00000.tar"] = ("silent", 30.0)
        code, _, err = run_cli(
            capsys, "run", "--stream", f"ccc:{server.url('/ccc/serial_00000.tar')}", "--model", TINY_FACTORY,
            "--method", "source", "--batch-size", "4", "--out", str(tmp_path / "out"), "--no-progress",
            "--remote-deadline", "1", "--remote-min-rate", "5000",
        )  # fmt: skip
    assert code != 0
    errors = [line for line in err.splitlines() if "serial_00000.tar" in line and "attempt " not in line]
    assert len(errors) == 1 and "without useful progress (deadline 1 s at 5,000 B/s)" in errors[0]
    assert "Traceback" not in err


@pytest.mark.parametrize("option", ["--remote-deadline", "--remote-min-rate"])
def test_remote_options_of_a_run_are_bounded(tmp_path, capsys, option: str) -> None:
    code, _, err = run_cli(
        capsys, "run", "--stream", "synthetic:", "--model", TINY_FACTORY, "--method", "source",
        "--out", str(tmp_path), option, "1e308" if option == "--remote-deadline" else "-1",
    )  # fmt: skip
    assert code == 2
    assert option.lstrip("-").replace("-", "_") in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
