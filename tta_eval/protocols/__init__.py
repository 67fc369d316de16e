"""Evaluation protocols: offline (continual or episodic), Tempora's continuous scenario, Alfarra et
al.'s time-constrained protocol, and Tempora's discrete and amortised scenarios.

Every protocol consumes a stream of batches, runs the methods in lockstep and yields one
``BatchRecord`` per method and batch, carrying the timing trace (e, ℓ). Each protocol is one module
that registers itself (``tta_eval.protocols.registry.register_protocol``): its settings, runner, scorer,
command-line options, sweep axis and its place among the protocols (``ProtocolEntry.order``).
Importing this package imports every public module of it (``ccc.registry.import_submodules``), so a
new protocol is one new file. ``run_protocol`` runs any protocol's settings through the registry;
``tta_eval.protocols.tempora`` holds the pure utility functions, ``tta_eval.protocols.timing`` the
clocks; the runners' shared machinery (``_execution``, which imports torch) is loaded on first use.

>>> from tta_eval.protocols import AlfarraProtocol, RunContext, evaluate_protocol
>>> tables = evaluate_protocol(methods, stream, AlfarraProtocol(speed=1.0), RunContext(device="cuda"))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ccc.registry import import_submodules
from tta_eval.cli_options import CliOption
from tta_eval.protocols._base import (
    NONFINITE_POLICIES,
    PRECISIONS,
    RESET_MODES,
    EpisodeSettings,
    NonFiniteLossError,
    ProtocolState,
    RunContext,
    ScoreColumn,
    SweepAxis,
    seconds_from_ms,
)
from tta_eval.protocols.alfarra import AlfarraProtocol, relative_speed, run_alfarra
from tta_eval.protocols.amortised import AmortisedProtocol, run_amortised
from tta_eval.protocols.continuous import ContinuousProtocol, continuous_scores
from tta_eval.protocols.discrete import DiscreteProtocol, run_discrete
from tta_eval.protocols.offline import OfflineProtocol, run_offline
from tta_eval.protocols.registry import (
    ProtocolEntry,
    get_protocol,
    list_protocols,
    protocol_entries,
    protocol_from_json,
    register_protocol,
)
from tta_eval.protocols.timing import (
    TIMING_MODES,
    CostModel,
    LatencyCalibration,
    MethodCost,
    Timing,
    calibrate_baseline_latency,
)
from tta_eval.records import RecordTable

if TYPE_CHECKING:
    from tta_eval.methods import TTAMethod
    from tta_eval.records import BatchRecord

import_submodules(__name__, __path__)

_EXECUTION = (
    "check_nonfinite",
    "frozen_copy",
    "lockstep",
    "precision_autocast",
    "predict_without_adapting",
    "prediction_network",
)
"""Names of ``tta_eval.protocols._execution``, which imports torch and the methods: loaded on first
use (PEP 562), so that the registry, and with it ``tta-eval --help``, loads without torch. A
protocol's runner builds on ``lockstep`` and ``check_nonfinite`` (imported inside the runner)."""


def __getattr__(name: str) -> Any:
    if name in _EXECUTION:
        return getattr(importlib.import_module("tta_eval.protocols._execution"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_protocol(
    methods: Mapping[str, TTAMethod],
    batches: Iterable[Any],
    protocol: EpisodeSettings = OfflineProtocol(),
    context: RunContext = RunContext(),
) -> Iterator[BatchRecord]:
    """Run ``methods`` (label → method) over ``batches`` under ``protocol``: the records its
    registered runner yields, one per method and batch.

    context: device, progress bar, timing (measured on the device by default) and the baseline
    latency λ in seconds, which the amortised protocol and a discrete protocol given as a
    utilisation need (ValueError otherwise).
    """
    return get_protocol(protocol.name).runner(methods, batches, protocol, context)


def evaluate_protocol(
    methods: Mapping[str, TTAMethod],
    batches: Iterable[Any],
    protocol: EpisodeSettings = OfflineProtocol(),
    context: RunContext = RunContext(),
) -> dict[str, RecordTable]:
    """``run_protocol`` collected into one RecordTable per method label."""
    tables = {name: RecordTable() for name in methods}
    for record in run_protocol(methods, batches, protocol, context):
        tables[record.method].append(record)
    return tables


def protocol_scores(
    table: RecordTable, protocol: EpisodeSettings, baseline_latency: float | None, label: str = ""
) -> list[dict[str, Any]]:
    """The protocol's scores for one method's records (its registered scorer; [] for the offline
    protocol); baseline_latency: λ in seconds where the protocol needs it."""
    return get_protocol(protocol.name).scorer(table, protocol, baseline_latency, label)


__all__ = [
    "NONFINITE_POLICIES",
    "PRECISIONS",
    "RESET_MODES",
    "TIMING_MODES",
    "AlfarraProtocol",
    "AmortisedProtocol",
    "CliOption",
    "ContinuousProtocol",
    "CostModel",
    "DiscreteProtocol",
    "EpisodeSettings",
    "LatencyCalibration",
    "MethodCost",
    "NonFiniteLossError",
    "OfflineProtocol",
    "ProtocolEntry",
    "ProtocolState",
    "RunContext",
    "ScoreColumn",
    "SweepAxis",
    "Timing",
    "calibrate_baseline_latency",
    "check_nonfinite",
    "continuous_scores",
    "evaluate_protocol",
    "frozen_copy",
    "get_protocol",
    "list_protocols",
    "lockstep",
    "precision_autocast",
    "predict_without_adapting",
    "prediction_network",
    "protocol_entries",
    "protocol_from_json",
    "protocol_scores",
    "register_protocol",
    "relative_speed",
    "run_alfarra",
    "run_amortised",
    "run_discrete",
    "run_offline",
    "run_protocol",
    "seconds_from_ms",
]
