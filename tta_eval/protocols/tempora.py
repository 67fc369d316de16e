"""Tempora's time-contingent utilities (Sreeram, Kwon, Mascolo): the discrete pipeline and the metrics.

Pure functions of per-batch numbers; no model is involved. Times may be in any unit as long as
all arguments of one call use the same one (the protocols use seconds). a_i is the fraction of
batch i predicted correctly; the utilities weight batches equally.

Discrete (environment-led): batch i arrives at i·γ; one pipeline serves one batch at a time, for
δ_i; a buffer of b slots holds arrivals while the pipeline is busy. A batch arriving exactly when
the pipeline frees counts as arrived. b = 0: arrivals during processing are lost, an idle
pipeline serves the next arrival. b = 1: when the pipeline frees it serves the most recent arrival
it has not served (older waiting ones are lost), also after arrivals have ceased; this is the
recurrence p_{j+1} = max(p_j + 1, floor(f_j / γ)) (0-based). b > 1: FIFO queue, the oldest waiting
batch is served first and the oldest is evicted when an arrival finds the queue full, as in
Tempora's code; queued batches are served after arrivals end (the drain). In a tie (an arrival at
exactly the moment the pipeline frees) the arrival enters the queue before the pipeline picks the
next batch; Tempora's code picks the queued batch first and queues the arrival after, which only
differs from ours when that arrival then evicts or displaces a batch (b = 1: we serve the new
arrival, Tempora's code the older one).

Continuous (user-led): w_i = ℓ_{i-1} + e_i (ℓ_0 = 0), d_i = max(0, w_i - λ),
κ_i = 1 / (1 + d_i / (T - λ)), U = mean(a_i κ_i) = ā·κ̄ + Cov(a, κ) with the population covariance
(ddof = 0), so the identity is exact. Tempora's code reports ā·κ̄ + the sample covariance
(``np.cov``, ddof = 1), which differs from mean(a_i κ_i) by Cov/(N - 1).

Amortised (resource-led): c_i = max(0, δ_i - λ); the method adapts while its spent overhead is below
the budget B and is frozen afterwards; U = β·ā_adapt + (1 - β)·ā_frozen with β the adapted fraction.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ccc.validation import check_non_negative_int, check_positive

Item = TypeVar("Item")

TIE_TOLERANCE = 1e-9
"""Times closer than this fraction of the arrival interval count as simultaneous."""


class DiscretePipeline(Generic[Item]):
    """Event simulation of Tempora's discrete scenario, driven arrival by arrival.

    interval: γ > 0 between arrivals; buffer: slots b >= 0. ``serve(position, item, start)`` is
    called for each served batch with its simulated start time and must return its processing time
    (>= 0); ``drop(position, item)`` for each lost batch. Both are called in increasing position
    order. Call ``arrive`` for positions 0, 1, 2, … in order, then ``drain``. A finish time within
    ``TIE_TOLERANCE · interval`` of an arrival counts as a tie (float sums of processing times).
    """

    def __init__(
        self,
        interval: float,
        buffer: int,
        serve: Callable[[int, Item, float], float],
        drop: Callable[[int, Item], None],
    ) -> None:
        check_positive("interval", interval)
        self.interval = float(interval)
        self.buffer = check_non_negative_int("buffer (batch slots)", buffer)
        # Finish times are sums of processing times: absorb their float error so ties stay ties.
        self._tolerance = TIE_TOLERANCE * self.interval
        self._serve = serve
        self._drop = drop
        self._queue: deque[tuple[int, Item]] = deque()
        self.free_at = 0.0
        self._next_position = 0

    def _start(self, position: int, item: Item) -> None:
        start = max(self.free_at, position * self.interval)
        seconds = self._serve(position, item, start)
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"processing time of batch {position} must be a finite number >= 0, got {seconds!r}")
        self.free_at = start + seconds

    def arrive(self, position: int, item: Item) -> None:
        """Batch ``position`` arrives at ``position · interval``."""
        if position != self._next_position:
            raise ValueError(f"arrivals must come in order: expected position {self._next_position}, got {position}")
        self._next_position += 1
        arrival = position * self.interval
        while self._queue and self.free_at < arrival - self._tolerance:
            self._start(*self._queue.popleft())
        if self.buffer == 0:
            if self.free_at <= arrival + self._tolerance:
                self._start(position, item)
            else:
                self._drop(position, item)
            return
        if len(self._queue) == self.buffer:
            self._drop(*self._queue.popleft())
        self._queue.append((position, item))
        while self._queue and self.free_at <= arrival + self._tolerance:
            self._start(*self._queue.popleft())

    def drain(self) -> None:
        """Arrivals have ended: serve every waiting batch."""
        while self._queue:
            self._start(*self._queue.popleft())

    def state_dict(self) -> dict[str, Any]:
        """The simulation's state between arrivals: the waiting (position, item) pairs, when the
        pipeline is free again and the next arrival's position."""
        return {"queue": list(self._queue), "free_at": self.free_at, "next_position": self._next_position}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
        self._queue = deque(state["queue"])
        self.free_at = float(state["free_at"])
        self._next_position = int(state["next_position"])


def _as_vector(name: str, values: ArrayLike) -> NDArray[np.float64]:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a one-dimensional sequence of numbers, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must hold finite numbers, got {float(array[~np.isfinite(array)][0])!r}")
    return array


def _check_times(name: str, values: ArrayLike) -> NDArray[np.float64]:
    array = _as_vector(name, values)
    if array.size and array.min() < 0:
        raise ValueError(f"{name} must be >= 0, got {float(array.min())!r}")
    return array


def _check_fractions(name: str, values: ArrayLike) -> NDArray[np.float64]:
    array = _as_vector(name, values)
    if array.size and (array.min() < 0 or array.max() > 1):
        raise ValueError(f"{name} must be in [0, 1], got values in [{float(array.min())!r}, {float(array.max())!r}]")
    return array


def served_batches(latencies: Sequence[float] | ArrayLike, interval: float, buffer: int = 1) -> list[int]:
    """0-based indices of the batches Tempora's discrete pipeline serves.

    latencies: processing time δ_i >= 0 of batch i if it is served (only served batches' values
    matter); interval: arrival interval γ > 0 in the same unit (batch i arrives at i·γ); buffer:
    b >= 0 slots (see the module docstring for the b = 0, 1 and > 1 rules).
    """
    durations = _check_times("latencies", latencies)
    served: list[int] = []

    def serve(position: int, item: None, start: float) -> float:
        served.append(position)
        return float(durations[position])

    pipeline: DiscretePipeline[None] = DiscretePipeline(interval, buffer, serve, lambda position, item: None)
    for position in range(durations.size):
        pipeline.arrive(position, None)
    pipeline.drain()
    return served


def discrete_utility(correct_fraction: ArrayLike, served: ArrayLike) -> dict[str, Any]:
    """U_discrete = (1/N) Σ_{i served} a_i = α · ā_served.

    correct_fraction: a_i in [0, 1] per batch (N >= 1); served: per-batch booleans. Returns utility,
    availability α = |served| / N, served_accuracy ā_served (NaN if nothing was served), batches.
    """
    accuracy = _check_fractions("correct_fraction", correct_fraction)
    mask = np.asarray(served, dtype=bool)
    if mask.shape != accuracy.shape:
        raise ValueError(f"served must have one flag per batch ({accuracy.size}), got shape {mask.shape}")
    if accuracy.size == 0:
        raise ValueError("discrete utility needs at least one batch, got none")
    availability = float(mask.mean())
    served_accuracy = float(accuracy[mask].mean()) if mask.any() else math.nan
    return {
        "utility": float(np.where(mask, accuracy, 0.0).mean()),
        "availability": availability,
        "served_accuracy": served_accuracy,
        "batches": int(accuracy.size),
    }


def decay_factors(
    pickup_to_prediction: ArrayLike, prediction_to_ready: ArrayLike, baseline_latency: float, threshold: float
) -> NDArray[np.float64]:
    """κ_i = 1 / (1 + max(0, ℓ_{i-1} + e_i - λ) / (T - λ)) per batch, ℓ_0 = 0; values in (0, 1].

    pickup_to_prediction: e_i >= 0; prediction_to_ready: ℓ_i >= 0 (same length); baseline_latency:
    λ > 0; threshold: T > λ; all in the same unit.
    """
    prediction = _check_times("pickup_to_prediction", pickup_to_prediction)
    ready = _check_times("prediction_to_ready", prediction_to_ready)
    if ready.shape != prediction.shape:
        raise ValueError(f"prediction_to_ready must have one value per batch ({prediction.size}), got {ready.size}")
    check_positive("baseline_latency", baseline_latency)
    check_positive("threshold", threshold)
    if threshold <= baseline_latency:
        raise ValueError(
            f"threshold must be greater than the baseline latency λ = {baseline_latency!r} (same unit), "
            f"got {threshold!r}"
        )
    wait = prediction.copy()
    wait[1:] += ready[:-1]
    delay = np.maximum(0.0, wait - baseline_latency)
    return 1.0 / (1.0 + delay / (threshold - baseline_latency))


def utility_decomposition(correct_fraction: NDArray[np.float64], decay: NDArray[np.float64]) -> dict[str, float]:
    """mean(a·κ) with ā, κ̄ and the population covariance Cov(a, κ) (so U = ā·κ̄ + Cov exactly)."""
    mean_accuracy = float(correct_fraction.mean())
    mean_kappa = float(decay.mean())
    covariance = float(np.mean((correct_fraction - mean_accuracy) * (decay - mean_kappa)))
    return {
        "utility": float(np.mean(correct_fraction * decay)),
        "mean_accuracy": mean_accuracy,
        "mean_kappa": mean_kappa,
        "covariance": covariance,
    }


def continuous_utility(
    correct_fraction: ArrayLike,
    pickup_to_prediction: ArrayLike,
    prediction_to_ready: ArrayLike,
    baseline_latency: float,
    threshold: float,
) -> dict[str, float]:
    """Tempora's continuous utility of a run in which every batch was predicted.

    correct_fraction: a_i in [0, 1] per batch (N >= 1); pickup_to_prediction: e_i >= 0;
    prediction_to_ready: ℓ_i >= 0; baseline_latency: λ > 0; threshold: T > λ; times in one unit.
    Returns utility U = mean(a_i κ_i), mean_accuracy ā, mean_kappa κ̄, covariance Cov(a, κ)
    (population, ddof = 0: U = ā·κ̄ + Cov to float precision).
    """
    accuracy = _check_fractions("correct_fraction", correct_fraction)
    if accuracy.size == 0:
        raise ValueError("continuous utility needs at least one batch, got none")
    decay = decay_factors(pickup_to_prediction, prediction_to_ready, baseline_latency, threshold)
    if decay.shape != accuracy.shape:
        raise ValueError(f"pickup_to_prediction must have one value per batch ({accuracy.size}), got {decay.size}")
    return utility_decomposition(accuracy, decay)


def amortised_utility(correct_fraction: ArrayLike, adapted: ArrayLike) -> dict[str, Any]:
    """U_amortised = β · ā_adapt + (1 - β) · ā_frozen.

    correct_fraction: a_i in [0, 1] per batch (N >= 1); adapted: per-batch booleans (the batches
    processed with adaptation). Returns utility, adapted_fraction β, adapt_accuracy ā_adapt and
    frozen_accuracy ā_frozen (NaN when their set is empty), batches.
    """
    accuracy = _check_fractions("correct_fraction", correct_fraction)
    mask = np.asarray(adapted, dtype=bool)
    if mask.shape != accuracy.shape:
        raise ValueError(f"adapted must have one flag per batch ({accuracy.size}), got shape {mask.shape}")
    if accuracy.size == 0:
        raise ValueError("amortised utility needs at least one batch, got none")
    return {
        "utility": float(accuracy.mean()),
        "adapted_fraction": float(mask.mean()),
        "adapt_accuracy": float(accuracy[mask].mean()) if mask.any() else math.nan,
        "frozen_accuracy": float(accuracy[~mask].mean()) if (~mask).any() else math.nan,
        "batches": int(accuracy.size),
    }
