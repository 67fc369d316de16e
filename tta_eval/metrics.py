"""Metrics computed from per-batch records (never from models).

Accuracies are fractions in [0, 1]. Windows are attributed at batch granularity: a batch belongs to
the window in which its first sample falls, so with W a multiple of the batch size windows are exact.
Each protocol's own scores (Alfarra et al., Tempora) live in its module in ``tta_eval.protocols`` and
are built from the helpers at the end of this module (per-batch accuracy a_i, domain masks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ccc.validation import check_positive_int
from tta_eval.records import RecordTable

DEFAULT_WINDOW = 10_000
DEFAULT_COLLAPSE_SPAN = 50_000


def overall_accuracy(table: RecordTable) -> float:
    """Top-1 accuracy in [0, 1] over all samples of ``table`` (NaN if empty)."""
    return table.total_correct / table.total_samples if table.total_samples else math.nan


@dataclass(frozen=True)
class WindowedAccuracy:
    """Accuracy in consecutive windows of ``window`` samples.

    sample_end[i]: samples seen at the end of window i (x axis of the paper's plots);
    samples[i]: samples in window i (the last window may be shorter); accuracy[i] in [0, 1].
    """

    window: int
    sample_end: NDArray[np.int64]
    samples: NDArray[np.int64]
    accuracy: NDArray[np.float64]

    def to_json(self) -> dict[str, object]:
        """JSON-serialisable form."""
        return {
            "window": self.window,
            "sample_end": self.sample_end.tolist(),
            "samples": self.samples.tolist(),
            "accuracy": [round(float(value), 6) for value in self.accuracy],
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> WindowedAccuracy:
        """Inverse of ``to_json``."""
        return cls(
            window=int(data["window"]),
            sample_end=np.asarray(data["sample_end"], dtype=np.int64),
            samples=np.asarray(data["samples"], dtype=np.int64),
            accuracy=np.asarray(data["accuracy"], dtype=np.float64),
        )


def windowed_accuracy(table: RecordTable, window: int = DEFAULT_WINDOW) -> WindowedAccuracy:
    """Accuracy per window of ``window`` (>= 1) samples."""
    check_positive_int("window", window)
    sample_start = table.column("sample_start")
    sizes = table.column("batch_size")
    correct = table.column("correct")
    if sizes.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return WindowedAccuracy(window, empty, empty, np.zeros(0))
    window_index = sample_start // window
    _, first_rows = np.unique(window_index, return_index=True)
    samples = np.add.reduceat(sizes, first_rows)
    correct_per_window = np.add.reduceat(correct, first_rows)
    sample_end = np.cumsum(samples) + sample_start[0]
    return WindowedAccuracy(window, sample_end.astype(np.int64), samples.astype(np.int64), correct_per_window / samples)


@dataclass(frozen=True)
class DomainAccuracy:
    """Accuracy in [0, 1] over the ``samples`` samples of one domain; ``first_sample`` where it first appears."""

    accuracy: float
    samples: int
    first_sample: int


def per_domain_accuracy(table: RecordTable) -> dict[str, DomainAccuracy]:
    """Accuracy per value of the recorded domain, in order of first appearance; {} without domains."""
    domains = table.column("domain")
    if domains.size == 0 or not any(domains):
        return {}
    sizes = table.column("batch_size")
    correct = table.column("correct")
    starts = table.column("sample_start")
    result: dict[str, DomainAccuracy] = {}
    for domain in dict.fromkeys(domains.tolist()):
        mask = domains == domain
        samples = int(sizes[mask].sum())
        result[domain] = DomainAccuracy(float(correct[mask].sum() / samples), samples, int(starts[mask][0]))
    return result


@dataclass(frozen=True)
class DomainSegment:
    """A stretch of consecutive batches of one domain: samples first_sample … end_sample - 1."""

    domain: str
    first_sample: int
    end_sample: int

    def to_json(self) -> dict[str, object]:
        """JSON-serialisable form."""
        return {"domain": self.domain, "first_sample": self.first_sample, "end_sample": self.end_sample}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DomainSegment:
        """Inverse of ``to_json``."""
        return cls(str(data["domain"]), int(data["first_sample"]), int(data["end_sample"]))


def domain_segments(table: RecordTable) -> list[DomainSegment]:
    """The recorded domains as consecutive stretches, in stream order (a domain that comes back gets
    a new segment, e.g. a corruption pair visited twice); [] without domains."""
    domains = table.column("domain")
    if domains.size == 0 or not any(domains):
        return []
    starts = table.column("sample_start")
    ends = starts + table.column("batch_size")
    changes = [0, *(index for index in range(1, domains.size) if domains[index] != domains[index - 1]), domains.size]
    return [
        DomainSegment(str(domains[first]), int(starts[first]), int(ends[last - 1]))
        for first, last in zip(changes[:-1], changes[1:])
    ]


@dataclass(frozen=True)
class CollapseReport:
    """Result of collapse detection.

    collapsed: True if the windowed accuracy stayed below the reference for at least ``span``
    consecutive samples; sample_index: first sample of the first such stretch (None otherwise);
    below_samples: length in samples of that stretch (0 otherwise); reference: "source" or the
    fixed accuracy used; message: one human-readable sentence.
    """

    collapsed: bool
    sample_index: int | None
    below_samples: int
    reference: str
    span: int
    message: str

    def to_json(self) -> dict[str, object]:
        """JSON-serialisable form."""
        return {
            "collapsed": self.collapsed,
            "sample_index": self.sample_index,
            "below_samples": self.below_samples,
            "reference": self.reference,
            "span": self.span,
            "message": self.message,
        }


def detect_collapse(
    curve: WindowedAccuracy,
    reference: WindowedAccuracy | float,
    span: int = DEFAULT_COLLAPSE_SPAN,
    reference_name: str = "source",
) -> CollapseReport:
    """First sample after which ``curve`` stays below ``reference`` for at least ``span`` samples.

    reference: the reference model's windowed accuracy on the same stream and window (compared
    window by window) or a fixed accuracy in [0, 1]. A stretch is a run of consecutive windows
    whose accuracy is strictly below the reference; its length counts the samples in those windows.
    Raises ValueError if a reference curve uses another window or another sample grid.
    """
    check_positive_int("span", span)
    if isinstance(reference, WindowedAccuracy):
        if reference.window != curve.window:
            raise ValueError(f"reference window must equal the curve's ({curve.window}), got {reference.window}")
        length = min(reference.accuracy.size, curve.accuracy.size)
        if not np.array_equal(reference.sample_end[:length], curve.sample_end[:length]):
            raise ValueError("reference curve covers other samples than the curve; use the same stream and window")
        threshold = reference.accuracy[:length]
        label = reference_name
    else:
        if not 0.0 <= float(reference) <= 1.0:
            raise ValueError(f"collapse reference accuracy must be in [0, 1], got {reference!r}")
        length = curve.accuracy.size
        threshold = np.full(length, float(reference))
        label = f"{float(reference):.4g}"
    below = curve.accuracy[:length] < threshold
    run_start: int | None = None
    run_samples = 0
    for index in range(length):
        if not below[index]:
            run_start, run_samples = None, 0
            continue
        if run_start is None:
            run_start = index
        run_samples += int(curve.samples[index])
        if run_samples >= span:
            start_sample = int(curve.sample_end[run_start] - curve.samples[run_start])
            stretch = run_samples
            for later in range(index + 1, length):
                if not below[later]:
                    break
                stretch += int(curve.samples[later])
            return CollapseReport(
                True,
                start_sample,
                stretch,
                label,
                span,
                f"collapse at sample {start_sample:,}: windowed accuracy stayed below {label} for {stretch:,} samples",
            )
    return CollapseReport(
        False,
        None,
        0,
        label,
        span,
        f"no collapse observed (windowed accuracy never stayed below {label} for {span:,} samples)",
    )


# --- helpers of the protocols' scores ------------------------------------------------------------------


def batch_accuracy(table: RecordTable) -> NDArray[np.float64]:
    """a_i: fraction of batch i predicted correctly, in [0, 1] (unpredicted batches: 0)."""
    sizes = table.column("batch_size")
    return table.column("correct") / np.maximum(sizes, 1)


def domain_masks(table: RecordTable) -> dict[str, NDArray[np.bool_]]:
    """Recorded domain → boolean mask of its batches, in order of first appearance; {} without domains."""
    domains = table.column("domain")
    if domains.size == 0 or not any(domains):
        return {}
    return {domain: domains == domain for domain in dict.fromkeys(domains.tolist())}


def format_milliseconds(seconds: float) -> str:
    """A time in seconds as milliseconds with 4 significant digits, e.g. 0.02 → "20 ms" (scenario names)."""
    return f"{1e3 * seconds:.4g} ms"
