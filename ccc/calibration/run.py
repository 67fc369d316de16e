"""``calibrate(config)``: a whole calibration run, from an image folder and a model to a saved table.

This is the library function behind ``ccc-calibrate compute`` (``ccc/cli/calibrate.py`` only turns
the command line into a :class:`CalibrationConfig`)::

    from ccc.calibration.run import CalibrationConfig, calibrate
    from ccc.models import ModelSpec

    result = calibrate(CalibrationConfig(out="calibration/vit.npz", imagenet="/data/imagenet/val",
                                         model=ModelSpec("vit_b_16"), workers=8))
    result.table.checksum()

The run is resumable: finished work units are kept in a work folder (default ``OUT.work``) until
the table is written; an interrupted run (``KeyboardInterrupt``) keeps them and the same call
resumes. Everything that determines the numbers is an explicit field of the config: the image
folder, the model, the corruptions, the seeds (this module does not know the demo world).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ccc.calibration.adaptive import AdaptivePlanner, AdaptiveSettings
from ccc.calibration.compute import DEFAULT_BACKEND
from ccc.calibration.compute.backends.registry import BackendSetup, get_backend
from ccc.calibration.compute.engine import DEFAULT_BLOCK_SIZE
from ccc.calibration.compute.imageset import DEFAULT_IMAGE_COUNT, Preprocessing, select_calibration_images
from ccc.calibration.compute.job import (
    BruteForcePlanner,
    CalibrationJob,
    CalibrationOutcome,
    CalibrationPlanner,
    compute_calibration,
    state_dict_digest,
)
from ccc.calibration.compute.workfolder import WorkFolder, default_work_folder
from ccc.calibration.presets import CCC_CORRUPTIONS, DifficultyPreset
from ccc.calibration.table import CalibrationError, CalibrationTable
from ccc.execution import open_executor
from ccc.models import DEFAULT_MODEL, DEFAULT_RESNET50_WEIGHTS, ModelSpec, load_model, resolve_device
from ccc.render import DEFAULT_RENDER_PRECISION
from ccc.stream.sources import index_image_folder, resolve_imagenet_folder
from ccc.validation import MAX_BATCH_SIZE, check_positive_int

__all__ = ["CalibrationConfig", "CalibrationRun", "calibrate", "model_identity"]

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[int, int], None]
"""``progress(finished, planned)``: evaluations finished since the last call, evaluations newly planned."""


@dataclasses.dataclass(frozen=True)
class CalibrationConfig:
    """What a calibration run computes and where it runs.

    Attributes:
        out: the table file to write (``.npz``); its folder must exist.
        imagenet: ImageNet-layout folder ``<wnid>/*.JPEG`` (None: ``$CCC_IMAGENET``).
        model: the model (loaded in this process, and by each Ray worker from the spec).
        corruptions: corruption names, >= 2 (default: the 15 of CCC).
        images: calibration images, class-balanced, >= 1 (None: 5,000; ``all_images``: every image).
        all_images: use every image of the folder (when ``images`` is None).
        image_seed: seed choosing the images, >= 0.
        seed: seed of the per-image corruption randomness, >= 0.
        adaptive: adaptive scheme settings (None: the brute-force grid).
        presets: difficulty presets stored in the table, each restricted to the corruptions the
            table holds (presets left with fewer than 2 are dropped); None: the ResNet-50 presets
            when the model is the default ResNet-50.
        serial: run in this process without Ray (``workers`` and ``ray_address`` ignored).
        workers: CPUs of a local Ray cluster (None: all).
        ray_address: an existing Ray cluster (``auto``, ``host:port``, ``ray://host:port``).
        evaluators: model workers on Ray (None: one per GPU with CUDA, else one per CPU).
        device: ``cpu`` or ``cuda[:index]``.
        batch_size: images per forward pass, in [1, 65,536].
        amp: float16 autocast (CUDA only).
        skip_bad_images: exclude unreadable images (deterministically) instead of stopping.
        classes: explicit class list (folder names; line k = class k), None: the sorted folders.
        block_size: images per unit of work, >= 1.
        preprocessing: how a source image becomes the model input: centre crops (the default) or the
            stream's random-resized crop, flip and JPEG round trip (:class:`Preprocessing`).
        work_folder: where finished work is kept (None: ``OUT.work``).
        overwrite: replace an existing ``out``.
        show_progress: show progress bars while indexing.
        backend: the calibration backend that runs the work units, by name
            (:func:`ccc.calibration.compute.backends.registry.list_backends`; default ``model``: the model
            measures them on CPU-rendered images; ``torch``: rendered and measured on ``device`` with
            the torch rendering backend, whose bytes differ from the CPU path's). A backend that does
            not use the executor runs in this process (no Ray cluster).
        backend_options: the backend's own options (name → value, see its description).
    """

    out: str | os.PathLike[str]
    imagenet: str | os.PathLike[str] | None = None
    model: ModelSpec = ModelSpec(DEFAULT_MODEL)
    corruptions: tuple[str, ...] = CCC_CORRUPTIONS
    images: int | None = None
    all_images: bool = False
    image_seed: int = 0
    seed: int = 0
    adaptive: AdaptiveSettings | None = None
    presets: Mapping[str, DifficultyPreset] | None = None
    serial: bool = False
    workers: int | None = None
    ray_address: str | None = None
    evaluators: int | None = None
    device: str = "cpu"
    batch_size: int = 64
    amp: bool = False
    skip_bad_images: bool = False
    classes: tuple[str, ...] | None = None
    block_size: int = DEFAULT_BLOCK_SIZE
    preprocessing: Preprocessing = Preprocessing()
    work_folder: str | os.PathLike[str] | None = None
    overwrite: bool = False
    show_progress: bool = True
    backend: str = DEFAULT_BACKEND
    backend_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def work_folder_path(self) -> Path:
        """The work folder: ``work_folder`` or ``OUT.work``."""
        return Path(self.work_folder) if self.work_folder is not None else default_work_folder(self.out)


@dataclasses.dataclass(frozen=True)
class CalibrationRun:
    """What :func:`calibrate` did: the outcome (table, counts), the file written and the job."""

    outcome: CalibrationOutcome
    table: CalibrationTable
    written: Path
    job: CalibrationJob


def model_identity(spec: ModelSpec) -> tuple[str, str | None]:
    """(model name for the metadata, sha256 of the weights file or None)."""
    weights_path = Path(spec.weights) if spec.weights is not None and Path(spec.weights).is_file() else None
    if weights_path is not None:
        digest = hashlib.sha256()
        with open(weights_path, "rb") as handle:
            for chunk in iter(lambda: handle.read(2**20), b""):
                digest.update(chunk)
        return f"{spec.kind} {spec.name} weights {weights_path.name}", digest.hexdigest()
    if spec.is_factory:
        return f"factory {spec.name}", None
    if spec.is_timm or spec.is_cifar:
        return f"{spec.kind} {spec.name} {spec.weights or 'pretrained'}", None
    weights = spec.weights or (DEFAULT_RESNET50_WEIGHTS if spec.name == DEFAULT_MODEL else "DEFAULT")
    return f"torchvision {spec.name} {weights}", None


def _with_presets(table: CalibrationTable, presets: Mapping[str, DifficultyPreset]) -> CalibrationTable:
    """``table`` with ``presets``, each restricted to the corruptions the table holds (>= 2 kept)."""
    restricted: dict[str, tuple[float, Iterable[str]]] = {
        name: (
            preset.target_accuracy,
            [corruption for corruption in preset.corruptions if corruption in table.corruptions],
        )
        for name, preset in presets.items()
    }
    return table.with_difficulty_presets(
        {name: preset for name, preset in restricted.items() if len(list(preset[1])) >= 2}
    )


def _check(config: CalibrationConfig) -> None:
    out = Path(config.out)
    if not out.parent.is_dir():
        raise CalibrationError(f"--out folder {out.parent} does not exist")
    if out.exists() and not config.overwrite and not config.work_folder_path.exists():
        raise CalibrationError(f"--out {out} already exists; pass --overwrite to replace it")
    if config.amp and not config.device.startswith("cuda"):
        raise CalibrationError(f"--amp needs --device cuda, got --device {config.device}")
    check_positive_int("--batch-size", config.batch_size, MAX_BATCH_SIZE, error=CalibrationError)
    resolve_device(config.device)
    try:
        entry = get_backend(config.backend)
    except ValueError as error:
        raise CalibrationError(str(error)) from None
    if not entry.uses_executor and (config.ray_address is not None or config.workers):
        raise CalibrationError(
            f"calibration backend {config.backend!r} runs in this process on --device: "
            "do not combine it with --workers or --ray-address"
        )


def calibrate(config: CalibrationConfig, progress: ProgressCallback | None = None) -> CalibrationRun:
    """Compute (or resume) the calibration table of ``config`` and save it to ``config.out``.

    The work folder is removed once the table is written. On ``KeyboardInterrupt`` or an error
    while computing, finished work stays in the work folder and the same call resumes.

    Args:
        config: what to compute.
        progress: optional callback, see :data:`ProgressCallback`.

    Raises:
        CalibrationError: a user mistake (message names the option), also for an unreachable Ray cluster.
        ccc.stream.sources.ImageFolderError: the image folder is missing, not in ImageNet layout, or holds
            unreadable images (without ``skip_bad_images``).
    """
    _check(config)
    root = resolve_imagenet_folder(None if config.imagenet is None else str(config.imagenet))
    index = index_image_folder(
        root, classes=config.classes, skip_bad_images=config.skip_bad_images, progress=config.show_progress
    )
    if index.excluded:
        logger.warning("excluding %d unreadable image(s): %s", len(index.excluded), ", ".join(index.excluded[:10]))
    image_count = config.images or (len(index) if config.all_images else DEFAULT_IMAGE_COUNT)
    image_set = select_calibration_images(index, image_count, config.image_seed, config.preprocessing)
    model = load_model(config.model, "cpu")
    model_name, weights_sha256 = model_identity(config.model)
    corruption_count = len(config.corruptions)
    block_count = -(-len(image_set) // config.block_size)
    planner: CalibrationPlanner
    if config.adaptive is not None:
        planner = AdaptivePlanner(config.adaptive, corruption_count, block_count, config.block_size, len(image_set))
    else:
        planner = BruteForcePlanner(corruption_count, block_count)
    job = CalibrationJob(
        image_set,
        tuple(config.corruptions),
        model_name,
        state_dict_digest(model),
        planner,
        seed=config.seed,
        block_size=config.block_size,
        amp=config.amp,
        weights_file_sha256=weights_sha256,
        backend=config.backend,
        render_precision=config.backend_options.get("precision", DEFAULT_RENDER_PRECISION),
    )
    folder_path = config.work_folder_path
    folder = WorkFolder.open(folder_path, job.identity())
    try:
        if folder.results:
            logger.warning("resuming: %d results already in %s", len(folder.results), folder_path)
        entry = get_backend(config.backend)
        serial = config.serial or not entry.uses_executor
        with open_executor(config.workers, config.ray_address, serial=serial) as executor:
            setup = BackendSetup(
                job.render_context(),
                executor,
                model if serial else config.model,
                device=config.device,
                batch_size=config.batch_size,
                amp=config.amp,
                evaluators=config.evaluators,
                options=config.backend_options,
            )
            backend = entry.factory(setup)
            outcome = compute_calibration(job, backend, folder, progress)
        table = outcome.table if config.presets is None else _with_presets(outcome.table, config.presets)
        written = table.save(config.out)
    except BaseException:
        folder.close()
        raise
    folder.remove()
    return CalibrationRun(outcome, table, written, job)
