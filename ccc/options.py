"""The one parser of ``key=value`` option strings, shared by stream definitions, method options and
reset-policy parameters (``tta_eval``); ``ccc-calibrate --adaptive-setting`` and ``tta-eval --cost``
read their numbers with its :func:`parse_value`.

An option string is ``key=value`` pairs joined by a separator: ``,`` for streams and method options
(``ccc-render:demo,difficulty=medium,seed=43``, ``tent:learning_rate=0.001,steps=2``), ``:`` for
the parameters of a reset policy (``periodic:every=1000``). Parsing is strict, each mistake one
line naming the option: a part without ``=``, an empty key or value, a key given twice, and a value
that Python would read as a number but that is no finite decimal (``0x10``, ``0o17``, ``1_000``,
``1e-400``, which underflows to 0, ``1e999``, ``nan``, ``inf``).

Values are typed: decimal integers (``-3``, ``2000``) as int, decimal floats (``0.5``, ``2e-4``) as
float, ``true``/``false`` as bool, ``none`` as None (any case), anything else as the string itself
(words, paths). A list is written with ``+`` between its items (``corruptions=noise+blur``) and
read with :func:`parse_list` by the caller whose option is a list.
"""

from __future__ import annotations

import math
import re
from typing import Any

OPTION_SEPARATOR = ","
"""Separates the options of a stream definition or of a method."""

LIST_SEPARATOR = "+"
"""Separates the items of a list value (``corruptions=noise+blur``)."""

_DECIMAL_INTEGER = re.compile(r"[+-]?\d+")
_DECIMAL_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
# What Python's int(), float() or literal_eval would read as a number (hex, octal, binary, digit
# separators, complex); such a text is a number written wrongly, not a word.
_PYTHON_NUMBER = re.compile(r"[+-]?(?:0[xXoObB][0-9a-fA-F_]+|[\d_]*\.?[\d_]+(?:[eE][+-]?[\d_]+)?[jJ]?)")
_NON_FINITE = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)


def parse_options(text: str, owner: str, separator: str = OPTION_SEPARATOR) -> dict[str, Any]:
    """Parse ``key=value`` pairs joined by ``separator`` into a dict of typed values (see
    :func:`parse_value`); an empty (or blank) text is no options.

    owner: what the options belong to, named in errors ("stream 'synthetic:'", "method 'tent'",
    "reset policy 'periodic'"). Raises ValueError in one line for a part that is not ``key=value``,
    a key given twice, an empty value or a badly written number.
    """
    options: dict[str, Any] = {}
    written: dict[str, str] = {}
    if not text.strip():
        return options
    for part in text.split(separator):
        key, raw = split_option(part, owner, separator)
        if key in options:
            raise ValueError(
                f"option {key!r} of {owner} is given twice ({key}={written[key]} and {key}={raw}); give it once"
            )
        options[key] = parse_value(key, raw, owner)
        written[key] = raw
    return options


def split_option(part: str, owner: str, separator: str = OPTION_SEPARATOR) -> tuple[str, str]:
    """``key=value`` as (key, value text), both stripped of blanks; ValueError in one line when
    ``=``, the key or the value is missing (separator: only to show the expected form)."""
    key, equals, raw = part.partition("=")
    key, raw = key.strip(), raw.strip()
    if not equals or not key:
        raise ValueError(f"options of {owner} must be key=value pairs separated by {separator!r}, got {part.strip()!r}")
    if not raw:
        raise ValueError(f"option {key!r} of {owner} has no value ({key}=); write {key}=VALUE or leave the option out")
    return key, raw


def parse_value(key: str, raw: str, owner: str) -> Any:
    """The typed value of option ``key`` written ``raw`` (not empty): int, float, bool, None or the
    text itself.

    Raises ValueError naming the key and the text for a number that is not a finite decimal
    (hex/octal/binary, digit separators, nan, inf, underflow to 0, overflow).
    """
    text = raw.strip()
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    if _DECIMAL_INTEGER.fullmatch(text):
        return int(text)
    if _DECIMAL_FLOAT.fullmatch(text):
        value = float(text)
        mantissa = re.split("[eE]", text)[0]
        if math.isinf(value) or (value == 0.0 and any(digit in "123456789" for digit in mantissa)):
            raise ValueError(
                f"option {key!r} of {owner} must be a finite decimal number, got {text!r} "
                f"({'overflows' if value else 'underflows to 0'} as a float)"
            )
        return value
    if _PYTHON_NUMBER.fullmatch(text) or _NON_FINITE.fullmatch(text):
        raise ValueError(
            f"option {key!r} of {owner} must be a finite decimal number (e.g. 16, 0.5, 2e-4), got {text!r}"
        )
    return text


def parse_list(key: str, value: Any, owner: str) -> tuple[str, ...]:
    """The items of list option ``key``, written ``a+b+c`` (a single word is a list of one);
    ValueError naming the key for a value that is not words or has an empty item."""
    items = tuple(item.strip() for item in value.split(LIST_SEPARATOR)) if isinstance(value, str) else ()
    if not items or not all(items):
        raise ValueError(
            f"option {key!r} of {owner} must be names joined by {LIST_SEPARATOR!r} (e.g. {key}=noise+blur), "
            f"got {value!r}"
        )
    return items
