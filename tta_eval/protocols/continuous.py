"""Tempora's continuous scenario: an offline run (no batch skipped) scored with latency penalties.

The run is the offline protocol's; the score is Tempora's continuous utility for one or more
thresholds T, computed from the records' timing trace (e, ℓ) and λ (``tempora.decay_factors``), so
a saved run can be rescored for any other T (``tta_eval.reports.rescore_run``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ccc.validation import check_positive
from tta_eval.cli_options import CliOption
from tta_eval.metrics import batch_accuracy, domain_masks, format_milliseconds
from tta_eval.protocols._base import EpisodeSettings, ScoreColumn, SweepAxis, seconds_from_ms
from tta_eval.protocols.offline import run_offline
from tta_eval.protocols.registry import ProtocolEntry, protocol_entries, register_protocol
from tta_eval.protocols.tempora import decay_factors, utility_decomposition
from tta_eval.records import RecordTable


@dataclass(frozen=True, kw_only=True)
class ContinuousProtocol(EpisodeSettings):
    """Tempora's continuous utility: an offline run (no batch skipped) scored with latency penalties.

    thresholds: one or more thresholds T in seconds, each > λ; the summary reports ā, κ̄, Cov(a, κ)
    and U_continuous for each. Any other T can be scored later from the trace (``tta-eval rescore``).
    """

    name: ClassVar[str] = "continuous"

    thresholds: tuple[float, ...] = (0.1,)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.thresholds, tuple) or not self.thresholds:
            raise ValueError(f"thresholds must be a non-empty tuple of seconds, got {self.thresholds!r}")
        for threshold in self.thresholds:
            check_positive("threshold", threshold)

    @property
    def needs_baseline_latency(self) -> bool:
        """The decay κ is defined relative to λ."""
        return True

    def check_baseline_latency(self, baseline_latency: float | None) -> None:
        """Every threshold must exceed λ (seconds)."""
        for threshold in self.thresholds:
            if baseline_latency is not None and threshold <= baseline_latency:
                raise ValueError(
                    f"threshold must be greater than the baseline latency λ = {1e3 * baseline_latency:.4g} ms, "
                    f"got {1e3 * threshold:.4g} ms"
                )


def check_trace(table: RecordTable, label: str = "") -> None:
    """ValueError unless every batch was predicted and adapted on and has a timing trace."""
    name = f"method {label!r}: " if label else ""
    if len(table) == 0:
        raise ValueError(f"{name}no records")
    if not (table.column("predicted").all() and table.column("adapted").all()):
        every_batch = " or ".join(entry.name for entry in protocol_entries() if entry.adapts_every_batch)
        raise ValueError(
            f"{name}continuous utility needs a run in which every batch was predicted and adapted on "
            f"(protocol {every_batch})"
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
    masks = domain_masks(table)
    scores = []
    for threshold in thresholds:
        decay = decay_factors(
            table.column("pickup_to_prediction"), table.column("prediction_to_ready"), baseline_latency, threshold
        )
        scores.append(
            {
                "scenario": f"continuous T={format_milliseconds(threshold)}",
                "protocol": "continuous",
                "threshold_seconds": threshold,
                **utility_decomposition(accuracy, decay),
                "per_domain": {
                    domain: utility_decomposition(accuracy[mask], decay[mask]) for domain, mask in masks.items()
                },
            }
        )
    return scores


def _score(
    table: RecordTable, protocol: ContinuousProtocol, baseline_latency: float | None, label: str
) -> list[dict[str, Any]]:
    if baseline_latency is None:
        raise ValueError("continuous utility needs the baseline latency λ, got None")
    return continuous_scores(table, baseline_latency, protocol.thresholds, label)


def _from_options(values: Mapping[str, Any], episode: dict[str, Any]) -> ContinuousProtocol:
    if not values["threshold_ms"]:
        raise ValueError("--protocol continuous needs at least one --threshold-ms T")
    return ContinuousProtocol(
        **episode, thresholds=tuple(seconds_from_ms("--threshold-ms", value) for value in values["threshold_ms"])
    )


def _scenarios(values: tuple[float, ...], base: Mapping[str, Any]) -> list[tuple[str, EpisodeSettings]]:
    """One offline run, scored for every threshold."""
    return [("continuous", ContinuousProtocol(**base, thresholds=tuple(values)))]


register_protocol(
    ProtocolEntry(
        name=ContinuousProtocol.name,
        summary="an offline run scored with Tempora's latency penalty",
        settings=ContinuousProtocol,
        runner=run_offline,
        from_options=_from_options,
        order=20,
        scorer=_score,
        score_columns=(
            ScoreColumn("utility", "U (%)"),
            ScoreColumn("mean_accuracy", "ā (%)"),
            ScoreColumn("mean_kappa", "κ̄", percent=False, digits=3),
            ScoreColumn("covariance", "Cov(a, κ)", percent=False, digits=5),
        ),
        options=(
            CliOption(
                "--threshold-ms",
                {
                    "type": float,
                    "action": "append",
                    "metavar": "T",
                    "help": "continuous: threshold T in ms, the delay budget (> λ) beyond which a prediction's "
                    "utility decays (repeatable)",
                },
            ),
        ),
        example=("--threshold-ms", "50"),
        sweep=SweepAxis(
            option="--thresholds-ms",
            metavar="T,…",
            help="continuous thresholds T in ms (delay budgets > λ), e.g. 50,100,200",
            score_key="threshold_seconds",
            label="threshold T (s)",
            scenarios=_scenarios,
            unit=1e-3,
        ),
        adapts_every_batch=True,
    )
)
