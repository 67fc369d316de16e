"""Tempora's discrete scenario as a live protocol: batches arrive every γ seconds of simulated time.

Time is simulated, not slept: each method has its own pipeline (``tempora.DiscretePipeline``) whose
clock advances by the time charged for each served batch (measured or from the cost model). A
served batch is processed by the method's own call (predict, then adapt); a batch that is not
served gets no prediction and the method never sees it. Per episode the pipeline drains, the method
is reset and the arrival clock restarts. Records come out in stream order for every method
(the FIFO queue serves and evicts oldest first).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ccc.validation import check_non_negative_int, check_positive
from tta_eval.cli_options import CliOption
from tta_eval.metrics import batch_accuracy, domain_masks, format_milliseconds
from tta_eval.protocols._base import EpisodeSettings, ProtocolState, RunContext, ScoreColumn, SweepAxis, seconds_from_ms
from tta_eval.protocols.registry import ProtocolEntry, register_protocol
from tta_eval.protocols.tempora import DiscretePipeline, discrete_utility
from tta_eval.records import RecordTable

if TYPE_CHECKING:
    from tta_eval.methods import TTAMethod
    from tta_eval.protocols._execution import MethodRunner, StreamBatch
    from tta_eval.records import BatchRecord


@dataclass(frozen=True, kw_only=True)
class DiscreteProtocol(EpisodeSettings):
    """Tempora's discrete utility: batches arrive every γ seconds; batches not served are lost.

    Give exactly one of interval (γ in seconds, > 0) and utilisation (ρ = λ/γ, > 0; γ then follows
    from λ). buffer: batch slots b >= 0 holding arrivals while the pipeline is busy (0: arrivals
    during processing are lost; 1: the most recent arrival waits; b > 1: FIFO queue evicting its
    oldest entry when full).
    """

    name: ClassVar[str] = "discrete"

    interval: float | None = None
    utilisation: float | None = None
    buffer: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.interval is None) == (self.utilisation is None):
            raise ValueError(
                f"give exactly one of interval (seconds) and utilisation (λ/γ), got interval={self.interval!r}, "
                f"utilisation={self.utilisation!r}"
            )
        if self.interval is not None:
            check_positive("interval", self.interval)
        if self.utilisation is not None:
            check_positive("utilisation", self.utilisation)
        check_non_negative_int("buffer (batch slots)", self.buffer)

    @property
    def needs_baseline_latency(self) -> bool:
        """A utilisation is converted to an interval with λ."""
        return self.utilisation is not None

    def interval_seconds(self, baseline_latency: float | None) -> float:
        """γ in seconds: ``interval``, or λ / ``utilisation``."""
        if self.interval is not None:
            return float(self.interval)
        if baseline_latency is None:
            raise ValueError("utilisation needs the baseline latency λ to derive the arrival interval, got None")
        check_positive("baseline_latency", baseline_latency)
        return baseline_latency / self.utilisation


class _MethodPipeline:
    """One method's discrete pipeline; records of served and lost batches collect in ``ready``."""

    def __init__(self, runner: MethodRunner, interval: float, buffer: int) -> None:
        self.runner = runner
        self.ready: list[BatchRecord] = []
        self.first_index = 0
        self._interval = interval
        self._buffer = buffer
        self.pipeline = self._new_pipeline()

    def _new_pipeline(self) -> DiscretePipeline[StreamBatch]:
        return DiscretePipeline(self._interval, self._buffer, self._serve, self._drop)

    def _serve(self, position: int, batch: StreamBatch, start: float) -> float:
        record = dataclasses.replace(self.runner.adapt(batch), pickup_time=start)
        self.ready.append(record)
        return record.seconds

    def _drop(self, position: int, batch: StreamBatch) -> None:
        self.ready.append(self.runner.skip(batch))

    def restart(self, first_index: int) -> None:
        """Start a new episode whose first arrival is stream batch ``first_index``."""
        self.pipeline = self._new_pipeline()
        self.first_index = first_index

    def take_ready(self) -> list[BatchRecord]:
        """Records produced since the last call, in stream order."""
        records, self.ready = self.ready, []
        return records


def _fields_of(batch: StreamBatch) -> dict[str, Any]:
    """A waiting batch as tensors and plain values (``StreamBatch(**fields)`` rebuilds it)."""
    return {field.name: getattr(batch, field.name) for field in dataclasses.fields(batch)}


class _DiscreteState(ProtocolState):
    """Every method's pipeline: its queue, clock and the first arrival of the current episode."""

    def __init__(self, runners: list[MethodRunner], interval: float, buffer: int) -> None:
        super().__init__(runners)
        self.pipelines = [_MethodPipeline(runner, interval, buffer) for runner in runners]

    def state_dict(self) -> dict[str, Any]:
        """Per pipeline: its episode's first stream batch and its simulation state, the waiting batches
        as dicts of their fields (records are handed out at every batch boundary, so none is waiting)."""
        pipelines = []
        for state in self.pipelines:
            saved = state.pipeline.state_dict()
            saved["queue"] = [(position, _fields_of(batch)) for position, batch in saved["queue"]]
            pipelines.append({"first_index": state.first_index, "pipeline": saved})
        return {"pipelines": pipelines}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
        from tta_eval.protocols._execution import StreamBatch

        for pipeline, saved in zip(self.pipelines, state["pipelines"], strict=True):
            pipeline.first_index = int(saved["first_index"])
            queue = [(position, StreamBatch(**fields)) for position, fields in saved["pipeline"]["queue"]]
            pipeline.pipeline.load_state_dict({**saved["pipeline"], "queue": queue})


def run_discrete(
    methods: Mapping[str, TTAMethod],
    batches: Iterable[Any],
    protocol: DiscreteProtocol,
    context: RunContext = RunContext(),
) -> Iterator[BatchRecord]:
    """Run ``methods`` in lockstep over ``batches`` under Tempora's discrete scenario.

    The context's baseline_latency λ (seconds) is needed when the protocol gives a utilisation
    instead of an interval. Served batches have ``predicted`` True and ``pickup_time`` set (seconds
    since the episode's first arrival); lost batches are recorded with ``predicted`` False and 0
    correct. Errors as in ``run_offline``.
    """
    from tta_eval.protocols._execution import check_nonfinite, lockstep

    interval = protocol.interval_seconds(context.baseline_latency)

    def flush(pipelines: list[_MethodPipeline]) -> Iterator[BatchRecord]:
        for state in pipelines:
            for record in state.take_ready():
                yield record
                check_nonfinite(record, protocol)

    with lockstep(
        methods,
        batches,
        protocol,
        context,
        functools.partial(_DiscreteState, interval=interval, buffer=protocol.buffer),
    ) as (state, stream):
        pipelines = state.pipelines
        for batch, new_episode in stream:
            if new_episode:
                for state in pipelines:
                    state.pipeline.drain()
                yield from flush(pipelines)
                for state in pipelines:
                    state.runner.reset()
                    state.restart(batch.index)
            for state in pipelines:
                state.pipeline.arrive(batch.index - state.first_index, batch)
            yield from flush(pipelines)
        for state in pipelines:
            state.pipeline.drain()
        yield from flush(pipelines)


def discrete_score(table: RecordTable, protocol: DiscreteProtocol, baseline_latency: float | None) -> dict[str, Any]:
    """Tempora's discrete utility: utility, availability α, served_accuracy, plus the interval γ
    (seconds), utilisation ρ = λ/γ (when λ is known) and buffer; per_domain the same per domain."""
    interval = protocol.interval_seconds(baseline_latency)
    utilisation = protocol.utilisation
    if utilisation is None and baseline_latency is not None:
        utilisation = baseline_latency / interval
    accuracy = batch_accuracy(table)
    served = table.column("predicted")
    pressure = (
        f"ρ={100 * protocol.utilisation:.4g}%"
        if protocol.utilisation is not None
        else f"γ={format_milliseconds(interval)}"
    )
    return {
        "scenario": f"discrete {pressure} b={protocol.buffer}",
        "protocol": "discrete",
        "interval_seconds": interval,
        "utilisation": utilisation,
        "buffer": protocol.buffer,
        **discrete_utility(accuracy, served),
        "per_domain": {
            domain: discrete_utility(accuracy[mask], served[mask]) for domain, mask in domain_masks(table).items()
        },
    }


def _score(
    table: RecordTable, protocol: DiscreteProtocol, baseline_latency: float | None, label: str
) -> list[dict[str, Any]]:
    return [discrete_score(table, protocol, baseline_latency)]


def _from_options(values: Mapping[str, Any], episode: dict[str, Any]) -> DiscreteProtocol:
    if values["utilisation"] is None and values["interval_ms"] is None:
        raise ValueError("--protocol discrete needs --utilisation ρ or --interval-ms γ")
    return DiscreteProtocol(
        **episode,
        interval=seconds_from_ms("--interval-ms", values["interval_ms"]),
        utilisation=values["utilisation"],
        buffer=1 if values["buffer"] is None else values["buffer"],
    )


def _scenarios(values: tuple[float, ...], base: Mapping[str, Any]) -> list[tuple[str, EpisodeSettings]]:
    """One run per utilisation ρ."""
    return [
        (f"discrete_rho={utilisation:g}", DiscreteProtocol(**base, utilisation=utilisation)) for utilisation in values
    ]


register_protocol(
    ProtocolEntry(
        name=DiscreteProtocol.name,
        summary="batches arrive every γ, those not served are lost (Tempora)",
        settings=DiscreteProtocol,
        runner=run_discrete,
        from_options=_from_options,
        order=40,
        scorer=_score,
        score_columns=(
            ScoreColumn("utility", "U (%)"),
            ScoreColumn("availability", "α (%)"),
            ScoreColumn("served_accuracy", "ā served (%)"),
        ),
        options=(
            CliOption(
                "--utilisation",
                {
                    "type": float,
                    "help": "discrete: utilisation ρ = λ/γ, the plain model's share of the arrival interval "
                    "(1 = 100 %%: a batch every λ)",
                },
            ),
            CliOption(
                "--interval-ms",
                {
                    "type": float,
                    "help": "discrete: arrival interval γ in ms, the time between two batches "
                    "(instead of --utilisation)",
                },
            ),
            CliOption(
                "--buffer",
                {
                    "type": int,
                    "help": "discrete: buffer slots b >= 0, batches that may wait while the method is busy "
                    "(default: 1)",
                },
            ),
        ),
        example=("--utilisation", "0.5"),
        sweep=SweepAxis(
            option="--utilisations",
            metavar="ρ,…",
            help="discrete utilisations ρ = λ/γ (plain model's latency / arrival interval), e.g. 1,0.7,0.5,0.35,0.25",
            score_key="utilisation",
            label="utilisation ρ = λ/γ",
            scenarios=_scenarios,
            shared_options=("--buffer",),
        ),
    )
)
