"""The run folder and the sweep folder: their layout, and every read and write of them.

Run folder (``<output_root>/<run_name>/``), written by ``tta_eval.experiment.run_experiment``:
  config.json        resolved settings: stream, model, every method's full config, protocol, timing, versions
  records/<label>.csv one row per batch and method with the timing trace (see ``tta_eval.records``)
  summary.json       per method: accuracy, windowed accuracy, per-domain accuracy, collapse, resets,
                     protocol scores; the timing mode and λ; written last, with ``status`` and the
                     sha256 of config.json (``run_status``)
  costs.json         measured runs with λ: each method's mean e/λ and ℓ/λ (a reusable cost model)
  accuracy.png/.svg  windowed accuracy over samples, the source model dashed
  checkpoint.pt      while the run goes: everything needed to resume it (``tta_eval.checkpoint``);
                     removed when the run completes
  .tta-eval.lock     while the run goes: the lock (``lock_run_folder``) naming the process writing it

Sweep folder (``<output_root>/<name>/``), written by ``tta_eval.sweep.run_sweep``: ``runs/<scenario>/``
run folders, ``results.csv`` (one row per scenario, domain and method), ``results.md``,
``sweep.json``, ``best_method.png/.svg`` and ``utility_<protocol>.png/.svg``.

Locking: a run (and a sweep) holds an exclusive lock on its folder (``ccc.folder_lock``, as
``ccc-generate`` does) from before it looks at the folder until it ends, so a second run into the
same folder stops at once with one line naming the first; the OS releases the lock of a killed run.

Completeness: a folder with config.json and no summary.json did not finish (killed, or its disk
filled up); a summary with ``status`` "stopped" covers part of the stream; ``load_run`` accepts
only complete runs of their own config.
"""

from __future__ import annotations

import collections
import contextlib
import csv
import glob
import hashlib
import io
import json
import math
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from ccc.folder_lock import FolderInUseError, FolderLock
from tta_eval.records import RECORD_COLUMNS

CONFIG_FILE = "config.json"
SUMMARY_FILE = "summary.json"
RECORDS_FOLDER = "records"
COSTS_FILE = "costs.json"
CHECKPOINT_FILE = "checkpoint.pt"
LOCK_FILE = ".tta-eval.lock"
"""The lock file of a run or sweep folder while a process writes it (removed when it ends)."""
PLOT_STEM = "accuracy"
PLOT_SUFFIXES = (".png", ".svg")
RUN_COMPLETE = "complete"
"""``status`` of a run folder's summary.json when every batch of the stream was recorded."""
RUN_STOPPED = "stopped"
"""``status`` of a run that ended early (an error, an interrupt): its numbers cover part of the stream."""

SWEEP_RUNS_FOLDER = "runs"
SWEEP_RESULTS_CSV = "results.csv"
SWEEP_RESULTS_MARKDOWN = "results.md"
SWEEP_FILE = "sweep.json"
BEST_METHOD_STEM = "best_method"
UTILITY_STEM = "utility_"
"""A sweep's utility plots are ``utility_<protocol>.png/.svg``."""

GLOB_CHARACTERS = frozenset("*?[")


def safe_file_name(text: str) -> str:
    """``text`` with every character outside [A-Za-z0-9._=+-] replaced by '_'."""
    return re.sub(r"[^A-Za-z0-9._=+-]", "_", text).strip("._")


def records_path(run_dir: Path, label: str) -> Path:
    """Where a run folder keeps the records of method ``label``."""
    return run_dir / RECORDS_FOLDER / f"{safe_file_name(label)}.csv"


def open_records(run_dir: Path, label: str, keep_bytes: int | None = None) -> TextIO:
    """The records file of method ``label``, opened for writing with line buffering: every row
    reaches the file when written, so a killed run leaves its rows. keep_bytes: resume a file,
    cut to its first ``keep_bytes`` bytes (the rows a checkpoint covers, checked beforehand by
    ``checkpointed_rows``), and append after them (None: a new, empty file)."""
    path = records_path(run_dir, label)
    if keep_bytes is None:
        return open(path, "w", newline="", buffering=1)
    with open(path, "r+b") as handle:
        handle.truncate(keep_bytes)
    return open(path, "a", newline="", buffering=1)


def checkpointed_rows(run_dir: Path, label: str, size: int) -> tuple[int, int]:
    """The rows in the first ``size`` bytes (>= 0) of method ``label``'s records file, the part a
    checkpoint covers: (rows, the sample their last row ends at; 0 without rows). Reads the file,
    changes nothing. ValueError (one line naming the file) unless those bytes are the header and whole
    rows of batches 0, 1, … in order: a missing or shorter file, no header, a cut inside a row, a
    malformed last row."""
    path = records_path(run_dir, label)
    if not path.is_file():
        raise ValueError(f"records file {str(path)!r} is missing")
    found = path.stat().st_size
    if found < size:
        raise ValueError(f"records file {str(path)!r} is {found:,} bytes, shorter than its {size:,} at the checkpoint")
    with open(path, "rb") as handle:
        head = handle.read(size)
    if not head.endswith(b"\n"):
        where = "has no header" if not head else f"ends inside a row (at byte {size:,})"
        raise ValueError(f"records file {str(path)!r} {where} at the checkpoint")
    try:
        reader = csv.reader(io.StringIO(head.decode(), newline=""))
        if tuple(next(reader)) != RECORD_COLUMNS:
            raise ValueError(f"its header is not {', '.join(RECORD_COLUMNS)}")
        tail = collections.deque(enumerate(reader, 1), maxlen=1)
        if not tail:
            return 0, 0
        rows, last = tail[0]
        row = dict(zip(RECORD_COLUMNS, last, strict=True))
        index, end = int(row["batch_index"]), int(row["sample_start"]) + int(row["batch_size"])
    except (ValueError, csv.Error) as error:
        reason = " ".join(str(error).split())
        raise ValueError(f"records file {str(path)!r} is not a file of records at the checkpoint: {reason}") from None
    if index != rows - 1:
        raise ValueError(f"records file {str(path)!r} holds {rows:,} rows, the last of batch {index:,}")
    return rows, end


def file_sha256(path: Path) -> str:
    """sha256 (hex) of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON (NaN written as null), atomically: a temporary file next to
    ``path`` renamed over it, so ``path`` is never half written (a full disk leaves the old file or none)."""
    write_text_atomic(Path(path), json.dumps(_replace_nan(data), indent=2) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed over it; the temporary is removed on error."""
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        temporary.write_text(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def _replace_nan(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _replace_nan(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_replace_nan(item) for item in value]
    return value


def _check_no_file_on_the_way(folder: Path, kind: str) -> None:
    """ValueError when ``folder`` or a folder above it is an existing file."""
    for part in (*reversed(folder.parents), folder):
        if part.exists() and not part.is_dir():
            raise ValueError(
                f"{kind} folder {str(folder)!r}: {str(part)!r} is an existing file, not a folder; "
                "choose another --out or --name"
            )


def _holds_files(folder: Path) -> bool:
    """Whether ``folder`` exists and holds anything besides its lock file."""
    return folder.is_dir() and any(entry.name != LOCK_FILE for entry in folder.iterdir())


@contextlib.contextmanager
def lock_run_folder(folder: Path, kind: str = "run") -> Iterator[Path]:
    """Hold an exclusive lock on the run (or sweep: ``kind``) folder ``folder``, created if needed,
    while the block runs; yields it. The lock is ``ccc.folder_lock``'s (the folder itself and
    :data:`LOCK_FILE`, which names this process; the OS releases it if the process dies). On exit
    the lock file is removed, and so is the folder if this call created it and it stayed empty.

    Raises ValueError naming the holder when another process (or another lock of this one) writes
    the folder, and when a path on the way is a file.
    """
    _check_no_file_on_the_way(folder, kind)
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        lock = FolderLock.acquire(folder, LOCK_FILE)
    except FolderInUseError as error:
        holder = error.holder or "another process"
        raise ValueError(
            f"{kind} folder {str(folder)!r} is being written by another tta-eval {kind} ({holder}); "
            "wait for it to end, "
            "or choose another --name"
        ) from None
    with lock:
        try:
            yield folder
        finally:
            (folder / LOCK_FILE).unlink(missing_ok=True)
            if created:
                with contextlib.suppress(OSError):
                    folder.rmdir()  # only when empty: a run that stopped before writing anything


def check_run_folder(run_dir: Path, overwrite: bool, resume: bool = False) -> Path:
    """``run_dir``, after checking it can become a run folder; ValueError if a path on the way is a
    file, or if it holds files (its lock file aside) and ``overwrite`` is not set (nothing is
    changed). resume: an unfinished run (``is_unfinished_run``) is accepted too (the caller resumes it)."""
    _check_no_file_on_the_way(run_dir, "run")
    if _holds_files(run_dir) and not overwrite and not (resume and is_unfinished_run(run_dir)):
        raise ValueError(f"run folder {str(run_dir)!r} already exists; choose another --name or pass --overwrite")
    return run_dir


def is_unfinished_run(run_dir: Path) -> bool:
    """True for a run folder whose run did not complete: config.json without summary.json (killed),
    or a summary with status "stopped" (an error or an interrupt)."""
    if not (run_dir / CONFIG_FILE).is_file():
        return False
    summary_path = run_dir / SUMMARY_FILE
    if not summary_path.is_file():
        return True
    try:
        return json.loads(summary_path.read_text()).get("status") == RUN_STOPPED
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return False


def read_config(run_dir: Path) -> dict[str, Any]:
    """config.json of ``run_dir``; ValueError naming it when it is unreadable."""
    path = run_dir / CONFIG_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{str(path)!r} cannot be read ({error}); pass --overwrite to start over") from None


def clear_run_folder(run_dir: Path) -> None:
    """Remove every output a previous run left in ``run_dir`` (summary first: the folder then reads as
    unfinished until the new run completes), and create it with its records folder."""
    outputs = [
        SUMMARY_FILE,
        CONFIG_FILE,
        COSTS_FILE,
        CHECKPOINT_FILE,
        f".{CHECKPOINT_FILE}.tmp",
        *(PLOT_STEM + suffix for suffix in PLOT_SUFFIXES),
    ]
    for name in outputs:
        (run_dir / name).unlink(missing_ok=True)
    if (run_dir / RECORDS_FOLDER).is_dir():
        for stale in (run_dir / RECORDS_FOLDER).glob("*.csv"):
            stale.unlink()
    (run_dir / RECORDS_FOLDER).mkdir(parents=True, exist_ok=True)


def write_config(run_dir: Path, config: dict[str, Any]) -> None:
    """Write the run's resolved settings (config.json)."""
    write_json(run_dir / CONFIG_FILE, config)


def run_status(run_dir: Path, stopped: str | None) -> dict[str, Any]:
    """The summary's completeness fields: status ("complete", or "stopped" with the reason
    ``stopped``) and config_sha256, the sha256 of the run's config.json."""
    return {
        "status": RUN_STOPPED if stopped is not None else RUN_COMPLETE,
        "stopped": stopped,
        "config_sha256": file_sha256(run_dir / CONFIG_FILE),
    }


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    """Write summary.json (last of a run's outputs; with ``run_status``'s fields)."""
    write_json(run_dir / SUMMARY_FILE, summary)


@dataclass(frozen=True)
class RunResult:
    """A finished run folder: its name, resolved config and summary."""

    name: str
    path: Path
    config: dict[str, Any]
    summary: dict[str, Any]


def load_run(run_dir: Path) -> RunResult:
    """Read config.json and summary.json of a complete run folder.

    ValueError (one line naming the folder and why) for a folder that is not a run, a run that did
    not finish (no summary.json next to config.json, or ``status`` other than "complete"), and a
    summary written for another config.json (its ``config_sha256`` differs: the folder was
    overwritten by a run that did not finish). Summaries written before ``status`` existed are
    accepted unless they record that the run stopped.
    """
    run_dir = Path(run_dir)
    summary_path = run_dir / SUMMARY_FILE
    config_path = run_dir / CONFIG_FILE
    if not summary_path.is_file():
        if config_path.is_file():
            raise ValueError(
                f"run folder {str(run_dir)!r} is incomplete: it has {CONFIG_FILE} but no {SUMMARY_FILE} "
                "(the run was killed or could not write its results); run it again with --overwrite"
            )
        raise ValueError(f"{str(run_dir)!r} is not a tta-eval run folder (no {SUMMARY_FILE})")
    try:
        summary = json.loads(summary_path.read_text())
        config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(
            f"run folder {str(run_dir)!r} has an unreadable {SUMMARY_FILE} or {CONFIG_FILE}: {error}"
        ) from None
    status = summary.get("status", RUN_COMPLETE if not summary.get("stopped") else RUN_STOPPED)
    if status != RUN_COMPLETE:
        raise ValueError(
            f"run folder {str(run_dir)!r} is incomplete: it stopped after {summary.get('samples', '?')} samples "
            f"({summary.get('stopped') or status}); its numbers cover part of the stream"
        )
    expected = summary.get("config_sha256")
    if expected is not None and (not config_path.is_file() or file_sha256(config_path) != expected):
        raise ValueError(
            f"run folder {str(run_dir)!r} is inconsistent: its {SUMMARY_FILE} was written for another {CONFIG_FILE} "
            "(the folder was overwritten by a run that did not finish); run it again with --overwrite"
        )
    return RunResult(run_dir.name, run_dir, config, summary)


def find_run_folders(paths: Sequence[Path]) -> list[Path]:
    """The run folders named by ``paths``: run folders themselves, folders holding run folders at any
    depth (sorted), or glob patterns (``results/*/demo_*``) of either; each folder once, in order.

    A run folder is one holding ``summary.json`` or ``config.json``. Raises ValueError naming a path
    that does not exist, matches nothing, or holds no run folder.
    """
    found: dict[Path, None] = {}
    for path in paths:
        text = str(path)
        candidates = [Path(match) for match in sorted(glob.glob(text))] if GLOB_CHARACTERS & set(text) else [path]
        if not candidates:
            raise ValueError(f"{text!r} matches no file or folder")
        for candidate in candidates:
            if not candidate.exists():
                raise ValueError(f"{text!r} does not exist")
            if _is_run_folder(candidate):
                found[candidate] = None
                continue
            nested = (
                sorted({marker.parent for name in (SUMMARY_FILE, CONFIG_FILE) for marker in candidate.rglob(name)})
                if candidate.is_dir()
                else []
            )
            if not nested:
                raise ValueError(f"{str(candidate)!r} is not a tta-eval run folder (no {SUMMARY_FILE}) and holds none")
            found.update(dict.fromkeys(nested))
    return list(found)


def _is_run_folder(path: Path) -> bool:
    return path.is_dir() and ((path / SUMMARY_FILE).is_file() or (path / CONFIG_FILE).is_file())


def prepare_sweep_folder(sweep_dir: Path, overwrite: bool) -> Path:
    """``sweep_dir``, checked and with the tables and plots of a previous sweep removed (they must not
    sit next to the runs of this one if it stops); ValueError for a file in its place, or an existing
    non-empty folder without ``overwrite``."""
    if sweep_dir.exists() and not sweep_dir.is_dir():
        raise ValueError(
            f"sweep folder {str(sweep_dir)!r} is an existing file, not a folder; choose another --out or --name"
        )
    if _holds_files(sweep_dir) and not overwrite:
        raise ValueError(f"sweep folder {str(sweep_dir)!r} already exists; choose another --name or pass --overwrite")
    if sweep_dir.is_dir():
        patterns = (
            SWEEP_FILE,
            SWEEP_RESULTS_CSV,
            SWEEP_RESULTS_MARKDOWN,
            f"{BEST_METHOD_STEM}.*",
            f"{UTILITY_STEM}*.*",
        )
        for pattern in patterns:
            for stale in sweep_dir.glob(pattern):
                stale.unlink()
    return sweep_dir
