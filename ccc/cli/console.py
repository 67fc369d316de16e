"""What the console scripts (``ccc-*`` and ``tta-eval``) share in what they print: the ``--help``
layout and counted nouns ("1 shard", "3 shards").

Each option's help ends with its default ("(default: 64)") when it has a meaningful one, and the
description and the epilog (the examples) keep their own line breaks. ``tta_eval`` imports this
module; it imports nothing heavy, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

__all__ = ["HelpFormatter", "count", "examples", "format_default"]


def format_default(value: object) -> str:
    """A default as a user would type it: lists space-separated, floats in shortest form, the rest as str()."""
    if isinstance(value, (list, tuple)):
        return " ".join(format_default(item) for item in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's and epilog's line breaks; appends "(default: VALUE)" to an option's help.

    Nothing is appended when the help already mentions its default (the word "default"), when the
    default is None, False, empty or suppressed (flags, repeatable options and options whose absence
    the help explains), or for positional arguments.
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or (isinstance(default, (str, list, tuple)) and not default)
            or "default" in text.lower()
        ):
            return action.help
        shown = format_default(default).replace("%", "%%")
        return f"{text} (default: {shown})" if text else f"(default: {shown})"


def examples(*commands: str | Sequence[str]) -> str:
    """An epilog listing example commands: each entry one command, or (command, comment) lines."""
    lines = ["examples:"]
    for entry in commands:
        if isinstance(entry, str):
            lines.append(f"  {entry}")
        else:
            command, comment = entry
            lines += [f"  # {comment}", f"  {command}"]
    return "\n".join(lines)


def count(number: int, noun: str, plural: str | None = None) -> str:
    """``number`` with thousands separators and ``noun`` in singular or plural ("1 shard", "2,500 images").

    plural: the plural form (default: ``noun`` + "s").
    """
    return f"{number:,} {noun if number == 1 else plural or noun + 's'}"
