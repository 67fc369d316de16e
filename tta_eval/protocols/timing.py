"""How long a method's step on a batch takes: measured wall time, or a deterministic cost model.

Each step is split at the moment the prediction is emitted: e (pickup → prediction) and ℓ
(prediction → ready for the next batch, i.e. adaptation work done after predicting), δ = e + ℓ.

Measured timing uses ``time.perf_counter`` around the call, with ``torch.cuda.synchronize`` before
each clock reading on a CUDA device. The split point is when the method's prediction network
(see ``tta_eval.protocols._execution.prediction_network``) first returns from its forward pass
during the call; a forward hook reads the clock there. If the network is not called, e = δ, ℓ = 0.

Deterministic timing charges per-method constants in units of λ (the plain model's latency), so a
protocol run is reproducible bit for bit on a noisy machine. The constants are given, or measured
once (the mean e and ℓ of a measured run, written to its ``costs.json``) and stored.

λ itself is calibrated as in Tempora: warm-up calls of the plain model, then λ = mean + 6σ of its
per-batch latency over repeated calls.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ccc.options import parse_value
from ccc.validation import check_non_negative, check_non_negative_int, check_positive, check_positive_int
from tta_eval.run_folder import COSTS_FILE

# torch is imported where a measurement needs it: the cost model and settings load without it
# (``tta-eval --help``).
if TYPE_CHECKING:
    import torch
    from torch import nn

logger = logging.getLogger(__name__)

T = TypeVar("T")

TIMING_MODES = ("measured", "deterministic")
DEFAULT_WARMUP_CALLS = 5
DEFAULT_CALIBRATION_CALLS = 50
CALIBRATION_SIGMAS = 6.0


def device_synchronizer(device: torch.device | str) -> Callable[[], None]:
    """A function waiting for all queued work on ``device`` (CUDA), or doing nothing (CPU)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


@dataclass(frozen=True)
class MethodCost:
    """Cost of one adapting step, in units of λ.

    pickup_to_prediction: e / λ >= 0; prediction_to_ready: ℓ / λ >= 0.
    """

    pickup_to_prediction: float
    prediction_to_ready: float = 0.0

    def __post_init__(self) -> None:
        check_non_negative("pickup_to_prediction", self.pickup_to_prediction)
        check_non_negative("prediction_to_ready", self.prediction_to_ready)

    @property
    def total(self) -> float:
        """δ / λ."""
        return self.pickup_to_prediction + self.prediction_to_ready

    @classmethod
    def parse(cls, text: str) -> MethodCost:
        """Parse "TOTAL" (δ/λ; e/λ = min(1, TOTAL), the rest after the prediction) or "E+L" (e/λ + ℓ/λ),
        each a decimal number as in every option string (``ccc.options.parse_value``)."""
        values = [parse_value("cost", part, "--cost") if part.strip() else part for part in text.split("+")]
        if not all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in values):
            raise ValueError(
                f"a cost must be 'TOTAL' or 'PREDICTION+READY' in units of λ, e.g. 2.5 or 1+1.5; got {text!r}"
            )
        values = [float(value) for value in values]
        if len(values) == 1:
            total = values[0]
            check_non_negative("cost", total)
            return cls(min(1.0, total), max(0.0, total - 1.0))
        if len(values) == 2:
            return cls(values[0], values[1])
        raise ValueError(f"a cost must be 'TOTAL' or 'PREDICTION+READY' in units of λ, e.g. 2.5 or 1+1.5; got {text!r}")

    def to_json(self) -> dict[str, float]:
        """JSON-serialisable form."""
        return {"pickup_to_prediction": self.pickup_to_prediction, "prediction_to_ready": self.prediction_to_ready}


PLAIN_MODEL_COST = MethodCost(1.0, 0.0)
"""The plain model's step: a prediction taking λ, nothing after it."""


@dataclass(frozen=True)
class CostModel:
    """Deterministic per-batch costs.

    baseline_latency: λ in seconds (> 0); costs: (method label, cost) pairs; plain: cost of a
    non-adapting prediction (Alfarra's skipped batches, a frozen model), by default one λ; origin:
    where the costs come from (e.g. "given", or the run folder they were measured in).
    A method without an entry costs ``plain`` when it is the source model and is an error otherwise.
    """

    baseline_latency: float
    costs: tuple[tuple[str, MethodCost], ...] = ()
    plain: MethodCost = PLAIN_MODEL_COST
    origin: str = "given"

    def __post_init__(self) -> None:
        check_positive("baseline_latency", self.baseline_latency)
        labels = [label for label, _ in self.costs]
        duplicates = sorted({label for label in labels if labels.count(label) > 1})
        if duplicates:
            raise ValueError(f"each method may have one cost, got several for: {', '.join(duplicates)}")

    def cost_of(self, label: str, fallback_name: str | None = None) -> MethodCost:
        """The cost of method ``label`` (or, if absent, of registry name ``fallback_name``)."""
        table = dict(self.costs)
        for key in (label, fallback_name):
            if key is not None and key in table:
                return table[key]
        if "source" in (label, fallback_name):
            return self.plain
        available = ", ".join(table) if table else "none"
        raise ValueError(
            f"the cost model has no cost for method {label!r}; give one with --cost {label}=TOTAL "
            f"(units of λ); methods with costs: {available}"
        )

    def to_json(self) -> dict[str, Any]:
        """JSON-serialisable form (the format of ``costs.json``)."""
        return {
            "baseline_latency_seconds": self.baseline_latency,
            "plain": self.plain.to_json(),
            "methods": {label: cost.to_json() for label, cost in self.costs},
            "origin": self.origin,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], origin: str | None = None) -> CostModel:
        """Inverse of ``to_json``; ValueError naming what is missing or malformed."""
        try:
            methods = data["methods"]
            return cls(
                baseline_latency=float(data["baseline_latency_seconds"]),
                costs=tuple((label, MethodCost(**values)) for label, values in methods.items()),
                plain=MethodCost(**data.get("plain", PLAIN_MODEL_COST.to_json())),
                origin=origin or str(data.get("origin", "given")),
            )
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(
                "a cost table needs 'baseline_latency_seconds' and 'methods' mapping labels to "
                f"{{'pickup_to_prediction': …, 'prediction_to_ready': …}}; problem: {error!r}"
            ) from None

    @classmethod
    def load(cls, path: Path) -> CostModel:
        """Read a cost table written by ``save`` (or a run folder's ``costs.json``; a run folder works too)."""
        path = Path(path)
        if path.is_dir():
            path = path / COSTS_FILE
        if not path.is_file():
            raise ValueError(f"cost table {str(path)!r} does not exist (write one with a measured run)")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"cost table {str(path)!r} is not valid JSON: {error}") from None
        return cls.from_json(data, origin=str(path))

    def save(self, path: Path) -> None:
        """Write the table as JSON."""
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n")


def measured_cost(
    pickup_to_prediction: np.ndarray, prediction_to_ready: np.ndarray, baseline_latency: float
) -> MethodCost:
    """Mean e / λ and ℓ / λ of measured steps (seconds); ValueError without any step."""
    check_positive("baseline_latency", baseline_latency)
    if pickup_to_prediction.size == 0:
        raise ValueError("a measured cost needs at least one adapted batch, got none")
    return MethodCost(
        float(np.mean(pickup_to_prediction) / baseline_latency),
        float(np.mean(prediction_to_ready) / baseline_latency),
    )


@dataclass(frozen=True)
class StepTime:
    """Seconds of one step: e (pickup → prediction) and ℓ (prediction → ready)."""

    pickup_to_prediction: float
    prediction_to_ready: float

    @property
    def total(self) -> float:
        """δ = e + ℓ."""
        return self.pickup_to_prediction + self.prediction_to_ready


class MeasuredClock:
    """Measures one method's steps with ``perf_counter`` (and device synchronisation).

    A forward hook on ``network`` notes the end of its first forward pass within an adapting call:
    the moment the prediction exists. ``detach``/``attach`` remove and restore the hook (e.g. while
    the network is deep-copied).
    """

    mode = "measured"

    def __init__(self, network: nn.Module, synchronize: Callable[[], None]) -> None:
        self._network = network
        self._synchronize = synchronize
        self._armed = False
        self._predicted_at: float | None = None
        self._handle: Any = None
        self.attach()

    def attach(self) -> None:
        """Install the forward hook (no-op if installed)."""
        if self._handle is None:
            self._handle = self._network.register_forward_hook(self._on_forward)

    def detach(self) -> None:
        """Remove the forward hook (no-op if removed)."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    @contextlib.contextmanager
    def detached(self) -> Iterator[None]:
        """Within the block the hook is removed (e.g. while the network is pickled), then restored if it
        was installed."""
        installed = self._handle is not None
        self.detach()
        try:
            yield
        finally:
            if installed:
                self.attach()

    def _on_forward(self, module: nn.Module, inputs: Any, output: Any) -> None:
        if self._armed:
            self._armed = False
            self._synchronize()
            self._predicted_at = time.perf_counter()

    def time_adaptation(self, call: Callable[[], T]) -> tuple[T, StepTime]:
        """Run an adapting call; its result and its e, ℓ in seconds."""
        self._synchronize()
        self._predicted_at = None
        self._armed = True
        started = time.perf_counter()
        try:
            result = call()
            self._synchronize()
            ended = time.perf_counter()
        finally:
            self._armed = False
        predicted = self._predicted_at if self._predicted_at is not None else ended
        return result, StepTime(predicted - started, ended - predicted)

    def time_prediction(self, call: Callable[[], T]) -> tuple[T, StepTime]:
        """Run a non-adapting prediction; its result and its time (all of it before the prediction)."""
        self._synchronize()
        started = time.perf_counter()
        result = call()
        self._synchronize()
        return result, StepTime(time.perf_counter() - started, 0.0)

    def time_reference(self, call: Callable[[], object]) -> float:
        """Seconds of a reference call (Alfarra's λ_t: a non-adapting forward on the same batch)."""
        return self.time_prediction(call)[1].total


class DeterministicClock:
    """Charges constant costs instead of measuring: ``cost`` per adapting step, ``plain`` per prediction."""

    mode = "deterministic"

    def __init__(self, cost: MethodCost, plain: MethodCost, baseline_latency: float) -> None:
        self._adapting = StepTime(
            cost.pickup_to_prediction * baseline_latency, cost.prediction_to_ready * baseline_latency
        )
        self._predicting = StepTime(
            plain.pickup_to_prediction * baseline_latency, plain.prediction_to_ready * baseline_latency
        )
        self._baseline_latency = baseline_latency

    def attach(self) -> None:
        """Nothing to install."""

    def detach(self) -> None:
        """Nothing to remove."""

    @contextlib.contextmanager
    def detached(self) -> Iterator[None]:
        """Nothing to remove or restore."""
        yield

    def time_adaptation(self, call: Callable[[], T]) -> tuple[T, StepTime]:
        """Run the call; charge the method's constant cost."""
        return call(), self._adapting

    def time_prediction(self, call: Callable[[], T]) -> tuple[T, StepTime]:
        """Run the call; charge the plain model's cost."""
        return call(), self._predicting

    def time_reference(self, call: Callable[[], object]) -> float:
        """λ, without running the reference call."""
        return self._baseline_latency


Clock = MeasuredClock | DeterministicClock


@dataclass(frozen=True)
class Timing:
    """Which clock a protocol run uses: measured (``cost_model`` None) or deterministic.

    device: where the methods run (for synchronisation when measuring). ``cost_model`` costs are
    looked up by method label, then by ``registry_names[label]``. warmup_calls >= 0: when
    measuring, each method is called this many times on the first batch it processes and then
    reset, before anything is timed (as in Tempora's code), so one-off start-up costs are not
    charged to the first batch; no warm-up in deterministic mode.
    """

    device: str = "cpu"
    cost_model: CostModel | None = None
    registry_names: tuple[tuple[str, str], ...] = ()
    warmup_calls: int = DEFAULT_WARMUP_CALLS

    def __post_init__(self) -> None:
        check_non_negative_int("warmup_calls", self.warmup_calls)

    @property
    def method_warmup_calls(self) -> int:
        """Untimed warm-up calls per method: ``warmup_calls`` when measuring, 0 in deterministic mode."""
        return self.warmup_calls if self.cost_model is None else 0

    @property
    def mode(self) -> str:
        """ "measured" or "deterministic"."""
        return "measured" if self.cost_model is None else "deterministic"

    def clock_for(self, label: str, network: nn.Module) -> Clock:
        """A clock for method ``label`` whose prediction network is ``network``."""
        if self.cost_model is None:
            return MeasuredClock(network, device_synchronizer(self.device))
        cost = self.cost_model.cost_of(label, dict(self.registry_names).get(label))
        return DeterministicClock(cost, self.cost_model.plain, self.cost_model.baseline_latency)

    def check_methods(self, labels: list[str]) -> None:
        """ValueError if the cost model lacks a cost for one of ``labels``."""
        if self.cost_model is not None:
            names = dict(self.registry_names)
            for label in labels:
                self.cost_model.cost_of(label, names.get(label))

    def to_json(self) -> dict[str, Any]:
        """JSON-serialisable description (mode and cost model)."""
        return {
            "mode": self.mode,
            "cost_model": None if self.cost_model is None else self.cost_model.to_json(),
            "warmup_calls": self.method_warmup_calls,
        }


@dataclass(frozen=True)
class LatencyCalibration:
    """λ from a sweep of the plain model: ``baseline_latency`` = mean + 6σ of ``calls`` timed calls.

    All times in seconds; σ is the sample standard deviation (ddof = 1) of the timed calls, which
    followed ``warmup`` untimed calls on the same batch.
    """

    baseline_latency: float
    mean: float
    std: float
    calls: int
    warmup: int
    batch_shape: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "baseline_latency_seconds": self.baseline_latency,
            "mean_seconds": self.mean,
            "std_seconds": self.std,
            "calls": self.calls,
            "warmup": self.warmup,
            "batch_shape": list(self.batch_shape),
            "rule": f"mean + {CALIBRATION_SIGMAS:g} sigma",
        }


def calibrate_baseline_latency(
    model: nn.Module,
    images: torch.Tensor,
    device: torch.device | str = "cpu",
    warmup: int = DEFAULT_WARMUP_CALLS,
    calls: int = DEFAULT_CALIBRATION_CALLS,
) -> LatencyCalibration:
    """Time the plain ``model`` (evaluation mode, no gradient) on ``images`` and return λ = mean + 6σ.

    images: one batch N×C×H×W (moved to ``device``); warmup >= 0 untimed calls, then calls >= 2
    timed ones. The model's train/eval mode is restored afterwards; parameters and buffers are
    not changed.
    """
    import torch

    check_non_negative_int("warmup", warmup)
    check_positive_int("calls", calls)
    if calls < 2:
        raise ValueError(f"calls must be >= 2 to estimate a standard deviation, got {calls}")
    synchronize = device_synchronizer(device)
    images = images.to(device)
    was_training = model.training
    model.eval()
    seconds = []
    try:
        with torch.no_grad():
            for _ in range(warmup):
                model(images)
            for _ in range(calls):
                synchronize()
                started = time.perf_counter()
                model(images)
                synchronize()
                seconds.append(time.perf_counter() - started)
    finally:
        model.train(was_training)
    mean = float(np.mean(seconds))
    std = float(np.std(seconds, ddof=1))
    latency = mean + CALIBRATION_SIGMAS * std
    if not math.isfinite(latency) or latency <= 0:
        raise ValueError(f"calibrated baseline latency must be a positive number of seconds, got {latency}")
    logger.info(
        "baseline latency λ = %.3f ms (mean %.3f ms, σ %.3f ms, %d calls)", 1e3 * latency, 1e3 * mean, 1e3 * std, calls
    )
    return LatencyCalibration(latency, mean, std, calls, warmup, tuple(images.shape))
