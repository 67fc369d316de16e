"""A stream's realised accuracy for a model, against the target it was calibrated for.

CCC promises a stream whose difficulty for its reference model stays at a target accuracy. This
module measures what a model actually scores on a stream (shards of ours, a ``ccc-mirror`` folder or
published shards) and sets it against:

- the **target**: the stream's ``target_accuracy`` from its manifest (percent), or one given by the
  caller (published shards have no manifest);
- the **calibrated** accuracy, where the samples carry it (ours, kind ``ccc``): the mean of each
  sample's ``calibrated_accuracy``, the calibration table's value at the sample's severities.

Uncertainty: the stream is cut into consecutive windows of ``window`` samples (the last, partial one
dropped from the spread); the standard error of a mean is the windows' standard deviation (ddof 1)
over the square root of their count. Windows rather than images, because a stream draws its source
images many times and neighbouring samples share a corruption pair. The same is reported per
corruption pair ``n1->n2`` (samples counted for their own pair).

Used by ``ccc-verify --accuracy``; :func:`summarise_realised` is pure (arrays in, numbers out),
:func:`score_stream` runs the model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    import torch

    from ccc.calibration.compute.evaluator import ModelEvaluator

__all__ = [
    "DEFAULT_WINDOW",
    "PairAccuracy",
    "RealisedAccuracy",
    "StreamOutcomes",
    "describe_realised",
    "score_stream",
    "summarise_realised",
]

DEFAULT_WINDOW = 1_000
"""Samples per window of the standard error (the paper's and ``tta-eval``'s accuracy window)."""


@dataclass(frozen=True)
class PairAccuracy:
    """One corruption pair's samples: count, realised and calibrated accuracy (percent; calibrated
    None when the samples carry none)."""

    samples: int
    realised: float
    calibrated: float | None


@dataclass(frozen=True)
class RealisedAccuracy:
    """A model's accuracy on a stream against its target (every accuracy in percent, [0, 100]).

    samples: samples scored; realised: their top-1 accuracy; standard_error: of ``realised`` over
    windows (None with fewer than two full windows); target: the stream's target accuracy (None:
    unknown); calibrated: mean per-sample calibrated accuracy (None: the samples carry none);
    calibrated_difference_error: standard error of realised − calibrated over windows (None as
    above); window: samples per window; windows: full windows; pairs: ``n1->n2`` → its samples'
    accuracies, in stream order of first appearance (empty without pair metadata).
    """

    samples: int
    realised: float
    standard_error: float | None
    target: float | None
    calibrated: float | None
    calibrated_difference_error: float | None
    window: int
    windows: int
    pairs: dict[str, PairAccuracy]

    @property
    def target_difference(self) -> float | None:
        """Realised minus target, points (None without a target)."""
        return None if self.target is None else self.realised - self.target

    @property
    def calibrated_difference(self) -> float | None:
        """Realised minus calibrated, points (None without calibrated accuracies)."""
        return None if self.calibrated is None else self.realised - self.calibrated

    def to_json_dict(self) -> dict[str, Any]:
        """Plain data for a JSON report (differences included)."""
        return {
            "samples": self.samples,
            "realised": self.realised,
            "standard_error": self.standard_error,
            "target": self.target,
            "target_difference": self.target_difference,
            "calibrated": self.calibrated,
            "calibrated_difference": self.calibrated_difference,
            "calibrated_difference_error": self.calibrated_difference_error,
            "window": self.window,
            "windows": self.windows,
            "pairs": {
                name: {"samples": pair.samples, "realised": pair.realised, "calibrated": pair.calibrated}
                for name, pair in self.pairs.items()
            },
        }


def _window_error(values: NDArray[np.float64], window: int) -> tuple[float | None, int]:
    """Standard error of the mean of ``values`` over its full windows of ``window``, and their count."""
    windows = values.size // window
    if windows < 2:
        return None, windows
    means = values[: windows * window].reshape(windows, window).mean(axis=1)
    return float(means.std(ddof=1) / math.sqrt(windows)), windows


def summarise_realised(
    correct: Sequence[bool] | NDArray[np.bool_],
    *,
    window: int = DEFAULT_WINDOW,
    target: float | None = None,
    calibrated: Sequence[float] | NDArray[np.float64] | None = None,
    pairs: Sequence[str] | None = None,
) -> RealisedAccuracy:
    """The realised accuracy of per-sample outcomes in stream order.

    correct: whether each sample was classified correctly (at least one sample); window: samples per
    window, >= 1; target: the stream's target accuracy, percent in [0, 100] (None: unknown);
    calibrated: each sample's calibrated accuracy, percent (None: unknown); pairs: each sample's
    corruption pair name (None: not reported). ValueError for empty input, lengths that differ, a
    window < 1 or a target outside [0, 100]."""
    outcome = np.asarray(correct, dtype=bool)
    if outcome.ndim != 1 or outcome.size == 0:
        raise ValueError("no sample was scored: the stream is empty")
    if window < 1:
        raise ValueError(f"window must be >= 1 sample, got {window}")
    if target is not None and not (math.isfinite(target) and 0.0 <= target <= 100.0):
        raise ValueError(f"target accuracy must be a percentage in [0, 100], got {target}")
    points = 100.0 * outcome.astype(np.float64)
    standard_error, windows = _window_error(points, window)
    calibrated_values = None if calibrated is None else np.asarray(calibrated, dtype=np.float64)
    for name, values in (("calibrated", calibrated_values), ("pairs", pairs)):
        if values is not None and len(values) != outcome.size:
            raise ValueError(f"{name} has {len(values)} entries for {outcome.size} samples")
    difference_error = None
    if calibrated_values is not None:
        difference_error, _ = _window_error(points - calibrated_values, window)
    per_pair: dict[str, PairAccuracy] = {}
    if pairs is not None:
        names = np.asarray(pairs, dtype=object)
        for name in dict.fromkeys(pairs):
            rows = names == name
            per_pair[name] = PairAccuracy(
                int(rows.sum()),
                float(points[rows].mean()),
                None if calibrated_values is None else float(calibrated_values[rows].mean()),
            )
    return RealisedAccuracy(
        samples=int(outcome.size),
        realised=float(points.mean()),
        standard_error=standard_error,
        target=None if target is None else float(target),
        calibrated=None if calibrated_values is None else float(calibrated_values.mean()),
        calibrated_difference_error=difference_error,
        window=window,
        windows=windows,
        pairs=per_pair,
    )


@dataclass
class StreamOutcomes:
    """Per-sample outcomes of :func:`score_stream`, in stream order: correct, calibrated accuracy
    (None when a sample carries none: then the list is dropped) and pair name (None likewise)."""

    correct: list[bool]
    calibrated: list[float] | None
    pairs: list[str] | None


def score_stream(
    batches: Iterable[tuple[torch.Tensor, torch.Tensor, list[dict[str, Any]]]],
    evaluator: ModelEvaluator,
    on_batch: Callable[[int], None] | None = None,
) -> StreamOutcomes:
    """Classify every sample of ``batches`` (``ccc.load.stream_loader`` batches of float images in
    [0, 1], N×3×H×W, with int64 labels and per-sample metadata) with ``evaluator`` and record, per
    sample, whether the top-1 prediction is the label, its ``calibrated_accuracy`` and its pair
    ``n1->n2`` where the metadata hold them. on_batch: called with each batch's size (progress)."""
    correct: list[bool] = []
    calibrated: list[float] = []
    pairs: list[str] = []
    every_calibrated = every_paired = True
    for images, labels, metadata in batches:
        predictions = evaluator.predict_tensor(images).cpu()
        correct.extend((predictions == labels.cpu()).tolist())
        for entry in metadata:
            value, first, second = entry.get("calibrated_accuracy"), entry.get("n1"), entry.get("n2")
            every_calibrated = every_calibrated and value is not None
            every_paired = every_paired and first is not None and second is not None
            if every_calibrated:
                calibrated.append(float(value))
            if every_paired:
                pairs.append(f"{first}->{second}")
        if on_batch is not None:
            on_batch(len(labels))
    return StreamOutcomes(correct, calibrated if every_calibrated else None, pairs if every_paired else None)


def _points(value: float, error: float | None) -> str:
    """``value`` in points with its standard error, e.g. ``-2.4 ± 0.6``."""
    return f"{value:+.1f}" + ("" if error is None else f" ± {error:.1f}")


def describe_realised(result: RealisedAccuracy, model: str) -> list[str]:
    """Lines for a person: the realised accuracy of ``model`` with its standard error, against the
    target and the calibrated accuracy where known, and the pair furthest from its calibration (or
    from the target when the samples carry no calibrated accuracy)."""
    error = "" if result.standard_error is None else f" ± {result.standard_error:.1f}"
    lines = [
        f"realised accuracy of {model}: {result.realised:.1f} %{error} over {result.samples:,} samples "
        f"(standard error over {result.windows:,} windows of {result.window:,})"
    ]
    if result.target_difference is not None:
        difference = _points(result.target_difference, result.standard_error)
        lines.append(f"  against the target {result.target:g} %: {difference} points")
    else:
        lines.append(
            "  no target: the stream records none (published shards, cin-c and gradual streams); "
            "give one with --target PERCENT"
        )
    if result.calibrated_difference is not None:
        difference = _points(result.calibrated_difference, result.calibrated_difference_error)
        lines.append(
            f"  against the calibrated accuracy of its samples, {result.calibrated:.1f} %: {difference} points"
        )
    by_calibration = result.calibrated is not None
    if result.pairs and (by_calibration or result.target is not None):

        def offset(pair: PairAccuracy) -> float:
            return pair.realised - (pair.calibrated if by_calibration else result.target)  # type: ignore[operator]

        name, pair = max(result.pairs.items(), key=lambda item: abs(offset(item[1])))
        against = "its calibration" if by_calibration else "the target"
        pairs = f"{len(result.pairs):,} pair{'s' * (len(result.pairs) != 1)}"
        lines.append(
            f"  furthest pair from {against}: {name}, {pair.realised:.1f} % over {pair.samples:,} samples "
            f"({offset(pair):+.1f} points; {pairs} in all)"
        )
    return lines
