"""Persisting finished calibration work so that a killed run resumes where it stopped.

A run writes into a work folder (by default ``<out>.work/`` next to the table):

- ``run.json`` — the run's identity (:func:`ccc.calibration.compute.job.run_identity`: image set,
  corruptions, seed, block size, model and weights digest, mode). A restart with different
  arguments is refused with the differing fields named; nothing in the folder is touched.
- ``results.log`` — one line per finished work unit, appended and flushed to disk (``fsync``) as
  soon as the unit finishes: ``<crc32 of the JSON, 8 hex digits> <JSON>\\n``. The JSON is
  ``{"base": [n1, s1], "block": b, "base_correct": c or null, "targets": [[n2, s2, correct], …]}``.
  A record is complete only if its line ends with a newline and its CRC matches, so a kill in the
  middle of a write leaves at most one incomplete last line, which the next start discards (the
  unit is simply computed again). Any other damage is reported, never repaired silently; so is a
  record the run cannot have written (a cell outside its corruptions or grid, a block outside its
  images, more correct predictions than the block has images), as soon as the folder is opened.
- ``lock`` — with the folder itself, held under an exclusive ``flock`` (:mod:`ccc.folder_lock`) while a
  run uses the folder, so two runs cannot write the same results (deleting the file does not free it).

Results are keyed by (cell, block); the order of lines does not matter (Ray finishes units in any
order), and the final table is a function of the keyed results only.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from ccc.calibration.compute.engine import Cell, UnitResult, WorkUnit
from ccc.calibration.table import GRID_SIZE, CalibrationError
from ccc.folder_lock import FolderInUseError, FolderLock

logger = logging.getLogger(__name__)

IDENTITY_FILE = "run.json"
RESULTS_FILE = "results.log"
LOCK_FILE = "lock"


class WorkFolderError(CalibrationError):
    """The work folder belongs to another run, is in use, or is damaged."""


def default_work_folder(out: str | os.PathLike[str]) -> Path:
    """``<out>.work`` next to the table file ``out``."""
    destination = Path(out)
    return destination.with_name(destination.name + ".work")


def encode_record(result: UnitResult) -> bytes:
    """The log line (with CRC and newline) of one finished unit."""
    unit = result.unit
    correct = list(result.correct)
    base_correct = correct.pop(0) if unit.evaluate_base else None
    document = {
        "base": [unit.corruption, unit.severity],
        "block": unit.block,
        "base_correct": base_correct,
        "targets": [[n2, s2, value] for (n2, s2), value in zip(unit.targets, correct)],
    }
    payload = json.dumps(document, separators=(",", ":")).encode("utf-8")
    return b"%08x " % zlib.crc32(payload) + payload + b"\n"


def decode_record(line: bytes) -> list[tuple[Cell, int, int]] | None:
    """``[(cell, block, correct), …]`` of a complete log line, or None if it is incomplete or damaged."""
    if not line.endswith(b"\n") or len(line) < 10 or line[8:9] != b" ":
        return None
    payload = line[9:-1]
    try:
        if int(line[:8], 16) != zlib.crc32(payload):
            return None
        document = json.loads(payload)
        corruption, severity = document["base"]
        block = document["block"]
        unit = WorkUnit(
            corruption,
            severity,
            block,
            document["base_correct"] is not None,
            tuple((n2, s2) for n2, s2, _ in document["targets"]),
        )
        values = ([document["base_correct"]] if unit.evaluate_base else []) + [v for _, _, v in document["targets"]]
    except (ValueError, KeyError, TypeError):
        return None
    return [(cell, block, int(value)) for cell, value in zip(unit.cells(), values)]


class WorkFolder:
    """An opened work folder: the finished results and an append handle (use as a context manager).

    Open with :meth:`open`; :attr:`results` maps ``(cell, block)`` to the number of correct
    predictions; :meth:`append` persists one finished unit; :meth:`close` releases the lock.
    """

    def __init__(self, path: Path, results: dict[tuple[Cell, int], int], log: BinaryIO, lock: FolderLock) -> None:
        self.path = path
        self.results = results
        self._log = log
        self._lock = lock
        self.resumed_records = len(results)

    @classmethod
    def open(cls, path: str | os.PathLike[str], identity: Mapping[str, Any]) -> WorkFolder:
        """Create ``path`` for a run with ``identity``, or reopen it if it holds the same run.

        Raises:
            WorkFolderError: the folder holds another run (differences listed), is locked by a
                running process, or its results are damaged.
        """
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        try:
            lock = FolderLock.acquire(folder, LOCK_FILE)
        except FolderInUseError as error:
            holder = f" ({error.holder})" if error.holder else ""
            raise WorkFolderError(
                f"work folder {folder} is in use by another ccc-calibrate run{holder}; wait for it or stop it"
            ) from None
        try:
            _check_identity(folder, identity)
            results = _read_results(folder / RESULTS_FILE, identity)
            log = open(folder / RESULTS_FILE, "ab")
        except BaseException:
            lock.release()
            raise
        return cls(folder, results, log, lock)

    def append(self, result: UnitResult) -> None:
        """Persist one finished unit (written, flushed and fsynced before returning)."""
        self._log.write(encode_record(result))
        self._log.flush()
        os.fsync(self._log.fileno())
        for cell, value in zip(result.unit.cells(), result.correct):
            self.results[(cell, result.unit.block)] = value

    def close(self) -> None:
        """Close the log and release the lock."""
        self._log.close()
        self._lock.release()

    def remove(self) -> None:
        """Close, then delete the folder (after the table has been written)."""
        self.close()
        shutil.rmtree(self.path)

    def __enter__(self) -> WorkFolder:
        return self

    def __exit__(self, *exception: object) -> None:
        if not self._log.closed:
            self.close()


def _check_identity(folder: Path, identity: Mapping[str, Any]) -> None:
    identity_path = folder / IDENTITY_FILE
    expected = json.loads(json.dumps(dict(identity), sort_keys=True))
    if not identity_path.exists():
        temporary = folder / (IDENTITY_FILE + ".tmp")
        temporary.write_text(json.dumps(expected, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(temporary, identity_path)
        return
    try:
        stored = json.loads(identity_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise WorkFolderError(
            f"work folder {folder}: {IDENTITY_FILE} is unreadable ({error}); delete the folder to start over"
        ) from None
    if stored == expected:
        return
    keys = sorted(set(stored) | set(expected)) if isinstance(stored, dict) else sorted(expected)
    differences = [
        f"{key}: {stored.get(key)!r} there, {expected.get(key)!r} now"
        for key in keys
        if not isinstance(stored, dict) or stored.get(key) != expected.get(key)
    ]
    raise WorkFolderError(
        f"work folder {folder} holds results of a different calibration run ({'; '.join(differences)}). "
        "Rerun with the same arguments to resume it, or choose another --out or --work-folder "
        "(the folder is kept: nothing computed is deleted)"
    )


def _read_results(path: Path, identity: Mapping[str, Any]) -> dict[tuple[Cell, int], int]:
    results: dict[tuple[Cell, int], int] = {}
    if not path.exists():
        return results
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    valid_bytes = 0
    for number, line in enumerate(lines, start=1):
        entries = decode_record(line)
        if entries is None:
            if number == len(lines):
                logger.warning("discarding an incomplete last record of %s (interrupted write)", path)
                with open(path, "r+b") as handle:
                    handle.truncate(valid_bytes)
                break
            raise WorkFolderError(
                f"{path} line {number} is damaged (not an interrupted last write); move the folder away to start over"
            )
        _check_record(entries, identity, path, number)
        _merge(results, entries, path, number)
        valid_bytes += len(line)
    return results


def _check_record(
    entries: Iterable[tuple[Cell, int, int]], identity: Mapping[str, Any], path: Path, number: int
) -> None:
    """Refuse a record that the run of ``identity`` cannot have written: a cell outside its corruptions
    or the 21-step grid, a block outside its image set, or more correct predictions than the block has
    images (checked for the identity fields present: corruptions, image_count, block_size)."""
    corruption_count = len(identity["corruptions"]) if "corruptions" in identity else None
    image_count, block_size = identity.get("image_count"), identity.get("block_size")
    for cell, block, value in entries:
        problem = None
        if any(not -1 <= n < (corruption_count if corruption_count is not None else n + 1) for n in (cell[0], cell[2])):
            problem = f"corruption index outside the run's {corruption_count} corruptions"
        elif any(not 0 <= s < GRID_SIZE for s in (cell[1], cell[3])):
            problem = f"severity index outside 0 … {GRID_SIZE - 1}"
        elif block < 0 or value < 0:
            problem = "a negative block or count"
        elif image_count is not None and block_size is not None:
            images = min(block_size, image_count - block * block_size)
            if images < 1:
                problem = f"block {block} is outside the {image_count} images (blocks of {block_size})"
            elif value > images:
                problem = f"{value} correct predictions in a block of {images} images"
        if problem is not None:
            raise WorkFolderError(
                f"{path} line {number} records an impossible result for cell {tuple(cell)} block {block}: {problem}; "
                "move the folder away to start over"
            )


def _merge(
    results: dict[tuple[Cell, int], int], entries: Iterable[tuple[Cell, int, int]], path: Path, number: int
) -> None:
    for cell, block, value in entries:
        key = (Cell(*cell), block)
        previous = results.setdefault(key, value)
        if previous != value:
            raise WorkFolderError(
                f"{path} line {number} contradicts an earlier record for cell {tuple(cell)} block {block} "
                f"({value} vs {previous} correct); move the folder away to start over"
            )
