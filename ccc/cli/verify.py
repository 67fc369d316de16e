"""``ccc-verify``: check a run folder against its manifest.

Example::

    ccc-verify shards/baseline_20_transition+speed_2000_seed_43
    ccc-verify RUN --no-decode                                   # sizes and sha256 only (fast)
    ccc-verify RUN --calibration calibration/resnet50.npz --imagenet /data/imagenet/val   # also the plan hash
    ccc-verify RUN --no-decode --accuracy                        # a model's realised accuracy against the target

Prints one line per shard that is not intact (missing, unfinished, truncated, altered,
undecodable) and a summary. ``--accuracy`` then scores a model on every sample and reports its
realised accuracy against the stream's target (``ccc.realised_accuracy``). Exit code 0 when every
shard is intact, 1 when problems were found, 2 for a usage error (no such folder, no manifest).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from ccc.calibration import CalibrationError
from ccc.cli.common import (
    HelpFormatter,
    OneLineErrorParser,
    UsageError,
    count,
    examples,
    image_source_arguments,
    integer_at_least,
    run_command,
)
from ccc.realised_accuracy import DEFAULT_WINDOW, describe_realised, score_stream, summarise_realised
from ccc.shards.manifest import ManifestError, describe_renderer, load_manifest
from ccc.shards.mirror import MIRROR_NAME, MirrorError, check_mirror
from ccc.stream.sources import ImageFolderError, read_class_list
from ccc.stream.spec import CCC_KIND, PlanError

PROGRAM = "ccc-verify"
PROBLEMS_EXIT_CODE = 1


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser of ``ccc-verify``."""
    parser = OneLineErrorParser(
        prog=PROGRAM,
        description="Check a CCC run folder (shards) against its manifest.",
        formatter_class=HelpFormatter,
        epilog=examples(
            (
                "ccc-verify shards/demo_baseline_30_transition+speed_100_seed_43",
                "the README's 224×224 demo stream (a demo stream's plan hash too)",
            ),
            (
                "ccc-verify shards/demo_baseline_30_transition+speed_100_seed_43 --no-decode",
                "sizes and sha256 only (fast)",
            ),
            (
                "ccc-verify shards/baseline_20_transition+speed_2000_seed_43 "
                "--calibration calibration/resnet50.npz --imagenet /data/imagenet/val",
                "an ImageNet stream: also check the plan hash",
            ),
            (
                "ccc-verify shards/demo_baseline_30_transition+speed_100_seed_43 --no-decode --accuracy "
                "--max-samples 3000",
                "the demo model's realised accuracy on the first 3,000 images against the stream's target",
            ),
        ),
    )
    parser.add_argument(
        "folder",
        metavar="DIR",
        help="run folder written by ccc-generate (holds manifest.json), or a ccc-mirror folder (mirror.json)",
    )
    parser.add_argument("--no-decode", action="store_true", help="check sizes and sha256 only, do not read the samples")
    parser.add_argument(
        "--calibration",
        metavar="FILE",
        help="calibration table of the stream "
        "(with --imagenet: check the plan hash; cin-c and gradual streams have none)",
    )
    parser.add_argument(
        "--imagenet",
        metavar="PATH",
        help="source image folder of the stream "
        "(with --calibration, or alone for cin-c and gradual streams: check the plan hash)",
    )
    parser.add_argument(
        "--dataset",
        metavar="NAME[/SPLIT]:PATH",
        help="instead of --imagenet, the dataset a --dataset stream was made from (cifar10:~/data; docs/datasets.md)",
    )
    parser.add_argument(
        "--classes",
        metavar="FILE",
        help="the class list the stream was made with (ccc-generate --classes), for the plan hash check",
    )
    parser.add_argument(
        "--demo",
        action="store_true",
        help="the stream is of the demo world: its table and images (found without it too, for demo streams)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_accuracy_arguments(parser)
    return parser


def _add_accuracy_arguments(parser: argparse.ArgumentParser) -> None:
    """--accuracy and its model, target and window (ccc.realised_accuracy)."""
    group = parser.add_argument_group("realised accuracy (--accuracy)")
    group.add_argument(
        "--accuracy",
        action="store_true",
        help="score a model on every sample and report its realised accuracy against the stream's target "
        "(after the shard check; the exit code is the shard check's)",
    )
    group.add_argument(
        "--model",
        default=None,
        help="torchvision model name, timm:NAME, a CIFAR model (cifar10:wrn28_10, cifar100:resnext29, ...) "
        "or module:function factory "
        "(default: the demo model on demo streams, else resnet50)",
    )
    group.add_argument(
        "--weights",
        default=None,
        help="weights: a local state_dict file, or a torchvision weights name (default: the model's own)",
    )
    group.add_argument("--device", default="cpu", help="device of the model: cpu or cuda[:index] (default: cpu)")
    group.add_argument(
        "--target",
        type=float,
        default=None,
        metavar="PERCENT",
        help="target accuracy in percent (default: the manifest's; needed for folders without one)",
    )
    group.add_argument(
        "--window",
        type=integer_at_least(1),
        default=DEFAULT_WINDOW,
        help=f"samples per window of the standard error (default: {DEFAULT_WINDOW:,})",
    )
    group.add_argument(
        "--batch-size", type=integer_at_least(1), default=64, help="images per forward pass (default: 64)"
    )
    group.add_argument(
        "--max-samples", type=integer_at_least(1), default=None, help="score only the stream's first N samples"
    )


def _run(arguments: argparse.Namespace) -> int:
    """Check the run folder; returns 0 when every shard is intact, 1 when problems were found."""
    # imported here: the checks import the image and corruption libraries, which --help does not need
    from ccc.check_run import locate_plan_inputs, verify_run
    from ccc.demo import demo_world_of, is_demo_stream

    folder = Path(arguments.folder)
    _check_accuracy_arguments(arguments)
    if arguments.demo and (
        arguments.calibration is not None or arguments.imagenet is not None or arguments.dataset is not None
    ):
        raise UsageError(
            "--demo uses the demo world's table and images: do not combine it with --calibration/--imagenet/--dataset"
        )
    arguments.imagenet, arguments.classes = image_source_arguments(arguments)
    if arguments.calibration is not None and arguments.imagenet is None:
        raise UsageError("pass both --calibration and --imagenet to check the plan hash, or neither")
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder")
    if not (folder / "manifest.json").exists() and (folder / MIRROR_NAME).exists():
        return _verify_mirror(folder, arguments)
    try:
        manifest = load_manifest(folder)
    except FileNotFoundError as error:
        raise UsageError(
            f"{folder} has no manifest.json ({error.strerror or error}); it is not a ccc-generate run folder"
        ) from error
    kind = manifest.stream.kind
    if kind != CCC_KIND and arguments.calibration is not None:
        raise UsageError(
            f"--calibration: a {kind} stream has no calibration table; pass only --imagenet to check its plan hash"
        )
    if kind == CCC_KIND and arguments.calibration is None and arguments.imagenet is not None:
        raise UsageError("pass both --calibration and --imagenet to check the plan hash, or neither")
    hint = ""
    if arguments.imagenet is None:
        found = locate_plan_inputs(manifest)
        if arguments.demo and not is_demo_stream(manifest.stream):
            raise UsageError(f"--demo: {folder} is not a demo-world stream (its images are not the demo folder's)")
        if found.imagenet is not None and (found.calibration is not None or kind != CCC_KIND):
            arguments.calibration, arguments.imagenet = found.calibration, found.imagenet
        hint = found.hint
    total = len(manifest.shards)
    with tqdm(total=total, desc=folder.name, unit="shard", disable=arguments.no_progress, mininterval=1.0) as bar:
        report = verify_run(
            folder,
            decode=not arguments.no_decode,
            calibration=arguments.calibration,
            imagenet=arguments.imagenet,
            classes=None if arguments.classes is None else read_class_list(arguments.classes),
            on_shard=lambda check: bar.update(0 if check.status == "unfinished" else 1),
        )
    for check in report.problems:
        print(f"{check.name}: {check.status}{f' — {check.detail}' if check.detail else ''}")
    for name in report.stray_files:
        print(f"{name}: temporary file of an interrupted run (the next ccc-generate removes it)")
    decoded = f", {count(report.samples_decoded, 'sample')} decoded" if report.samples_decoded else ""
    renderer = (
        ""
        if report.renderer is None
        else f"; rendered by {describe_renderer(report.renderer)} (bytes differ from the CPU reference path's)"
    )
    print(
        f"{PROGRAM}: {report.intact_shards:,} of {count(report.num_shards, 'shard')} intact "
        f"({count(report.num_images, 'image')} in the stream"
        f"{decoded}); plan hash {report.plan_hash}"
        f"{f' ({hint})' if report.plan_hash == 'not checked' and hint else ''}{renderer}"
    )
    document = report.to_json_dict()
    if arguments.accuracy and _can_score(report.ok):
        world = demo_world_of(manifest.stream)
        document["realised_accuracy"] = _report_accuracy(folder, manifest.stream.target_accuracy, world, arguments)
    _write_json(arguments.json, document)
    return 0 if report.ok else PROBLEMS_EXIT_CODE


def _can_score(intact: bool) -> bool:
    """Whether --accuracy may read the stream: only when every shard is intact (a line saying why not)."""
    if not intact:
        print(f"{PROGRAM}: realised accuracy not measured: the stream has shards that are not intact (above)")
    return intact


def _write_json(path: str | None, document: dict[str, object]) -> None:
    """Write ``--json``'s report (nothing without the option); UsageError when it cannot be written."""
    if not path:
        return
    try:
        Path(path).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot write --json {path}: {error.strerror or error}") from error


def _check_accuracy_arguments(arguments: argparse.Namespace) -> None:
    """UsageError for --accuracy's options given without it, a --target outside [0, 100] or a --device
    this machine does not have (before any shard is read)."""
    given = [
        option
        for option, value in (
            ("--model", arguments.model),
            ("--weights", arguments.weights),
            ("--target", arguments.target),
            ("--max-samples", arguments.max_samples),
        )
        if value is not None
    ]
    if given and not arguments.accuracy:
        raise UsageError(f"{', '.join(given)} set(s) up the realised-accuracy check: add --accuracy")
    if arguments.target is not None and not 0.0 <= arguments.target <= 100.0:
        raise UsageError(f"--target is an accuracy in percent, in [0, 100], got {arguments.target:g}")
    if arguments.accuracy:
        from ccc.models import resolve_device

        try:
            resolve_device(arguments.device)
        except ValueError as error:
            raise UsageError(f"--device: {error}") from None


def _report_accuracy(
    folder: Path, target: float | None, world: str | None, arguments: argparse.Namespace
) -> dict[str, object]:
    """Score the model of ``--model`` (default: the demo world's model on a stream of demo world ``world``, else
    resnet50) on the
    stream in ``folder``, print its realised accuracy against the target (``--target``, else
    ``target``: the manifest's) and return the JSON form (``ccc.realised_accuracy``)."""
    from ccc.calibration.compute.evaluator import ModelEvaluator
    from ccc.demo import demo_model_name
    from ccc.load import StreamError, open_stream, stream_loader
    from ccc.models import ModelSpec, load_model, resolve_device

    target = arguments.target if arguments.target is not None else target
    name = arguments.model or (ModelSpec().name if world is None else demo_model_name(world))
    device = resolve_device(arguments.device)
    try:
        model = load_model(ModelSpec(name, arguments.weights), device)
    except ValueError as error:
        raise UsageError(f"--model {name}: {error}") from None
    stream = open_stream(folder, image_format="float", limit=arguments.max_samples)
    batches = stream_loader(stream, batch_size=arguments.batch_size)
    with tqdm(total=stream.length, desc=f"{name} on {folder.name}", unit="image", disable=arguments.no_progress) as bar:
        try:
            outcomes = score_stream(batches, ModelEvaluator(model, device, arguments.batch_size), bar.update)
        except StreamError as error:
            raise UsageError(f"realised accuracy: {error}") from None
    result = summarise_realised(
        outcomes.correct,
        window=arguments.window,
        target=target,
        calibrated=outcomes.calibrated,
        pairs=outcomes.pairs,
    )
    for line in describe_realised(result, name):
        print(line)
    return {"model": name, **result.to_json_dict()}


def _verify_mirror(folder: Path, arguments: argparse.Namespace) -> int:
    """A ccc-mirror folder without a manifest (a published stream): shard integrity only."""
    if arguments.calibration is not None or arguments.imagenet is not None or arguments.demo:
        raise UsageError(f"{folder} is a ccc-mirror folder without a manifest: it has no plan hash to check")
    with tqdm(desc=folder.name, unit="shard", disable=arguments.no_progress, mininterval=1.0) as bar:
        shards, problems, decoded = check_mirror(
            folder, decode=not arguments.no_decode, on_shard=lambda _: bar.update()
        )
    for line in problems:
        print(line)
    decoded_text = f", {count(decoded, 'sample')} decoded" if decoded else ""
    print(
        f"{PROGRAM}: {shards - len(problems):,} of {count(shards, 'shard')} intact{decoded_text}; "
        "a ccc-mirror folder without a manifest: "
        f"shard integrity only (sizes, sha256, samples against {MIRROR_NAME}; no stream definition, no plan hash)"
    )
    document: dict[str, object] = {
        "shards": shards,
        "intact_shards": shards - len(problems),
        "problems": list(problems),
        "samples_decoded": decoded,
    }
    if arguments.accuracy and _can_score(not problems):
        document["realised_accuracy"] = _report_accuracy(folder, None, False, arguments)
    _write_json(arguments.json, document)
    return PROBLEMS_EXIT_CODE if problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``ccc-verify``; returns the exit code.

    0: intact; 1: problems found; 2: user error; 130: interrupted.
    """
    arguments = build_parser().parse_args(argv)
    return run_command(
        PROGRAM,
        lambda: _run(arguments),
        (UsageError, ManifestError, MirrorError, CalibrationError, ImageFolderError, PlanError, OSError),
    )


if __name__ == "__main__":
    sys.exit(main())
