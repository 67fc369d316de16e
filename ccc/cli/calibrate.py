"""``ccc-calibrate``: import, inspect, compute and plot calibration tables.

A thin layer over library functions: ``import`` → :func:`ccc.calibration.import_ccc_pickle`,
``compute`` → :func:`ccc.calibration.run.calibrate` (this module only turns the options, ``--demo``
included, into a :class:`~ccc.calibration.run.CalibrationConfig`), ``plot`` →
:func:`ccc.calibration.plot.plot_table`.

Subcommands are entries of :data:`SUBCOMMANDS` (a name, a help line, a function that adds the
arguments, and a function that runs the command and returns the exit code); :func:`main` needs no
change to add one.

User mistakes (missing file, invalid table, refused pickle, failed download, unreachable Ray
cluster) end with one line on stderr and exit code 2, never a traceback (:func:`ccc.cli.common.run_command`);
an interrupted computation keeps everything finished in its work folder and says how to resume
(exit code 130).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from ccc.cache import DownloadError
from ccc.calibration.compute import DEFAULT_BACKEND
from ccc.calibration.compute.engine import DEFAULT_BLOCK_SIZE
from ccc.calibration.compute.imageset import DEFAULT_IMAGE_COUNT, Preprocessing
from ccc.calibration.compute.workfolder import default_work_folder
from ccc.calibration.presets import CCC_CORRUPTIONS
from ccc.calibration.published import PUBLISHED_MATRIX_URL, import_ccc_pickle
from ccc.calibration.table import SEVERITIES, CalibrationError, CalibrationTable
from ccc.calibration.table_io import CENTRE_PREPROCESSING, PREPROCESSING_KINDS, STREAM_PREPROCESSING
from ccc.cli.common import (
    INTERRUPTED_EXIT_CODE,
    HelpFormatter,
    OneLineErrorParser,
    add_image_folder_arguments,
    count,
    examples,
    float_list,
    image_source_arguments,
    integer_at_least,
    name_list,
    run_command,
)
from ccc.corruptions import DEFAULT_CORRUPTION_SET, get_corruption_set, list_corruption_sets
from ccc.execution import RayUnavailableError
from ccc.render import RENDER_PRECISIONS
from ccc.stream.sources import ImageFolderError, read_class_list

# torch, the model loader and the compute engine are imported when a command runs, so that
# ``ccc-calibrate --help`` answers at once.
if TYPE_CHECKING:
    from ccc.calibration.adaptive import AdaptiveSettings
    from ccc.calibration.run import CalibrationConfig, CalibrationRun

PROGRAM = "ccc-calibrate"
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


_positive = integer_at_least(1)
_non_negative = integer_at_least(0)


def adaptive_setting_argument(text: str) -> tuple[str, object]:
    """argparse type of ``--adaptive-setting NAME=VALUE`` (see
    :func:`ccc.calibration.adaptive.parse_adaptive_setting`)."""
    from ccc.calibration.adaptive import parse_adaptive_setting

    try:
        return parse_adaptive_setting(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_compute_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``ccc-calibrate compute``, in argument groups."""
    _add_compute_inputs(parser.add_argument_group("inputs"))
    _add_compute_model(parser.add_argument_group("model"))
    _add_compute_measurement(parser.add_argument_group("measurement"))
    _add_compute_adaptive(parser.add_argument_group("adaptive scheme"))
    _add_compute_execution(parser.add_argument_group("execution"))
    _add_compute_output(parser.add_argument_group("output"))


def _add_compute_inputs(group: argparse._ArgumentGroup) -> None:
    """The image folder, its class list and the demo world."""
    add_image_folder_arguments(group)
    group.add_argument(
        "--demo",
        action="store_true",
        help="the embedded demo world: its images, its model (ccc.demo:demo_model; with --corruption-set cifar the "
        "32x32 world's, ccc.demo:demo_model_cifar), its corruptions; the table gets the demo difficulty presets "
        "(docs/demo.md)",
    )


def _add_compute_model(group: argparse._ArgumentGroup) -> None:
    """The model, its weights and its preprocessing."""
    group.add_argument(
        "--model",
        default=None,
        help="torchvision model name, timm:NAME (needs pip install timm), a CIFAR model (cifar10:wrn28_10, "
        "cifar100:resnext29, ...; with --weights FILE) or module:function factory "
        "(default: resnet50)",
    )
    group.add_argument(
        "--weights",
        default=None,
        help="weights: a local state_dict file, or a torchvision weights name (default: IMAGENET1K_V1 for resnet50)",
    )
    group.add_argument(
        "--normalization",
        default="auto",
        choices=("auto", "imagenet", "none"),
        help="input normalisation inside the model (default: auto)",
    )
    group.add_argument(
        "--corruption-set",
        choices=list_corruption_sets(),
        default=DEFAULT_CORRUPTION_SET,
        help="whose corruption parameters and image size: imagenet (224x224, default), cifar (32x32), "
        "tinyimagenet or imagenet64 (64x64); a table measures one set and makes streams of that set only",
    )
    group.add_argument(
        "--preprocessing",
        choices=PREPROCESSING_KINDS,
        default=None,
        help="centre: resize and centre crop, as ImageNet-C and the published CCC matrices; stream: each image "
        "drawn as a CCC stream draws its samples (random-resized crop, flip, JPEG quality 85 after the "
        "corruptions; for the other corruption sets the whole image at the set's size, JPEG only where the "
        "set's streams store it), so that streams realise their target (docs/calibration.md) (default: centre "
        "for imagenet, stream for the other sets, which have no centre crop)",
    )
    group.add_argument(
        "--resize", type=_positive, default=None, help="centre preprocessing: shorter side (default: 256)"
    )
    group.add_argument(
        "--crop",
        type=_positive,
        default=None,
        help="preprocessing: side of the square model input (default: 224; the other corruption sets: their size)",
    )


def _add_compute_measurement(group: argparse._ArgumentGroup) -> None:
    """Which corruptions and images are measured, and their seeds."""
    group.add_argument(
        "--corruptions",
        type=name_list,
        default=None,
        metavar="A,B,...",
        help="comma-separated corruptions (default: the 15 of CCC; with --demo the demo world's 5)",
    )
    group.add_argument(
        "--images",
        type=_positive,
        default=None,
        help=f"calibration images, class-balanced (default: {DEFAULT_IMAGE_COUNT}; with --demo every demo image)",
    )
    group.add_argument(
        "--image-seed", type=_non_negative, default=0, help="seed choosing the calibration images (default: 0)"
    )
    group.add_argument(
        "--seed", type=_non_negative, default=0, help="seed of the per-image corruption randomness (default: 0)"
    )


def _add_compute_adaptive(group: argparse._ArgumentGroup) -> None:
    """The adaptive scheme and its settings."""
    group.add_argument(
        "--adaptive",
        action="store_true",
        help="adaptive scheme: measure pair cells only where severity paths need them",
    )
    group.add_argument(
        "--targets",
        type=float_list,
        default=None,
        metavar="T1,T2,...",
        help="adaptive: target accuracies in percent (default: 40,20,0)",
    )
    group.add_argument(
        "--adaptive-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        type=adaptive_setting_argument,
        help="adaptive: override one AdaptiveSettings field (repeatable; fractions allowed), e.g. "
        "path_fraction=1/4 (docs/calibration.md)",
    )


def _add_compute_execution(group: argparse._ArgumentGroup) -> None:
    """Ray, model actors, device, batches and progress."""
    group.add_argument(
        "--workers",
        type=_non_negative,
        default=None,
        help="CPUs of a local Ray cluster (default: all); 0 runs in this process without Ray",
    )
    group.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="use an existing Ray cluster (auto, host:port, ray://host:port)",
    )
    group.add_argument(
        "--evaluators",
        type=_positive,
        default=None,
        help="model actors (default: one per GPU with --device cuda, else one per CPU, each rendering too)",
    )
    group.add_argument("--device", default="cpu", help="cpu or cuda[:index] (default: cpu)")
    group.add_argument(
        "--backend",
        default=DEFAULT_BACKEND,
        metavar="NAME",
        help="who renders and evaluates the cells: model (default) renders on the CPU (the reference path, "
        "byte-reproducible) with Ray workers or --workers 0; torch renders and evaluates each cell on --device "
        "with the torch rendering backend, in this process (choose it with a GPU: --backend torch --device cuda). "
        "Its bytes differ from the CPU path's (random corruptions draw from counter-based per-sample streams; "
        "reproducible on the same device type), so its tables differ slightly from the model backend's; "
        "docs/calibration.md",
    )
    group.add_argument(
        "--render-precision",
        choices=RENDER_PRECISIONS,
        help="--backend torch: the torch rendering backend's working float precision (default float64; float32 "
        "is faster on GPUs, other bytes; docs/fidelity.md); part of the work folder's identity",
    )
    group.add_argument("--batch-size", type=_positive, default=64, help="images per forward pass (default: 64)")
    group.add_argument("--amp", action="store_true", help="float16 mixed precision (CUDA only)")
    group.add_argument(
        "--block-size",
        type=_positive,
        default=DEFAULT_BLOCK_SIZE,
        help=f"images per unit of work (default: {DEFAULT_BLOCK_SIZE})",
    )
    group.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_compute_output(group: argparse._ArgumentGroup) -> None:
    """The table to write and the work folder behind it."""
    group.add_argument(
        "--out", required=True, metavar="FILE", help="calibration table to write, e.g. calibration/NAME.npz"
    )
    group.add_argument(
        "--work-folder",
        metavar="DIR",
        default=None,
        help="where finished work is kept until the table is written (default: OUT.work)",
    )
    group.add_argument("--overwrite", action="store_true", help="replace an existing --out table")


def _config(arguments: argparse.Namespace) -> CalibrationConfig:
    """The library configuration of ``ccc-calibrate compute``; ``--demo`` becomes explicit inputs."""
    from ccc.calibration.run import CalibrationConfig
    from ccc.models import DEFAULT_MODEL, ModelSpec

    if arguments.targets is not None and not arguments.adaptive:
        raise CalibrationError("--targets only applies with --adaptive")
    if arguments.adaptive_setting and not arguments.adaptive:
        raise CalibrationError("--adaptive-setting only applies with --adaptive")
    (imagenet, classes), model, corruptions, targets, presets = (
        image_source_arguments(arguments),
        arguments.model,
        arguments.corruptions,
        arguments.targets,
        None,
    )
    if arguments.demo:
        from ccc.demo import demo_image_folder, demo_model_name, demo_table

        world = demo_table(arguments.corruption_set)
        if imagenet is not None:
            raise CalibrationError(
                "--demo uses the demo world's own images: do not combine it with --imagenet or --dataset"
            )
        if model is not None or arguments.weights is not None:
            raise CalibrationError(
                f"--demo uses the demo model ({demo_model_name(arguments.corruption_set)}): do not combine it with "
                "--model or --weights"
            )
        imagenet = str(demo_image_folder(corruption_set=arguments.corruption_set))
        model = demo_model_name(arguments.corruption_set)
        corruptions = corruptions or list(world.corruptions)
        if arguments.adaptive and targets is None:
            targets = sorted({preset.target_accuracy for preset in world.presets.values()}, reverse=True)
        presets = world.presets
    return CalibrationConfig(
        out=arguments.out,
        imagenet=imagenet,
        model=ModelSpec(model or DEFAULT_MODEL, arguments.weights, arguments.normalization),
        corruptions=tuple(corruptions or CCC_CORRUPTIONS),
        images=arguments.images,
        all_images=arguments.demo,
        image_seed=arguments.image_seed,
        seed=arguments.seed,
        adaptive=adaptive_settings(arguments.adaptive_setting, targets) if arguments.adaptive else None,
        presets=presets,
        serial=arguments.workers == 0 and arguments.ray_address is None,
        workers=arguments.workers,
        ray_address=arguments.ray_address,
        evaluators=arguments.evaluators,
        device=arguments.device,
        batch_size=arguments.batch_size,
        amp=arguments.amp,
        skip_bad_images=arguments.skip_bad_images,
        classes=None if classes is None else tuple(read_class_list(classes)),
        block_size=arguments.block_size,
        preprocessing=_preprocessing(arguments),
        work_folder=arguments.work_folder,
        overwrite=arguments.overwrite,
        show_progress=not arguments.no_progress,
        backend=arguments.backend,
        backend_options=_backend_options(arguments),
    )


def _preprocessing(arguments: argparse.Namespace) -> Preprocessing:
    """``--corruption-set``, ``--preprocessing``, ``--resize`` and ``--crop``; ``--resize`` belongs to the centre
    kind only; the defaults follow the set (centre at 224 for imagenet, stream at the set's size otherwise)."""
    corruption_set = arguments.corruption_set
    imagenet = corruption_set == DEFAULT_CORRUPTION_SET
    kind = arguments.preprocessing or (CENTRE_PREPROCESSING if imagenet else STREAM_PREPROCESSING)
    if kind != CENTRE_PREPROCESSING and arguments.resize is not None:
        raise ValueError(
            f"--resize applies to --preprocessing {CENTRE_PREPROCESSING}: the {kind} preprocessing "
            "resizes the crop or the whole image to --crop"
        )
    crop = arguments.crop or (224 if imagenet else get_corruption_set(corruption_set).image_size)
    resize = 256 if arguments.resize is None else arguments.resize
    return Preprocessing(resize, crop, kind, corruption_set)


def _backend_options(arguments: argparse.Namespace) -> dict[str, str]:
    """The backend's own options from the command line: ``--render-precision`` for ``--backend torch``."""
    if arguments.render_precision is None:
        return {}
    if arguments.backend != "torch":
        raise ValueError(
            f"--render-precision applies to the torch rendering backend: add --backend torch "
            f"(got --backend {arguments.backend})"
        )
    return {"precision": arguments.render_precision}


def adaptive_settings(overrides: list[tuple[str, object]], targets: list[float] | None) -> AdaptiveSettings:
    """``--targets`` and ``--adaptive-setting`` overrides over the defaults (ValueError if a setting is
    given twice or out of range)."""
    from ccc.calibration.adaptive import AdaptiveSettings

    settings: dict[str, object] = {}
    for name, value in overrides:
        if name in settings:
            raise ValueError(
                f"--adaptive-setting {name} is given twice ({name}={settings[name]} and {name}={value}); give it once"
            )
        settings[name] = value
    if targets:
        settings["targets"] = tuple(targets)
    return AdaptiveSettings(**settings)


class _ProgressBar:
    """tqdm over model evaluations, opened at the first report; the total grows as adaptive rounds are planned."""

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled
        self._bar: tqdm[None] | None = None

    def __call__(self, finished: int, planned: int) -> None:
        if self._bar is None:
            interactive = sys.stderr.isatty()
            self._bar = tqdm(
                total=0,
                unit="img",
                unit_scale=True,
                desc="calibrating",
                disable=not self._enabled,
                mininterval=0.5 if interactive else 30.0,
                dynamic_ncols=True,
            )
        if planned:
            self._bar.total += planned
            self._bar.refresh()
        if finished:
            self._bar.update(finished)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _summary(run: CalibrationRun, folder: Path) -> str:
    outcome, table, job = run.outcome, run.table, run.job
    corruption_count = len(job.corruptions)
    brute_force = (1 + 20 * corruption_count + 400 * corruption_count * (corruption_count - 1)) * len(job.image_set)
    lines = [
        f"wrote {run.written}: {count(len(table.pairs()), 'pair')} of {count(corruption_count, 'corruption')}, "
        f"checksum {table.checksum()}",
        f"evaluated {count(outcome.evaluated_images, 'image')} in {outcome.seconds:.1f} s "
        f"({outcome.images_per_second:,.1f} images/s)"
        + (f"; {outcome.resumed_images:,} were already done in {folder}" if outcome.resumed_images else ""),
        f"table rests on {outcome.total_images:,} image evaluations; the brute-force grid needs {brute_force:,} "
        f"({brute_force / max(outcome.total_images, 1):.1f}x)",
    ]
    return "\n".join(lines)


def run_compute(arguments: argparse.Namespace) -> int:
    """Execute ``ccc-calibrate compute``; returns the exit code."""
    from ccc.calibration.run import calibrate

    folder = Path(arguments.work_folder) if arguments.work_folder else default_work_folder(arguments.out)
    try:
        config = _config(arguments)
    except (ValueError, RayUnavailableError) as error:
        raise CalibrationError(str(error)) from error
    progress = _ProgressBar(not arguments.no_progress)
    kept = f"finished work is kept in {folder}"
    try:
        run = calibrate(config, progress)
    except KeyboardInterrupt:
        progress.close()
        print(f"interrupted; {kept}: rerun the same command to resume", file=sys.stderr)
        return INTERRUPTED_EXIT_CODE
    except (ImageFolderError, RayUnavailableError) as error:
        progress.close()
        raise CalibrationError(f"{error} ({kept}; rerun to resume)" if folder.exists() else str(error)) from error
    except ValueError as error:
        progress.close()
        raise CalibrationError(str(error)) from error
    progress.close()
    print(_summary(run, folder))
    return 0


def add_plot_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``ccc-calibrate plot``."""
    parser.add_argument("file", metavar="FILE", help="calibration table (.npz)")
    parser.add_argument("--out", required=True, metavar="PNG", help="image to write")
    parser.add_argument(
        "--pairs",
        type=name_list,
        default=None,
        metavar="N1:N2,...",
        help="pairs to draw, e.g. fog:snow,jpeg:contrast (default: all, up to --max-pairs)",
    )
    parser.add_argument(
        "--max-pairs",
        type=_positive,
        default=30,
        help="draw at most this many pairs when --pairs is not given (default: 30)",
    )
    parser.add_argument(
        "--target", type=float, default=None, help="draw the severity path for this target accuracy (percent)"
    )
    parser.add_argument(
        "--contours",
        type=float_list,
        default=None,
        metavar="T1,T2,...",
        help="accuracy contour levels in percent (default: the table's preset targets, else 40,20)",
    )
    parser.add_argument(
        "--objective",
        default="reference",
        choices=("reference", "minimax", "mean_abs"),
        help="path objective (default: reference)",
    )


def run_plot(arguments: argparse.Namespace) -> int:
    """Execute ``ccc-calibrate plot``; returns the exit code."""
    from ccc.calibration.plot import plot_table

    table = CalibrationTable.load(arguments.file)
    pairs = None
    if arguments.pairs is not None:
        pairs = []
        for item in arguments.pairs:
            first, separator, second = item.partition(":")
            if not separator or not first or not second:
                raise CalibrationError(f"--pairs entries must look like n1:n2, got {item!r}")
            pairs.append((first, second))
    try:
        written = plot_table(
            table,
            arguments.out,
            pairs=pairs,
            target=arguments.target,
            contours=arguments.contours,
            objective=arguments.objective,
            max_pairs=arguments.max_pairs,
        )
    except ValueError as error:
        if isinstance(error, CalibrationError):
            raise
        raise CalibrationError(str(error)) from error
    print(f"wrote {written}")
    return 0


def _add_import_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SRC", help="published CCC pickle: a file path or an http(s) URL")
    parser.add_argument("--out", required=True, metavar="FILE", help="calibration table to write (.npz)")
    parser.add_argument(
        "--cache-dir",
        metavar="DIR",
        default=None,
        help="download cache folder (default: $CCC_CACHE_DIR, else ~/.cache/ccc)",
    )
    parser.add_argument("--no-progress", action="store_true", help="do not show a download progress bar")


def _run_import(arguments: argparse.Namespace) -> int:
    table = import_ccc_pickle(arguments.source, cache_dir=arguments.cache_dir, progress=not arguments.no_progress)
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
        f"preprocessing: {metadata.preprocessing_kind} ({metadata.preprocessing})",
        f"set:           corruption set {metadata.corruption_set}",
        f"image set:     {metadata.image_set_description}",
        f"               {metadata.image_count} images, file list sha256 {metadata.image_set_sha256 or 'unknown'}",
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
            (
                f"ccc-calibrate import {PUBLISHED_MATRIX_URL} --out calibration/resnet50.npz",
                "the published ResNet-50 matrices",
            ),
            (
                "ccc-calibrate import ~/Downloads/ccc_accuracy_matrix.pickle --out calibration/resnet50.npz",
                "a pickle already downloaded",
            ),
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
            (
                "ccc-calibrate compute --demo --adaptive --out calibration/my_demo.npz",
                "the demo world's table (no ImageNet, minutes)",
            ),
            (
                "ccc-calibrate compute --imagenet /data/imagenet/val --adaptive --device cuda "
                "--out calibration/resnet50_adaptive.npz",
                "ResNet-50 on ImageNet, measuring only the cells the severity paths need",
            ),
            (
                "ccc-calibrate compute --imagenet /data/imagenet/val --adaptive --backend torch --device cuda "
                "--out calibration/resnet50_torch.npz",
                "the same with every cell rendered on the GPU (torch backend: its bytes differ from the CPU path's)",
            ),
            (
                "ccc-calibrate compute --imagenet /data/imagenet/val --model mymodels:vit --weights ~/vit.pt "
                "--out calibration/vit.npz",
                "your own model (module:function factory)",
            ),
        ),
    ),
    Subcommand(
        "plot",
        "draw the 21×21 accuracy grid of corruption pairs with target contours and paths (PNG)",
        add_plot_arguments,
        run_plot,
        (
            (
                "ccc-calibrate plot calibration/resnet50.npz --out grid.png --target 20",
                "every pair with its path to 20 %",
            ),
            "ccc-calibrate plot calibration/resnet50.npz --out fog_snow.png --pairs fog:snow --contours 40,20",
        ),
    ),
)
"""The registered subcommands, in ``--help`` order; extend this tuple to add one."""


def build_parser(subcommands: Sequence[Subcommand] = SUBCOMMANDS) -> argparse.ArgumentParser:
    """The argument parser with one subparser per entry of ``subcommands``."""
    parser = OneLineErrorParser(
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
    """Entry point of ``ccc-calibrate``; returns the exit code (0 success, 2 user error, 130 interrupted)."""
    arguments = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if arguments.verbose else logging.WARNING, format="%(name)s: %(message)s")
    return run_command(PROGRAM, lambda: arguments.run(arguments), (CalibrationError, DownloadError, OSError))


if __name__ == "__main__":
    sys.exit(main())
