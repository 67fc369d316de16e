"""Registry of test-time adaptation methods: frozen entries, listing, creation with overrides.

Each method module of ``tta_eval.methods`` registers its own entry with ``register_method`` when it is
imported; ``tta_eval.methods`` imports every module of the package (``ccc.registry.import_submodules``),
so a new method is one new file. Methods are listed by name (``ccc.registry.Registry``).
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from dataclasses import dataclass
from typing import Any

from torch import nn

from ccc.options import parse_options
from ccc.registry import Registry
from ccc.validation import check_positive_int
from tta_eval.methods.base import require_batchnorm
from tta_eval.methods.reset import POLICY_SEPARATOR, RESET_POLICIES, NeverReset, PeriodicPolicy, ResetPolicy

RESET_POLICY_OPTION = "reset"
RESET_OPTION = "reset_every"
"""``reset_every=N`` is the short form of ``reset=periodic:every=N`` (None: ``reset=never``)."""


@dataclass(frozen=True)
class MethodEntry:
    """One registered method.

    name: registry key (the method's module is ``tta_eval/methods/<name>.py``); method_class: called as
    method_class(model, config); config_class: frozen dataclass whose defaults are the published
    values; description: one line; reset: default reset policy, as written after ``reset=`` (see
    ``parse_reset_policy``; "never", "periodic:every=1000", "rdumbpp", "asr", ...);
    needs_batchnorm: the method's rule needs BatchNorm layers (test-batch statistics, BN priors), so
    ``create`` refuses a model without them in one line; sources: papers and code the defaults come
    from; colour: its colour in every plot (a matplotlib colour; None: one picked from the name).
    """

    name: str
    method_class: type[nn.Module]
    config_class: type
    description: str
    reset: str = "never"
    needs_batchnorm: bool = True
    sources: str = ""
    colour: str | None = None

    def __post_init__(self) -> None:
        parse_reset_policy(self.reset)

    @property
    def reset_every(self) -> int | None:
        """Batches between the default periodic resets (None when the default policy is not periodic)."""
        return parse_reset_policy(self.reset).interval()

    def option_names(self) -> list[str]:
        """Names accepted by ``create`` for this method: config fields, ``reset`` and ``reset_every``."""
        return [field.name for field in dataclasses.fields(self.config_class)] + [RESET_POLICY_OPTION, RESET_OPTION]

    def defaults(self) -> dict[str, Any]:
        """All default option values, including the reset policy (every parameter written out) and
        ``reset_every`` (its period when periodic, else None)."""
        values = dataclasses.asdict(self.config_class())
        policy = parse_reset_policy(self.reset)
        values[RESET_POLICY_OPTION] = policy.text()
        values[RESET_OPTION] = policy.interval()
        return values


REGISTRY: Registry[MethodEntry] = Registry("method")
"""Every method, by name; each method module registers its own entry."""


def register_method(entry: MethodEntry) -> MethodEntry:
    """Add ``entry``; raises ValueError if its name is taken."""
    return REGISTRY.register(entry)


def list_methods(pattern: str = "*") -> list[str]:
    """Registered method names matching the shell-style ``pattern``, in alphabetical order."""
    return REGISTRY.names(pattern)


def get_method(name: str) -> MethodEntry:
    """The entry called ``name``; ValueError listing the registered names otherwise."""
    return REGISTRY.get(name)


def _coerce_option(owner: str, option: str, value: Any, default: Any, annotation: Any) -> Any:
    """Check ``value`` against the type of the field (int accepted where a float is expected); owner
    names the field's owner in the error ("method 'eta'", "reset policy 'asr'")."""
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
        if value is None:
            # The option parser reads the word "none" as None; a text option takes it as written
            # (ROID's prior_correction=none).
            return "none"
        choices = typing.get_args(annotation)
        expected = f"one of {', '.join(map(repr, choices))}" if choices else "a string"
    else:
        return value
    raise ValueError(f"option {option!r} of {owner} must be {expected}, got {value!r}")


def reset_policy_names() -> list[str]:
    """Names of the reset policies, in the order they are listed."""
    return list(RESET_POLICIES)


def reset_policy_defaults() -> list[str]:
    """Each reset policy with its default parameters, as written after ``reset=``."""
    return [policy_class().text() for policy_class in RESET_POLICIES.values()]


def parse_reset_policy(value: Any) -> ResetPolicy:
    """The reset policy written as ``NAME`` or ``NAME:param=value:param=value`` (None: never).

    NAME is one of ``reset_policy_names()``; parameters are the fields of the policy's class, parsed
    by ``ccc.options.parse_options`` with ':' between them (values as in ``--method`` options:
    decimal numbers, true/false, none, words). Raises ValueError in one line naming the valid
    policies or parameters for an unknown name or parameter, a malformed or repeated part or a bad
    value.
    """
    if value is None:
        return NeverReset()
    if not isinstance(value, str):
        raise ValueError(
            f"option {RESET_POLICY_OPTION!r} must be a reset policy such as 'periodic:every=1000' "
            f"(policies: {', '.join(RESET_POLICIES)}), got {value!r}"
        )
    name, _, parameter_text = value.partition(POLICY_SEPARATOR)
    name = name.strip()
    policy_class = RESET_POLICIES.get(name)
    if policy_class is None:
        raise ValueError(
            f"unknown reset policy {name!r}; valid policies: {', '.join(RESET_POLICIES)} "
            "(e.g. reset=periodic:every=1000)"
        )
    fields = {field.name: field for field in dataclasses.fields(policy_class)}
    owner = f"reset policy {name!r}"
    default_policy = policy_class()
    hints = typing.get_type_hints(policy_class)
    parameters = parse_options(parameter_text, owner, POLICY_SEPARATOR)
    for key, parameter in parameters.items():
        if key not in fields:
            valid = ", ".join(fields) if fields else "none"
            raise ValueError(f"unknown parameter {key!r} of {owner}; valid parameters: {valid}")
        parameters[key] = _coerce_option(owner, key, parameter, getattr(default_policy, key), hints.get(key))
    try:
        return policy_class(**parameters)
    except ValueError as error:
        raise ValueError(f"{owner}: {error}") from None


def resolve_config(name: str, **overrides: Any) -> tuple[Any, ResetPolicy]:
    """The validated config of method ``name`` with ``overrides`` applied, and its reset policy.

    overrides may set ``reset`` (a policy text, see ``parse_reset_policy``) or its short form
    ``reset_every`` (an integer >= 1 or None), not both. Raises ValueError for an unknown method, an
    unknown option (listing the valid ones), a value of the wrong type or out of range.
    """
    entry = get_method(name)
    valid = entry.option_names()
    unknown = sorted(set(overrides) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} for method "
            f"{name!r}; valid options: {', '.join(valid)}"
        )
    if RESET_POLICY_OPTION in overrides and RESET_OPTION in overrides:
        raise ValueError(
            f"give either {RESET_POLICY_OPTION!r} or its short form {RESET_OPTION!r} for method {name!r}, not both "
            f"(got {overrides[RESET_POLICY_OPTION]!r} and {overrides[RESET_OPTION]!r})"
        )
    if RESET_OPTION in overrides:
        reset_every = overrides.pop(RESET_OPTION)
        policy: ResetPolicy = (
            NeverReset() if reset_every is None else PeriodicPolicy(check_positive_int(RESET_OPTION, reset_every))
        )
    else:
        policy = parse_reset_policy(overrides.pop(RESET_POLICY_OPTION, entry.reset))
    default_config = entry.config_class()
    hints = typing.get_type_hints(entry.config_class)
    coerced = {
        option: _coerce_option(f"method {name!r}", option, value, getattr(default_config, option), hints.get(option))
        for option, value in overrides.items()
    }
    return dataclasses.replace(default_config, **coerced), policy


def create(name: str, model: nn.Module, **overrides: Any) -> nn.Module:
    """Build method ``name`` around a copy of ``model`` (``model`` itself is not modified).

    overrides: config fields of the method (see ``get_method(name).defaults()``) and the reset policy,
    ``reset`` (e.g. "periodic:every=500", "rdumbpp", "asr", "never") or its short form ``reset_every``
    (batches between periodic resets, or None); a policy other than never wraps the method in a
    ``ResetPolicyWrapper`` (``tta_eval.methods.reset``). The returned module's ``forward(images)``
    returns logits and adapts; ``reset()`` restores its initial state; ``last_step`` describes the
    last batch. Raises ValueError for unknown names/options, bad values, or a model without
    BatchNorm for a method that adapts BatchNorm.
    """
    entry = get_method(name)
    config, policy = resolve_config(name, **overrides)
    if entry.needs_batchnorm:
        require_batchnorm(model, name)
    return policy.wrap(entry.method_class(copy.deepcopy(model), config))
