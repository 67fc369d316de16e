"""``ccc-calibrate``: import, inspect (and, later, compute and plot) calibration tables.

Subcommands are entries of :data:`SUBCOMMANDS` (a name, a help line, a function that adds the
arguments, and a function that runs the command and returns the exit code). To add ``compute`` or
``plot``, write those two functions and append a :class:`Subcommand`; :func:`main` needs no change.

User mistakes (missing file, invalid table, refused pickle, failed download) end with one line on
stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Callable, Sequence

import numpy as np

from ccc.cache import DownloadError
from ccc.calibration.published import PUBLISHED_MATRIX_URL, import_ccc_pickle
from ccc.calibration.commands import add_compute_arguments, add_plot_arguments, run_compute, run_plot
from ccc.calibration.table import SEVERITIES, CalibrationError, CalibrationTable
from ccc.cli.console import HelpFormatter, count, examples

PROGRAM = "ccc-calibrate"
USER_ERROR_EXIT_CODE = 2
_INFO_SEVERITIES = (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)


@dataclasses.dataclass(frozen=True)
class Subcommand:
    """One ``ccc-calibrate`` subcommand.

    Attributes:
        name: the word on the command line.
        help: one-line description shown by ``--help``.
        add_arguments: adds the subcommand's arguments to its parser.
        run: executes the parsed arguments and returns the process exit code.
        examples: example commands ending the subcommand's ``--help``: a command, or (command, comment).
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    examples: tuple[str | tuple[str, str], ...] = ()


def _add_import_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SRC", help="published CCC pickle: a file path or an http(s) URL")
    parser.add_argument("--out", required=True, metavar="FILE", help="calibration table to write (.npz)")
    parser.add_argument(
        "--cache-dir", metavar="DIR", default=None,
        help="download cache folder (default: $CCC_CACHE_DIR, else ~/.cache/ccc)",
    )
    parser.add_argument("--no-progress", action="store_true", help="do not show a download progress bar")


def _run_import(arguments: argparse.Namespace) -> int:
    table = import_ccc_pickle(
        arguments.source, cache_dir=arguments.cache_dir, progress=not arguments.no_progress
    )
    written = table.save(arguments.out)
    print(f"wrote {written}: {count(len(table.pairs()), 'pair')}, checksum {table.checksum()}")
    return 0


def _add_info_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="calibration table (.npz)")


def describe_table(table: CalibrationTable) -> str:
    """A human-readable multi-line summary of ``table`` (what ``ccc-calibrate info`` prints)."""
    metadata = table.metadata
    corruptions = table.corruptions
    accuracy = table.accuracy_array
    possible_pairs = len(corruptions) * (len(corruptions) - 1)
    lines = [
        f"checksum:      {table.checksum()}",
        f"model:         {metadata.model_name}",
        f"weights:       sha256 {metadata.model_weights_sha256 or 'unknown'}",
        f"preprocessing: {metadata.preprocessing}",
        f"image set:     {metadata.image_set_description}",
        f"               {metadata.image_count} images, file list sha256 "
        f"{metadata.image_set_sha256 or 'unknown'}",
        f"source:        {metadata.source or '(computed)'}"
        + (f" (sha256 {metadata.source_sha256})" if metadata.source_sha256 else ""),
        f"created:       {metadata.created} with ccc {metadata.library_version}",
    ]
    if metadata.notes:
        lines.append(f"notes:         {metadata.notes}")
    lines += [
        f"corruptions:   {len(corruptions)}: {', '.join(corruptions)}",
        f"pairs:         {len(table.pairs())} of {possible_pairs} ordered pairs",
        f"accuracy:      min {accuracy.min():.2f} %, max {accuracy.max():.2f} %, "
        f"mean {accuracy.mean():.2f} % over all cells",
        f"images/cell:   min {table.image_counts_array.min()}, max {table.image_counts_array.max()}",
        "single-corruption accuracy (%), other severity 0, mean over pairs:",
    ]
    columns = [int(np.flatnonzero(SEVERITIES == severity)[0]) for severity in _INFO_SEVERITIES]
    width = max(len(name) for name in corruptions)
    lines.append("  " + " " * width + "".join(f"  s={severity:<4g}" for severity in _INFO_SEVERITIES))
    for name in corruptions:
        try:
            curve = table.single_corruption_accuracy(name)
        except CalibrationError:
            lines.append(f"  {name:<{width}}  (in no pair)")
            continue
        lines.append(f"  {name:<{width}}" + "".join(f"  {curve[column]:6.2f}" for column in columns))
    if table.difficulty_presets:
        lines.append("difficulty presets:")
        for name, preset in table.difficulty_presets.items():
            lines.append(
                f"  {name}: target {preset.target_accuracy:g} %, {len(preset.corruptions)} corruptions: "
                f"{', '.join(preset.corruptions)}"
            )
    else:
        lines.append("difficulty presets: none")
    return "\n".join(lines)


def _run_info(arguments: argparse.Namespace) -> int:
    print(describe_table(CalibrationTable.load(arguments.file)))
    return 0


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand(
        "import",
        "convert the published CCC accuracy-matrix pickle (file or URL) into a calibration table",
        _add_import_arguments,
        _run_import,
        (
            (f"ccc-calibrate import {PUBLISHED_MATRIX_URL} --out calibration/resnet50.npz", "the published ResNet-50 matrices"),
            ("ccc-calibrate import ~/Downloads/ccc_accuracy_matrix.pickle --out calibration/resnet50.npz", "a pickle already downloaded"),
        ),
    ),
    Subcommand(
        "info",
        "summarise a calibration table",
        _add_info_arguments,
        _run_info,
        (
            ("ccc-calibrate info calibration/resnet50.npz", "corruptions, presets, accuracy ranges, metadata"),
            ("ccc-calibrate info calibration/demo.npz", "the demo world's table"),
        ),
    ),
    Subcommand(
        "compute",
        "compute a calibration table for a model on ImageNet validation images (resumable)",
        add_compute_arguments,
        run_compute,
        (
            ("ccc-calibrate compute --demo --adaptive --out calibration/demo.npz", "the demo world's table (no ImageNet, minutes)"),
            (
                "ccc-calibrate compute --imagenet /data/imagenet/val --adaptive --device cuda --out calibration/resnet50_adaptive.npz",
                "ResNet-50 on ImageNet, measuring only the cells the severity paths need",
            ),
            ("ccc-calibrate compute --model mymodels:vit --weights vit.pt --out calibration/vit.npz", "your own model (module:function factory)"),
        ),
    ),
    Subcommand(
        "plot",
        "draw the 21×21 accuracy grid of corruption pairs with target contours and paths (PNG)",
        add_plot_arguments,
        run_plot,
        (
            ("ccc-calibrate plot calibration/resnet50.npz --out grid.png --target 20", "every pair with its path to 20 %"),
            "ccc-calibrate plot calibration/resnet50.npz --out fog_snow.png --pairs fog:snow --contours 40,20",
        ),
    ),
)
"""The registered subcommands, in ``--help`` order; extend this tuple to add one."""


def build_parser(subcommands: Sequence[Subcommand] = SUBCOMMANDS) -> argparse.ArgumentParser:
    """The argument parser with one subparser per entry of ``subcommands``."""
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Import and inspect CCC calibration tables (accuracy grids per corruption pair).",
        formatter_class=HelpFormatter,
        epilog=examples(*(entry for subcommand in subcommands for entry in subcommand.examples[:1]))
        + "\n\n'ccc-calibrate COMMAND --help' shows a command's options and more examples.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for subcommand in subcommands:
        command_parser = commands.add_parser(
            subcommand.name,
            help=subcommand.help,
            description=subcommand.help,
            formatter_class=HelpFormatter,
            epilog=examples(*subcommand.examples) if subcommand.examples else None,
        )
        subcommand.add_arguments(command_parser)
        command_parser.set_defaults(run=subcommand.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``ccc-calibrate``; returns the exit code (0 success, 2 user error)."""
    arguments = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if arguments.verbose else logging.WARNING, format="%(name)s: %(message)s"
    )
    try:
        return arguments.run(arguments)
    except (CalibrationError, DownloadError, OSError) as error:
        message = " ".join(str(error).split())
        print(f"{PROGRAM}: error: {message}", file=sys.stderr)
        return USER_ERROR_EXIT_CODE


if __name__ == "__main__":
    sys.exit(main())
