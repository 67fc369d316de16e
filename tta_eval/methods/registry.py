"""Registry of test-time adaptation methods: frozen entries, listing, creation with overrides.

Each method module of ``tta_eval.methods`` registers its own entry with ``register_method`` when it is
imported; ``tta_eval.methods`` imports every module of the package, so a new method is one new file.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import typing
from dataclasses import dataclass
from typing import Any

from torch import nn

from tta_eval.methods.base import require_batchnorm
from tta_eval.methods.reset import PeriodicReset
from ccc.validation import check_positive_int

RESET_OPTION = "reset_every"


@dataclass(frozen=True)
class MethodEntry:
    """One registered method.

    name: registry key (the method's module is ``tta_eval/methods/<name>.py``); method_class: called as
    method_class(model, config); config_class: frozen dataclass whose defaults are the published
    values; description: one line; reset_every: default periodic reset in batches (None = never);
    needs_batchnorm: the method's rule needs BatchNorm layers (test-batch statistics, BN priors), so
    ``create`` refuses a model without them in one line; sources: papers and code the defaults come
    from; colour: its colour in every plot (a matplotlib colour; None: one picked from the name).
    """

    name: str
    method_class: type[nn.Module]
    config_class: type
    description: str
    reset_every: int | None = None
    needs_batchnorm: bool = True
    sources: str = ""
    colour: str | None = None

    def option_names(self) -> list[str]:
        """Names accepted by ``create`` for this method: config fields and ``reset_every``."""
        return [field.name for field in dataclasses.fields(self.config_class)] + [RESET_OPTION]

    def defaults(self) -> dict[str, Any]:
        """All default option values, including ``reset_every``."""
        values = dataclasses.asdict(self.config_class())
        values[RESET_OPTION] = self.reset_every
        return values


_REGISTRY: dict[str, MethodEntry] = {}


def register_method(entry: MethodEntry) -> MethodEntry:
    """Add ``entry``; raises ValueError if its name is taken."""
    if entry.name in _REGISTRY:
        raise ValueError(f"method name {entry.name!r} is already registered")
    _REGISTRY[entry.name] = entry
    return entry


def list_methods(pattern: str = "*") -> list[str]:
    """Registered method names matching the shell-style ``pattern``, in alphabetical order."""
    return sorted(name for name in _REGISTRY if fnmatch.fnmatchcase(name, pattern))


def get_method(name: str) -> MethodEntry:
    """The entry called ``name``; ValueError listing the registered names otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; available: {', '.join(list_methods())}") from None


def _coerce_option(method: str, option: str, value: Any, default: Any, annotation: Any) -> Any:
    """Check ``value`` against the type of the field (int accepted where a float is expected)."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        expected = "a boolean"
    elif isinstance(default, float):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        expected = "a number"
    elif isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        expected = "an integer"
    elif isinstance(default, str):
        if isinstance(value, str):
            return value
        choices = typing.get_args(annotation)
        expected = f"one of {', '.join(map(repr, choices))}" if choices else "a string"
    else:
        return value
    raise ValueError(f"option {option!r} of method {method!r} must be {expected}, got {value!r}")


def resolve_config(name: str, **overrides: Any) -> tuple[Any, int | None]:
    """The validated config of method ``name`` with ``overrides`` applied, and its reset period.

    Raises ValueError for an unknown method, an unknown option (listing the valid ones), a value of
    the wrong type or out of range.
    """
    entry = get_method(name)
    valid = entry.option_names()
    unknown = sorted(set(overrides) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} for method "
            f"{name!r}; valid options: {', '.join(valid)}"
        )
    reset_every = overrides.pop(RESET_OPTION, entry.reset_every)
    if reset_every is not None:
        check_positive_int(RESET_OPTION, reset_every)
    default_config = entry.config_class()
    hints = typing.get_type_hints(entry.config_class)
    coerced = {
        option: _coerce_option(name, option, value, getattr(default_config, option), hints.get(option))
        for option, value in overrides.items()
    }
    return dataclasses.replace(default_config, **coerced), reset_every


def create(name: str, model: nn.Module, **overrides: Any) -> nn.Module:
    """Build method ``name`` around a copy of ``model`` (``model`` itself is not modified).

    overrides: config fields of the method (see ``get_method(name).defaults()``) and
    ``reset_every`` (batches between resets, or None). The returned module's ``forward(images)``
    returns logits and adapts; ``reset()`` restores its initial state; ``last_step`` describes the
    last batch. Raises ValueError for unknown names/options, bad values, or a model without
    BatchNorm for a method that adapts BatchNorm.
    """
    entry = get_method(name)
    config, reset_every = resolve_config(name, **overrides)
    if entry.needs_batchnorm:
        require_batchnorm(model, name)
    method = entry.method_class(copy.deepcopy(model), config)
    if reset_every is not None:
        method = PeriodicReset(method, reset_every)
    return method
