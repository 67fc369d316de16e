"""Resumable runs (issue 22 §1): checkpoints, resumption from them, refusal of a changed command.

Under deterministic timing a run interrupted at any moment and resumed writes records byte-identical
to an uninterrupted run. Here interruptions are raised inside the process (fast, every protocol);
tests/tta_eval/test_resume_kill.py kills the console script with real SIGKILLs.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from pathlib import Path

import pytest

import tta_eval.checkpoint
import tta_eval.records
from tests.tta_eval.tta_helpers import run_cli
from tta_eval.checkpoint import Checkpoint, Checkpointer, read_checkpoint, write_checkpoint
from tta_eval.experiment import run_experiment
from tta_eval.protocols import (
    AlfarraProtocol,
    AmortisedProtocol,
    CostModel,
    DiscreteProtocol,
    MethodCost,
    OfflineProtocol,
)
from tta_eval.resume import config_differences
from tta_eval.run_folder import CHECKPOINT_FILE, RECORDS_FOLDER
from tta_eval.settings import ExperimentSettings, MethodSpec
from tta_eval.streams import StreamOptions

FACTORY = "tests.tta_eval.tta_helpers:make_tiny_cnn"
"""A 10-class tiny CNN with seeded initialisation: every process builds the same model."""
STREAM = "synthetic:num_batches=12,domain_length=4,image_size=8"
METHODS = ("cotta", "rotta", "eata:fisher_samples=64", "rdumb:reset_every=5")
"""EATA's stream head (4 batches) holds the first checkpoint (48 samples)."""
COSTS = {"cotta": "3", "rotta": "1+1", "eata": "2", "rdumb": "2", "asr": "2", "rdumbpp": "2", "roid": "2"}
PROTOCOLS = {
    "offline": OfflineProtocol(domain_key="domain"),
    "alfarra": AlfarraProtocol(domain_key="domain"),
    "discrete": DiscreteProtocol(domain_key="domain", utilisation=0.5, buffer=2),
    "amortised": AmortisedProtocol(domain_key="domain", budget=0.05),
}


def settings(out: Path, protocol_name: str, **changes: object) -> ExperimentSettings:
    from ccc.models import ModelSpec

    cost_model = CostModel(0.01, tuple((name, MethodCost.parse(cost)) for name, cost in COSTS.items()))
    base = ExperimentSettings(
        stream=STREAM,
        methods=tuple(MethodSpec.parse(text) for text in METHODS),
        model=ModelSpec(FACTORY),
        output_root=out,
        run_name="run",
        stream_options=StreamOptions(batch_size=16),
        protocol=PROTOCOLS[protocol_name],
        cost_model=cost_model,
        progress=False,
        checkpoint_every=48,
    )
    return dataclasses.replace(base, **changes)


def records(run_dir: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((run_dir / RECORDS_FOLDER).glob("*.csv"))}


class Interrupted(Exception):
    """Stands for a kill."""


@pytest.mark.parametrize("protocol_name", sorted(PROTOCOLS))
@pytest.mark.parametrize("interruption", ["after a checkpoint", "between checkpoints"])
def test_an_interrupted_run_resumes_to_identical_records(tmp_path, monkeypatch, protocol_name, interruption) -> None:
    reference = records(run_experiment(settings(tmp_path / "reference", protocol_name)))
    saves = []
    original_save = Checkpointer.save

    def save_then_stop(self, state, samples):  # type: ignore[no-untyped-def]
        original_save(self, state, samples)
        saves.append(samples)
        if interruption == "after a checkpoint" and len(saves) == 1:
            raise Interrupted

    rows = []
    original_write = tta_eval.records.CsvRecordWriter.write

    def write_then_stop(self, record):  # type: ignore[no-untyped-def]
        original_write(self, record)
        rows.append(record)
        if interruption == "between checkpoints" and len(rows) == 5 * 7:
            raise Interrupted

    monkeypatch.setattr(Checkpointer, "save", save_then_stop)
    monkeypatch.setattr(tta_eval.records.CsvRecordWriter, "write", write_then_stop)
    with pytest.raises(Interrupted):
        run_experiment(settings(tmp_path / "resumed", protocol_name))
    run_dir = tmp_path / "resumed" / "run"
    assert read_checkpoint(run_dir) is not None
    monkeypatch.undo()
    notes: list[str] = []
    run_experiment(settings(tmp_path / "resumed", protocol_name), notify=notes.append)
    assert records(run_dir) == reference
    assert notes == [f"resuming run run from sample {saves[-1]:,}"]
    assert not (run_dir / CHECKPOINT_FILE).exists()


@pytest.mark.parametrize("method", ["asr:reset=asr:a0=0.97", "rdumbpp:reset=rdumbpp:threshold=0.5:warmup=2:cooldown=1"])
def test_reset_policy_state_resumes_to_identical_records(tmp_path, monkeypatch, method) -> None:
    """The policies' state (ASR's threshold average, Fisher and episode means; RDumb++'s drift
    statistics) is in the checkpoint: with thresholds at which both reset on this stream, before and
    after the interruption, the resumed records equal the uninterrupted run's."""
    chosen = {"methods": (MethodSpec.parse(method),)}
    reference = records(run_experiment(settings(tmp_path / "reference", "offline", **chosen)))
    (adapting,) = [content for file_name, content in reference.items() if file_name != "source.csv"]
    assert sum(int(row["reset"]) for row in csv.DictReader(io.StringIO(adapting.decode()))) >= 2
    rows = []
    original_write = tta_eval.records.CsvRecordWriter.write

    def write_then_stop(self, record):  # type: ignore[no-untyped-def]
        original_write(self, record)
        rows.append(record)
        if len(rows) == 2 * 7:
            raise Interrupted

    monkeypatch.setattr(tta_eval.records.CsvRecordWriter, "write", write_then_stop)
    with pytest.raises(Interrupted):
        run_experiment(settings(tmp_path / "resumed", "offline", **chosen))
    monkeypatch.undo()
    run_dir = run_experiment(settings(tmp_path / "resumed", "offline", **chosen))
    assert records(run_dir) == reference


def test_an_fp16_run_resumes_with_its_loss_scaler(tmp_path, monkeypatch) -> None:
    """Under fp16 (CPU autocast here) each method's loss scaler is part of the checkpoint."""
    chosen = {"methods": (MethodSpec.parse("eata:fisher_samples=64"),), "precision": "fp16"}
    reference = records(run_experiment(settings(tmp_path / "reference", "offline", **chosen)))
    saved = []
    original_save = Checkpointer.save

    def save_then_stop(self, state, samples):  # type: ignore[no-untyped-def]
        original_save(self, state, samples)
        saved.append(state["runners"])
        if len(saved) == 2:
            raise Interrupted

    monkeypatch.setattr(Checkpointer, "save", save_then_stop)
    with pytest.raises(Interrupted):
        run_experiment(settings(tmp_path / "resumed", "offline", **chosen))
    monkeypatch.undo()
    assert "scale" in saved[-1]["eata:fisher_samples=64"]["grad_scaler"]
    run_dir = run_experiment(settings(tmp_path / "resumed", "offline", **chosen))
    assert records(run_dir) == reference


def test_a_run_killed_before_its_first_checkpoint_starts_over(tmp_path) -> None:
    reference = records(run_experiment(settings(tmp_path / "reference", "offline")))
    run_dir = run_experiment(settings(tmp_path / "resumed", "offline", checkpoint_every=0))
    (run_dir / "summary.json").unlink()
    (run_dir / RECORDS_FOLDER / "cotta.csv").write_text("partial")
    notes: list[str] = []
    run_experiment(settings(tmp_path / "resumed", "offline"), notify=notes.append)
    assert records(run_dir) == reference
    assert notes == ["run run has no checkpoint: starting it over"]


def interrupted_run(out: Path) -> list[str]:
    arguments = [
        "run",
        "--stream",
        STREAM,
        "--model",
        FACTORY,
        "--batch-size",
        "16",
        "--out",
        str(out),
        "--name",
        "run",
    ]
    arguments += ["--no-progress", "--checkpoint-every", "48", "--baseline-latency-ms", "10", "--protocol", "alfarra"]
    for method in METHODS:
        arguments += ["--method", method]
    for name, cost in COSTS.items():
        arguments += ["--cost", f"{name}={cost}"]
    return arguments


def stop_after_first_checkpoint(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    original_save = Checkpointer.save

    def save_then_stop(self, state, samples):  # type: ignore[no-untyped-def]
        original_save(self, state, samples)
        raise KeyboardInterrupt

    monkeypatch.setattr(Checkpointer, "save", save_then_stop)


def test_the_same_command_resumes_and_says_so(tmp_path, monkeypatch, capsys) -> None:
    arguments = interrupted_run(tmp_path)
    stop_after_first_checkpoint(monkeypatch)
    code, _, _ = run_cli(capsys, *arguments)
    assert code == 130
    monkeypatch.undo()
    code, out, err = run_cli(capsys, *arguments)
    assert code == 0, err
    assert "resuming run run from sample 48" in out.splitlines()
    code, _, err = run_cli(capsys, *arguments)
    assert code == 2 and "already exists" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (["--method", "tent", "--cost", "tent=2"], "methods.tent"),
        (["--speed", "0.5"], "protocol.speed"),
        (["--max-samples", "150"], "max_samples"),
        (["--window", "32"], "window"),
    ],
)
def test_a_changed_command_is_refused_in_one_line(tmp_path, monkeypatch, capsys, change, named) -> None:
    arguments = interrupted_run(tmp_path)
    stop_after_first_checkpoint(monkeypatch)
    run_cli(capsys, *arguments)
    monkeypatch.undo()
    code, _, err = run_cli(capsys, *arguments, *change)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "unfinished run of another command" in err and named in err and "--overwrite" in err, err
    code, out, err = run_cli(capsys, *arguments, *change, "--overwrite")
    assert code == 0, err
    assert "resuming" not in out


def test_the_default_interval_is_a_recorded_choice_and_zero_writes_none(tmp_path, monkeypatch) -> None:
    long_stream = "synthetic:num_batches=7000,image_size=8"
    from tta_eval.settings import resolve_experiment

    notes = resolve_experiment(settings(tmp_path, "offline", stream=long_stream, checkpoint_every=None)).notes
    assert any("checkpoint every 100,000 samples" in note for note in notes)
    assert not any(
        "checkpoint" in note for note in resolve_experiment(settings(tmp_path, "offline", stream=long_stream)).notes
    )
    written = []
    monkeypatch.setattr(tta_eval.checkpoint, "write_checkpoint", lambda path, checkpoint: written.append(path) or 0)
    run_experiment(settings(tmp_path, "offline", checkpoint_every=0))
    assert written == []
    with pytest.raises(ValueError, match="checkpoint_every"):
        settings(tmp_path, "offline", checkpoint_every=-1)


def small_checkpoint(**extra: object) -> Checkpoint:
    """A checkpoint of nothing but ``extra`` (and an empty config)."""
    return Checkpoint("{}", 0, 0, {}, {}, {}, {}, {}, {}, dict(extra))


def test_a_checkpoint_write_is_atomic(tmp_path) -> None:
    path = tmp_path / CHECKPOINT_FILE
    write_checkpoint(path, small_checkpoint(value=1))

    class Unpicklable:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            raise RuntimeError("cannot pickle")

    with pytest.raises(RuntimeError):
        write_checkpoint(path, small_checkpoint(value=Unpicklable()))
    assert read_checkpoint(tmp_path).extra["value"] == 1
    assert sorted(item.name for item in tmp_path.iterdir()) == [CHECKPOINT_FILE]
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot be read"):
        read_checkpoint(tmp_path)


def test_config_differences_name_nested_entries() -> None:
    saved = {"methods": {"tent": {"lr": 1}}, "window": 10, "choices": ["a"]}
    assert config_differences(saved, {"methods": {"tent": {"lr": 2}}, "window": 10, "choices": ["a"]}) == [
        "methods.tent.lr"
    ]
    assert config_differences(saved, {"methods": {}, "window": 11, "choices": ["a"]}) == ["methods.tent", "window"]


def test_a_config_written_before_entries_were_added_still_matches() -> None:
    saved = {"methods": {"tent": {"config": {"lr": 1}}}, "window": 10}
    current = {"methods": {"tent": {"config": {"lr": 1, "optimizer": "sgd"}}}, "window": 10, "method_settings": None}
    assert config_differences(saved, current) == []
    adam = {**current, "methods": {"tent": {"config": {"lr": 1, "optimizer": "adam"}}}}
    assert config_differences(saved, adam) == ["methods.tent.config.optimizer"]
    assert config_differences(saved, {**current, "method_settings": {"name": "cifar10"}}) == ["method_settings"]


def test_a_ccc_stream_resumes_without_reading_the_shards_before_its_position(tmp_path) -> None:
    import torch

    from tests.builders import make_ccc_run
    from tta_eval.streams import open_stream_source

    run = make_ccc_run(tmp_path, num_images=48, speed=4, shard_size=16)
    options = StreamOptions(batch_size=8)
    whole = list(open_stream_source(f"ccc:{run}", options))
    for shard in sorted(run.glob("*.tar"))[:1]:
        shard.write_bytes(b"")
    resumed = open_stream_source(f"ccc:{run}", options, start=16)
    assert list(open_stream_source(f"ccc:{run}", options, start=48)) == []
    batches = list(resumed)
    assert len(batches) == len(whole) - 2
    for (images, labels, metadata), (expected_images, expected_labels, expected_metadata) in zip(
        batches, whole[2:], strict=True
    ):
        assert (
            torch.equal(images, expected_images)
            and torch.equal(labels, expected_labels)
            and metadata == expected_metadata
        )


def test_other_streams_resume_by_dropping_whole_batches(tmp_path) -> None:
    from tta_eval.streams import (
        SizedStream,
        open_stream_source,
        skip_samples,
        stream_length,
    )

    options = StreamOptions(batch_size=16)
    whole = list(open_stream_source(STREAM, options))
    rest = open_stream_source(STREAM, options, start=48)
    assert stream_length(skip_samples(SizedStream(whole, 16 * 12), 48)) == 16 * 12 - 48
    assert [labels.tolist() for _, labels, _ in rest] == [labels.tolist() for _, labels, _ in whole[3:]]
    with pytest.raises(ValueError, match="not the start of a batch"):
        list(open_stream_source(STREAM, options, start=40))


@pytest.mark.parametrize("protocol_name", ["offline", "amortised"])
def test_a_measured_run_resumes_with_its_saved_latency(tmp_path, monkeypatch, protocol_name) -> None:
    measured = settings(tmp_path, protocol_name, cost_model=None, baseline_latency=0.001, warmup_calls=1)
    original_save = Checkpointer.save

    def save_then_stop(self, state, samples):  # type: ignore[no-untyped-def]
        original_save(self, state, samples)
        raise Interrupted

    monkeypatch.setattr(Checkpointer, "save", save_then_stop)
    with pytest.raises(Interrupted):
        run_experiment(measured)
    monkeypatch.undo()
    run_dir = run_experiment(measured)
    from tta_eval.run_folder import load_run

    summary = load_run(run_dir).summary
    assert summary["timing"]["baseline_latency_seconds"] == 0.001
    assert all(method["batches"] == 12 for method in summary["methods"].values())


def test_a_position_beyond_the_end_of_a_stream_is_refused() -> None:
    """Issue 35 §4: a stream whose length a run does not know before it reads it ended silently when
    resumed past its end, and the run completed."""
    from tta_eval.streams import SizedStream, open_stream_source, skip_samples

    whole = list(open_stream_source(STREAM, StreamOptions(batch_size=16)))
    beyond = r"cannot resume the stream at sample 208: it ends at sample 192"
    with pytest.raises(ValueError, match=beyond):
        skip_samples(SizedStream(whole, 16 * 12), 208)
    with pytest.raises(ValueError, match=beyond):
        list(skip_samples(iter(whole), 208))
    assert list(skip_samples(iter(whole), 192)) == []
