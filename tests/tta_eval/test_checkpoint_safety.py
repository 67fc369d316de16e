"""Files a run reads back are data, never code (issue 27 §7): a replaced checkpoint or source-statistics
file that would run ``os.system`` or ``exec`` when unpickled is refused in one line and runs nothing; an
opcode flood is refused before it is unpickled. A checkpoint is bound to its command (another one's is
refused naming what differs; a deleted config.json is restored from it), and a checkpoint that cannot
be written (a full disk) ends the run with one line (issue 27 §11).
"""

from __future__ import annotations

import builtins
import errno
import json
import os
import pickle
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import tta_eval.checkpoint
from tests.tta_eval.method_helpers import statistics_file
from tests.tta_eval.tta_helpers import run_cli
from tta_eval.checkpoint import (
    CUDA_RNG_STATE_BYTES,
    Checkpoint,
    Checkpointer,
    check_rng_states,
    read_checkpoint,
    rng_states,
)
from tta_eval.experiment import run_experiment
from tta_eval.methods import create
from tta_eval.protocols import CostModel, MethodCost, OfflineProtocol
from tta_eval.run_folder import CHECKPOINT_FILE, CONFIG_FILE, LOCK_FILE, RECORDS_FOLDER, RUN_COMPLETE, SUMMARY_FILE
from tta_eval.settings import ExperimentSettings, MethodSpec
from tta_eval.streams import StreamOptions

FACTORY = "tests.tta_eval.tta_helpers:make_tiny_cnn"
STREAM = "synthetic:num_batches=6,domain_length=3,image_size=8"
COMMAND = (
    *("run", "--stream", STREAM, "--model", FACTORY, "--method", "tent"),
    *("--batch-size", "16", "--checkpoint-every", "32", "--no-progress"),
)


class SystemCall:
    """Unpickled, runs ``touch MARKER``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


class Exec:
    """Unpickled, creates MARKER through ``exec``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (builtins.exec, (f"open({str(self.marker)!r}, 'w').close()",))


def write_payload(path: Path, kind: str, marker: Path) -> None:
    """A file at ``path`` that runs code when unpickled: a plain pickle, or inside a torch zip."""
    if kind == "os.system, plain pickle":
        path.write_bytes(pickle.dumps({"format": 2, "payload": SystemCall(marker)}))
    else:
        torch.save({"format": 2, "payload": Exec(marker)}, path)


def write_opcode_flood(path: Path) -> None:
    """A torch-style zip whose pickle builds 600,000 empty dicts (a few seconds and ~100 MB to unpickle)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02" + b"}" * 600_000 + b".")
        archive.writestr("archive/version", "3\n")


def refuse_unpickling(monkeypatch: pytest.MonkeyPatch) -> None:
    def unpickled(*arguments, **options):  # type: ignore[no-untyped-def]
        raise AssertionError("torch.load was called")

    monkeypatch.setattr(torch, "load", unpickled)


PAYLOADS = ["os.system, plain pickle", "exec, torch zip"]


def interrupted_run(
    out: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *extra: str
) -> Path:
    """The run folder of ``COMMAND`` stopped right after its first checkpoint."""
    original_save = Checkpointer.save

    def save_then_stop(self, state, samples):  # type: ignore[no-untyped-def]
        original_save(self, state, samples)
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(Checkpointer, "save", save_then_stop)
        code, _, _ = run_cli(capsys, *COMMAND, "--out", str(out), "--name", "run", *extra)
    assert code == 130
    run_dir = out / "run"
    assert (run_dir / CHECKPOINT_FILE).is_file()
    return run_dir


def records(run_dir: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((run_dir / RECORDS_FOLDER).glob("*.csv"))}


@pytest.mark.parametrize("kind", PAYLOADS)
def test_a_replaced_checkpoint_runs_nothing_and_is_refused_in_one_line(tmp_path, monkeypatch, capsys, kind) -> None:
    run_dir = interrupted_run(tmp_path, monkeypatch, capsys)
    marker = tmp_path / "marker"
    write_payload(run_dir / CHECKPOINT_FILE, kind, marker)
    code, _, err = run_cli(capsys, *COMMAND, "--out", str(tmp_path), "--name", "run")
    assert not marker.exists(), "the payload ran"
    assert code == 2
    assert err.count("\n") == 1 and "checkpoint" in err and "--overwrite" in err, err


def test_an_opcode_flood_checkpoint_is_refused_before_unpickling(tmp_path, monkeypatch) -> None:
    write_opcode_flood(tmp_path / CHECKPOINT_FILE)
    refuse_unpickling(monkeypatch)
    with pytest.raises(ValueError, match="more than 500,000 opcodes"):
        read_checkpoint(tmp_path)


def test_a_checkpoint_of_format_1_is_refused_without_unpickling_its_modules(tmp_path) -> None:
    marker = tmp_path / "marker"
    torch.save(
        {"format": 1, "methods": {"tent": torch.nn.Linear(2, 2)}, "payload": Exec(marker)}, tmp_path / CHECKPOINT_FILE
    )
    with pytest.raises(
        ValueError, match=r"objects other than tensors and plain values .*, as checkpoints of format 1"
    ) as error:
        read_checkpoint(tmp_path)
    assert "\n" not in str(error.value) and not marker.exists()


def test_a_checkpoint_with_malformed_entries_is_refused_in_one_line(tmp_path) -> None:
    payload = Checkpoint("{}", 0, 0, {}, {}, {}, {}, {}, {}, {}).to_payload()
    torch.save({**payload, "records": [1], "samples": -5, "config": "not json"}, tmp_path / CHECKPOINT_FILE)
    with pytest.raises(ValueError, match=r"has malformed entries \(config, records, samples\); pass --overwrite"):
        read_checkpoint(tmp_path)


@pytest.mark.parametrize("name", ["petta", "ttac_nq"])
@pytest.mark.parametrize("kind", PAYLOADS)
def test_a_replaced_source_statistics_file_runs_nothing(tmp_path, tiny_cnn, name, kind) -> None:
    path, marker = tmp_path / "source.ttac.pt", tmp_path / "marker"
    write_payload(path, kind, marker)
    with pytest.raises(ValueError, match="source_statistics file .* cannot be read") as error:
        create(name, tiny_cnn, source_statistics=str(path))
    assert "\n" not in str(error.value) and not marker.exists()


@pytest.mark.parametrize("name", ["petta", "ttac_nq"])
def test_an_opcode_flood_of_source_statistics_is_refused_before_unpickling(
    tmp_path, tiny_cnn, monkeypatch, name
) -> None:
    path = tmp_path / "source.ttac.pt"
    write_opcode_flood(path)
    refuse_unpickling(monkeypatch)
    with pytest.raises(ValueError, match="more than 500,000 opcodes"):
        create(name, tiny_cnn, source_statistics=str(path))


def test_source_statistics_written_by_save_still_load(tmp_path, tiny_cnn) -> None:
    create("ttac_nq", tiny_cnn, source_statistics=statistics_file(tiny_cnn, tmp_path))


def settings(out: Path, method: str = "tent") -> ExperimentSettings:
    """A short run of ``method`` with a checkpoint every 32 samples, timed by a cost model (its records
    are the same in every process)."""
    from ccc.models import ModelSpec

    return ExperimentSettings(
        stream=STREAM,
        methods=(MethodSpec.parse(method),),
        model=ModelSpec(FACTORY),
        output_root=out,
        run_name="run",
        stream_options=StreamOptions(batch_size=16),
        protocol=OfflineProtocol(domain_key="domain"),
        cost_model=CostModel(0.01, (("tent", MethodCost.parse("2")), ("eta", MethodCost.parse("2")))),
        progress=False,
        checkpoint_every=32,
    )


def stopped_after_first_checkpoint(chosen: ExperimentSettings, monkeypatch: pytest.MonkeyPatch) -> Path:
    original_save = Checkpointer.save

    def save_then_stop(self, state, samples):  # type: ignore[no-untyped-def]
        original_save(self, state, samples)
        raise KeyboardInterrupt

    with monkeypatch.context() as patched, pytest.raises(KeyboardInterrupt):
        patched.setattr(Checkpointer, "save", save_then_stop)
        run_experiment(chosen)
    return chosen.output_root / "run"


def test_a_checkpoint_of_another_command_is_refused_naming_what_differs(tmp_path, monkeypatch) -> None:
    other = stopped_after_first_checkpoint(settings(tmp_path / "other", "eta"), monkeypatch)
    run_dir = stopped_after_first_checkpoint(settings(tmp_path / "this"), monkeypatch)
    (run_dir / CHECKPOINT_FILE).write_bytes((other / CHECKPOINT_FILE).read_bytes())
    with pytest.raises(ValueError, match=r"was written by another command \(methods\.eta, methods\.tent differ\)"):
        run_experiment(settings(tmp_path / "this"))


def test_a_deleted_config_is_restored_from_the_checkpoint_and_the_run_resumes(tmp_path, monkeypatch) -> None:
    reference = run_experiment(settings(tmp_path / "reference"))
    run_dir = stopped_after_first_checkpoint(settings(tmp_path / "resumed"), monkeypatch)
    config = (run_dir / CONFIG_FILE).read_bytes()
    (run_dir / CONFIG_FILE).unlink()
    notes: list[str] = []
    run_experiment(settings(tmp_path / "resumed"), notify=notes.append)
    assert notes == [f"run run: {CONFIG_FILE} restored from its checkpoint", "resuming run run from sample 32"]
    assert (run_dir / CONFIG_FILE).read_bytes() == config
    assert records(run_dir) == records(reference)


def test_a_deleted_config_with_an_unusable_checkpoint_says_what_to_do(tmp_path, monkeypatch) -> None:
    run_dir = stopped_after_first_checkpoint(settings(tmp_path), monkeypatch)
    (run_dir / CONFIG_FILE).unlink()
    (run_dir / CHECKPOINT_FILE).write_bytes(b"not a checkpoint")
    with pytest.raises(
        ValueError, match=r"has no config.json to resume from, and checkpoint .* cannot be read: .*--overwrite"
    ) as error:
        run_experiment(settings(tmp_path))
    assert "\n" not in str(error.value)


def test_a_full_disk_while_a_checkpoint_is_written_is_one_line_and_keeps_the_previous(
    tmp_path, monkeypatch, capsys
) -> None:
    run_dir = interrupted_run(tmp_path, monkeypatch, capsys, "--method", "cotta")
    previous = (run_dir / CHECKPOINT_FILE).read_bytes()
    real_open = builtins.open

    class FullDisk:
        """A file on a disk with 4 KiB left."""

        def __init__(self, handle) -> None:  # type: ignore[no-untyped-def]
            self._handle, self._left = handle, 4096

        def write(self, data) -> int:  # type: ignore[no-untyped-def]
            if len(data) > self._left:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self._left -= len(data)
            return self._handle.write(data)

        def __getattr__(self, name):  # type: ignore[no-untyped-def]
            return getattr(self._handle, name)

        def __enter__(self):  # type: ignore[no-untyped-def]
            return self

        def __exit__(self, *exception) -> None:  # type: ignore[no-untyped-def]
            self._handle.close()

    def open_on_full_disk(path, mode="r", *arguments, **options):  # type: ignore[no-untyped-def]
        handle = real_open(path, mode, *arguments, **options)
        return FullDisk(handle) if str(path).endswith(f".{CHECKPOINT_FILE}.tmp") else handle

    monkeypatch.setattr(tta_eval.checkpoint, "open", open_on_full_disk, raising=False)
    code, _, err = run_cli(capsys, *COMMAND, "--method", "cotta", "--out", str(tmp_path), "--name", "run")
    assert code == 2
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(f"tta-eval: error: {run_dir / CHECKPOINT_FILE}: No space left on device")
    ), err
    assert (run_dir / CHECKPOINT_FILE).read_bytes() == previous
    assert not (run_dir / f".{CHECKPOINT_FILE}.tmp").exists()


def test_a_run_resumed_with_other_model_weights_is_refused_in_one_line(tmp_path, monkeypatch) -> None:
    from ccc.models import ModelSpec, load_model

    run_dir = stopped_after_first_checkpoint(settings(tmp_path), monkeypatch)
    model = load_model(ModelSpec(FACTORY), "cpu")
    with torch.no_grad():
        next(model.parameters()).add_(0.01)
    before = folder_files(run_dir)
    with pytest.raises(
        ValueError,
        match=r"was written with other model weights \(sha256 [0-9a-f]{12}…, now [0-9a-f]{12}…\); .*--overwrite",
    ) as error:
        run_experiment(settings(tmp_path), model=model)
    assert "\n" not in str(error.value)
    assert folder_files(run_dir) == before, "the refusal changed the run folder (records cut or summary removed)"
    run_experiment(settings(tmp_path), model=load_model(ModelSpec(FACTORY), "cpu"))


def folder_files(run_dir: Path) -> dict[str, bytes]:
    """Every file of a run folder (its lock file aside) by relative path, with its bytes."""
    return {
        str(path.relative_to(run_dir)): path.read_bytes()
        for path in sorted(run_dir.rglob("*"))
        if path.is_file() and path.name != LOCK_FILE
    }


def tamper(run_dir: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite the checkpoint of ``run_dir`` with ``change`` applied to its payload."""
    path = run_dir / CHECKPOINT_FILE
    payload = torch.load(path, weights_only=True)
    change(payload)
    torch.save(payload, path)


def assert_refused_untouched(tmp_path: Path, run_dir: Path, capsys: pytest.CaptureFixture[str], reason: str) -> None:
    """The resumption of the tampered run in ``run_dir`` is one line naming its checkpoint and ``reason``
    (a regular expression), and no file of the folder changed; deleting the checkpoint starts it over."""
    before = folder_files(run_dir)
    code, _, err = run_cli(capsys, *COMMAND, "--out", str(tmp_path), "--name", "run")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"checkpoint {str(run_dir / CHECKPOINT_FILE)!r}" in err and re.search(reason, err), err
    assert "delete it or pass --overwrite" in err, err
    assert folder_files(run_dir) == before
    (run_dir / CHECKPOINT_FILE).unlink()
    code, _, err = run_cli(capsys, *COMMAND, "--out", str(tmp_path), "--name", "run")
    assert code == 0, err
    assert json.loads((run_dir / SUMMARY_FILE).read_text())["status"] == RUN_COMPLETE


def set_records(label: str, size: Callable[[int], int]) -> Callable[[dict[str, Any]], None]:
    def change(payload: dict[str, Any]) -> None:
        payload["records"][label] = size(payload["records"][label])

    return change


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (set_records("source", lambda size: 0), r"records file .*source\.csv.* has no header"),
        (set_records("tent", lambda size: size + 10**6), r"records file .*tent\.csv.* is \d[\d,]* bytes, shorter than"),
        (set_records("source", lambda size: size - 3), r"records file .*source\.csv.* ends inside a row"),
        (lambda payload: payload["records"].pop("tent"), r"records of methods source, not source, tent"),
        (lambda payload: payload["records"].update(other=10), r"records of methods source, tent, other"),
    ],
    ids=["source cut to 0 bytes", "beyond the file", "inside a row", "a method missing", "another method"],
)
def test_records_sizes_that_do_not_fit_are_refused_before_a_record_changes(
    tmp_path, monkeypatch, capsys, change, reason
) -> None:
    """Issue 35 §3: a checkpoint's records sizes are checked against the files before they are cut."""
    run_dir = interrupted_run(tmp_path, monkeypatch, capsys)
    tamper(run_dir, change)
    assert_refused_untouched(tmp_path, run_dir, capsys, reason)


def set_position(batches: int, samples: int) -> Callable[[dict[str, Any]], None]:
    def change(payload: dict[str, Any]) -> None:
        payload["batches"], payload["samples"] = batches, samples

    return change


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            set_position(2, 10**15),
            r"position \(sample 1,000,000,000,000,000\) is beyond the stream's end \(sample 96\)",
        ),
        (set_position(10**15 // 16, 10**15), r"beyond the stream's end"),
        (set_position(7, 112), r"position \(sample 112\) is beyond the stream's end \(sample 96\)"),
        (
            set_position(1, 16),
            r"source\.csv' holds 2 batches up to sample 32 .*, beyond its position \(1 batches, 16 samples\)",
        ),
        (set_position(2, 1), r"position \(2 batches, 1 samples\) has more batches than samples"),
        (set_position(0, 0), r"holds 2 batches up to sample 32 .*, beyond its position \(0 batches, 0 samples\)"),
    ],
    ids=["samples 1e15", "batches and samples 1e15", "past the end", "behind the records", "batches > samples", "0"],
)
def test_a_position_beyond_the_stream_or_behind_the_records_is_refused(
    tmp_path, monkeypatch, capsys, change, reason
) -> None:
    """Issue 35 §4: a checkpoint claiming samples=10**15 ended the run "complete" after 32 of 96 samples."""
    run_dir = interrupted_run(tmp_path, monkeypatch, capsys)
    tamper(run_dir, change)
    assert_refused_untouched(tmp_path, run_dir, capsys, reason)


def set_rng(name: str, value: object) -> Callable[[dict[str, Any]], None]:
    def change(payload: dict[str, Any]) -> None:
        payload["rng"][name] = value

    return change


def numpy_state(**changes: object) -> Callable[[dict[str, Any]], None]:
    def change(payload: dict[str, Any]) -> None:
        kind, key, position, has_gauss, cached = payload["rng"]["numpy"]
        values = {"kind": kind, "key": key, "position": position, "has_gauss": has_gauss, "cached": cached}
        payload["rng"]["numpy"] = tuple({**values, **changes}.values())

    return change


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (set_rng("torch", torch.zeros(10, dtype=torch.uint8)), r"random state 'torch' .*5,056 bytes"),
        (set_rng("torch", torch.zeros(5056)), r"random state 'torch' .*uint8 tensor"),
        (set_rng("torch", [1, 2]), r"random state 'torch' .*uint8 tensor"),
        (lambda payload: payload["rng"].pop("torch"), r"random states lack 'torch'"),
        (set_rng("cuda", [torch.zeros(16)]), r"random state 'cuda' .*uint8 tensor"),
        (set_rng("cuda", torch.zeros(16, dtype=torch.uint8)), r"random state 'cuda' .*list"),
        (set_rng("cuda", [torch.zeros(3, dtype=torch.uint8)]), r"random state 'cuda' .*16 bytes"),
        (set_rng("numpy", (1, 2)), r"random state 'numpy'"),
        (numpy_state(key=torch.zeros(3, dtype=torch.int64)), r"random state 'numpy'"),
        (numpy_state(key=torch.full((624,), 2**33)), r"random state 'numpy'"),
        (numpy_state(position=1000), r"random state 'numpy'"),
        (numpy_state(kind="PCG64"), r"random state 'numpy'"),
        (set_rng("python", (3, (1, 2), None)), r"random state 'python'"),
        (set_rng("python", "x"), r"random state 'python'"),
        (set_rng("other", 1), r"unknown random state 'other'"),
    ],
    ids=[
        "torch size",
        "torch dtype",
        "torch list",
        "torch missing",
        "cuda dtype",
        "cuda not a list",
        "cuda size",
        "numpy tuple",
        "numpy key size",
        "numpy key range",
        "numpy position",
        "numpy kind",
        "python size",
        "python type",
        "unknown",
    ],
)
def test_a_malformed_random_state_is_one_line_naming_the_checkpoint(
    tmp_path, monkeypatch, capsys, change, reason
) -> None:
    """Issue 35 §5: a random state of the wrong type or size was a RuntimeError traceback from
    ``restore_rng_states`` (after the records were cut)."""
    run_dir = interrupted_run(tmp_path, monkeypatch, capsys)
    tamper(run_dir, change)
    assert_refused_untouched(tmp_path, run_dir, capsys, reason)


def test_a_checkpoint_that_does_not_fit_restores_no_deleted_config(tmp_path, monkeypatch, capsys) -> None:
    """Issue 35 §3: with config.json deleted, a checkpoint is checked whole before config.json is
    written back from it."""
    run_dir = interrupted_run(tmp_path, monkeypatch, capsys)
    tamper(run_dir, set_records("source", lambda size: 0))
    (run_dir / CONFIG_FILE).unlink()
    before = folder_files(run_dir)
    code, _, err = run_cli(capsys, *COMMAND, "--out", str(tmp_path), "--name", "run")
    assert code == 2 and err.count("\n") == 1 and "source.csv' has no header" in err, err
    assert folder_files(run_dir) == before


def test_more_cuda_random_states_than_devices_are_refused(monkeypatch) -> None:
    """A checkpoint written on a machine with more CUDA devices than this one's cannot set their states."""
    states = {**rng_states(), "cuda": [torch.zeros(CUDA_RNG_STATE_BYTES, dtype=torch.uint8)] * 2}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match=r"random state 'cuda' holds the states of 2 CUDA devices, this machine has 1"):
        check_rng_states(states)
    check_rng_states({**states, "cuda": states["cuda"][:1]})
