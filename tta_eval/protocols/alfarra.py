"""Alfarra et al.'s time-constrained protocol ("Evaluation of test-time adaptation under computational
time constraints", ICML 2024).

The stream reveals batches at rate η·r, where r is the rate at which the plain model keeps pace.
When a method adapts on batch t it is busy for C_t = ceil(η · δ_t / λ_t) stream slots (δ_t: its
time on the batch, λ_t: the time of a non-adapting forward pass of its network on the same batch,
both measured with device synchronisation; or C fixed by the user, or δ from a deterministic cost
model with λ_t = λ). The next C_t - 1 batches (C_t in the strict variant) are predicted by the most
recent adapted model without adaptation (or get no prediction in the single-model variant), then
the method adapts again. C ≡ 1 is the offline protocol.

Non-adapting predictions use the method's prediction network in its current layer modes (BatchNorm
layers that normalise with batch statistics keep doing so, as ``model.model(x)`` in the authors'
code) and change no parameter or buffer. The single-model variant records skipped batches as
unpredicted (all samples wrong); the authors' code draws random labels for them instead.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ccc.validation import check_in_range, check_positive_int
from tta_eval.cli_options import CliOption
from tta_eval.metrics import overall_accuracy, per_domain_accuracy
from tta_eval.protocols._base import EpisodeSettings, ProtocolState, RunContext, ScoreColumn, SweepAxis
from tta_eval.protocols.registry import ProtocolEntry, register_protocol
from tta_eval.records import RecordTable

if TYPE_CHECKING:
    from tta_eval.methods import TTAMethod
    from tta_eval.protocols._execution import MethodRunner
    from tta_eval.records import BatchRecord


@dataclass(frozen=True, kw_only=True)
class AlfarraProtocol(EpisodeSettings):
    """Alfarra et al.'s time-constrained protocol.

    speed: stream speed η in (0, 1] (1: the stream reveals a batch each time the plain model
        finishes one; smaller values slow the stream down).
    relative_speed: fixed relative adaptation speed C >= 1 for every adapted batch, or None to
        measure C_t = ceil(η · δ_t / λ_t) on each adapted batch (δ_t: the method's time on the batch,
        λ_t: the time of a non-adapting forward pass of its network on the same batch).
    strict: skip C batches after an adapted batch instead of C - 1 (the paper's stricter variant).
    single_model: skipped batches get no prediction (count as wrong) instead of the latest model's
        non-adapting prediction.
    """

    name: ClassVar[str] = "alfarra"

    speed: float = 1.0
    relative_speed: int | None = None
    strict: bool = False
    single_model: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in_range("speed", self.speed, 0.0, 1.0, include_low=False)
        if self.relative_speed is not None:
            check_positive_int("relative_speed", self.relative_speed)
        for flag in ("strict", "single_model"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be True or False, got {getattr(self, flag)!r}")


def relative_speed(speed: float, method_seconds: float, baseline_seconds: float) -> int:
    """C = ceil(η · δ / λ), at least 1; the ratio is rounded to 9 decimals first so that float error
    (0.1 · 30 = 3.0000000000000004) does not add a slot. speed: η in (0, 1]; times in seconds."""
    if baseline_seconds <= 0:
        return 1
    return max(1, math.ceil(round(speed * method_seconds / baseline_seconds, 9)))


class _AlfarraState(ProtocolState):
    """Per method, the batches still to be skipped (predicted without adapting) before it adapts again."""

    def __init__(self, runners: list[MethodRunner]) -> None:
        super().__init__(runners)
        self.busy_batches = {runner.label: 0 for runner in runners}

    def state_dict(self) -> dict[str, Any]:
        """The pending skips per method label."""
        return {"busy_batches": dict(self.busy_batches)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the pending skips (in place: the runner loop holds the dict)."""
        self.busy_batches.clear()
        self.busy_batches.update(state["busy_batches"])


def run_alfarra(
    methods: Mapping[str, TTAMethod],
    batches: Iterable[Any],
    protocol: AlfarraProtocol = AlfarraProtocol(),
    context: RunContext = RunContext(),
) -> Iterator[BatchRecord]:
    """Run ``methods`` in lockstep over ``batches`` under Alfarra et al.'s protocol; one record per
    method and batch, in stream order.

    Adapted batches have ``adapted`` True and ``relative_speed`` C_t (and ``baseline_seconds`` λ_t
    when C is measured); the following batches are non-adapting predictions or, with
    ``single_model``, unpredicted. At an episode boundary the methods are reset and adapt on the
    first batch of the episode. Errors as in ``run_offline``.
    """
    from tta_eval.protocols._execution import check_nonfinite, lockstep

    with lockstep(methods, batches, protocol, context, _AlfarraState) as (state, stream):
        busy_batches = state.busy_batches
        for batch, new_episode in stream:
            for runner in state.runners:
                if new_episode:
                    runner.reset()
                    busy_batches[runner.label] = 0
                if busy_batches[runner.label] > 0:
                    busy_batches[runner.label] -= 1
                    yield runner.skip(batch) if protocol.single_model else runner.predict(batch)
                    continue
                record = runner.adapt(batch)
                if protocol.relative_speed is not None:
                    slots = protocol.relative_speed
                else:
                    baseline = runner.reference_seconds(batch)
                    slots = relative_speed(protocol.speed, record.seconds, baseline)
                    record = dataclasses.replace(record, baseline_seconds=baseline)
                record = dataclasses.replace(record, relative_speed=slots)
                busy_batches[runner.label] = slots if protocol.strict else slots - 1
                yield record
                check_nonfinite(record, protocol)


def alfarra_score(table: RecordTable, protocol: AlfarraProtocol) -> dict[str, Any]:
    """Accuracy under Alfarra et al.'s protocol (utility = accuracy over all samples) and how often
    the method adapted: adapted_batch_fraction, predicted_fraction, mean_relative_speed (mean C_t)."""
    adapted = table.column("adapted")
    speeds = table.column("relative_speed")[adapted]
    per_domain = {
        domain: {"utility": value.accuracy, "accuracy": value.accuracy}
        for domain, value in per_domain_accuracy(table).items()
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


def _score(
    table: RecordTable, protocol: AlfarraProtocol, baseline_latency: float | None, label: str
) -> list[dict[str, Any]]:
    return [alfarra_score(table, protocol)]


def _from_options(values: Mapping[str, Any], episode: dict[str, Any]) -> AlfarraProtocol:
    return AlfarraProtocol(
        **episode,
        speed=1.0 if values["speed"] is None else values["speed"],
        relative_speed=values["relative_speed"],
        strict=bool(values["strict"]),
        single_model=bool(values["single_model"]),
    )


def _scenarios(values: tuple[float, ...], base: Mapping[str, Any]) -> list[tuple[str, EpisodeSettings]]:
    """One run per stream speed η."""
    return [(f"alfarra_eta={speed:g}", AlfarraProtocol(**base, speed=speed)) for speed in values]


register_protocol(
    ProtocolEntry(
        name=AlfarraProtocol.name,
        summary="a slow method skips batches (Alfarra et al.)",
        settings=AlfarraProtocol,
        runner=run_alfarra,
        from_options=_from_options,
        order=30,
        scorer=_score,
        score_columns=(
            ScoreColumn("accuracy", "accuracy (%)"),
            ScoreColumn("adapted_batch_fraction", "adapted batches (%)"),
            ScoreColumn("predicted_fraction", "predicted (%)"),
            ScoreColumn("mean_relative_speed", "mean C", percent=False, digits=2),
        ),
        options=(
            CliOption(
                "--speed",
                {
                    "type": float,
                    "help": "alfarra: stream speed η in (0, 1], the rate of the stream relative to the plain "
                    "model's pace (1: a batch every λ) (default: 1)",
                },
            ),
            CliOption(
                "--relative-speed",
                {
                    "type": int,
                    "help": "alfarra: fixed relative speed C >= 1 (batches a method needs per adapted batch) "
                    "instead of measuring it",
                },
            ),
            CliOption("--strict", {"action": "store_true", "help": "alfarra: skip C batches, not C - 1"}),
            CliOption("--single-model", {"action": "store_true", "help": "alfarra: skipped batches get no prediction"}),
        ),
        example=("--speed", "0.5"),
        sweep=SweepAxis(
            option="--speeds",
            metavar="η,…",
            help="alfarra stream speeds η in (0, 1] (stream rate relative to the plain model's pace), e.g. 1,0.5,0.25",
            score_key="speed",
            label="stream speed η",
            scenarios=_scenarios,
            shared_options=("--strict", "--single-model"),
        ),
    )
)
