"""Metrics computed from per-batch records (never from models).

Accuracies are fractions in [0, 1]. Windows are attributed at batch granularity: a batch belongs to
the window in which its first sample falls, so with W a multiple of the batch size windows are exact.
The time-contingent scores (Alfarra et al., Tempora) are computed from the same records, with the
per-batch accuracy a_i and the timing trace; Tempora's utilities weight batches equally.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tta_eval.protocols.settings import (
    AlfarraProtocol,
    AmortisedProtocol,
    ContinuousProtocol,
    DiscreteProtocol,
    EpisodeSettings,
)
from tta_eval.protocols.tempora import amortised_utility, decay_factors, discrete_utility, utility_decomposition
from tta_eval.records import RecordTable
from ccc.validation import check_positive_int

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


# --- time-contingent protocols ------------------------------------------------------------------------


def batch_accuracy(table: RecordTable) -> NDArray[np.float64]:
    """a_i: fraction of batch i predicted correctly, in [0, 1] (unpredicted batches: 0)."""
    sizes = table.column("batch_size")
    return table.column("correct") / np.maximum(sizes, 1)


def _domain_masks(table: RecordTable) -> dict[str, NDArray[np.bool_]]:
    domains = table.column("domain")
    if domains.size == 0 or not any(domains):
        return {}
    return {domain: domains == domain for domain in dict.fromkeys(domains.tolist())}


def _milliseconds(seconds: float) -> str:
    return f"{1e3 * seconds:.4g} ms"


def check_trace(table: RecordTable, label: str = "") -> None:
    """ValueError unless every batch was predicted and adapted on and has a timing trace."""
    name = f"method {label!r}: " if label else ""
    if len(table) == 0:
        raise ValueError(f"{name}no records")
    if not (table.column("predicted").all() and table.column("adapted").all()):
        raise ValueError(
            f"{name}continuous utility needs a run in which every batch was predicted and adapted on "
            "(protocol offline or continuous)"
        )
    trace = np.concatenate([table.column("pickup_to_prediction"), table.column("prediction_to_ready")])
    if not np.all(np.isfinite(trace)):
        raise ValueError(f"{name}the records have no timing trace (written by an older tta_eval?)")


def continuous_scores(
    table: RecordTable, baseline_latency: float, thresholds: tuple[float, ...], label: str = ""
) -> list[dict[str, Any]]:
    """Tempora's continuous utility for each threshold T (seconds) from the records' trace.

    Returns per T: scenario, threshold_seconds, utility, mean_accuracy, mean_kappa, covariance
    (population), per_domain (the same per domain, κ computed over the whole stream). ValueError if
    a batch was not predicted and adapted on, or a threshold is not above λ.
    """
    check_trace(table, label)
    accuracy = batch_accuracy(table)
    masks = _domain_masks(table)
    scores = []
    for threshold in thresholds:
        decay = decay_factors(
            table.column("pickup_to_prediction"), table.column("prediction_to_ready"), baseline_latency, threshold
        )
        scores.append(
            {
                "scenario": f"continuous T={_milliseconds(threshold)}",
                "protocol": "continuous",
                "threshold_seconds": threshold,
                **utility_decomposition(accuracy, decay),
                "per_domain": {domain: utility_decomposition(accuracy[mask], decay[mask]) for domain, mask in masks.items()},
            }
        )
    return scores


def alfarra_score(table: RecordTable, protocol: AlfarraProtocol) -> dict[str, Any]:
    """Accuracy under Alfarra et al.'s protocol (utility = accuracy over all samples) and how often
    the method adapted: adapted_batch_fraction, predicted_fraction, mean_relative_speed (mean C_t)."""
    adapted = table.column("adapted")
    speeds = table.column("relative_speed")[adapted]
    per_domain = {
        domain: {"utility": value.accuracy, "accuracy": value.accuracy} for domain, value in per_domain_accuracy(table).items()
    }
    accuracy = overall_accuracy(table)
    return {
        "scenario": f"alfarra η={protocol.speed:g}",
        "protocol": "alfarra",
        "speed": protocol.speed,
        "utility": accuracy,
        "accuracy": accuracy,
        "adapted_batch_fraction": float(adapted.mean()) if adapted.size else math.nan,
        "predicted_fraction": float(table.column("predicted").mean()) if adapted.size else math.nan,
        "mean_relative_speed": float(speeds.mean()) if speeds.size else math.nan,
        "per_domain": per_domain,
    }


def discrete_score(
    table: RecordTable, protocol: DiscreteProtocol, baseline_latency: float | None
) -> dict[str, Any]:
    """Tempora's discrete utility: utility, availability α, served_accuracy, plus the interval γ
    (seconds), utilisation ρ = λ/γ (when λ is known) and buffer; per_domain the same per domain."""
    interval = protocol.interval_seconds(baseline_latency)
    utilisation = protocol.utilisation
    if utilisation is None and baseline_latency is not None:
        utilisation = baseline_latency / interval
    accuracy = batch_accuracy(table)
    served = table.column("predicted")
    pressure = f"ρ={100 * protocol.utilisation:.4g}%" if protocol.utilisation is not None else f"γ={_milliseconds(interval)}"
    return {
        "scenario": f"discrete {pressure} b={protocol.buffer}",
        "protocol": "discrete",
        "interval_seconds": interval,
        "utilisation": utilisation,
        "buffer": protocol.buffer,
        **discrete_utility(accuracy, served),
        "per_domain": {
            domain: discrete_utility(accuracy[mask], served[mask]) for domain, mask in _domain_masks(table).items()
        },
    }


def amortised_score(table: RecordTable, protocol: AmortisedProtocol, baseline_latency: float) -> dict[str, Any]:
    """Tempora's amortised utility: utility, adapted_fraction β, adapt_accuracy, frozen_accuracy,
    the budget B and the overhead spent Σ max(0, δ_i - λ) over adapted batches (seconds)."""
    accuracy = batch_accuracy(table)
    adapted = table.column("adapted")
    overhead = np.maximum(0.0, table.column("seconds") - baseline_latency)[adapted]
    return {
        "scenario": f"amortised B={protocol.budget:g} s",
        "protocol": "amortised",
        "budget_seconds": protocol.budget,
        **amortised_utility(accuracy, adapted),
        "overhead_spent_seconds": float(overhead.sum()),
        "per_domain": {
            domain: amortised_utility(accuracy[mask], adapted[mask]) for domain, mask in _domain_masks(table).items()
        },
    }


def protocol_scores(
    table: RecordTable, protocol: EpisodeSettings, baseline_latency: float | None, label: str = ""
) -> list[dict[str, Any]]:
    """The protocol's scores for one method's records ([] for the offline protocol)."""
    if isinstance(protocol, ContinuousProtocol):
        if baseline_latency is None:
            raise ValueError("continuous utility needs the baseline latency λ, got None")
        return continuous_scores(table, baseline_latency, protocol.thresholds, label)
    if isinstance(protocol, AlfarraProtocol):
        return [alfarra_score(table, protocol)]
    if isinstance(protocol, DiscreteProtocol):
        return [discrete_score(table, protocol, baseline_latency)]
    if isinstance(protocol, AmortisedProtocol):
        if baseline_latency is None:
            raise ValueError("amortised utility needs the baseline latency λ, got None")
        return [amortised_score(table, protocol, baseline_latency)]
    return []
