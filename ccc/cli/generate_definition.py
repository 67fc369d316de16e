"""What ``ccc-generate`` is asked to make: one typed :class:`StreamDefinition`, built once from the
command line by :func:`definition_from_arguments` (the ``--demo`` world's settings included) and
validated once, in its constructor.

The dry run, the run folder's name and the generation all read this one object. The library takes
a stream definition as a mapping (:func:`ccc.stream.spec.resolve_stream_spec`), where ``speed`` is
also the images per domain of a ``cin-c`` or ``gradual`` stream; :meth:`StreamDefinition.spec_mapping`
is the one place that converts. Nothing of this object is written to disk: a run folder records
the resolved :class:`ccc.stream.spec.StreamSpec` (its manifest), whose bytes this module never touches.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ccc.cli.common import UsageError, image_source_arguments
from ccc.demo.demonstration import DEMO_DOMAIN_IMAGES, DEMO_NUM_IMAGES, DEMO_SPEED
from ccc.stream.spec import CCC_KIND, DEFAULT_CORRUPTION_SET, KINDS, PAPER_NUM_IMAGES

__all__ = ["StreamDefinition", "definition_from_arguments"]


@dataclass(frozen=True)
class StreamDefinition:
    """A ``ccc-generate`` stream: its kind and parameters, its inputs and the dry run's plot.

    Every field means one thing; the fields of one kind are None for the others (the constructor
    refuses them in one line that names the command-line options).

    Attributes:
        kind: one of :data:`ccc.stream.spec.KINDS`: ``ccc``, ``cin-c`` or ``gradual``.
        seed: stream seed, >= 0.
        num_images: stream length in images, >= 1; None for a ``cin-c`` or ``gradual`` stream
            means one pass of its domains (a ``ccc`` stream always has a length).
        shard_size: samples per shard, >= 1.
        corruptions: comma-separated corruption names as given (order matters), or None for the
            preset's (``ccc``) or the 15 ImageNet-C corruptions (``cin-c``, ``gradual``).
        image_folder: ImageNet-layout folder ``<folder>/<wnid>/*.JPEG``; None for ``$CCC_IMAGENET``,
            or the demo world's folder in a ``--demo`` dry run (no folder is read then).
        classes: file with the explicit class list (line k = class k), or None.
        skip_bad_images: exclude unreadable images instead of stopping.
        demo: the embedded demo world instead of ImageNet (run folders are named ``demo_…``).
        difficulty: ``ccc`` only: the calibration table's difficulty preset, or None.
        baseline_accuracy: ``ccc`` only: target accuracy in percent in [0, 100], or None for the preset's.
        speed: ``ccc`` only: images per severity step (transition speed), >= 1; required.
        schedule: ``ccc`` only: corruption order (:data:`ccc.stream.schedule.SCHEDULES`).
        path_objective: ``ccc`` only: severity path choice (:data:`ccc.stream.paths.PATH_OBJECTIVES`).
        calibration: ``ccc`` only: table ``.npz``, published pickle or its URL; None for the default table.
        plot: ``ccc`` only: where the dry run writes the schedule plot; None for
            ``<run folder name>_schedule.png``.
        severity: ``cin-c`` only: the severity of every corruption, 1..5; None for the default (5).
        images_per_domain: ``cin-c`` and ``gradual`` only: images per corruption (``cin-c``) or per
            severity level (``gradual``), >= 1; None for the kind's default.
        crop: ``random``, ``whole`` or (``cin-c`` and ``gradual`` only) ``center``; None for the corruption
            set's default (:data:`ccc.stream.spec.SET_DEFAULTS`).
        image_encoding: how the images are stored, one of :data:`ccc.stream.spec.IMAGE_ENCODINGS`
            (``jpeg``, the public ImageNet data's, or the lossless ``png``); None for the set's default.
        corruption_set: whose corruption parameters and image size (:func:`ccc.corruptions.list_corruption_sets`).
    """

    kind: str
    seed: int
    num_images: int | None
    shard_size: int
    corruptions: str | None = None
    image_folder: str | None = None
    classes: str | None = None
    skip_bad_images: bool = False
    demo: bool = False
    difficulty: str | None = None
    baseline_accuracy: float | None = None
    speed: int | None = None
    schedule: str | None = None
    path_objective: str | None = None
    calibration: str | None = None
    plot: str | None = None
    severity: int | None = None
    images_per_domain: int | None = None
    crop: str | None = None
    image_encoding: str | None = None
    corruption_set: str = DEFAULT_CORRUPTION_SET

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise UsageError(f"--kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.kind == CCC_KIND:
            self._check_ccc_fields()
        else:
            self._check_domain_fields()

    def _check_ccc_fields(self) -> None:
        given = _given(("--severity", self.severity), ("--images-per-domain", self.images_per_domain))
        if given:
            raise UsageError(
                f"{', '.join(given)} {_do(given)} not apply to --kind ccc (the default): its severities come "
                "from the calibration table (images per step: --speed K); --severity is for --kind cin-c, "
                "--images-per-domain for cin-c and gradual"
            )
        if self.crop == "center":
            raise UsageError(
                "--crop center (ImageNet-C's centre crop) is for --kind cin-c and gradual; "
                "a ccc stream crops at random (the default) or takes --crop whole"
            )
        if self.speed is None:
            raise UsageError(
                "--speed K is required: images per severity step (the paper: 1000, 2000 or 5000); "
                "--demo chooses the demo's"
            )

    def _check_domain_fields(self) -> None:
        given = _given(
            ("--difficulty", self.difficulty),
            ("--baseline-accuracy", self.baseline_accuracy),
            ("--speed", self.speed),
            ("--schedule", self.schedule),
            ("--path-objective", self.path_objective),
            ("--calibration", self.calibration),
            ("--plot", self.plot),
            ("--severity", self.severity if self.kind == "gradual" else None),
        )
        if given:
            severity = (
                "its severities are 1 2 3 4 5 4 3 2 1 per corruption"
                if self.kind == "gradual"
                else "--severity S sets its one severity"
            )
            raise UsageError(
                f"{', '.join(given)} {_do(given)} not apply to --kind {self.kind}: it needs no calibration table, "
                f"{severity}, and --images-per-domain N sets the images per domain"
            )

    def spec_mapping(self) -> dict[str, Any]:
        """The stream as the mapping :func:`ccc.stream.spec.resolve_stream_spec` and
        :func:`ccc.stream.plan.plan_stream` read; the one place where :attr:`images_per_domain`
        becomes the library's ``speed`` key (images per domain for ``cin-c`` and ``gradual``)."""
        return {
            "kind": self.kind,
            "severity": self.severity,
            "crop": self.crop,
            "difficulty": self.difficulty,
            "baseline_accuracy": self.baseline_accuracy,
            "corruptions": self.corruptions,
            "speed": self.speed if self.kind == CCC_KIND else self.images_per_domain,
            "seed": self.seed,
            "num_images": self.num_images,
            "schedule": self.schedule,
            "path_objective": self.path_objective,
            "shard_size": self.shard_size,
            "image_encoding": self.image_encoding,
            "corruption_set": self.corruption_set,
        }


def _given(*options: tuple[str, object]) -> list[str]:
    """The flags among ``(flag, value)`` pairs whose value was given (is not None)."""
    return [flag for flag, value in options if value is not None]


def _do(flags: list[str]) -> str:
    return "does" if len(flags) == 1 else "do"


def definition_from_arguments(arguments: argparse.Namespace, note: Callable[[str], None]) -> StreamDefinition:
    """The :class:`StreamDefinition` of parsed ``ccc-generate`` arguments (the namespace is not changed).

    With ``--demo`` the demo world's settings fill what the user left out (told to ``note``): its
    table and, for a ``ccc`` stream, its speed and length, for a ``gradual`` stream its images per
    level; outside a dry run the demo's images are prepared here (on first use, told to ``note`` then) and
    become the image folder. ``--dataset`` becomes the image folder and class list here too (written into the
    cache on first use), in a dry run only when it counts a ``cin-c`` stream's images. Raises
    :class:`ccc.cli.common.UsageError` (one line) for options that do not go together: options another kind
    uses, ``--demo`` with ``--imagenet``, a ``ccc`` stream without ``--speed``.
    """
    values = _argument_values(arguments)
    demo_defaults = _demo_defaults(arguments) if arguments.demo else {}
    definition = StreamDefinition(**{**values, **demo_defaults})
    if not arguments.demo:
        counts_images = definition.kind == "cin-c" and definition.images_per_domain is None
        if arguments.dataset is None or (arguments.dry_run and not counts_images):
            return definition  # a dry run reads no image, unless it counts a cin-c stream's images
        image_folder, classes = image_source_arguments(arguments, note)
        return dataclasses.replace(definition, image_folder=image_folder, classes=classes)
    if arguments.imagenet is not None or arguments.dataset is not None:
        raise UsageError("--demo uses the demo world's own images: do not combine it with --imagenet or --dataset")
    from ccc.demo import demo_calibration_path, demo_image_folder, demo_table
    from ccc.demo.folder import default_demo_folder

    world = definition.corruption_set
    try:
        demo_table(world)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if definition.kind == CCC_KIND and definition.calibration is None:
        definition = dataclasses.replace(definition, calibration=str(demo_calibration_path(world)))
    if demo_defaults:
        note(_demo_note(definition.kind, demo_defaults))
    if arguments.dry_run:
        return definition
    folder = default_demo_folder(world=world)
    if not folder.is_dir():
        note(f"demo world (not ImageNet): preparing its images in {folder} (once, about 30 s) …")
    return dataclasses.replace(definition, image_folder=str(demo_image_folder(corruption_set=world)))


def _argument_values(arguments: argparse.Namespace) -> dict[str, Any]:
    """The definition's fields as the command line gives them (the defaults of a ``ccc`` stream filled in)."""
    ccc = arguments.kind == CCC_KIND
    return {
        "kind": arguments.kind,
        "seed": arguments.seed,
        "num_images": PAPER_NUM_IMAGES if ccc and arguments.num_images is None else arguments.num_images,
        "shard_size": arguments.shard_size,
        "corruptions": arguments.corruptions,
        "image_folder": arguments.imagenet,
        "classes": arguments.classes,
        "skip_bad_images": arguments.skip_bad_images,
        "demo": arguments.demo,
        "difficulty": arguments.difficulty,
        "baseline_accuracy": arguments.baseline_accuracy,
        "speed": arguments.speed,
        "schedule": (arguments.schedule or "reference") if ccc else arguments.schedule,
        "path_objective": (arguments.path_objective or "reference") if ccc else arguments.path_objective,
        "calibration": arguments.calibration,
        "plot": arguments.plot,
        "severity": arguments.severity,
        "images_per_domain": arguments.images_per_domain,
        "crop": arguments.crop,
        "image_encoding": arguments.image_encoding,
        "corruption_set": arguments.corruption_set,
    }


def _demo_defaults(arguments: argparse.Namespace) -> dict[str, int]:
    """The demo world's values for the numbers the user left out: a ``ccc`` stream's speed and
    length, a ``gradual`` stream's images per level."""
    if arguments.kind == CCC_KIND:
        chosen = {"speed": (arguments.speed, DEMO_SPEED), "num_images": (arguments.num_images, DEMO_NUM_IMAGES)}
    elif arguments.kind == "gradual":
        chosen = {"images_per_domain": (arguments.images_per_domain, DEMO_DOMAIN_IMAGES)}
    else:
        chosen = {}
    return {field: demo for field, (given, demo) in chosen.items() if given is None}


def _demo_note(kind: str, demo_defaults: dict[str, int]) -> str:
    """The line that says which demo values were chosen."""
    if kind != CCC_KIND:
        return f"demo world settings (docs/demo.md): --images-per-domain {demo_defaults['images_per_domain']}"
    chosen = [
        flag
        for field, flag in (("speed", f"--speed {DEMO_SPEED}"), ("num_images", f"--num-images {DEMO_NUM_IMAGES:,}"))
        if field in demo_defaults
    ]
    return (
        f"demo world settings (the demo's, not the paper's; docs/demo.md): {', '.join(chosen)} "
        "— its corruption pairs last 1,400–4,100 images"
    )
