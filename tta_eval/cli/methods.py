"""``tta-eval methods``: the registered methods and their defaults."""

from __future__ import annotations

import argparse

from ccc.cli.common import HelpFormatter, examples

__all__ = ["add_command", "execute"]


def add_command(commands: argparse._SubParsersAction) -> None:
    """``tta-eval methods``: the registered methods and their defaults."""
    methods = commands.add_parser(
        "methods",
        help="list registered methods with their defaults",
        description="List registered methods with their defaults (the options of --method NAME:OPTION=VALUE).",
        formatter_class=HelpFormatter,
        epilog=examples("tta-eval methods", ("tta-eval methods 'e*a'", "eta, eata")),
    )
    methods.add_argument("pattern", nargs="?", default="*", help="shell-style name pattern")


def execute(arguments: argparse.Namespace) -> int:
    from tta_eval.methods import get_method, list_methods
    from tta_eval.methods.registry import reset_policy_defaults

    names = list_methods(arguments.pattern)
    if not names:
        raise ValueError(f"no method matches {arguments.pattern!r}; available: {', '.join(list_methods())}")
    for name in names:
        entry = get_method(name)
        print(f"{name}: {entry.description}")
        for option, value in entry.defaults().items():
            print(f"    {option} = {value!r}")
        if entry.sources:
            print(f"    sources: {entry.sources}")
    print("reset policies, for any method (--method NAME:reset=POLICY:param=value:…; docs/methods.md):")
    for policy in reset_policy_defaults():
        print(f"    {policy}")
    return 0
