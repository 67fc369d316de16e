"""tta-eval verifies a ``ccc:`` run folder's shards against the manifest's sha256 by default: a byte
changed inside a JPEG (which still decodes) stops the run in one line naming the shard before any
of that shard's samples is scored; ``--no-verify`` opts out; config.json says which was done."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.builders import REPOSITORY, make_ccc_run
from tests.tta_eval.tta_helpers import TINY_FACTORY, run_cli
from tta_eval.records import RecordTable
from tta_eval.run_folder import records_path


@pytest.fixture(scope="module")
def altered_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 128-image run folder (two shards of 64) whose second shard has one bit flipped inside the
    entropy-coded data of its first JPEG: same size, still a valid tar and a decodable image."""
    run = make_ccc_run(tmp_path_factory.mktemp("shards"), num_images=128, speed=8, shard_size=64)
    shard = run / "serial_00001.tar"
    data = bytearray(shard.read_bytes())
    start = data.index(b"\xff\xd8\xff")
    end = data.index(b"\xff\xd9", start)
    position = next(place for place in range(end - 64, start, -1) if data[place] < 0xFE and data[place - 1] != 0xFF)
    data[position] ^= 0x01
    shard.write_bytes(bytes(data))
    return run


def run_arguments(run: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "--stream", f"ccc:{run}", "--model", TINY_FACTORY, "--method", "source", "--batch-size", "16",
            "--out", str(out), "--no-progress", *extra]  # fmt: skip


@pytest.mark.parametrize("workers", [0, 2])
def test_an_altered_shard_stops_the_run_in_one_line_before_its_samples_are_scored(
    altered_run, tmp_path, capsys, workers
):
    # with DataLoader workers the message is the worker's, not torch's "Caught StreamError … Traceback …"
    code, _, err = run_cli(capsys, *run_arguments(altered_run, tmp_path, "--num-workers", str(workers)))
    assert code == 2, err
    assert err.strip().splitlines() == [
        f"tta-eval: error: shard {altered_run / 'serial_00001.tar'}: "
        "altered (sha256 differs from the manifest's; the file changed after it was written)"
    ]
    run_dir = tmp_path / altered_run.name
    records = RecordTable.read_csv(records_path(run_dir, "source"))
    assert records.column("sample_start").tolist() == [0, 16, 32, 48]  # the first shard only
    config = json.loads((run_dir / "config.json").read_text())
    assert config["stream_verification"] == "sha256" and config["stream_options"]["verify_shards"] is True


def test_no_verify_reads_the_altered_shard_and_says_so_in_the_config(altered_run, tmp_path, capsys):
    code, _, err = run_cli(capsys, *run_arguments(altered_run, tmp_path, "--no-verify"))
    assert code == 0, err
    config = json.loads((tmp_path / altered_run.name / "config.json").read_text())
    assert config["stream_verification"] is None and config["stream_options"]["verify_shards"] is False


def test_no_verify_s_help_and_the_loading_guide_say_what_verification_risks_and_misses():
    from tta_eval.streams import stream_sources

    (option,) = [option for source in stream_sources() for option in source.options if option.flag == "--no-verify"]
    assert "a changed image byte is then delivered silently" in option.arguments["help"]
    guide = " ".join((REPOSITORY / "docs" / "loading.md").read_text().split())
    assert "nothing is signed, so a shard edited together with its manifest entry's sha256" in guide
    assert (
        "a server that sends neither validator and replaces a shard with one of the same size is not detected" in guide
    )
