"""``ccc-calibrate compute`` and ``ccc-calibrate plot``: argument parsing over the library functions.

Registered as :class:`ccc.calibration.cli.Subcommand` entries. User mistakes become
:class:`~ccc.calibration.table.CalibrationError` (one line on stderr, exit code 2, printed by
:func:`ccc.calibration.cli.main`); an interrupted computation keeps everything finished in its work
folder and says how to resume (exit code 130).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

from typing import TYPE_CHECKING

from tqdm import tqdm

from ccc.calibration.engine import DEFAULT_BLOCK_SIZE
from ccc.calibration.imageset import DEFAULT_IMAGE_COUNT, Preprocessing, select_calibration_images
from ccc.calibration.table import CCC_CORRUPTIONS, CalibrationError, CalibrationTable
from ccc.calibration.workfolder import WorkFolder, default_work_folder
from ccc.cli.console import count
from ccc.execution import RayUnavailableError, open_executor
from ccc.imagenet import ImageFolderError, index_image_folder, read_class_list, resolve_imagenet_folder

# torch, the model loader and the compute engine are imported when a command runs, so that
# ``ccc-calibrate --help`` answers at once.
if TYPE_CHECKING:
    from torch import nn

    from ccc.calibration.adaptive import AdaptiveSettings
    from ccc.calibration.backends import CalibrationBackend
    from ccc.calibration.compute import CalibrationJob, CalibrationOutcome
    from ccc.models import ModelSpec

logger = logging.getLogger(__name__)

DEMO_MODEL = "ccc.demo:demo_model"
"""The demo world's model factory."""

INTERRUPTED_EXIT_CODE = 130


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def adaptive_setting_argument(text: str) -> tuple[str, object]:
    """argparse type of ``--adaptive-setting NAME=VALUE`` (see :func:`ccc.calibration.adaptive.parse_adaptive_setting`)."""
    from ccc.calibration.adaptive import parse_adaptive_setting

    try:
        return parse_adaptive_setting(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def _name_list(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def _float_list(text: str) -> list[float]:
    try:
        return [float(value) for value in text.split(",") if value.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def add_compute_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``ccc-calibrate compute``."""
    parser.add_argument("--imagenet", metavar="PATH", help="ImageNet validation folder val/<wnid>/*.JPEG (default: $CCC_IMAGENET)")
    parser.add_argument("--out", required=True, metavar="FILE", help="calibration table to write, e.g. calibration/NAME.npz")
    parser.add_argument("--model", default=None, help="torchvision model name or module:function factory (default: resnet50)")
    parser.add_argument("--weights", default=None, help="weights: a local state_dict file, or a torchvision weights name (default: IMAGENET1K_V1 for resnet50)")
    parser.add_argument("--normalization", default="auto", choices=("auto", "imagenet", "none"), help="input normalisation inside the model (default: auto)")
    parser.add_argument("--corruptions", type=_name_list, default=None, metavar="A,B,...", help="comma-separated corruptions (default: the 15 of CCC; with --demo the demo world's 5)")
    parser.add_argument("--images", type=_positive_int, default=None, help=f"calibration images, class-balanced (default: {DEFAULT_IMAGE_COUNT}; with --demo every demo image)")
    parser.add_argument(
        "--demo",
        action="store_true",
        help="the embedded demo world: its images, its model (ccc.demo:demo_model), its corruptions; the table gets the demo difficulty presets (docs/demo.md)",
    )
    parser.add_argument("--image-seed", type=_non_negative_int, default=0, help="seed choosing the calibration images (default: 0)")
    parser.add_argument("--seed", type=_non_negative_int, default=0, help="seed of the per-image corruption randomness (default: 0)")
    parser.add_argument("--adaptive", action="store_true", help="adaptive scheme: measure pair cells only where severity paths need them")
    parser.add_argument("--targets", type=_float_list, default=None, metavar="T1,T2,...", help="adaptive: target accuracies in percent (default: 40,20,0)")
    parser.add_argument(
        "--adaptive-setting", action="append", default=[], metavar="NAME=VALUE", type=adaptive_setting_argument,
        help="adaptive: override one AdaptiveSettings field (repeatable; fractions allowed), e.g. path_fraction=1/4 (docs/calibration.md)",
    )
    parser.add_argument("--workers", type=_non_negative_int, default=None, help="CPUs of a local Ray cluster (default: all); 0 runs in this process without Ray")
    parser.add_argument("--ray-address", default=None, metavar="ADDR", help="use an existing Ray cluster (auto, host:port, ray://host:port)")
    parser.add_argument("--evaluators", type=_positive_int, default=None, help="model actors (default: one per GPU with --device cuda, else one per CPU, each rendering too)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:index] (default: cpu)")
    parser.add_argument("--batch-size", type=_positive_int, default=64, help="images per forward pass (default: 64)")
    parser.add_argument("--amp", action="store_true", help="float16 mixed precision (CUDA only)")
    parser.add_argument("--skip-bad-images", action="store_true", help="exclude unreadable images (deterministically) instead of stopping")
    parser.add_argument("--classes", metavar="FILE", help="explicit class list, one class folder name per line (line k = class k); needed for an ImageNet folder with extra or missing classes")
    parser.add_argument("--block-size", type=_positive_int, default=DEFAULT_BLOCK_SIZE, help=f"images per unit of work (default: {DEFAULT_BLOCK_SIZE})")
    parser.add_argument("--resize", type=_positive_int, default=256, help="preprocessing: shorter side (default: 256)")
    parser.add_argument("--crop", type=_positive_int, default=224, help="preprocessing: centre crop side (default: 224)")
    parser.add_argument("--work-folder", metavar="DIR", default=None, help="where finished work is kept until the table is written (default: OUT.work)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out table")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _apply_demo(arguments: argparse.Namespace) -> None:
    """Point the image folder, model, corruptions and (adaptive) targets at the demo world."""
    from ccc.demo import DEMO_DIFFICULTY_PRESETS, demo_image_folder
    from ccc.demo.calibration import DEMO_CALIBRATION_CORRUPTIONS

    if arguments.imagenet is not None:
        raise CalibrationError("--demo uses the demo world's own images: do not combine it with --imagenet")
    if arguments.model is not None or arguments.weights is not None:
        raise CalibrationError("--demo uses the demo model (ccc.demo:demo_model): do not combine it with --model or --weights")
    arguments.imagenet = str(demo_image_folder())
    arguments.model = DEMO_MODEL
    arguments.corruptions = arguments.corruptions or list(DEMO_CALIBRATION_CORRUPTIONS)
    if arguments.adaptive and arguments.targets is None:
        arguments.targets = sorted({preset.target_accuracy for preset in DEMO_DIFFICULTY_PRESETS.values()}, reverse=True)


def _adaptive_settings(arguments: argparse.Namespace) -> AdaptiveSettings:
    """``--targets`` and ``--adaptive-setting`` overrides over the defaults (ValueError if out of range)."""
    from ccc.calibration.adaptive import AdaptiveSettings

    overrides = dict(arguments.adaptive_setting)
    if arguments.targets:
        overrides["targets"] = tuple(arguments.targets)
    return AdaptiveSettings(**overrides)


def _with_demo_presets(table: CalibrationTable) -> CalibrationTable:
    """``table`` with the demo difficulty presets, each restricted to the corruptions the table holds."""
    from ccc.demo import DEMO_DIFFICULTY_PRESETS

    presets = {
        name: (preset.target_accuracy, [corruption for corruption in preset.corruptions if corruption in table.corruptions])
        for name, preset in DEMO_DIFFICULTY_PRESETS.items()
    }
    return table.with_difficulty_presets({name: preset for name, preset in presets.items() if len(preset[1]) >= 2})


def _model_identity(spec: ModelSpec) -> tuple[str, str | None]:
    """(model name for the metadata, sha256 of the weights file or None)."""
    from ccc.models import DEFAULT_MODEL, DEFAULT_RESNET50_WEIGHTS

    weights_path = Path(spec.weights) if spec.weights is not None and Path(spec.weights).is_file() else None
    if weights_path is not None:
        digest = hashlib.sha256()
        with open(weights_path, "rb") as handle:
            for chunk in iter(lambda: handle.read(2**20), b""):
                digest.update(chunk)
        kind = "factory" if spec.is_factory else "torchvision"
        return f"{kind} {spec.name} weights {weights_path.name}", digest.hexdigest()
    if spec.is_factory:
        return f"factory {spec.name}", None
    weights = spec.weights or (DEFAULT_RESNET50_WEIGHTS if spec.name == DEFAULT_MODEL else "DEFAULT")
    return f"torchvision {spec.name} {weights}", None


@contextlib.contextmanager
def _open_backend(arguments: argparse.Namespace, job: CalibrationJob, spec: ModelSpec, model: nn.Module) -> Iterator[CalibrationBackend]:
    """In-process with the already loaded ``model`` for ``--workers 0``, else Ray (workers load ``spec``)."""
    from ccc.calibration.backends import ModelBackend

    serial = arguments.workers == 0 and arguments.ray_address is None
    with open_executor(arguments.workers, arguments.ray_address, serial=serial) as executor:
        yield ModelBackend(
            executor,
            job.render_context(),
            model if serial else spec,
            device=arguments.device,
            batch_size=arguments.batch_size,
            amp=arguments.amp,
            evaluators=arguments.evaluators,
        )


class _ProgressBar:
    """tqdm over model evaluations; the total grows as adaptive rounds are planned."""

    def __init__(self, enabled: bool) -> None:
        interactive = sys.stderr.isatty()
        self._bar = tqdm(
            total=0, unit="img", unit_scale=True, desc="calibrating", disable=not enabled,
            mininterval=0.5 if interactive else 30.0, dynamic_ncols=True,
        )

    def __call__(self, finished: int, planned: int) -> None:
        if planned:
            self._bar.total += planned
            self._bar.refresh()
        if finished:
            self._bar.update(finished)

    def close(self) -> None:
        self._bar.close()


def _summary(outcome: CalibrationOutcome, written: Path, job: CalibrationJob, folder: Path) -> str:
    table = outcome.table
    corruption_count = len(job.corruptions)
    brute_force = (1 + 20 * corruption_count + 400 * corruption_count * (corruption_count - 1)) * len(job.image_set)
    lines = [
        f"wrote {written}: {count(len(table.pairs()), 'pair')} of {count(corruption_count, 'corruption')}, checksum {table.checksum()}",
        f"evaluated {count(outcome.evaluated_images, 'image')} in {outcome.seconds:.1f} s "
        f"({outcome.images_per_second:,.1f} images/s)"
        + (f"; {outcome.resumed_images:,} were already done in {folder}" if outcome.resumed_images else ""),
        f"table rests on {outcome.total_images:,} image evaluations; the brute-force grid needs {brute_force:,} "
        f"({brute_force / max(outcome.total_images, 1):.1f}x)",
    ]
    return "\n".join(lines)


def run_compute(arguments: argparse.Namespace) -> int:
    """Execute ``ccc-calibrate compute``; returns the exit code."""
    from ccc.calibration.adaptive import AdaptivePlanner
    from ccc.calibration.compute import BruteForcePlanner, CalibrationJob, CalibrationPlanner, compute_calibration, state_dict_digest
    from ccc.calibration.evaluator import MAX_BATCH_SIZE
    from ccc.models import DEFAULT_MODEL, ModelSpec, load_model, resolve_device

    out = Path(arguments.out)
    folder_path = Path(arguments.work_folder) if arguments.work_folder else default_work_folder(out)
    try:
        if not out.parent.is_dir():
            raise CalibrationError(f"--out folder {out.parent} does not exist")
        if out.exists() and not arguments.overwrite and not folder_path.exists():
            raise CalibrationError(f"--out {out} already exists; pass --overwrite to replace it")
        if arguments.amp and not arguments.device.startswith("cuda"):
            raise CalibrationError(f"--amp needs --device cuda, got --device {arguments.device}")
        if arguments.targets is not None and not arguments.adaptive:
            raise CalibrationError("--targets only applies with --adaptive")
        if arguments.adaptive_setting and not arguments.adaptive:
            raise CalibrationError("--adaptive-setting only applies with --adaptive")
        if arguments.batch_size > MAX_BATCH_SIZE:
            raise CalibrationError(f"--batch-size must be an integer in [1, {MAX_BATCH_SIZE:,}], got {arguments.batch_size:,}")
        resolve_device(arguments.device)
        if arguments.demo:
            _apply_demo(arguments)
        settings = _adaptive_settings(arguments) if arguments.adaptive else None
        corruptions = arguments.corruptions or list(CCC_CORRUPTIONS)
        preprocessing = Preprocessing(arguments.resize, arguments.crop)
        root = resolve_imagenet_folder(arguments.imagenet)
        classes = None if arguments.classes is None else read_class_list(arguments.classes)
        index = index_image_folder(root, classes=classes, skip_bad_images=arguments.skip_bad_images, progress=not arguments.no_progress)
        if index.excluded:
            logger.warning("excluding %d unreadable image(s): %s", len(index.excluded), ", ".join(index.excluded[:10]))
        image_count = arguments.images or (len(index) if arguments.demo else DEFAULT_IMAGE_COUNT)
        image_set = select_calibration_images(index, image_count, arguments.image_seed, preprocessing)
        spec = ModelSpec(arguments.model or DEFAULT_MODEL, arguments.weights, arguments.normalization)
        model = load_model(spec, "cpu")
        model_name, weights_sha256 = _model_identity(spec)
        corruption_count = len(corruptions)
        block_count = -(-len(image_set) // arguments.block_size)
        planner: CalibrationPlanner
        if settings is not None:
            planner = AdaptivePlanner(settings, corruption_count, block_count, arguments.block_size, len(image_set))
        else:
            planner = BruteForcePlanner(corruption_count, block_count)
        job = CalibrationJob(
            image_set, tuple(corruptions), model_name, state_dict_digest(model), planner,
            seed=arguments.seed, block_size=arguments.block_size, amp=arguments.amp,
            weights_file_sha256=weights_sha256,
        )
        folder = WorkFolder.open(folder_path, job.identity())
    except (ValueError, RayUnavailableError) as error:
        if isinstance(error, CalibrationError):
            raise
        raise CalibrationError(str(error)) from error
    progress = _ProgressBar(not arguments.no_progress)
    try:
        if folder.results:
            logger.warning("resuming: %d results already in %s", len(folder.results), folder_path)
        with _open_backend(arguments, job, spec, model) as backend:
            outcome = compute_calibration(job, backend, folder, progress)
        progress.close()
        table = _with_demo_presets(outcome.table) if arguments.demo else outcome.table
        written = table.save(out)
    except KeyboardInterrupt:
        progress.close()
        folder.close()
        print(
            f"interrupted; finished work is kept in {folder_path}: rerun the same command to resume",
            file=sys.stderr,
        )
        return INTERRUPTED_EXIT_CODE
    except (ImageFolderError, RayUnavailableError) as error:
        progress.close()
        folder.close()
        raise CalibrationError(f"{error} (finished work is kept in {folder_path}; rerun to resume)") from error
    folder.remove()
    print(_summary(outcome, written, job, folder_path))
    return 0


def add_plot_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``ccc-calibrate plot``."""
    parser.add_argument("file", metavar="FILE", help="calibration table (.npz)")
    parser.add_argument("--out", required=True, metavar="PNG", help="image to write")
    parser.add_argument("--pairs", type=_name_list, default=None, metavar="N1:N2,...", help="pairs to draw, e.g. fog:snow,jpeg:contrast (default: all, up to --max-pairs)")
    parser.add_argument("--max-pairs", type=_positive_int, default=30, help="draw at most this many pairs when --pairs is not given (default: 30)")
    parser.add_argument("--target", type=float, default=None, help="draw the severity path for this target accuracy (percent)")
    parser.add_argument("--contours", type=_float_list, default=None, metavar="T1,T2,...", help="accuracy contour levels in percent (default: the table's preset targets, else 40,20)")
    parser.add_argument("--objective", default="reference", choices=("reference", "minimax", "mean_abs"), help="path objective (default: reference)")


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
            table, arguments.out, pairs=pairs, target=arguments.target, contours=arguments.contours,
            objective=arguments.objective, max_pairs=arguments.max_pairs,
        )
    except ValueError as error:
        if isinstance(error, CalibrationError):
            raise
        raise CalibrationError(str(error)) from error
    print(f"wrote {written}")
    return 0

