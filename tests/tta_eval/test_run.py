"""The run as an object (``tta_eval.run.Run``), phase by phase: ``start`` writes config.json (with λ) and
empty records, ``record`` runs the protocol loop and checkpoints, ``finish`` writes the summary and
removes the checkpoint, ``stop`` writes a stopped summary and keeps it, ``resume`` continues from the
checkpoint to the records of an uninterrupted run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ccc.models import ModelSpec, load_model
from tta_eval.checkpoint import Checkpoint, read_checkpoint
from tta_eval.experiment import run_experiment
from tta_eval.protocols import CostModel, MethodCost, OfflineProtocol
from tta_eval.records import RECORD_COLUMNS, CsvRecordWriter
from tta_eval.run import Run
from tta_eval.run_folder import CHECKPOINT_FILE, CONFIG_FILE, SUMMARY_FILE, file_sha256, lock_run_folder, records_path
from tta_eval.settings import ExperimentSettings, MethodSpec, resolve_experiment

STREAM = "synthetic:num_batches=6,batch_size=16,domain_length=2,image_size=8"
"""96 samples in 6 batches of 16."""
COSTS = CostModel(0.01, (("source", MethodCost(1.0)), ("tent", MethodCost(1.0, 1.0))))
"""Deterministic timing: records do not depend on the machine, so two runs can be compared byte for byte."""
FACTORY = "tests.tta_eval.tta_helpers:make_tiny_cnn"
"""A 10-class tiny CNN with seeded initialisation: every load builds the same model."""


def resolved(out: Path, **changes: object):  # type: ignore[no-untyped-def]
    settings = ExperimentSettings(
        stream=STREAM,
        methods=(MethodSpec.parse("tent"),),
        model=ModelSpec(FACTORY),
        output_root=out,
        run_name="r",
        protocol=OfflineProtocol(domain_key="domain"),
        cost_model=COSTS,
        progress=False,
        checkpoint_every=32,
        **changes,
    )
    return resolve_experiment(settings)


def started(out: Path, choices: tuple[str, ...] = ()) -> Run:
    run = Run(resolved(out), choices)
    assert run.checkpoint_to_resume(print) is None
    run.start(load_model(run.settings.model, run.device), run.open_stream(None))
    return run


def records(folder: Path) -> dict[str, bytes]:
    return {label: records_path(folder, label).read_bytes() for label in ("source", "tent")}


def test_a_run_knows_its_folder_methods_and_config_before_touching_a_file(tmp_path) -> None:
    run = Run(resolved(tmp_path), ("chosen earlier",))
    assert run.folder == tmp_path / "r"
    assert [method.label for method in run.methods] == ["source", "tent"]  # the collapse reference added
    assert run.timing.mode == "deterministic"
    assert run.config["choices"][0] == "chosen earlier"
    assert run.config["stream"] == STREAM and "baseline_latency_source" not in run.config
    assert not (tmp_path / "r").exists()


def test_start_writes_the_config_with_latency_and_opens_empty_records(tmp_path) -> None:
    with lock_run_folder(tmp_path / "r"):
        run = started(tmp_path, ("chosen earlier",))
        config = json.loads((run.folder / CONFIG_FILE).read_text())
        assert config == {**run.config, **run.latency.to_json()}
        assert config["baseline_latency_seconds"] == 0.01 and config["baseline_latency_source"] == "cost model"
        assert set(run.modules) == {"source", "tent"} and all(len(table) == 0 for table in run.tables.values())
        assert all(records_path(run.folder, label).exists() for label in run.modules)
        assert not (run.folder / SUMMARY_FILE).exists()
        run.record()
    assert all(len(table) == 6 for table in run.tables.values())
    header = records_path(run.folder, "tent").read_text().splitlines()[0]
    assert header == ",".join(RECORD_COLUMNS)


def test_record_checkpoints_and_finish_writes_the_summary_and_removes_the_checkpoint(tmp_path) -> None:
    with lock_run_folder(tmp_path / "r"):
        run = started(tmp_path)
        run.record()
        checkpoint = read_checkpoint(run.folder)
        assert checkpoint is not None and checkpoint.samples == 96  # the last of 32, 64 and 96 samples
        assert not (run.folder / SUMMARY_FILE).exists()
        assert run.finish() == tmp_path / "r"
    summary = json.loads((run.folder / SUMMARY_FILE).read_text())
    assert summary["status"] == "complete" and summary["stopped"] is None
    assert summary["config_sha256"] == file_sha256(run.folder / CONFIG_FILE)
    assert set(summary["methods"]) == {"source", "tent"} and summary["run"] == "r"
    assert summary["timing"]["mode"] == "deterministic"
    assert (run.folder / "accuracy.png").exists()
    assert not (run.folder / CHECKPOINT_FILE).exists()
    assert records(run.folder) == records(run_experiment(resolved(tmp_path / "whole").settings))


def test_stop_writes_a_stopped_summary_and_keeps_the_checkpoint(tmp_path) -> None:
    with lock_run_folder(tmp_path / "r"):
        run = started(tmp_path)
        run.record()
        run.stop(RuntimeError("halted"))
    summary = json.loads((run.folder / SUMMARY_FILE).read_text())
    assert summary["status"] == "stopped" and summary["stopped"] == "RuntimeError: halted"
    assert (run.folder / CHECKPOINT_FILE).exists()


def test_a_run_that_recorded_nothing_writes_no_summary(tmp_path) -> None:
    with lock_run_folder(tmp_path / "r"):
        run = started(tmp_path)
        run.stop(RuntimeError("halted before the first batch"))
    assert not (run.folder / SUMMARY_FILE).exists()
    assert (run.folder / CONFIG_FILE).exists()  # the folder reads as an unfinished run


def test_record_before_start_is_refused(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="start or resume the run before recording it"):
        Run(resolved(tmp_path)).record()


class Interrupted(Exception):
    """Stands for a kill."""


def test_resume_continues_from_the_checkpoint_to_the_records_of_an_uninterrupted_run(tmp_path, monkeypatch) -> None:
    whole = records(run_experiment(resolved(tmp_path / "whole").settings))
    written = []
    original_write = CsvRecordWriter.write

    def write_then_stop(self, record):  # type: ignore[no-untyped-def]
        original_write(self, record)
        written.append(record)
        if len(written) == 2 * 5:  # in the fifth batch: the last checkpoint is at 64 samples
            raise Interrupted

    monkeypatch.setattr(CsvRecordWriter, "write", write_then_stop)
    with lock_run_folder(tmp_path / "r"):
        first = started(tmp_path)
        with pytest.raises(Interrupted) as interruption:
            first.record()
        first.stop(interruption.value)
    monkeypatch.undo()
    assert json.loads((first.folder / SUMMARY_FILE).read_text())["status"] == "stopped"
    notes: list[str] = []
    with lock_run_folder(tmp_path / "r"):
        run = Run(resolved(tmp_path))
        checkpoint = run.checkpoint_to_resume(notes.append)
        assert checkpoint is not None and checkpoint.samples == 64
        assert sum(1 for _ in run.open_stream(checkpoint)) == 2  # batches 5 and 6
        run.resume(load_model(run.settings.model, run.device), run.open_stream(checkpoint), checkpoint, notes.append)
        assert notes == ["resuming run r from sample 64"]
        assert not (run.folder / SUMMARY_FILE).exists()  # the stopped attempt's summary is gone
        assert all(len(table) == 4 for table in run.tables.values())  # the records cut to the checkpoint
        assert run.latency == first.latency
        run.record()
        run.finish()
    assert records(run.folder) == whole
    assert json.loads((run.folder / SUMMARY_FILE).read_text())["status"] == "complete"


def test_open_stream_starts_at_the_checkpoint_and_is_empty_at_its_end(tmp_path) -> None:
    run = Run(resolved(tmp_path, max_samples=80))
    assert sum(1 for _ in run.open_stream(None)) == 5
    at = {samples: Checkpoint("{}", samples // 16, samples, {}, {}, {}, {}, {}, {}, {}) for samples in (64, 80)}
    assert sum(1 for _ in run.open_stream(at[64])) == 1
    assert list(run.open_stream(at[80])) == []
