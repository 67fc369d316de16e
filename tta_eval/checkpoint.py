"""Checkpoints of a tta-eval run: what is saved, the atomic write, and whether a command may resume a run.

A checkpoint is one file in the run folder (``tta_eval.run_folder.CHECKPOINT_FILE``), written at a
batch boundary by the protocol machinery (``tta_eval.protocols.execution.lockstep``) every
``every`` samples. It holds, as one ``torch.save`` pickle:

- ``methods``: every method module itself (model, optimiser, EMA teachers, memory banks, filter
  counters, reset-policy state and ``torch.Generator``s: they are attributes of the modules);
- ``runners``, ``episodes``, ``protocol``: the state of each method's runner (pending reset,
  warm-up done, frozen copy), of the episode tracker and of the protocol (Alfarra's pending skips,
  Tempora's queues, clocks and budgets);
- ``position``: batches and samples of the stream consumed;
- ``rng``: the global random states (torch, CUDA when present, numpy, python);
- ``records``: the size in bytes of each records CSV at the checkpoint (flushed and fsynced first);
- ``extra``: what the caller adds (``tta_eval.experiment``: λ and its calibration).

The file is written to a temporary name next to it, fsynced and renamed over the previous one, then
the folder is fsynced: a kill at any moment leaves the previous checkpoint or the new one, never a
partial file. Checkpoints are pickles: load only your own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch

from tta_eval.run_folder import CHECKPOINT_FILE

logger = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1
"""Version of the checkpoint's layout; a file of another version is refused."""

DEFAULT_CHECKPOINT_EVERY = 100_000
"""Samples between checkpoints when ``--checkpoint-every`` is not given (75 per 7.5M-image CCC stream)."""

UNCOMPARED_CONFIG_KEYS = ("choices", "baseline_latency_source", "calibration")
"""config.json entries that may differ between the run and its resumption (notes; how λ was obtained)."""


def rng_states() -> dict[str, Any]:
    """The global random states: torch (CPU and, when available, every CUDA device), numpy, python."""
    states: dict[str, Any] = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: Mapping[str, Any]) -> None:
    """Set the global random states saved by ``rng_states``."""
    torch.set_rng_state(states["torch"].cpu())
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([state.cpu() for state in states["cuda"]])


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def write_checkpoint(path: Path, payload: Mapping[str, Any]) -> int:
    """Write ``payload`` with ``torch.save`` to ``path`` atomically (temporary file, fsync, rename,
    fsync of the folder); returns the file's size in bytes. The temporary is removed on error."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with open(temporary, "wb") as handle:
            torch.save(dict(payload), handle)
            handle.flush()
            os.fsync(handle.fileno())
            size = handle.tell()
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    _fsync_folder(path.parent)
    return size


def read_checkpoint(run_dir: Path, device: str | torch.device = "cpu") -> dict[str, Any] | None:
    """The checkpoint of ``run_dir`` (tensors on ``device``), or None when it has none; ValueError for an
    unreadable file or one of another format."""
    path = Path(run_dir) / CHECKPOINT_FILE
    if not path.is_file():
        return None
    try:
        payload = torch.load(path, map_location=device, weights_only=False)
    except Exception as error:  # noqa: BLE001 - any unpickling failure means the same to the user
        raise ValueError(f"checkpoint {str(path)!r} cannot be read ({type(error).__name__}: {error}); pass --overwrite to start over") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"checkpoint {str(path)!r} is not a tta-eval checkpoint of format {CHECKPOINT_FORMAT}; pass --overwrite to start over")
    return payload


def remove_checkpoint(run_dir: Path) -> None:
    """Delete the checkpoint of a finished run (and a temporary one a kill left behind)."""
    for name in (CHECKPOINT_FILE, f".{CHECKPOINT_FILE}.tmp"):
        (Path(run_dir) / name).unlink(missing_ok=True)


def comparable_config(config: Mapping[str, Any], latency_given: bool) -> dict[str, Any]:
    """``config`` without the entries a resumption may change (``UNCOMPARED_CONFIG_KEYS``), and without
    λ unless it was given (``latency_given``): a calibrated λ differs in every process and a resumed
    run reuses the saved one; a cost model's λ is compared as part of the timing."""
    kept = {key: value for key, value in config.items() if key not in UNCOMPARED_CONFIG_KEYS}
    if not latency_given:
        kept.pop("baseline_latency_seconds", None)
    return kept


def config_differences(saved: Mapping[str, Any], current: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted names of the entries where two configs differ (nested mappings compared entry by entry)."""
    differences = []
    for key in sorted(set(saved) | set(current), key=str):
        name = f"{prefix}{key}"
        before, after = saved.get(key), current.get(key)
        if isinstance(before, Mapping) and isinstance(after, Mapping):
            differences += config_differences(before, after, f"{name}.")
        elif before != after:
            differences.append(name)
    return differences


def check_same_run(run_dir: Path, saved: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """ValueError (one line naming what differs) unless ``current`` (a fresh config without λ) is the
    config of the unfinished run in ``run_dir``."""
    given = saved.get("baseline_latency_source") == "given"
    differences = config_differences(comparable_config(saved, given), comparable_config(current, given))
    if differences:
        shown = ", ".join(differences[:5]) + (f" and {len(differences) - 5} more" if len(differences) > 5 else "")
        raise ValueError(
            f"run folder {str(run_dir)!r} holds an unfinished run of another command ({shown} differ); "
            "repeat its command to resume it, pass --overwrite to start over, or choose another --name"
        )


class Checkpointer:
    """Writes a run's checkpoints every ``every`` samples (> 0).

    run_dir: the run folder; records: label → the open records file of each method (flushed and
    fsynced before each checkpoint, their sizes saved); extra: what every checkpoint also carries;
    start: samples already consumed (a resumed run). The protocol machinery calls ``due`` at each
    batch boundary and ``save`` when it returns True.
    """

    def __init__(self, run_dir: Path, every: int, records: Mapping[str, TextIO], extra: Mapping[str, Any] | None = None, start: int = 0) -> None:
        if every <= 0:
            raise ValueError(f"checkpoint interval must be a positive number of samples, got {every!r}")
        self.path = Path(run_dir) / CHECKPOINT_FILE
        self.every = every
        self._records = records
        self._extra = dict(extra or {})
        self._next = (start // every + 1) * every
        self.writes: list[tuple[int, float]] = []
        """(bytes, seconds) of every checkpoint written by this object."""

    def due(self, samples: int) -> bool:
        """True when ``samples`` (consumed so far) reached the next checkpoint."""
        return samples >= self._next

    def save(self, state: Mapping[str, Any], samples: int) -> None:
        """Flush and fsync the records, then write ``state`` (methods, runners, protocol, position)
        with the records' sizes, the global random states and the extra entries."""
        started = time.perf_counter()
        sizes = {}
        for label, handle in self._records.items():
            handle.flush()
            os.fsync(handle.fileno())
            sizes[label] = os.fstat(handle.fileno()).st_size
        payload = {"format": CHECKPOINT_FORMAT, **state, "rng": rng_states(), "records": sizes, "extra": self._extra}
        size = write_checkpoint(self.path, payload)
        self._next = (samples // self.every + 1) * self.every
        self.writes.append((size, time.perf_counter() - started))
        logger.info("checkpoint at sample %d: %.1f MB in %.2f s", samples, size / 1e6, self.writes[-1][1])
