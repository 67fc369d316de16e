"""Command line: ``tta-eval run``, ``sweep``, ``rescore``, ``compare``, ``methods``, one module each.

Each command module has ``add_command(commands)`` (its parser, options and examples) and
``execute(arguments) -> int``; :mod:`.options` holds the options ``run`` and ``sweep`` share.
User mistakes end with a one-line "tta-eval: error: …" on stderr and exit code 2, never a traceback
(:func:`ccc.cli.common.run_command`).
Times on the command line carry their unit in the option name (``--threshold-ms``, ``--budget-s``).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from ccc.cli.common import HelpFormatter, OneLineErrorParser, examples, run_command
from ccc.execution import RayUnavailableError, TaskFailedError
from tta_eval.protocols import NonFiniteLossError

from . import compare, methods, rescore, run, sweep

__all__ = ["COMMANDS", "PROGRAM", "build_parser", "main"]

PROGRAM = "tta-eval"

COMMANDS = {"run": run, "sweep": sweep, "rescore": rescore, "compare": compare, "methods": methods}
"""Command name → its module (``add_command``, ``execute``), in the order ``--help`` lists them."""


def build_parser() -> argparse.ArgumentParser:
    """The ``tta-eval`` parser: one subcommand per command, each with its own options and examples."""
    parser = OneLineErrorParser(
        prog=PROGRAM,
        description="Evaluate test-time adaptation methods over a stream: offline, Alfarra et al.'s and "
        "Tempora's time-constrained protocols.",
        formatter_class=HelpFormatter,
        epilog=examples(*run.RUN_EXAMPLES[:1], *compare.COMPARE_EXAMPLES[:1], "tta-eval methods")
        + "\n\n'tta-eval COMMAND --help' shows a command's options and more examples.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        command.add_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tta-eval`` console script; returns the exit code (0 success, 1 run stopped by
    ``--nonfinite-loss stop``, 2 user error, 130 interrupted)."""
    parser = build_parser()
    arguments = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if arguments.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    user_errors = (ValueError, OSError, RayUnavailableError, TaskFailedError)
    return run_command(
        PROGRAM, lambda: COMMANDS[arguments.command].execute(arguments), user_errors, stopped=(NonFiniteLossError,)
    )
