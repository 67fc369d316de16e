"""The offline ("current") protocol: every batch is predicted and adapted on; time is ignored.

Continual: the protocol never resets a method (CCC). Episodic: the protocol resets every method to
its initial state at each domain change (the majority value of a metadata key changes between
consecutive batches) or every N batches. Several methods run in lockstep over one pass of the
stream, so they see exactly the same batches and the stream is decoded once. The per-batch timing
trace is recorded all the same (Tempora's continuous utility is computed from it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from tta_eval.protocols._base import EpisodeSettings, RunContext
from tta_eval.protocols.registry import ProtocolEntry, register_protocol

if TYPE_CHECKING:
    from tta_eval.methods import TTAMethod
    from tta_eval.records import BatchRecord


@dataclass(frozen=True, kw_only=True)
class OfflineProtocol(EpisodeSettings):
    """The offline ("current") protocol: every batch is predicted and adapted on; time is ignored.

    The per-batch timing trace is still recorded, so continuous utility can be computed afterwards.
    """

    name: ClassVar[str] = "offline"


def run_offline(
    methods: Mapping[str, TTAMethod],
    batches: Iterable[Any],
    protocol: EpisodeSettings = OfflineProtocol(),
    context: RunContext = RunContext(),
) -> Iterator[BatchRecord]:
    """Run ``methods`` (name → method module) in lockstep over ``batches`` and yield one record per method and batch.

    Methods are moved to the context's device. Methods with ``preparation_samples`` > 0 (EATA) first
    get the head of the stream through ``prepare``; those batches are held in memory and then
    evaluated as usual. protocol: its episode settings (resets, domain key, non-finite policy)
    apply. Raises ValueError for malformed batches, labels outside the model's output range or an
    empty stream, and NonFiniteLossError under ``nonfinite_loss="stop"``.
    """
    from tta_eval.protocols._execution import check_nonfinite, lockstep

    with lockstep(methods, batches, protocol, context) as (state, stream):
        for batch, new_episode in stream:
            for runner in state.runners:
                if new_episode:
                    runner.reset()
                record = runner.adapt(batch)
                yield record
                check_nonfinite(record, protocol)


def _from_options(values: Mapping[str, Any], episode: dict[str, Any]) -> OfflineProtocol:
    return OfflineProtocol(**episode)


register_protocol(
    ProtocolEntry(
        name=OfflineProtocol.name,
        summary="every batch predicted and adapted on, time ignored",
        settings=OfflineProtocol,
        runner=run_offline,
        from_options=_from_options,
        order=10,
        adapts_every_batch=True,
    )
)
