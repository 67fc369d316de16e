"""``tta-eval rescore``: saved runs' continuous utility for other thresholds."""

from __future__ import annotations

import argparse
from pathlib import Path

from ccc.cli.common import HelpFormatter, examples
from tta_eval.protocols import seconds_from_ms

__all__ = ["RUN_FOLDER", "add_command", "execute"]

RUN_FOLDER = "results/demo_baseline_30_transition+speed_100_seed_43"
"""The README's 224×224 demo run folder (``DEMO_STREAM``'s), named in the examples of ``rescore``."""


def add_command(commands: argparse._SubParsersAction) -> None:
    """``tta-eval rescore``: saved runs' continuous utility for other thresholds."""
    rescore = commands.add_parser(
        "rescore",
        help="continuous utility of saved runs for other thresholds",
        description="Tempora's continuous utility of saved runs for other thresholds T (from their timing traces).",
        formatter_class=HelpFormatter,
        epilog=examples(
            (
                f"tta-eval rescore {RUN_FOLDER} --threshold-ms 50 --threshold-ms 400 --baseline-latency-ms 40",
                "the README's 224×224 demo run: an offline run stores no λ, so give it (a continuous run's is used)",
            ),
            (
                f"tta-eval rescore {RUN_FOLDER} --threshold-ms 100 --baseline-latency-ms 20 --json scores.json",
                "another λ, scores also as JSON",
            ),
        ),
    )
    rescore.add_argument("runs", nargs="+", type=Path, help="run folders of protocol offline or continuous")
    rescore.add_argument(
        "--threshold-ms", type=float, action="append", required=True, metavar="T", help="threshold T in ms (repeatable)"
    )
    rescore.add_argument(
        "--baseline-latency-ms",
        type=float,
        default=None,
        help="λ, the plain model's latency per batch in ms (default: the one a continuous run stored; "
        "an offline run stores none)",
    )
    rescore.add_argument("--json", type=Path, default=None, help="also write the scores as JSON here (default: none)")


def execute(arguments: argparse.Namespace) -> int:
    from tta_eval.reports import rescore_run, scores_table
    from tta_eval.run_folder import write_json

    thresholds = tuple(seconds_from_ms("--threshold-ms", value) for value in arguments.threshold_ms)
    latency = seconds_from_ms("--baseline-latency-ms", arguments.baseline_latency_ms)
    results = [rescore_run(path, thresholds, latency) for path in arguments.runs]
    for result in results:
        print(f"run {result['run']} (λ = {1e3 * result['baseline_latency_seconds']:.4g} ms):")
        print()
        print(scores_table(result["methods"]), end="")
    if arguments.json is not None:
        write_json(arguments.json, results if len(results) > 1 else results[0])
        print(f"written: {arguments.json}")
    return 0
