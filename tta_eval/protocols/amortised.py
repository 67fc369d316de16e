"""Tempora's amortised scenario as a live protocol: adapt until the overhead budget is spent, then freeze.

Overhead of an adapted batch: c_i = max(0, δ_i - λ) seconds (δ_i measured or from the cost model).
A method adapts on a batch while its spent overhead is below the budget B; the batch during which
the spend crosses B is still adapted (its overhead is only known afterwards), as in Tempora's code,
so the spend can exceed B by one batch's overhead. The specification's
m = max{j : Σ_{i ≤ j} c_i ≤ B} counts that batch as frozen instead. After that the model is frozen:
a copy of its prediction network in evaluation mode, so BatchNorm normalises with the running
statistics it tracked on the target stream. Per episode the method is reset, unfrozen and given a
fresh budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ccc.validation import check_non_negative, check_positive
from tta_eval.cli_options import CliOption
from tta_eval.metrics import batch_accuracy, domain_masks
from tta_eval.protocols._base import EpisodeSettings, ProtocolState, RunContext, ScoreColumn, SweepAxis
from tta_eval.protocols.registry import ProtocolEntry, register_protocol
from tta_eval.protocols.tempora import amortised_utility
from tta_eval.records import RecordTable

if TYPE_CHECKING:
    from tta_eval.methods import TTAMethod
    from tta_eval.protocols._execution import MethodRunner
    from tta_eval.records import BatchRecord


@dataclass(frozen=True, kw_only=True)
class AmortisedProtocol(EpisodeSettings):
    """Tempora's amortised utility: adapt until the adaptation overhead budget is spent, then freeze.

    budget: B in seconds >= 0, the total overhead Σ max(0, δ_i - λ) the method may spend per episode.
    Once spent, the model is frozen: it predicts without adapting, in evaluation mode, so BatchNorm
    uses the running statistics tracked on the target stream while adapting.
    """

    name: ClassVar[str] = "amortised"

    budget: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_non_negative("budget", self.budget)

    @property
    def needs_baseline_latency(self) -> bool:
        """The overhead of a batch is its time beyond λ."""
        return True


class _AmortisedState(ProtocolState):
    """Per method, the overhead spent in the current episode (seconds); frozen copies are the runners'."""

    def __init__(self, runners: list[MethodRunner]) -> None:
        super().__init__(runners)
        self.spent = {runner.label: 0.0 for runner in runners}

    def state_dict(self) -> dict[str, Any]:
        """The overhead spent per method label."""
        return {"spent": dict(self.spent)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the overhead spent (in place: the runner loop holds the dict)."""
        self.spent.clear()
        self.spent.update(state["spent"])


def run_amortised(
    methods: Mapping[str, TTAMethod],
    batches: Iterable[Any],
    protocol: AmortisedProtocol,
    context: RunContext,
) -> Iterator[BatchRecord]:
    """Run ``methods`` in lockstep over ``batches`` under Tempora's amortised scenario.

    The context's baseline_latency λ in seconds (> 0) is required. Adapted batches have ``adapted``
    True; frozen ones are non-adapting predictions of the frozen copy (``adapted`` False). Errors as
    in ``run_offline``.
    """
    from tta_eval.protocols._execution import check_nonfinite, lockstep

    baseline_latency = context.baseline_latency
    if baseline_latency is None:
        raise ValueError("the amortised protocol needs the baseline latency λ (seconds), got None")
    check_positive("baseline_latency", baseline_latency)
    with lockstep(methods, batches, protocol, context, _AmortisedState) as (state, stream):
        spent = state.spent
        for batch, new_episode in stream:
            for runner in state.runners:
                if new_episode:
                    runner.reset()
                    spent[runner.label] = 0.0
                if runner.frozen_network is None and spent[runner.label] >= protocol.budget:
                    runner.freeze()
                if runner.frozen_network is not None:
                    yield runner.predict(batch)
                    continue
                record = runner.adapt(batch)
                spent[runner.label] += max(0.0, record.seconds - baseline_latency)
                yield record
                check_nonfinite(record, protocol)


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
            domain: amortised_utility(accuracy[mask], adapted[mask]) for domain, mask in domain_masks(table).items()
        },
    }


def _score(
    table: RecordTable, protocol: AmortisedProtocol, baseline_latency: float | None, label: str
) -> list[dict[str, Any]]:
    if baseline_latency is None:
        raise ValueError("amortised utility needs the baseline latency λ, got None")
    return [amortised_score(table, protocol, baseline_latency)]


def _from_options(values: Mapping[str, Any], episode: dict[str, Any]) -> AmortisedProtocol:
    if values["budget_s"] is None:
        raise ValueError("--protocol amortised needs --budget-s B")
    return AmortisedProtocol(**episode, budget=values["budget_s"])


def _scenarios(values: tuple[float, ...], base: Mapping[str, Any]) -> list[tuple[str, EpisodeSettings]]:
    """One run per budget B."""
    return [(f"amortised_B={budget:g}s", AmortisedProtocol(**base, budget=budget)) for budget in values]


register_protocol(
    ProtocolEntry(
        name=AmortisedProtocol.name,
        summary="adapt until an overhead budget is spent, then freeze (Tempora)",
        settings=AmortisedProtocol,
        runner=run_amortised,
        from_options=_from_options,
        order=50,
        scorer=_score,
        score_columns=(
            ScoreColumn("utility", "U (%)"),
            ScoreColumn("adapted_fraction", "β (%)"),
            ScoreColumn("adapt_accuracy", "ā adapt (%)"),
            ScoreColumn("frozen_accuracy", "ā frozen (%)"),
            ScoreColumn("overhead_spent_seconds", "overhead spent (s)", percent=False, digits=3),
        ),
        options=(
            CliOption(
                "--budget-s",
                {
                    "type": float,
                    "help": "amortised: overhead budget B in seconds, the adaptation time beyond λ a method "
                    "may spend in total",
                },
            ),
        ),
        example=("--budget-s", "0.05"),
        sweep=SweepAxis(
            option="--budgets-s",
            metavar="B,…",
            help="amortised overhead budgets B in seconds, e.g. 1,2,4",
            score_key="budget_seconds",
            label="budget B (s)",
            scenarios=_scenarios,
        ),
    )
)
