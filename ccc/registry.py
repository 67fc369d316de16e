"""The one registry pattern of ccc and tta_eval: named entries of one kind, filled as modules import.

Every extension point (corruptions and their torch versions, calibration backends, TTA methods,
protocols, stream sources) follows the same convention (``tests/test_registry_wiring.py`` checks it):

- the entries of a kind live in one package, one module per entry (or per family of entries);
- the package's ``registry.py`` holds its ``REGISTRY`` and a ``register_<kind>()`` function;
- the package's ``__init__`` calls :func:`import_submodules`, so a new entry is one new file;
- each module ends in its ``register_<kind>(...)`` call (the built-in stream sources, which carry
  command-line options, register their ``StreamSource`` in ``REGISTRY`` directly);
- where the order of the entries means something (ImageNet-C's corruption order, the order of the
  ``--protocol`` choices), the entry carries an explicit ``order`` number and the registry sorts by
  it; otherwise entries are listed by name.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Colour:
...     name: str
...     order: int
>>> colours = Registry("colour", ordered=True)
>>> _ = colours.register(Colour("blue", 2)); _ = colours.register(Colour("red", 1))
>>> colours.names()
['red', 'blue']
>>> colours.get("green")
Traceback (most recent call last):
ValueError: unknown colour 'green'; available: red, blue
"""

from __future__ import annotations

import fnmatch
import importlib
import pkgutil
from collections.abc import Iterable, Iterator
from typing import Generic, Protocol, TypeVar


class NamedEntry(Protocol):
    """What a registry holds: an entry with a ``name`` (and an ``order`` in an ordered registry)."""

    @property
    def name(self) -> str: ...


EntryT = TypeVar("EntryT", bound=NamedEntry)


class Registry(Generic[EntryT]):
    """Named entries of one kind.

    kind: what an entry is, in error messages ("method", "protocol", ...).
    ordered: entries carry an ``order`` number (int or float) and are listed by it, then by name;
    otherwise they are listed by name.
    """

    def __init__(self, kind: str, *, ordered: bool = False) -> None:
        self.kind = kind
        self.ordered = ordered
        self._entries: dict[str, EntryT] = {}

    def register(self, entry: EntryT) -> EntryT:
        """Add ``entry`` under ``entry.name`` and return it; ValueError for a name already taken or,
        in an ordered registry, an ``order`` another entry has."""
        if entry.name in self._entries:
            raise ValueError(f"{self.kind} {entry.name!r} is already registered")
        if self.ordered:
            order = getattr(entry, "order", None)
            if not isinstance(order, (int, float)) or isinstance(order, bool):
                raise ValueError(f"{self.kind} {entry.name!r} needs a number 'order', got {order!r}")
            for other in self._entries.values():
                if getattr(other, "order") == order:
                    raise ValueError(f"{self.kind} {entry.name!r} has the order {order} of {other.name!r}")
        self._entries[entry.name] = entry
        return entry

    def _sort_key(self, entry: EntryT) -> tuple[float, str]:
        return (getattr(entry, "order") if self.ordered else 0, entry.name)

    def entries(self) -> list[EntryT]:
        """The entries, in the registry's order."""
        return sorted(self._entries.values(), key=self._sort_key)

    def names(self, pattern: str = "*") -> list[str]:
        """The names matching the shell-style ``pattern``, in the registry's order."""
        return [entry.name for entry in self.entries() if fnmatch.fnmatchcase(entry.name, pattern)]

    def get(self, name: str) -> EntryT:
        """The entry called ``name``; ValueError listing the registered names otherwise."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise ValueError(f"unknown {self.kind} {name!r}; available: {', '.join(self.names())}") from None

    def copy(self) -> Registry[EntryT]:
        """A registry of the same kind holding the same entries; registering in it leaves this one as
        it is (tests register toy entries in a copy)."""
        duplicate: Registry[EntryT] = Registry(self.kind, ordered=self.ordered)
        duplicate._entries = dict(self._entries)
        return duplicate

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[EntryT]:
        return iter(self.entries())

    def __len__(self) -> int:
        return len(self._entries)


def import_submodules(package: str, path: Iterable[str]) -> None:
    """Import every module of ``package`` (call as ``import_submodules(__name__, __path__)`` in its
    ``__init__``), so that each module's ``register`` call runs; modules whose name starts with an
    underscore are skipped (shared helpers import them where needed)."""
    for module in pkgutil.iter_modules(list(path)):
        if not module.name.startswith("_"):
            importlib.import_module(f"{package}.{module.name}")
