"""``tta-eval compare``: a table and an overlay plot of run folders."""

from __future__ import annotations

import argparse
from pathlib import Path

from ccc.cli.common import HelpFormatter, examples

__all__ = ["COMPARE_EXAMPLES", "add_command", "execute"]

COMPARE_EXAMPLES = (
    (
        "tta-eval compare results",
        "every run folder below results/ "
        "(at any depth; name run folders or a glob when two hold the same method on one stream)",
    ),
    (
        "tta-eval compare results/demo_* --out comparison_demo",
        "the run folders a glob names, table and plot in comparison_demo/",
    ),
    (
        "tta-eval compare results/demo_baseline_30_transition+speed_200_seed_43_images_10000 results/discrete",
        "two run folders",
    ),
)
"""Example commands ending the help of ``run`` and ``compare``."""


def add_command(commands: argparse._SubParsersAction) -> None:
    """``tta-eval compare``: a table and an overlay plot of run folders."""
    compare = commands.add_parser(
        "compare",
        help="markdown table and overlay plot of run folders",
        description="A markdown table and an overlay plot of run folders written by 'tta-eval run'.",
        formatter_class=HelpFormatter,
        epilog=examples(*COMPARE_EXAMPLES),
    )
    compare.add_argument(
        "runs",
        nargs="+",
        type=Path,
        help="run folders written by 'tta-eval run', folders holding them (any depth) or glob patterns",
    )
    compare.add_argument(
        "--out",
        type=Path,
        default=Path("comparison"),
        help="folder for table (comparison.md) and plot (accuracy.png/.svg)",
    )


def execute(arguments: argparse.Namespace) -> int:
    from tta_eval.reports import comparison_table, plot_comparison
    from tta_eval.run_folder import find_run_folders, load_run

    runs = [load_run(path) for path in find_run_folders(arguments.runs)]
    table = comparison_table(runs)
    arguments.out.mkdir(parents=True, exist_ok=True)
    (arguments.out / "comparison.md").write_text(table)
    paths = plot_comparison(runs, arguments.out / "accuracy")
    print(table, end="")
    print(f"written: {arguments.out / 'comparison.md'}, {', '.join(str(path) for path in paths)}")
    return 0
