"""Registry of named method settings: frozen entries with a source for every value, listing, look-up.

Each module of ``tta_eval.method_settings`` registers its entries with ``register_method_settings``
when it is imported (``demo.py``: the demo world's; ``cifar.py``: the public CIFAR-10-C and
CIFAR-100-C code's). The precedence a run applies (``tta_eval.settings``): the user's ``--method
name:option=value`` > the method settings > the method's published (ImageNet) default; options that
make one choice together (``LINKED_OPTIONS``) are taken from one place: when the user sets one of
them, the settings give none of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ccc.registry import Registry
from ccc.validation import MAX_BATCH_SIZE, check_positive_int

LINKED_OPTIONS: tuple[frozenset[str], ...] = (
    frozenset({"reset", "reset_every"}),  # one reset policy, two spellings
    frozenset({"optimizer", "nesterov"}),  # Nesterov momentum exists for SGD only
)
"""Options that make one choice together: the user's value for one of them excludes the settings' for all."""


@dataclass(frozen=True)
class SettingValue:
    """One option's value and where it comes from (``source``: repository and file, or a module)."""

    value: Any
    source: str


@dataclass(frozen=True)
class MethodSettings:
    """One named table of method options.

    name: registry key (``--settings NAME``); heading: starts the note a run prints about the values
    it applied; options: method registry name → option → ``SettingValue`` (every value accepted by
    the method's config, see ``tta_eval.methods.resolve_config``); batch_size: the run's samples per
    batch in [1, 65536] unless the user gives one (None: the run's default); omitted: method registry
    name → why it keeps its defaults, or what of the public setting its options cannot express
    (docs/methods.md lists both).
    """

    name: str
    heading: str
    options: Mapping[str, Mapping[str, SettingValue]]
    batch_size: SettingValue | None = None
    omitted: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.batch_size is not None:
            check_positive_int("batch_size", self.batch_size.value, MAX_BATCH_SIZE)

    def open_options(self, method: str, given: Mapping[str, Any]) -> dict[str, Any]:
        """The options these settings give method ``method`` (a registry name) that ``given`` (the
        user's options) leaves open: none of an option the user sets, nor of the ``LINKED_OPTIONS``
        of one the user sets."""
        taken = set(given).union(*(linked for linked in LINKED_OPTIONS if linked & given.keys()))
        return {
            option: setting.value for option, setting in self.options.get(method, {}).items() if option not in taken
        }


REGISTRY: Registry[MethodSettings] = Registry("method settings")
"""Every named table of method options, by name; each module of the package registers its own."""


def register_method_settings(entry: MethodSettings) -> MethodSettings:
    """Add ``entry``; raises ValueError if its name is taken."""
    return REGISTRY.register(entry)


def get_method_settings(name: str) -> MethodSettings:
    """The method settings called ``name``; ValueError listing the valid names otherwise."""
    return REGISTRY.get(name)


def list_method_settings() -> list[str]:
    """The names of the registered method settings, in alphabetical order."""
    return REGISTRY.names()


def format_options(options: Mapping[str, Any]) -> str:
    """``options`` as ``--method`` option text: ``option=value`` joined by ", " (floats in shortest
    form, booleans as true/false)."""
    return ", ".join(f"{option}={_value_text(value)}" for option, value in options.items())


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)
