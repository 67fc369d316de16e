"""``ccc-generate``: render a CCC stream into WebDataset shards (or show its schedule with ``--dry-run``).

Example::

    ccc-generate --difficulty medium --speed 2000 --seed 43 --imagenet /data/imagenet/val \\
        --calibration calibration/resnet50.npz --workers 16

writes ``shards/baseline_20_transition+speed_2000_seed_43/serial_00000.tar`` … and
``manifest.json``. Re-running the same command resumes an interrupted run. User mistakes (missing
folder or table, unknown difficulty or corruption, a folder holding another stream, a full disk)
end with one line on stderr and exit code 2; Ctrl-C exits with 130 and the run can be resumed.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ccc.cache import is_url
from ccc.calibration import PUBLISHED_MATRIX_URL, CalibrationError, CalibrationTable, load_calibration
from ccc.calibration.table_io import STREAM_PREPROCESSING
from ccc.cli.common import (
    HelpFormatter,
    OneLineErrorParser,
    UsageError,
    add_image_folder_arguments,
    count,
    examples,
    integer_at_least,
    run_command,
)
from ccc.cli.generate_definition import StreamDefinition, definition_from_arguments
from ccc.corruptions import get_corruption_set, list_corruption_sets
from ccc.demo import count_source_images, world_run_name
from ccc.demo.demonstration import DEMO_DOMAIN_IMAGES, DEMO_NUM_IMAGES, DEMO_SHARD_BYTES_PER_IMAGE, DEMO_SPEED
from ccc.execution import RayUnavailableError, open_executor
from ccc.generate import (
    DEFAULT_RENDER_BATCH_SIZE,
    DEFAULT_SAMPLES_PER_TASK,
    OutputFolderError,
    RenderDeviceError,
    TorchRendering,
    check_render_device,
    expected_shard_names,
    generate_stream,
    task_count,
)
from ccc.render import DEFAULT_RENDER_PRECISION, RENDER_PRECISIONS, SourceImageMismatchError
from ccc.shards.manifest import ManifestError
from ccc.shards.record import shard_name
from ccc.stream.domains import CROPS
from ccc.stream.paths import PATH_OBJECTIVES
from ccc.stream.plan import StreamPlan, plan_stream
from ccc.stream.report import describe_domains, describe_schedule, plot_schedule
from ccc.stream.schedule import SCHEDULES, ScheduleError, StreamSchedule, build_schedule
from ccc.stream.sources import IMAGENET_ENVIRONMENT_VARIABLE, ImageFolderError, read_class_list
from ccc.stream.spec import (
    CCC_KIND,
    DEFAULT_CORRUPTION_SET,
    DEFAULT_GRADUAL_IMAGES,
    DEFAULT_SEED,
    DEFAULT_SEVERITY,
    DEFAULT_SHARD_SIZE,
    IMAGE_ENCODINGS,
    KINDS,
    PAPER_NUM_IMAGES,
    SET_MODEL_OPTIONS,
    PlanError,
    domain_run_name,
    resolve_difficulty,
    resolve_stream_spec,
)

PROGRAM = "ccc-generate"
DEFAULT_CALIBRATION = Path("calibration") / "resnet50.npz"
DEFAULT_OUTPUT = Path("shards")
_NO_IMAGES_CHECKSUM = "0" * 64
"""Stands for the image folder's checksum in a dry run of a cin-c or gradual stream (no folder is read)."""
SHARD_BYTES_PER_IMAGE = 32_300
"""Shard bytes per sample (224×224 JPEG at quality 85 plus tar members), measured on a 6,000-image demo stream."""

LOCAL_RAY_MIN_PIXELS = 100_000_000
"""Output pixels (images × the corruption set's image area) from which ``ccc-generate`` starts a local Ray
cluster when ``--workers`` is not given: about 2,000 images at 224×224 or 98,000 at 32×32. Starting and
stopping the cluster costs about 5 s, more than two workers save on a smaller stream (measured on two cores,
BENCHMARKS.md "Stream rendering")."""


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an accuracy in percent in [0, 100], got {text!r}") from None
    if not 0.0 <= value <= 100.0:
        raise argparse.ArgumentTypeError(f"must be an accuracy in percent in [0, 100], got {value:g}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The ``ccc-generate`` argument parser."""
    parser = OneLineErrorParser(
        prog=PROGRAM,
        description="Render a CCC stream (continuously changing corruptions) into WebDataset tar shards. "
        "The paper's 27 published streams need no rendering: read them by name (open_stream"
        '("published:baseline_20_transition+speed_2000_seed_43"), tta-eval run --stream ccc:published:NAME) '
        "or copy them with ccc-mirror published:NAME DIR (docs/loading.md).",
        formatter_class=HelpFormatter,
        epilog=examples(
            (
                "ccc-generate --demo --difficulty medium --speed 200 --num-images 10000",
                "no ImageNet needed: the embedded demo world (docs/demo.md)",
            ),
            (
                "ccc-generate --difficulty medium --speed 2000 --imagenet /data/imagenet/val "
                "--calibration calibration/resnet50.npz",
                "the paper's medium stream at speed 2000 (7.5M images; the table: ccc-calibrate import --help)",
            ),
            (
                "ccc-generate --demo --difficulty hard --dry-run --plot hard.png",
                "show the schedule only, render nothing",
            ),
            (
                "ccc-generate --kind cin-c --severity 5 --imagenet /data/imagenet/val",
                "concatenated ImageNet-C (15 corruptions × every image: 750,000 for ImageNet's 50,000), "
                "no calibration table needed",
            ),
            ("ccc-generate --demo --kind gradual --crop center", "the gradual setting on the demo world"),
            (
                "ccc-generate --demo --difficulty medium --render-device cuda --out shards/torch_cuda",
                "render on a GPU with the torch backend (bytes differ from the default CPU path's)",
            ),
        ),
    )
    _add_kind_options(parser.add_argument_group('kind (docs/generator.md, "Stream kinds")'))
    _add_stream_options(parser.add_argument_group("stream"))
    _add_input_options(parser.add_argument_group("inputs"))
    _add_output_options(parser.add_argument_group("output"))
    _add_execution_options(parser.add_argument_group("execution"))
    return parser


def _add_kind_options(group: argparse._ArgumentGroup) -> None:
    """--kind and the options of the cin-c and gradual kinds."""
    group.add_argument(
        "--kind",
        choices=KINDS,
        default=CCC_KIND,
        help="ccc: continuously changing corruption pairs (the calibrated CCC stream); cin-c: concatenated "
        "ImageNet-C, each corruption once at one severity; gradual: each corruption at severities "
        "1 2 3 4 5 4 3 2 1",
    )
    group.add_argument(
        "--severity",
        type=integer_at_least(1),
        choices=range(1, 6),
        metavar="S",
        help=f"--kind cin-c: the severity of every corruption, 1–5 (default {DEFAULT_SEVERITY})",
    )
    group.add_argument(
        "--images-per-domain",
        type=integer_at_least(1),
        metavar="N",
        help="--kind cin-c: images per corruption (default: every source image, as the CCC paper's CIN-C and "
        f"ASR's scripts); gradual: per severity level (default {DEFAULT_GRADUAL_IMAGES:,}, as "
        "mariodoebler/test-time-adaptation's gradual setting; with --demo "
        f"{DEMO_DOMAIN_IMAGES}); every domain shows the same images in the same order, at most the folder's "
        "image count",
    )
    group.add_argument(
        "--crop",
        choices=CROPS,
        help="random (the CCC stream's random-resized crop and flip), whole (the whole image at the corruption "
        "set's size, no flip: CIFAR-10-C's and Tiny-ImageNet-C's), or for --kind cin-c and gradual center "
        "(ImageNet-C's Resize(256) + CenterCrop(224), no flip); default: the set's (random for imagenet, whole "
        "for the others)",
    )
    group.add_argument(
        "--corruption-set",
        choices=list_corruption_sets(),
        default=DEFAULT_CORRUPTION_SET,
        help="whose corruption parameters and image size: imagenet (ImageNet-C at 224x224; default), cifar "
        "(CIFAR-10-C's, 32x32), tinyimagenet or imagenet64 (64x64); docs/fidelity.md",
    )


def _add_stream_options(group: argparse._ArgumentGroup) -> None:
    """The ccc stream's difficulty, speed, seed, length, corruptions, schedule and path objective."""
    group.add_argument(
        "--difficulty",
        metavar="NAME",
        help="difficulty preset of the calibration table: easy, medium or hard for the ResNet-50 table and the "
        "demo table (default: none; then give --baseline-accuracy and --corruptions)",
    )
    group.add_argument(
        "--speed",
        type=integer_at_least(1),
        metavar="K",
        help="transition speed: images per severity step (the paper: 1000, 2000, 5000; required, except with "
        f"--demo: {DEMO_SPEED})",
    )
    group.add_argument(
        "--seed",
        type=integer_at_least(0),
        default=DEFAULT_SEED,
        metavar="S",
        help="stream seed (the paper: 43, 44, 45)",
    )
    group.add_argument(
        "--num-images",
        type=integer_at_least(1),
        metavar="N",
        help=f"stream length in images (default {PAPER_NUM_IMAGES:,}, the paper's: about "
        f"{PAPER_NUM_IMAGES * SHARD_BYTES_PER_IMAGE / 1e9:,.0f} GB of shards at "
        f"~{SHARD_BYTES_PER_IMAGE / 1e3:.0f} KB per image; "
        f"with --demo {DEMO_NUM_IMAGES:,}, about {DEMO_NUM_IMAGES * DEMO_SHARD_BYTES_PER_IMAGE / 1e9:.2f} GB)",
    )
    group.add_argument(
        "--baseline-accuracy",
        type=_percent,
        metavar="X",
        help="calibration target accuracy in percent (default: the preset's)",
    )
    group.add_argument(
        "--corruptions",
        metavar="A,B,...",
        help="comma-separated corruptions; order matters for the schedule (default: the preset's; cin-c and "
        "gradual: the 15 ImageNet-C corruptions in their order, gaussian_noise … jpeg_compression)",
    )
    group.add_argument(
        "--schedule",
        choices=SCHEDULES,
        help="corruption order (reference, the default: the public generator's order for the seed)",
    )
    group.add_argument(
        "--path-objective",
        choices=PATH_OBJECTIVES,
        help="severity path choice (reference, the default: the public generator's; see docs/paths.md)",
    )


def _add_input_options(group: argparse._ArgumentGroup) -> None:
    """The image folder, its class list, the calibration table and the demo world."""
    add_image_folder_arguments(group)
    group.add_argument(
        "--calibration",
        metavar="FILE",
        help=f"calibration table .npz, or the published CCC pickle (file or URL; converted once and cached) "
        f"(default: {DEFAULT_CALIBRATION} if it exists)",
    )
    group.add_argument(
        "--demo",
        action="store_true",
        help="the embedded demo world instead of ImageNet: procedural images, a small CNN's calibration table "
        "(docs/demo.md); runs are named demo_baseline_…; with --corruption-set cifar its 32x32 world "
        "(demo_cifar_baseline_…)",
    )


def _add_output_options(group: argparse._ArgumentGroup) -> None:
    """The run folder and its shards."""
    group.add_argument("--out", metavar="DIR", default=str(DEFAULT_OUTPUT), help="parent folder of the run folder")
    group.add_argument(
        "--name",
        metavar="NAME",
        help="run folder name (default: baseline_<b>_transition+speed_<k>_seed_<s>, prefixed <set>_ for a "
        "--corruption-set other than imagenet, then _images_<N> for a length other than the default, _<encoding> "
        "for an --image-encoding other than the set's, and _torch for --render-device, _torch_float32 with "
        "--render-precision float32)",
    )
    group.add_argument(
        "--image-encoding",
        choices=IMAGE_ENCODINGS,
        help="how the shards store the images: jpeg (quality 85, the public CCC data) or png (lossless: the "
        "rendered pixels exactly, about 150 KB per 224x224 image against about 20 KB); default: the corruption "
        "set's (png for cifar, jpeg for the others)",
    )
    group.add_argument(
        "--shard-size", type=integer_at_least(1), default=DEFAULT_SHARD_SIZE, metavar="N", help="samples per shard"
    )
    group.add_argument(
        "--overwrite", action="store_true", help="delete the shards and manifest of another stream in the run folder"
    )


def _add_execution_options(group: argparse._ArgumentGroup) -> None:
    """Workers, Ray, the dry run and what is printed."""
    group.add_argument(
        "--workers",
        type=integer_at_least(1),
        metavar="N",
        help="local Ray workers (default: all CPUs, with --render-device cuda one per GPU, and no more than the "
        f"stream's tasks of {DEFAULT_SAMPLES_PER_TASK} samples or one render batch; 1 for a stream of fewer than "
        f"{LOCAL_RAY_MIN_PIXELS / 1e6:,.0f} million output pixels, e.g. 2,000 images at 224×224, where starting Ray "
        "costs more than it saves); 1 renders in this process without Ray",
    )
    group.add_argument(
        "--render-device",
        metavar="DEVICE",
        help="render with the torch backend on cpu or cuda[:index] instead of the CPU reference path (the default): "
        "choose it when a GPU is at hand. Its bytes differ from the CPU path's (random corruptions draw from "
        "counter-based per-sample streams) and are reproducible on the same device type, whatever the workers and "
        "batch size; the manifest records it. With Ray each worker takes one GPU (num_gpus=1) and renders on cuda",
    )
    group.add_argument(
        "--render-batch-size",
        type=integer_at_least(1),
        metavar="N",
        help=f"--render-device: samples per batch and per task (default {DEFAULT_RENDER_BATCH_SIZE})",
    )
    group.add_argument(
        "--render-precision",
        choices=RENDER_PRECISIONS,
        help="--render-device: the torch backend's working float precision (default float64, the CPU path's "
        "arithmetic); float32 is faster on GPUs and gives other bytes, with the accuracy-level fidelity "
        "measured in docs/fidelity.md; the manifest records it",
    )
    group.add_argument(
        "--ray-address", metavar="ADDR", help="render on an existing Ray cluster (auto, host:port or ray://host:port)"
    )
    group.add_argument(
        "--dry-run", action="store_true", help="print the schedule and write a plot of it, render nothing"
    )
    group.add_argument(
        "--plot",
        metavar="FILE",
        help="where --dry-run writes the plot (default: <run folder name>_schedule.png in the current folder)",
    )
    group.add_argument("--no-progress", action="store_true", help="no progress bars")
    group.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")


def _load_table(definition: StreamDefinition, progress: bool) -> CalibrationTable:
    """The calibration table of a ``ccc`` stream: its file or URL, else the default table here."""
    path = definition.calibration
    if path is None:
        if not DEFAULT_CALIBRATION.is_file():
            imagenet = (
                ""
                if os.environ.get(IMAGENET_ENVIRONMENT_VARIABLE)
                else f" and --imagenet PATH (or {IMAGENET_ENVIRONMENT_VARIABLE}=PATH)"
            )
            raise UsageError(
                f"no calibration table ({DEFAULT_CALIBRATION} does not exist here): pass --calibration FILE — "
                f"a table .npz, or the published CCC pickle or its URL ({PUBLISHED_MATRIX_URL}), converted once —"
                f"{imagenet}; without ImageNet, add --demo to run on the embedded demo world"
            )
        path = str(DEFAULT_CALIBRATION)
    if not is_url(path) and not Path(path).is_file():
        raise UsageError(
            f"calibration table {path} does not exist; pass a table .npz, the published CCC pickle or its URL "
            f"({PUBLISHED_MATRIX_URL}), or compute one with `ccc-calibrate compute`"
        )
    table, note = load_calibration(path, progress=progress)
    if note:
        print(f"{PROGRAM}: {note}", file=sys.stderr)
    return table


def _note_preprocessing(table: CalibrationTable) -> None:
    """One line on stderr when ``table`` was not measured the way a ccc stream draws its samples."""
    if table.metadata.preprocessing_kind != STREAM_PREPROCESSING:
        print(
            f"{PROGRAM}: note: the calibration table measured {table.metadata.preprocessing_kind} crops, the stream "
            "shows random-resized crops and JPEG quality 85, so its realised accuracy can miss the target by a few "
            "points: check it with ccc-verify --accuracy, or calibrate with ccc-calibrate compute --preprocessing "
            "stream (docs/calibration.md)",
            file=sys.stderr,
        )


def _rendering(arguments: argparse.Namespace) -> TorchRendering | None:
    """The torch renderer of ``--render-device`` (None: the CPU reference path), its device checked on
    this machine unless the run goes to a Ray cluster (checked there by the generation) or is a dry
    run (which renders nothing, so it can be previewed on a machine without the GPU)."""
    if arguments.render_device is None:
        given = {"--render-batch-size": arguments.render_batch_size, "--render-precision": arguments.render_precision}
        for option, value in given.items():
            if value is not None:
                raise UsageError(f"{option} applies to the torch renderer: add --render-device cpu|cuda")
        return None
    rendering = TorchRendering(
        arguments.render_device,
        arguments.render_batch_size or DEFAULT_RENDER_BATCH_SIZE,
        arguments.render_precision or DEFAULT_RENDER_PRECISION,
    )
    if arguments.ray_address is None and not arguments.dry_run:
        check_render_device(rendering)
    return rendering


def _describe_rendering(rendering: TorchRendering | None) -> str:
    """The dry run's line about the renderer."""
    if rendering is None:
        return "renderer: the CPU reference path (the default; --render-device picks the torch backend)"
    return f"renderer: {rendering.describe()}"


def _default_workers(plan: StreamPlan, rendering: TorchRendering | None) -> int:
    """``--workers`` when not given: 1 (this process, no Ray) for a stream of fewer than
    :data:`LOCAL_RAY_MIN_PIXELS` output pixels; else one per GPU for the torch renderer on CUDA or one per CPU,
    and no more than the stream's tasks."""
    spec = plan.spec
    if spec.num_images * get_corruption_set(spec.corruption_set).image_size ** 2 < LOCAL_RAY_MIN_PIXELS:
        return 1
    if rendering is not None and rendering.device_type == "cuda":
        import torch

        workers = max(1, torch.cuda.device_count())
    else:
        workers = os.cpu_count() or 1
    return min(workers, task_count(spec, rendering))


TORCH_RUN_SUFFIX = "_torch"
"""Ending of the default run folder name of a stream rendered by the torch backend (``--render-device``),
whose bytes differ from the CPU reference path's: the two renderers' runs never share a folder. A
precision other than the default follows it (``_torch_float32``)."""


def _run_suffix(rendering: TorchRendering | None) -> str:
    """The default run folder name's ending for ``rendering``: none, :data:`TORCH_RUN_SUFFIX`, or that and
    ``_<precision>`` for a precision other than the default."""
    if rendering is None:
        return ""
    if rendering.precision == DEFAULT_RENDER_PRECISION:
        return TORCH_RUN_SUFFIX
    return f"{TORCH_RUN_SUFFIX}_{rendering.precision}"


def _run_folder(arguments: argparse.Namespace, default_name: str, rendering: TorchRendering | None) -> Path:
    """The run folder: ``--out`` / (``--name``, else ``default_name`` (its world's, ``demo_…`` for the demo)
    followed by :func:`_run_suffix` for the torch renderer)."""
    if arguments.name:
        return Path(arguments.out) / arguments.name
    return Path(arguments.out) / (default_name + _run_suffix(rendering))


def _run_domains(arguments: argparse.Namespace, definition: StreamDefinition, rendering: TorchRendering | None) -> int:
    """A cin-c or gradual stream: no calibration table, only an image folder."""
    progress = not arguments.no_progress
    if arguments.dry_run:
        spec = resolve_stream_spec(
            definition.spec_mapping(), None, _NO_IMAGES_CHECKSUM, _count_source_images(definition)
        )
    else:
        plan = _plan(definition, None, progress)
        spec = plan.spec
    name = ("demo_" if definition.demo else "") + domain_run_name(
        spec.kind, spec.severity, spec.speed, spec.crop, spec.seed, spec.image_encoding, spec.corruption_set
    )
    run_dir = _run_folder(arguments, name, rendering)
    if arguments.dry_run:
        print(describe_domains(spec, shard_name))
        print(f"\n{_describe_rendering(rendering)}")
        print(f"run folder: {run_dir} (nothing written there by --dry-run)")
        return 0
    return _render(arguments, definition, plan, run_dir, rendering)


def _count_source_images(definition: StreamDefinition) -> int | None:
    """The image count a dry run of a cin-c stream without --images-per-domain needs (every image per
    corruption): the demo world's, or the folder's, listed without reading an image; else None."""
    if definition.kind != "cin-c" or definition.images_per_domain is not None:
        return None
    return count_source_images(definition.image_folder, definition.demo, _classes(definition))


def _classes(definition: StreamDefinition) -> list[str] | None:
    """The explicit class list of ``--classes``, or None."""
    return None if definition.classes is None else read_class_list(definition.classes)


def _plan(
    definition: StreamDefinition,
    table: CalibrationTable | None,
    progress: bool,
    schedule: StreamSchedule | None = None,
) -> StreamPlan:
    """The plan of ``definition`` over its image folder (table: None for the kinds that need none;
    schedule: the one already built for a ccc stream)."""
    return plan_stream(
        definition.spec_mapping(),
        table,
        definition.image_folder,
        classes=_classes(definition),
        skip_bad_images=definition.skip_bad_images,
        progress=progress,
        schedule=schedule,
    )


def _render(
    arguments: argparse.Namespace,
    definition: StreamDefinition,
    plan: StreamPlan,
    run_dir: Path,
    rendering: TorchRendering | None,
) -> int:
    """Render ``plan`` into ``run_dir`` and print what was done and what comes next."""
    spec, sources = plan.spec, plan.sources
    renderer = "" if rendering is None else f", rendered by {rendering.describe()}"
    print(
        f"{PROGRAM}: {count(len(sources), 'source image')}, {count(spec.num_shards, 'shard')} "
        f"({expected_shard_names(plan)[0]} …) in {run_dir}{renderer}"
    )
    workers = arguments.workers or _default_workers(plan, rendering)
    serial = arguments.ray_address is None and workers == 1
    with open_executor(workers, arguments.ray_address, serial=serial) as executor:
        summary = generate_stream(
            plan,
            run_dir,
            executor,
            overwrite=arguments.overwrite,
            progress=not arguments.no_progress,
            rendering=rendering,
        )
    skipped = summary.shards_skipped
    print(
        f"{PROGRAM}: wrote {count(summary.shards_written, 'shard')} ({count(summary.images_rendered, 'image')}, "
        f"{summary.bytes_written / 1e6:,.1f} MB) in {summary.seconds:,.1f} s, "
        f"{summary.images_per_second:,.1f} images/s; "
        f"{count(skipped, 'shard')} {'was' if skipped == 1 else 'were'} already finished; output {run_dir}"
    )
    methods = "" if definition.demo else " --method source --method bn --method eata --method rdumb"
    if definition.corruption_set in SET_MODEL_OPTIONS and not definition.demo:
        methods += " " + SET_MODEL_OPTIONS[definition.corruption_set].split(" (")[0]
    print(
        f"next: ccc-verify {run_dir}\n      tta-eval run --stream ccc:{run_dir}{methods}      # results/{run_dir.name}/"
    )
    return 0


def _run_ccc(arguments: argparse.Namespace, definition: StreamDefinition, rendering: TorchRendering | None) -> int:
    """A ccc stream: calibration table → target and corruptions → schedule → dry run or shards."""
    table = _load_table(definition, progress=not arguments.no_progress)
    if definition.difficulty is None and (definition.baseline_accuracy is None or definition.corruptions is None):
        raise UsageError(
            f"pass --difficulty NAME (one of: {', '.join(table.difficulty_presets) or 'none in this table'}) "
            "or both --baseline-accuracy X and --corruptions A,B,..."
        )
    target, names, _ = resolve_difficulty(
        table, definition.difficulty, definition.baseline_accuracy, definition.corruptions
    )
    schedule = build_schedule(table, target, names, definition.seed, definition.schedule, definition.path_objective)
    name = world_run_name(
        target,
        definition.speed,
        definition.seed,
        definition.num_images,
        definition.demo,
        definition.image_encoding,
        definition.corruption_set,
        definition.crop,
    )
    run_dir = _run_folder(arguments, name, rendering)
    if arguments.dry_run:
        num_shards = -(-definition.num_images // definition.shard_size)
        print(describe_schedule(schedule, definition.speed, definition.num_images, num_shards, shard_name))
        plot = plot_schedule(
            schedule, definition.speed, definition.num_images, definition.plot or f"{run_dir.name}_schedule.png"
        )
        print(f"\n{_describe_rendering(rendering)}")
        print(f"run folder: {run_dir} (nothing written there by --dry-run)\nplot: {plot.resolve()}")
        _note_preprocessing(table)
        return 0
    plan = _plan(definition, table, not arguments.no_progress, schedule)
    code = _render(arguments, definition, plan, run_dir, rendering)
    _note_preprocessing(table)
    return code


def _run(arguments: argparse.Namespace) -> int:
    rendering = _rendering(arguments)  # first: a bad --render-device ends the command before anything is read
    if rendering is not None:
        from ccc.render_torch import check_torch_corruption_set

        try:
            check_torch_corruption_set(arguments.corruption_set)
        except ValueError as error:
            raise UsageError(str(error)) from None
    definition = definition_from_arguments(arguments, note=lambda line: print(f"{PROGRAM}: {line}", file=sys.stderr))
    if definition.kind == CCC_KIND:
        return _run_ccc(arguments, definition, rendering)
    return _run_domains(arguments, definition, rendering)


_USER_ERRORS = (
    UsageError,
    CalibrationError,
    ImageFolderError,
    ScheduleError,
    PlanError,
    OutputFolderError,
    ManifestError,
    SourceImageMismatchError,
    RayUnavailableError,
    RenderDeviceError,
    OSError,
)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``ccc-generate``; returns the exit code (0 success, 2 user error, 130 interrupted)."""
    arguments = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if arguments.verbose else logging.WARNING, format="%(name)s: %(message)s")
    return run_command(
        PROGRAM, lambda: _run(arguments), _USER_ERRORS, interrupted="interrupted; run the same command again to resume"
    )


if __name__ == "__main__":
    sys.exit(main())
