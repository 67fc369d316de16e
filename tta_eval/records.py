"""Per-batch records: one row per batch, kept as compact columns and written as CSV.

Every record carries the batch's timing trace (pickup → prediction e and prediction → ready ℓ),
so time-contingent utilities can be recomputed from a saved run. A 7.5M-image run at batch size 64
is about 117,000 rows (a few MB of CSV).
"""

from __future__ import annotations

import array
import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np
from numpy.typing import NDArray

RECORD_COLUMNS = (
    "batch_index",
    "sample_start",
    "batch_size",
    "correct",
    "samples_adapted",
    "loss",
    "nonfinite_loss",
    "reset",
    "seconds",
    "domain",
    "pickup_to_prediction",
    "prediction_to_ready",
    "predicted",
    "adapted",
    "pickup_time",
    "baseline_seconds",
    "relative_speed",
)

LEGACY_RECORD_COLUMNS = RECORD_COLUMNS[:10]
"""Header of record files written before the timing trace existed (still readable)."""


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """What happened on one batch for one method.

    batch_index: 0-based position in the stream; sample_start: samples seen before this batch;
    batch_size: samples in the batch; correct: top-1 correct predictions in [0, batch_size];
    samples_adapted: samples that entered the adaptation loss after filters; loss: adaptation
    loss (NaN if none was computed); nonfinite_loss: the loss was NaN/inf and the update skipped;
    reset: the method was restored to its initial state before this batch (by its own policy or
    the protocol); seconds: time the protocol charged for the batch, e + ℓ (measured wall time of
    the method's call, or the cost model's value in deterministic mode; 0 without a prediction);
    domain: majority value of the domain metadata key in the batch ("" if none).

    Timing trace and protocol columns: pickup_to_prediction: e in seconds, from pickup to the
    prediction; prediction_to_ready: ℓ in seconds, from the prediction until the method is ready
    for the next batch; predicted: the batch got a prediction (False: skipped or not served, all
    its samples count as wrong); adapted: the method's adapting call ran on it (False: a
    non-adapting prediction or none); pickup_time: simulated seconds since the episode's first
    arrival when processing started (Tempora's discrete protocol; NaN elsewhere);
    baseline_seconds: λ_t, the time of a non-adapting forward pass on the batch (Alfarra's
    protocol with measured C; NaN elsewhere); relative_speed: C_t of an adapted batch in Alfarra's
    protocol (0 elsewhere).
    """

    method: str
    batch_index: int
    sample_start: int
    batch_size: int
    correct: int
    samples_adapted: int
    loss: float
    nonfinite_loss: bool
    reset: bool
    seconds: float
    domain: str = ""
    pickup_to_prediction: float = math.nan
    prediction_to_ready: float = math.nan
    predicted: bool = True
    adapted: bool = True
    pickup_time: float = math.nan
    baseline_seconds: float = math.nan
    relative_speed: int = 0


class RecordTable:
    """Column store of one method's BatchRecords (append, then read columns as numpy arrays).

    Memory: 108 bytes per record (six 8-byte integers, six 8-byte floats, four flags, one reference
    to the domain name; each distinct domain name is stored once), about 13 MB for a 7.5M-image
    stream at batch size 64 (plus the lists' over-allocation; 114 bytes measured).
    """

    def __init__(self) -> None:
        self._integers = {
            name: array.array("q")
            for name in ("batch_index", "sample_start", "batch_size", "correct", "samples_adapted", "relative_speed")
        }
        self._flags = {name: array.array("b") for name in ("nonfinite_loss", "reset", "predicted", "adapted")}
        self._floats = {
            name: array.array("d")
            for name in (
                "loss",
                "seconds",
                "pickup_to_prediction",
                "prediction_to_ready",
                "pickup_time",
                "baseline_seconds",
            )
        }
        self._domains: list[str] = []
        self._domain_names: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._domains)

    def append(self, record: BatchRecord) -> None:
        """Add one row."""
        for name, column in self._integers.items():
            column.append(getattr(record, name))
        for name, column in self._flags.items():
            column.append(1 if getattr(record, name) else 0)
        for name, column in self._floats.items():
            column.append(getattr(record, name))
        self._domains.append(self._domain_names.setdefault(record.domain, record.domain))

    def column(self, name: str) -> NDArray:
        """Column ``name`` (one of RECORD_COLUMNS) as a numpy array (bool for flags, str objects for domain)."""
        if name in self._integers:
            return np.frombuffer(self._integers[name], dtype=np.int64).copy() if len(self) else np.zeros(0, np.int64)
        if name in self._flags:
            return np.frombuffer(self._flags[name], dtype=np.int8).astype(bool) if len(self) else np.zeros(0, bool)
        if name in self._floats:
            return np.frombuffer(self._floats[name], dtype=np.float64).copy() if len(self) else np.zeros(0)
        if name == "domain":
            return np.array(self._domains, dtype=object)
        raise ValueError(f"unknown record column {name!r}; columns: {', '.join(RECORD_COLUMNS)}")

    @property
    def total_samples(self) -> int:
        """Samples covered by the records."""
        return int(sum(self._integers["batch_size"]))

    @property
    def total_correct(self) -> int:
        """Correct predictions over all records."""
        return int(sum(self._integers["correct"]))

    def write_csv(self, path: Path) -> None:
        """Write all rows to ``path`` (header = RECORD_COLUMNS)."""
        with open(path, "w", newline="") as handle:
            writer = CsvRecordWriter(handle)
            columns = {name: self.column(name) for name in RECORD_COLUMNS}
            for row in range(len(self)):
                writer.write_row([columns[name][row] for name in RECORD_COLUMNS])

    @classmethod
    def read_csv(cls, path: Path) -> RecordTable:
        """Read a table written by ``write_csv`` or ``CsvRecordWriter``; ValueError on a bad header.

        Files without the timing-trace columns (older runs) are read with NaN times.
        """
        table = cls()
        with open(path, newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if header is None or tuple(header) not in (RECORD_COLUMNS, LEGACY_RECORD_COLUMNS):
                raise ValueError(
                    f"{path} is not a tta_eval record file: header {header}, expected {list(RECORD_COLUMNS)}"
                )
            for values in reader:
                row = dict(zip(header, values))
                table.append(
                    BatchRecord(
                        method="",
                        batch_index=int(row["batch_index"]),
                        sample_start=int(row["sample_start"]),
                        batch_size=int(row["batch_size"]),
                        correct=int(row["correct"]),
                        samples_adapted=int(row["samples_adapted"]),
                        loss=_read_float(row["loss"]),
                        nonfinite_loss=row["nonfinite_loss"] == "1",
                        reset=row["reset"] == "1",
                        seconds=float(row["seconds"]),
                        domain=row["domain"],
                        pickup_to_prediction=_read_float(row.get("pickup_to_prediction", "")),
                        prediction_to_ready=_read_float(row.get("prediction_to_ready", "")),
                        predicted=row.get("predicted", "1") == "1",
                        adapted=row.get("adapted", "1") == "1",
                        pickup_time=_read_float(row.get("pickup_time", "")),
                        baseline_seconds=_read_float(row.get("baseline_seconds", "")),
                        relative_speed=int(row.get("relative_speed", "0") or 0),
                    )
                )
        return table


def _read_float(text: str) -> float:
    return float(text) if text else math.nan


def _float_text(value: float) -> str:
    return "" if value != value else repr(float(value))


def _format(value: object) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "1" if value else "0"
    if isinstance(value, (float, np.floating)):
        return "" if math.isnan(value) else repr(float(value))
    return str(value)


class CsvRecordWriter:
    """Incremental CSV writer of records to an open text file (header written on creation unless
    ``header`` is False: appending to the rows of a resumed run)."""

    def __init__(self, handle: TextIO, header: bool = True) -> None:
        self._writer = csv.writer(handle)
        if header:
            self._writer.writerow(RECORD_COLUMNS)

    def write_row(self, values: list[object]) -> None:
        """Write one row of values in RECORD_COLUMNS order."""
        self._writer.writerow([_format(value) for value in values])

    def write(self, record: BatchRecord) -> None:
        """Write one record (the fast path of ``write_row``: types are known, floats written exactly)."""
        self._writer.writerow(
            (
                record.batch_index,
                record.sample_start,
                record.batch_size,
                record.correct,
                record.samples_adapted,
                _float_text(record.loss),
                "1" if record.nonfinite_loss else "0",
                "1" if record.reset else "0",
                _float_text(record.seconds),
                record.domain,
                _float_text(record.pickup_to_prediction),
                _float_text(record.prediction_to_ready),
                "1" if record.predicted else "0",
                "1" if record.adapted else "0",
                _float_text(record.pickup_time),
                _float_text(record.baseline_seconds),
                record.relative_speed,
            )
        )
