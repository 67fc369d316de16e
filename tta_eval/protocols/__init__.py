"""Evaluation protocols: offline (continual or episodic), Alfarra et al.'s time-constrained protocol,
and Tempora's discrete, continuous and amortised scenarios.

Every protocol consumes a stream of batches, runs the methods in lockstep and yields one
``BatchRecord`` per method and batch, carrying the timing trace (e, ℓ). ``run_protocol`` dispatches
on the settings' type; ``tta_eval.protocols.tempora`` holds the pure utility functions.

>>> from tta_eval.protocols import AlfarraProtocol, evaluate_protocol
>>> tables = evaluate_protocol(methods, stream, AlfarraProtocol(speed=1.0))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from tta_eval.protocols.settings import (
    NONFINITE_POLICIES,
    PROTOCOLS,
    RESET_MODES,
    AlfarraProtocol,
    AmortisedProtocol,
    ContinuousProtocol,
    DiscreteProtocol,
    EpisodeSettings,
    NonFiniteLossError,
    OfflineProtocol,
    ProtocolSettings,
    protocol_from_json,
)
from tta_eval.protocols.timing import (
    COSTS_FILE,
    TIMING_MODES,
    CostModel,
    LatencyCalibration,
    MethodCost,
    Timing,
    calibrate_baseline_latency,
)
from tta_eval.records import BatchRecord, RecordTable

if TYPE_CHECKING:
    import torch

    from tta_eval.methods import TTAMethod

_RUNNERS = {
    "relative_speed": "alfarra",
    "run_alfarra": "alfarra",
    "run_amortised": "amortised",
    "run_discrete": "discrete",
    "frozen_copy": "execution",
    "predict_without_adapting": "execution",
    "prediction_network": "execution",
    "evaluate_offline": "offline",
    "run_offline": "offline",
}
"""Names whose modules import torch and the methods: loaded on first use (PEP 562), so that the
settings, and with them ``tta-eval --help``, load without torch."""


def __getattr__(name: str) -> Any:
    if name in _RUNNERS:
        return getattr(importlib.import_module(f"tta_eval.protocols.{_RUNNERS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_protocol(
    methods: Mapping[str, TTAMethod],
    batches: Iterable[Any],
    protocol: EpisodeSettings = OfflineProtocol(),
    device: str | torch.device = "cpu",
    progress: bool = False,
    timing: Timing | None = None,
    baseline_latency: float | None = None,
) -> Iterator[BatchRecord]:
    """Run ``methods`` over ``batches`` under ``protocol``; records as yielded by the protocol's runner.

    baseline_latency: λ in seconds; required by the amortised protocol and by a discrete protocol
    given as a utilisation (ValueError otherwise). timing: measured on ``device`` by default.
    """
    from tta_eval.protocols.alfarra import run_alfarra
    from tta_eval.protocols.amortised import run_amortised
    from tta_eval.protocols.discrete import run_discrete
    from tta_eval.protocols.offline import run_offline

    if isinstance(protocol, AlfarraProtocol):
        return run_alfarra(methods, batches, protocol, device, progress, timing)
    if isinstance(protocol, DiscreteProtocol):
        return run_discrete(methods, batches, protocol, device, progress, timing, baseline_latency)
    if isinstance(protocol, AmortisedProtocol):
        if baseline_latency is None:
            raise ValueError("the amortised protocol needs the baseline latency λ (seconds), got None")
        return run_amortised(methods, batches, protocol, baseline_latency, device, progress, timing)
    return run_offline(methods, batches, protocol, device, progress, timing)


def evaluate_protocol(
    methods: Mapping[str, TTAMethod],
    batches: Iterable[Any],
    protocol: EpisodeSettings = OfflineProtocol(),
    device: str | torch.device = "cpu",
    progress: bool = False,
    timing: Timing | None = None,
    baseline_latency: float | None = None,
) -> dict[str, RecordTable]:
    """``run_protocol`` collected into one RecordTable per method name."""
    tables = {name: RecordTable() for name in methods}
    for record in run_protocol(methods, batches, protocol, device, progress, timing, baseline_latency):
        tables[record.method].append(record)
    return tables


__all__ = [
    "COSTS_FILE",
    "NONFINITE_POLICIES",
    "PROTOCOLS",
    "RESET_MODES",
    "TIMING_MODES",
    "AlfarraProtocol",
    "AmortisedProtocol",
    "ContinuousProtocol",
    "CostModel",
    "DiscreteProtocol",
    "EpisodeSettings",
    "LatencyCalibration",
    "MethodCost",
    "NonFiniteLossError",
    "OfflineProtocol",
    "ProtocolSettings",
    "Timing",
    "calibrate_baseline_latency",
    "evaluate_offline",
    "evaluate_protocol",
    "frozen_copy",
    "predict_without_adapting",
    "prediction_network",
    "protocol_from_json",
    "relative_speed",
    "run_alfarra",
    "run_amortised",
    "run_discrete",
    "run_offline",
    "run_protocol",
]
