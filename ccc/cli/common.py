"""What the console scripts (``ccc-*`` and ``tta-eval``) share: the ``--help`` layout, counted nouns
("1 shard", "3 shards"), argument types, and the one wrapper that turns user errors into one line
on stderr and exit code 2 (:func:`run_command`, :class:`UsageError`).

Each option's help ends with its default ("(default: 64)") when it has a meaningful one, and the
description and the epilog (the examples) keep their own line breaks. ``tta_eval`` imports this
module; it imports nothing heavy, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from ccc.host_memory import reuse_freed_memory

__all__ = [
    "INTERRUPTED_EXIT_CODE",
    "STOPPED_EXIT_CODE",
    "USER_ERROR_EXIT_CODE",
    "HelpFormatter",
    "OneLineErrorParser",
    "UsageError",
    "add_image_folder_arguments",
    "image_source_arguments",
    "count",
    "examples",
    "float_list",
    "format_default",
    "integer_at_least",
    "name_list",
    "one_line",
    "run_command",
]

USER_ERROR_EXIT_CODE = 2
"""Exit code of a user mistake (bad option, missing file, …), as argparse uses."""

INTERRUPTED_EXIT_CODE = 130
"""Exit code after Ctrl-C (128 + SIGINT)."""

STOPPED_EXIT_CODE = 1
"""Exit code of a run that stopped as the user asked (e.g. ``tta-eval --nonfinite-loss stop``)."""


class UsageError(ValueError):
    """A command-line mistake the parser itself cannot see (e.g. two options that exclude each other)."""


class OneLineErrorParser(argparse.ArgumentParser):
    """The console scripts' ArgumentParser: a mistake the parser sees (an unknown option, a bad choice,
    a missing argument) is one line on stderr, ``PROG: error: MESSAGE (see --help)``, and exit code 2,
    instead of argparse's usage block. Subcommand parsers (``add_subparsers``) are of the same class."""

    def error(self, message: str) -> NoReturn:
        """Print ``message`` as one line and exit with :data:`USER_ERROR_EXIT_CODE`."""
        print(f"{self.prog}: error: {' '.join(message.split())} (see --help)", file=sys.stderr)
        sys.exit(USER_ERROR_EXIT_CODE)


def add_image_folder_arguments(group: argparse._ArgumentGroup) -> None:
    """``--imagenet PATH`` (or ``--dataset NAME[/SPLIT]:PATH``, see :func:`image_source_arguments`), ``--classes
    FILE`` and ``--skip-bad-images``: the source image folder of ccc-generate and ccc-calibrate, with the same
    meaning in both."""
    group.add_argument(
        "--imagenet", metavar="PATH", help="ImageNet validation folder PATH/<wnid>/*.JPEG (default: $CCC_IMAGENET)"
    )
    group.add_argument(
        "--dataset",
        metavar="NAME[/SPLIT]:PATH",
        help="a small-resolution dataset as published instead of --imagenet: cifar10 or cifar100 (torchvision's "
        "pickle batches; split test by default) or tinyimagenet (the tiny-imagenet-200 folder; split val), "
        "written once into the cache as class folders (docs/datasets.md); e.g. cifar10:~/data",
    )
    group.add_argument(
        "--classes",
        metavar="FILE",
        help="explicit class list, one class folder name per line (line k = class k); needed for an ImageNet "
        "folder with extra or missing classes",
    )
    group.add_argument(
        "--skip-bad-images",
        action="store_true",
        help="exclude unreadable images (deterministically) instead of stopping",
    )


def image_source_arguments(
    arguments: argparse.Namespace, note: Callable[[str], None] | None = None
) -> tuple[str | None, str | None]:
    """The source image folder and class list file the arguments name: ``--imagenet`` and ``--classes``, or
    the class folders of ``--dataset`` (written into the cache on first use,
    :func:`ccc.datasets.folders.dataset_image_folder`; told to ``note`` first) and their own class list; None
    where not given.

    Raises:
        UsageError: ``--dataset`` with ``--imagenet`` or ``--classes``, or a ``--dataset`` that is malformed
            or not in its published format (one line).
    """
    if arguments.dataset is None:
        return arguments.imagenet, arguments.classes
    if arguments.imagenet is not None or arguments.classes is not None:
        raise UsageError(
            "--dataset names the source images and their classes: do not combine it with --imagenet or --classes"
        )
    from ccc.datasets.folders import CLASS_LIST_NAME, dataset_image_folder

    if note is not None:
        note(f"--dataset {arguments.dataset}: its images as class folders in the cache (written once) …")
    try:
        folder = dataset_image_folder(arguments.dataset)
    except ValueError as error:
        raise UsageError(str(error)) from None
    return str(folder), str(folder / CLASS_LIST_NAME)


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


def integer_at_least(minimum: int) -> Callable[[str], int]:
    """argparse type: an integer >= ``minimum`` ("1_000" and "1,000" accepted)."""

    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", "").replace(",", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def name_list(text: str) -> list[str]:
    """argparse type: comma-separated names (blanks dropped)."""
    return [name.strip() for name in text.split(",") if name.strip()]


def float_list(text: str) -> list[float]:
    """argparse type: comma-separated numbers."""
    try:
        return [float(value) for value in text.split(",") if value.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def one_line(error: BaseException) -> str:
    """The error's message on one line (line breaks and runs of spaces become one space); a failed
    file operation as "FILE: reason" (or "FILE -> FILE2: reason", or the reason alone without a file),
    without "[Errno N]"."""
    if isinstance(error, OSError) and error.strerror:
        if error.filename is None:
            text = error.strerror
        elif error.filename2 is not None:
            text = f"{error.filename} -> {error.filename2}: {error.strerror}"
        else:
            text = f"{error.filename}: {error.strerror}"
    else:
        text = str(error)
    return " ".join(text.split())


def run_command(
    program: str,
    command: Callable[[], int],
    user_errors: tuple[type[BaseException], ...] = (ValueError, OSError),
    interrupted: str = "interrupted",
    stopped: tuple[type[BaseException], ...] = (),
) -> int:
    """Run ``command`` and return its exit code; a user error becomes one line and exit code 2.

    Args:
        program: the console script's name, the prefix of every message.
        command: runs the parsed command line and returns the exit code.
        user_errors: exceptions that are user mistakes, printed as ``PROGRAM: error: MESSAGE``.
        interrupted: what to print after ``PROGRAM:`` on Ctrl-C (exit code 130).
        stopped: exceptions that end a run as the user asked, printed as ``PROGRAM: stopped: MESSAGE``
            (exit code 1).

    Before the command, freed tensor buffers are kept for reuse (``ccc.host_memory.reuse_freed_memory``).
    """
    reuse_freed_memory()
    try:
        return command()
    except stopped as error:
        print(f"{program}: stopped: {one_line(error)}", file=sys.stderr)
        return STOPPED_EXIT_CODE
    except user_errors as error:
        print(f"{program}: error: {one_line(error)}", file=sys.stderr)
        return USER_ERROR_EXIT_CODE
    except KeyboardInterrupt:
        print(f"{program}: {interrupted}", file=sys.stderr)
        return INTERRUPTED_EXIT_CODE
