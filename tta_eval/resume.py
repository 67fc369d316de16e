"""Resuming an unfinished tta-eval run: the one place that reads a run folder's checkpoint, checks it
against the folder, the command and the stream, and restores the folder to it.

``tta_eval.run.Run`` calls ``find_checkpoint`` once before the stream opens (nothing in the folder
changes unless the checkpoint passes every check: a deleted config.json is then written back from it),
and ``restore_records`` once when it resumes (the model checked against the checkpoint's, the
records cut to the rows the checkpoint covers). The protocol loop then loads the methods' saved
states and the random states from the checkpoint (``tta_eval.protocols._execution``). What a
checkpoint holds and how it is written are ``tta_eval.checkpoint``'s; the folder's files are
``tta_eval.run_folder``'s.

Checks, each a ValueError of one line that names the file, what is wrong and how to go on:

- ``check_same_run``: the folder's unfinished run is this command's (config.json compared without
  ``UNCOMPARED_CONFIG_KEYS``);
- ``check_checkpoint_config``: the checkpoint was written by this command;
- ``check_checkpoint_claims``: its methods, position, records sizes and rows, and random states fit
  the folder and the stream;
- ``check_checkpoint_model``: the model given to resume is the one the run started from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import torch

from tta_eval.checkpoint import Checkpoint, check_rng_states, is_int_between, read_checkpoint
from tta_eval.records import RecordTable
from tta_eval.run_folder import (
    CHECKPOINT_FILE,
    CONFIG_FILE,
    SUMMARY_FILE,
    check_run_folder,
    checkpointed_rows,
    is_unfinished_run,
    open_records,
    read_config,
    records_path,
    write_text_atomic,
)

UNCOMPARED_CONFIG_KEYS = ("choices", "baseline_latency_source", "calibration")
"""config.json entries that may differ between the run and its resumption (notes; how λ was obtained)."""


def find_checkpoint(
    run_dir: Path,
    config: Mapping[str, Any],
    labels: Sequence[str],
    end: int | None,
    device: str | torch.device,
    overwrite: bool,
    notify: Callable[[str], None],
) -> Checkpoint | None:
    """The checkpoint to resume the run in ``run_dir`` from (tensors on ``device``); None: start the run.

    config: this command's fresh config.json content (without λ); labels: the run's methods, in order;
    end: the samples the run covers (None: unknown). Without ``overwrite``: a deleted config.json is
    restored from the checkpoint written by this command (a line to ``notify``); an unfinished run of
    this command is resumed from its checkpoint (started over, with a line to ``notify``, when it has
    none); an unfinished run or a checkpoint of another command, a checkpoint that does not fit the
    folder or the stream (``check_checkpoint_claims``: nothing is changed then, config.json included)
    and a complete run are refused (ValueError, one line). With ``overwrite``: None, the folder
    unread."""
    if not overwrite and _restore_config(run_dir, config, labels, end):
        notify(f"run {run_dir.name}: {CONFIG_FILE} restored from its checkpoint")
    check_run_folder(run_dir, overwrite, resume=not overwrite)
    if overwrite or not is_unfinished_run(run_dir):
        return None
    check_same_run(run_dir, read_config(run_dir), config)
    checkpoint = read_checkpoint(run_dir, device)
    if checkpoint is None:
        notify(f"run {run_dir.name} has no checkpoint: starting it over")
        return None
    check_checkpoint_config(run_dir, checkpoint, config)
    check_checkpoint_claims(run_dir, checkpoint, labels, end)
    return checkpoint


def restore_records(
    run_dir: Path, checkpoint: Checkpoint, model_digest: str
) -> tuple[dict[str, TextIO], dict[str, RecordTable]]:
    """Restore the folder of the run in ``run_dir`` to ``checkpoint`` (``find_checkpoint``'s): refuse a
    model other than the one the run started from (``model_digest``: ``tta_eval.checkpoint.model_sha256``;
    ValueError, nothing changed), remove the summary of a stopped attempt and cut each method's
    records to the rows the checkpoint covers. Returns label → records opened for appending, and
    label → the records kept."""
    check_checkpoint_model(run_dir, checkpoint, model_digest)
    (run_dir / SUMMARY_FILE).unlink(missing_ok=True)
    handles: dict[str, TextIO] = {}
    tables: dict[str, RecordTable] = {}
    try:
        for label, size in checkpoint.records.items():
            handles[label] = open_records(run_dir, label, keep_bytes=size)
            tables[label] = RecordTable.read_csv(records_path(run_dir, label))
    except BaseException:
        for handle in handles.values():
            handle.close()
        raise
    return handles, tables


def comparable_config(config: Mapping[str, Any], latency_given: bool) -> dict[str, Any]:
    """``config`` without the entries a resumption may change (``UNCOMPARED_CONFIG_KEYS``), and without
    λ unless it was given (``latency_given``): a calibrated λ differs in every process and a resumed
    run reuses the saved one; a cost model's λ is compared as part of the timing."""
    kept = {key: value for key, value in config.items() if key not in UNCOMPARED_CONFIG_KEYS}
    if not latency_given:
        kept.pop("baseline_latency_seconds", None)
    return kept


ADDED_CONFIG_ENTRIES = {"method_settings": None, "optimizer": "sgd"}
"""config.json entries added after runs may have started, with the value that means what a config without
them meant (no named method settings; SGD): a run started before they existed still resumes."""


def config_differences(saved: Mapping[str, Any], current: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted names of the entries where two configs differ (nested mappings compared entry by entry; an entry
    of :data:`ADDED_CONFIG_ENTRIES` missing from ``saved`` counts as its value there)."""
    differences = []
    for key in sorted(set(saved) | set(current), key=str):
        name = f"{prefix}{key}"
        before, after = saved.get(key, ADDED_CONFIG_ENTRIES.get(key)), current.get(key)
        if isinstance(before, Mapping) and isinstance(after, Mapping):
            differences += config_differences(before, after, f"{name}.")
        elif before != after:
            differences.append(name)
    return differences


def _shown(differences: list[str]) -> str:
    return ", ".join(differences[:5]) + (f" and {len(differences) - 5} more" if len(differences) > 5 else "")


def _differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    given = saved.get("baseline_latency_source") == "given"
    return config_differences(comparable_config(saved, given), comparable_config(current, given))


def check_same_run(run_dir: Path, saved: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """ValueError (one line naming what differs) unless ``current`` (a fresh config without λ) is the
    config of the unfinished run in ``run_dir``."""
    differences = _differences(saved, current)
    if differences:
        raise ValueError(
            f"run folder {str(run_dir)!r} holds an unfinished run of another command ({_shown(differences)} differ); "
            "repeat its command to resume it, pass --overwrite to start over, or choose another --name"
        )


def check_checkpoint_model(run_dir: Path, checkpoint: Checkpoint, digest: str) -> None:
    """ValueError (one line) when the model loaded to resume the run in ``run_dir`` (its
    ``model_sha256``: ``digest``) is not the one ``checkpoint``'s run started from."""
    saved = checkpoint.extra.get("model_sha256")
    if saved != digest:
        raise ValueError(
            f"checkpoint {str(Path(run_dir) / CHECKPOINT_FILE)!r} was written with other model weights "
            f"(sha256 {str(saved)[:12]}…, "
            f"now {digest[:12]}…); resume with the weights the run started from, or pass --overwrite to start over"
        )


def check_checkpoint_config(run_dir: Path, checkpoint: Checkpoint, current: Mapping[str, Any]) -> None:
    """ValueError (one line naming what differs) unless ``checkpoint`` was written by the command of
    ``current`` (a fresh config without λ), e.g. when a checkpoint of another run was copied there."""
    differences = _differences(checkpoint.config_dict(), current)
    if differences:
        raise ValueError(
            f"checkpoint {str(Path(run_dir) / CHECKPOINT_FILE)!r} was written by another command "
            f"({_shown(differences)} differ); "
            "repeat that command to resume it, or pass --overwrite to start over"
        )


def check_checkpoint_claims(run_dir: Path, checkpoint: Checkpoint, labels: Sequence[str], end: int | None) -> None:
    """ValueError (one line naming the checkpoint file, what is wrong and how to start over) unless
    ``checkpoint`` can resume the run in ``run_dir`` as it is: it holds the states and records of the
    run's methods (``labels``, in order); its position (batches <= samples) is not beyond ``end``, the
    samples of the run's stream (None: unknown); each records file holds the rows the checkpoint says
    (``tta_eval.run_folder.checkpointed_rows``), batches 0, 1, … no further than its position (a method
    whose rows wait in a protocol's queue may be behind it); its random states have the form
    ``check_rng_states`` accepts. Reads the records files, changes nothing: a resumption checks this
    before it cuts the records or restores a file."""
    try:
        for entry in ("methods", "runners", "records"):
            saved = list(getattr(checkpoint, entry))
            if saved != list(labels):
                raise ValueError(f"it holds the {entry} of methods {', '.join(saved)}, not {', '.join(labels)}")
        batches, samples = checkpoint.batches, checkpoint.samples
        if batches > samples:
            raise ValueError(f"its position ({batches:,} batches, {samples:,} samples) has more batches than samples")
        if end is not None and samples > end:
            raise ValueError(f"its position (sample {samples:,}) is beyond the stream's end (sample {end:,})")
        for label, size in checkpoint.records.items():
            if not is_int_between(size, 0):
                raise ValueError(f"its records size of method {label} is {size!r}, not a number of bytes")
            rows, covered = checkpointed_rows(run_dir, label, size)
            if rows > batches or covered > samples:
                raise ValueError(
                    f"records file {str(records_path(run_dir, label))!r} holds {rows:,} batches up to sample "
                    f"{covered:,} at the checkpoint, beyond its position ({batches:,} batches, {samples:,} samples)"
                )
        check_rng_states(checkpoint.rng)
    except ValueError as error:
        raise ValueError(
            f"checkpoint {str(Path(run_dir) / CHECKPOINT_FILE)!r} cannot resume this run: {error}; "
            "delete it or pass --overwrite to start the run over"
        ) from None


def _restore_config(run_dir: Path, current: Mapping[str, Any], labels: Sequence[str], end: int | None) -> bool:
    """Write config.json back from the checkpoint when ``run_dir`` holds a checkpoint but no config.json
    (deleted), after checking the checkpoint was written by the command of ``current`` (a fresh config
    without λ) and can resume the run of ``labels`` up to ``end`` (``check_checkpoint_claims``); True
    when it did.
    ValueError (one line saying what is wrong and how to go on) when the checkpoint cannot be used."""
    run_dir = Path(run_dir)
    if (run_dir / CONFIG_FILE).exists() or not (run_dir / CHECKPOINT_FILE).is_file():
        return False
    try:
        checkpoint = read_checkpoint(run_dir)
    except ValueError as error:
        raise ValueError(f"run folder {str(run_dir)!r} has no {CONFIG_FILE} to resume from, and {error}") from None
    if checkpoint is None:
        return False
    check_checkpoint_config(run_dir, checkpoint, current)
    check_checkpoint_claims(run_dir, checkpoint, labels, end)
    write_text_atomic(run_dir / CONFIG_FILE, checkpoint.config)
    return True
