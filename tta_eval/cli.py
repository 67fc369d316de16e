"""Command line: ``tta-eval run``, ``tta-eval compare``, ``tta-eval methods``.

User mistakes end with a one-line "tta-eval: error: …" on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from tta_eval.experiment import ExperimentSettings, MethodSpec, run_experiment
from tta_eval.methods import get_method, list_methods
from tta_eval.metrics import DEFAULT_COLLAPSE_SPAN, DEFAULT_WINDOW
from tta_eval.models import ModelSpec
from tta_eval.protocols import NonFiniteLossError, OfflineProtocol
from tta_eval.reports import comparison_table, load_run, plot_comparison
from tta_eval.streams import StreamOptions

PROGRAM = "tta-eval"
USER_ERROR_EXIT = 2
RUN_STOPPED_EXIT = 1


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Evaluate test-time adaptation methods over a stream (offline protocol).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run methods over a stream and write a run folder")
    run.add_argument(
        "--stream",
        required=True,
        help="an image folder in ImageFolder layout (root/<class>/<image>), 'synthetic[:option=value,...]', "
        "or '<scheme>:<location>' for a registered stream source",
    )
    run.add_argument(
        "--method",
        action="append",
        required=True,
        metavar="NAME[:OPTION=VALUE,...]",
        help="method to run (repeatable), e.g. rdumb, eata, tent:learning_rate=0.001; see 'tta-eval methods'",
    )
    run.add_argument("--model", default="resnet50", help="torchvision model name or 'module:function' factory")
    run.add_argument(
        "--weights",
        default=None,
        help="torchvision weights name (IMAGENET1K_V1 for resnet50 by default, DEFAULT, none) or a state_dict file",
    )
    run.add_argument("--normalization", choices=("auto", "imagenet", "none"), default="auto")
    run.add_argument("--device", default="cpu", help="cpu, cuda or cuda:INDEX (default: cpu)")
    run.add_argument("--batch-size", type=int, default=64)
    run.add_argument("--num-workers", type=int, default=0, help="DataLoader workers for image folders")
    run.add_argument("--image-size", type=int, default=224, help="centre-crop size for image folders")
    run.add_argument("--shuffle-seed", type=int, default=0, help="fixed shuffling of image folders")
    run.add_argument("--no-shuffle", action="store_true", help="read image folders in sorted (class) order")
    run.add_argument("--max-samples", type=int, default=None, help="stop after this many samples")
    run.add_argument("--domain-key", default=None, help="metadata key naming each sample's domain")
    episodic = run.add_mutually_exclusive_group()
    episodic.add_argument("--episodic-domain", metavar="KEY", help="episodic: reset methods when KEY changes")
    episodic.add_argument("--episodic-every", type=int, metavar="N", help="episodic: reset methods every N batches")
    run.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="samples per accuracy window")
    run.add_argument(
        "--collapse-reference",
        default="source",
        help="'source' (run the source model as reference), an accuracy in [0, 1], or 'none'",
    )
    run.add_argument("--collapse-span", type=int, default=DEFAULT_COLLAPSE_SPAN, help="samples below the reference")
    run.add_argument("--nonfinite-loss", choices=("continue", "stop"), default="continue")
    run.add_argument("--out", type=Path, default=Path("results"), help="folder holding run folders")
    run.add_argument("--name", default=None, help="run folder name (default: from the stream)")
    run.add_argument("--overwrite", action="store_true", help="replace an existing run folder")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")

    compare = commands.add_parser("compare", help="markdown table and overlay plot of run folders")
    compare.add_argument("runs", nargs="+", type=Path, help="run folders written by 'tta-eval run'")
    compare.add_argument("--out", type=Path, default=Path("comparison"), help="folder for table and plot")

    methods = commands.add_parser("methods", help="list registered methods with their defaults")
    methods.add_argument("pattern", nargs="?", default="*", help="shell-style name pattern")
    return parser


def _collapse_reference(text: str) -> str | float | None:
    if text == "source":
        return "source"
    if text.lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"--collapse-reference must be 'source', 'none' or an accuracy in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"--collapse-reference accuracy must be in [0, 1], got {value}")
    return value


def _run(arguments: argparse.Namespace) -> int:
    if arguments.episodic_domain:
        protocol = OfflineProtocol(
            reset="domain", domain_key=arguments.episodic_domain, nonfinite_loss=arguments.nonfinite_loss
        )
    elif arguments.episodic_every is not None:
        protocol = OfflineProtocol(
            reset="batches",
            reset_every_batches=arguments.episodic_every,
            domain_key=arguments.domain_key,
            nonfinite_loss=arguments.nonfinite_loss,
        )
    else:
        protocol = OfflineProtocol(domain_key=arguments.domain_key, nonfinite_loss=arguments.nonfinite_loss)
    settings = ExperimentSettings(
        stream=arguments.stream,
        methods=tuple(MethodSpec.parse(text) for text in arguments.method),
        model=ModelSpec(arguments.model, arguments.weights, arguments.normalization),
        output_root=arguments.out,
        run_name=arguments.name,
        device=arguments.device,
        stream_options=StreamOptions(
            batch_size=arguments.batch_size,
            num_workers=arguments.num_workers,
            image_size=arguments.image_size,
            shuffle_seed=None if arguments.no_shuffle else arguments.shuffle_seed,
        ),
        max_samples=arguments.max_samples,
        protocol=protocol,
        window=arguments.window,
        collapse_reference=_collapse_reference(arguments.collapse_reference),
        collapse_span=arguments.collapse_span,
        overwrite=arguments.overwrite,
        progress=not arguments.no_progress,
    )
    run_dir = run_experiment(settings)
    print(comparison_table([load_run(run_dir)]), end="")
    print(f"run folder: {run_dir}")
    return 0


def _compare(arguments: argparse.Namespace) -> int:
    runs = [load_run(path) for path in arguments.runs]
    table = comparison_table(runs)
    arguments.out.mkdir(parents=True, exist_ok=True)
    (arguments.out / "comparison.md").write_text(table)
    paths = plot_comparison(runs, arguments.out / "accuracy")
    print(table, end="")
    print(f"written: {arguments.out / 'comparison.md'}, {', '.join(str(path) for path in paths)}")
    return 0


def _methods(arguments: argparse.Namespace) -> int:
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
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tta-eval`` console script; returns the exit code."""
    parser = _build_parser()
    arguments = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if arguments.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    handlers = {"run": _run, "compare": _compare, "methods": _methods}
    try:
        return handlers[arguments.command](arguments)
    except NonFiniteLossError as error:
        print(f"{PROGRAM}: stopped: {error}", file=sys.stderr)
        return RUN_STOPPED_EXIT
    except (ValueError, FileNotFoundError, NotADirectoryError, PermissionError) as error:
        print(f"{PROGRAM}: error: {error}", file=sys.stderr)
        return USER_ERROR_EXIT
    except KeyboardInterrupt:
        print(f"{PROGRAM}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
