"""Adding a protocol is one module and its registration: a protocol defined here, registered for the
test only, is run, scored, tabulated and swept by ``tta-eval run`` and ``tta-eval sweep``, with its
own option refused under other protocols, without any other file knowing it."""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from ccc.registry import Registry
from ccc.validation import check_positive_int
from tests.tta_eval.tta_helpers import TINY_FACTORY, run_cli
from tta_eval.metrics import batch_accuracy, domain_masks
from tta_eval.protocols import (
    CliOption,
    EpisodeSettings,
    ProtocolEntry,
    RunContext,
    ScoreColumn,
    SweepAxis,
    check_nonfinite,
    list_protocols,
    lockstep,
    protocol_entries,
    register_protocol,
)
from tta_eval.protocols import registry as protocol_registry
from tta_eval.records import BatchRecord, RecordTable

STREAM = "synthetic:num_batches=6,batch_size=16,domain_length=2,image_size=8"


@dataclass(frozen=True, kw_only=True)
class EveryKthProtocol(EpisodeSettings):
    """Adapt on every ``period``-th batch, predict the others without adapting."""

    name: ClassVar[str] = "every_kth"

    period: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_int("period", self.period)


@dataclass(frozen=True, kw_only=True)
class EveryOtherProtocol(EveryKthProtocol):
    """Another name for the same protocol."""

    name: ClassVar[str] = "every_other"


def run_every_kth(
    methods: Mapping[str, Any], batches: Iterable[Any], protocol: EveryKthProtocol, context: RunContext
) -> Iterator[BatchRecord]:
    with lockstep(methods, batches, protocol, context) as (state, stream):
        for batch, new_episode in stream:
            for runner in state.runners:
                if new_episode:
                    runner.reset()
                if batch.index % protocol.period:
                    yield runner.predict(batch)
                    continue
                record = runner.adapt(batch)
                yield record
                check_nonfinite(record, protocol)


def score_every_kth(
    table: RecordTable, protocol: EveryKthProtocol, baseline_latency: float | None, label: str
) -> list[dict[str, Any]]:
    accuracy = batch_accuracy(table)
    adapted = table.column("adapted")
    return [
        {
            "scenario": f"every {protocol.period}th",
            "protocol": EveryKthProtocol.name,
            "period": protocol.period,
            "utility": float(accuracy.mean()),
            "adapted_share": float(adapted.mean()),
            "per_domain": {
                domain: {"utility": float(accuracy[mask].mean())} for domain, mask in domain_masks(table).items()
            },
        }
    ]


def from_options(values: Mapping[str, Any], episode: dict[str, Any]) -> EveryKthProtocol:
    if values["period"] is None:
        raise ValueError("--protocol every_kth needs --period K")
    return EveryKthProtocol(**episode, period=values["period"])


ENTRY = ProtocolEntry(
    name=EveryKthProtocol.name,
    summary="adapt on every k-th batch",
    settings=EveryKthProtocol,
    runner=run_every_kth,
    from_options=from_options,
    order=15,
    scorer=score_every_kth,
    score_columns=(ScoreColumn("utility", "U (%)"), ScoreColumn("adapted_share", "adapted share (%)")),
    options=(CliOption("--period", {"type": int, "help": "every_kth: adapt on every K-th batch"}),),
    example=("--period", "3"),
    sweep=SweepAxis(
        option="--periods",
        metavar="K,…",
        help="every_kth periods",
        score_key="period",
        label="period K",
        scenarios=lambda values, base: [
            (f"every_{int(value)}", EveryKthProtocol(**base, period=int(value))) for value in values
        ],
    ),
)


@pytest.fixture
def registered(monkeypatch):  # type: ignore[no-untyped-def]
    """The protocol registered for one test, in a copy of the registry that the test leaves behind."""
    registry = Registry("protocol", ordered=True)
    for entry in protocol_entries():
        registry.register(entry)
    monkeypatch.setattr(protocol_registry, "REGISTRY", registry)
    register_protocol(ENTRY)
    yield ENTRY


def common(tmp_path, command: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [
        command,
        "--stream",
        STREAM,
        "--model",
        TINY_FACTORY,
        "--method",
        "tent",
        "--domain-key",
        "domain",
        "--out",
        str(tmp_path),
        "--no-progress",
        "--cost",
        "tent=2",
        "--baseline-latency-ms",
        "10",
    ]


def test_a_registered_protocol_runs_scores_and_sweeps_from_the_command_line(tmp_path, capsys, registered):
    code, out, err = run_cli(
        capsys, *common(tmp_path, "run"), "--name", "run", "--protocol", "every_kth", "--period", "3"
    )
    assert code == 0, err
    assert "every 3th:" in out and "| adapted share (%) |" in out
    code, _, err = run_cli(capsys, *common(tmp_path, "run"), "--name", "wrong", "--period", "3")
    assert (
        code == 2 and err.strip() == "tta-eval: error: --period applies to --protocol every_kth, got --protocol offline"
    )
    code, out, err = run_cli(capsys, *common(tmp_path, "sweep"), "--name", "sweep", "--periods", "2,3")
    assert code == 0, err
    with open(tmp_path / "sweep" / "results.csv", newline="") as handle:
        rows = [
            row
            for row in csv.DictReader(handle)
            if row["protocol"] == "every_kth" and row["domain"] == "all" and row["method"] == "tent"
        ]
    assert {row["parameter"]: float(row["adapted_share"]) for row in rows} == {
        "2": pytest.approx(3 / 6),
        "3": pytest.approx(2 / 6),
    }
    assert (tmp_path / "sweep" / "utility_every_kth.png").is_file()


def test_a_protocol_takes_its_place_from_its_order_not_from_when_it_registered(registered):
    """Registered last, ordered 15: the second choice of --protocol and of a sweep's scenarios."""
    assert list_protocols()[:3] == ["offline", "every_kth", "continuous"]
    assert [entry.name for entry in protocol_entries()] == list_protocols()


def test_the_registration_ends_with_the_test():
    assert "every_kth" not in list_protocols()


def test_registering_a_taken_name_or_option_is_refused(registered):
    with pytest.raises(ValueError, match="protocol 'every_kth' is already registered"):
        register_protocol(ENTRY)
    other = ProtocolEntry(
        name="offline", summary="", settings=EveryKthProtocol, runner=run_every_kth, from_options=from_options, order=60
    )
    with pytest.raises(ValueError, match="must carry its settings class's name"):
        register_protocol(other)
    with pytest.raises(ValueError, match="protocol 'every_other' has the order 15 of 'every_kth'"):
        register_protocol(dataclasses.replace(ENTRY, name="every_other", settings=EveryOtherProtocol, options=()))
