"""The protocols by name: one ``ProtocolEntry`` per protocol, in the order of ``ProtocolEntry.order``.

A protocol is one module in ``tta_eval.protocols`` that defines its settings (a frozen dataclass
deriving from ``EpisodeSettings``), its runner, its scorer, its command-line options and, if it has
one, its sweep axis, and registers them as one ``ProtocolEntry`` with :func:`register_protocol` at its
end; the package imports every public module (``ccc.registry.import_submodules``), so a new protocol
is one new file. The entry's ``order`` places it among the others (the choices of ``--protocol``, a
sweep's scenarios). Everything else (the run, the summary, the score tables, ``tta-eval run``/``sweep``)
asks the registry. Loads without torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ccc.registry import Registry
from tta_eval.cli_options import CliOption
from tta_eval.protocols._base import EpisodeSettings, Runner, ScoreColumn, Scorer, SweepAxis

if TYPE_CHECKING:
    from tta_eval.records import RecordTable


def _no_scores(
    table: RecordTable, settings: EpisodeSettings, baseline_latency: float | None, label: str
) -> list[dict[str, Any]]:
    return []


@dataclass(frozen=True)
class ProtocolEntry:
    """A registered protocol.

    name: the protocol's name (``settings.name``); summary: one line for ``tta-eval run --help``;
    settings: its settings class; order: its place among the protocols (a number, unique; listed
    by it: offline 10, continuous 20, alfarra 30, discrete 40, amortised 50); runner: see
    ``Runner``; scorer: see ``Scorer`` (none: no scores); score_columns: its score table's columns;
    options: its ``tta-eval run`` options; from_options(values, episode): its settings from the
    options' values (flag dest → value, None when not given) and the episode settings; ValueError
    naming the option for a missing or bad value; example: command-line options of a typical run
    (used by the tests and docs); sweep: what ``tta-eval sweep`` varies (None: not swept);
    adapts_every_batch: every batch is predicted and adapted on (its runs can be rescored for
    continuous utility).
    """

    name: str
    summary: str
    settings: type[EpisodeSettings]
    runner: Runner
    from_options: Callable[[Mapping[str, Any], dict[str, Any]], EpisodeSettings]
    order: float
    scorer: Scorer = _no_scores
    score_columns: tuple[ScoreColumn, ...] = ()
    options: tuple[CliOption, ...] = ()
    example: tuple[str, ...] = ()
    sweep: SweepAxis | None = None
    adapts_every_batch: bool = False


REGISTRY: Registry[ProtocolEntry] = Registry("protocol", ordered=True)
"""Every protocol, in the order of ``ProtocolEntry.order``."""


def register_protocol(entry: ProtocolEntry) -> ProtocolEntry:
    """Add ``entry`` to the registry (at the end of its module); ValueError for a name, an order or
    an option flag that is already registered, or a name that differs from its settings class's."""
    if entry.name != entry.settings.name:
        raise ValueError(
            f"protocol entry {entry.name!r} must carry its settings class's name, got {entry.settings.name!r}"
        )
    if entry.name in REGISTRY:
        raise ValueError(f"protocol {entry.name!r} is already registered")
    taken = {option.flag: other.name for other in REGISTRY for option in other.options}
    for option in entry.options:
        if option.flag in taken:
            raise ValueError(
                f"option {option.flag} of protocol {entry.name!r} is already protocol {taken[option.flag]!r}'s"
            )
    return REGISTRY.register(entry)


def get_protocol(name: str) -> ProtocolEntry:
    """The registered protocol ``name``; ValueError listing the available ones otherwise."""
    return REGISTRY.get(name)


def list_protocols() -> list[str]:
    """Names of the registered protocols, in their order."""
    return REGISTRY.names()


def protocol_entries() -> list[ProtocolEntry]:
    """The registered protocols, in their order."""
    return REGISTRY.entries()


def protocol_from_json(data: Mapping[str, Any]) -> EpisodeSettings:
    """Inverse of ``to_json``; ValueError for an unknown name or unknown fields."""
    values = dict(data)
    cls = get_protocol(values.pop("name", "offline")).settings
    valid = {item.name for item in dataclasses.fields(cls)}
    unknown = sorted(set(values) - valid)
    if unknown:
        raise ValueError(
            f"unknown field(s) {', '.join(unknown)} for protocol {cls.name!r}; valid: {', '.join(sorted(valid))}"
        )
    values = {key: tuple(value) if isinstance(value, list) else value for key, value in values.items()}
    return cls(**values)
