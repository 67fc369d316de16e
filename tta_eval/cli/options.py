"""The options ``tta-eval run`` and ``sweep`` share, and the settings they become.

Option groups (stream, each stream source's own, model, methods, run folder, precision, timing, cluster)
and the conversions of parsed arguments into :class:`tta_eval.settings.ExperimentSettings`, an
episode's settings and the executor; each command module adds its own options beside these.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ccc.cli.common import HelpFormatter, integer_at_least
from ccc.validation import LOADER_WORKERS_PER_CPU, MIN_LOADER_WORKERS_LIMIT, max_loader_workers
from tta_eval.method_settings import list_method_settings
from tta_eval.metrics import DEFAULT_COLLAPSE_SPAN, DEFAULT_WINDOW
from tta_eval.protocols import PRECISIONS, CostModel, EpisodeSettings, MethodCost, seconds_from_ms
from tta_eval.protocols.timing import DEFAULT_CALIBRATION_CALLS, DEFAULT_WARMUP_CALLS, PLAIN_MODEL_COST
from tta_eval.streams import (
    DEFAULT_BATCH_SIZE,
    DEMO_WORLD,
    WORLD_MODELS,
    StreamOptions,
    stream_schemes,
    stream_sources,
)

# The experiment and the models (torch) are imported by the functions that use them, so that --help
# answers at once.
if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from ccc.execution import Executor, TaskOptions
    from ccc.models import ModelSpec
    from tta_eval.settings import ExperimentSettings

__all__ = [
    "DEMO_STREAM",
    "add_experiment_command",
    "episode_settings",
    "experiment_settings",
    "open_executor",
    "per_stream",
    "stream_options",
]

DEMO_STREAM = "ccc:shards/demo_baseline_30_transition+speed_100_seed_43"
"""The README's 224×224 demo stream; its run folder is results/demo_baseline_30_transition+speed_100_seed_43."""


def add_experiment_command(
    commands: argparse._SubParsersAction, name: str, summary: str, description: str, epilog: str
) -> argparse.ArgumentParser:
    """Subcommand ``name`` of an experiment (``run``, ``sweep``) with the options they share: the
    experiment's (:func:`_add_experiment_arguments`) and the cluster's; the command adds its own."""
    parser = commands.add_parser(
        name, help=summary, description=description, formatter_class=HelpFormatter, epilog=epilog
    )
    _add_experiment_arguments(parser)
    _add_cluster_arguments(parser)
    return parser


def _add_experiment_arguments(parser: argparse.ArgumentParser) -> None:
    """The options shared by ``run`` and ``sweep``, in groups: the stream, each stream source's own,
    the model, the methods, the run folder, precision and timing."""
    _add_stream_arguments(parser)
    _add_stream_source_arguments(parser)
    _add_model_arguments(parser)
    _add_method_arguments(parser)
    _add_run_arguments(parser)
    _add_precision_arguments(parser)
    _add_timing_arguments(parser)


def _add_stream_arguments(parser: argparse.ArgumentParser) -> None:
    """--stream and the options every stream source takes (batches, workers, length, domains)."""
    group = parser.add_argument_group("stream")
    group.add_argument(
        "--stream",
        required=True,
        action="append",
        metavar="SCHEME:LOCATION",
        help="the stream (run: repeatable, one run folder per stream): '<scheme>:<location>' for a registered "
        "stream source ("
        + ", ".join(f"{scheme}:" for scheme in stream_schemes())
        + "), e.g. ccc:shards/RUN (a ccc-generate run folder), folder:PATH (ImageFolder layout "
        "root/<class>/<image>), synthetic:option=value,...; a plain folder path is read as an image folder",
    )
    group.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help=f"samples per batch (each method predicts, then adapts, once per batch; default: {DEFAULT_BATCH_SIZE}, "
        "or the batch size of --settings)",
    )
    group.add_argument(
        "--num-workers",
        type=int,
        default=0,
        help="DataLoader worker processes that read or render the stream, for every stream with images "
        "(ccc:, ccc-render:, folder:; synthetic: has none); 0 reads in this process; at most "
        f"{LOADER_WORKERS_PER_CPU} per CPU of this machine or {MIN_LOADER_WORKERS_LIMIT}, whichever is more "
        f"(here {max_loader_workers()})",
    )
    group.add_argument(
        "--max-samples", type=int, default=None, help="stop after this many samples (default: the whole stream)"
    )
    group.add_argument(
        "--domain-key",
        default=None,
        help="metadata key naming each sample's domain, for per-domain accuracy and the plot's shading "
        "(default: 'pair', the corruption pair n1→n2, for ccc: streams under 'run'; none otherwise)",
    )


def _add_stream_source_arguments(parser: argparse.ArgumentParser) -> None:
    """Each registered stream source's own options, under its heading (``StreamSource.options``)."""
    for source in stream_sources():
        if source.options:
            group = parser.add_argument_group(source.heading)
            for option in source.options:
                group.add_argument(option.flag, **option.arguments)


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The model the methods adapt and where it runs."""
    group = parser.add_argument_group("model")
    group.add_argument(
        "--model",
        default=None,
        help="torchvision model name, timm:NAME (needs pip install timm), a CIFAR model (cifar10:wrn28_10, "
        "cifar100:resnext29, ...; with --weights FILE, e.g. RobustBench's) or 'module:function' factory "
        "(default: the stream's world's model: the demo model for demo-world streams, resnet50 otherwise)",
    )
    group.add_argument(
        "--weights",
        default=None,
        help="torchvision weights name (IMAGENET1K_V1 for resnet50 by default, DEFAULT, none) or a state_dict file",
    )
    group.add_argument(
        "--normalization",
        choices=("auto", "imagenet", "none"),
        default="auto",
        help="input normalisation inside the model (auto: ImageNet's for torchvision models, the model's "
        "pretrained_cfg mean/std for timm models, the published weights' for CIFAR models)",
    )
    group.add_argument(
        "--demo",
        action="store_true",
        help="the demo world's model (ccc.demo:demo_model, docs/demo.md), for streams made with ccc-generate --demo",
    )
    group.add_argument("--device", default="cpu", help="cpu, cuda or cuda:INDEX")


def _add_method_arguments(parser: argparse.ArgumentParser) -> None:
    """The methods, their episodes (resets) and what a non-finite loss does."""
    group = parser.add_argument_group("methods")
    group.add_argument(
        "--method",
        action="append",
        default=[],
        metavar="NAME[:OPTION=VALUE,...]",
        help="method to run (repeatable), e.g. rdumb, eata, tent:learning_rate=0.001; see 'tta-eval methods' "
        "(demo-world streams: source, bn, tent, eta, rdumb when none is given)",
    )
    group.add_argument(
        "--settings",
        default=None,
        metavar="NAME",
        help="named method settings that give each method their options where --method does not set them, and "
        f"the run their batch size where --batch-size is not given: {', '.join(list_method_settings())} "
        "(docs/methods.md, 'CIFAR settings'; demo-world streams get demo unless another is named)",
    )
    episodic = group.add_mutually_exclusive_group()
    episodic.add_argument("--episodic-domain", metavar="KEY", help="episodic: reset methods when KEY changes")
    episodic.add_argument("--episodic-every", type=int, metavar="N", help="episodic: reset methods every N batches")
    group.add_argument(
        "--nonfinite-loss",
        choices=("continue", "stop"),
        default="continue",
        help="on a NaN/inf adaptation loss: skip that update and go on, or stop the run",
    )


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The run folder, its checkpoints and its accuracy windows and collapse judgement."""
    group = parser.add_argument_group("run")
    group.add_argument(
        "--window",
        type=int,
        default=None,
        help=f"samples per accuracy window, one point of the accuracy plot (default: fitted to the stream's length "
        f"for >= 20 windows, at least one batch, at most {DEFAULT_WINDOW:,})",
    )
    group.add_argument(
        "--collapse-reference",
        default="source",
        help="collapse is judged against: 'source' (run the source model as reference), an accuracy in [0, 1], "
        "or 'none'",
    )
    group.add_argument(
        "--collapse-span",
        type=int,
        default=None,
        help="a method collapsed once its windowed accuracy stays below the reference for this many samples "
        f"(default: 5 windows, at most {DEFAULT_COLLAPSE_SPAN:,})",
    )
    group.add_argument("--out", type=Path, default=Path("results"), help="folder holding run folders")
    group.add_argument("--name", default=None, help="run folder name (default: from the stream)")
    group.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing run folder (an unfinished run of the same command is resumed without it)",
    )
    group.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        metavar="SAMPLES",
        help="samples between checkpoints, from which re-running the same command resumes an interrupted run; "
        "0: none (default: 100,000)",
    )
    group.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_precision_arguments(parser: argparse.ArgumentParser) -> None:
    """--precision and --channels-last (GPU runs; docs/tta_eval.md, "Precision")."""
    group = parser.add_argument_group("precision (GPU runs)")
    group.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="fp32",
        help="arithmetic of the methods' forward passes: fp32, or autocast to bf16 / fp16 (fp16 with loss "
        "scaling); needs a CUDA device",
    )
    group.add_argument(
        "--channels-last",
        action="store_true",
        help="models and images in channels-last memory format (faster convolutions on recent GPUs); "
        "needs a CUDA device",
    )


def _check_precision(arguments: argparse.Namespace) -> None:
    """Refuse --precision bf16/fp16 and --channels-last on the CPU, and bf16 on a GPU without bfloat16."""
    on_cpu = not arguments.device.startswith("cuda")
    if on_cpu and arguments.precision != "fp32":
        raise ValueError(f"--precision {arguments.precision} needs a CUDA device; CPU runs use fp32")
    if on_cpu and arguments.channels_last:
        raise ValueError("--channels-last needs a CUDA device; CPU runs use the default memory format")
    if arguments.precision == "bf16":
        import torch

        if torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
            raise ValueError(
                f"--precision bf16: {torch.cuda.get_device_name()} does not support bfloat16; use --precision fp16"
            )


def _add_timing_arguments(parser: argparse.ArgumentParser) -> None:
    """Measured wall time, or deterministic costs (docs/protocols.md)."""
    timing = parser.add_argument_group("timing (measured wall time unless costs are given)")
    timing.add_argument(
        "--cost",
        action="append",
        default=[],
        metavar="LABEL=COST",
        help="deterministic cost of a method in units of λ (the plain model's latency per batch): TOTAL "
        "(δ/λ, δ the method's time per batch, e.g. tent=2.43) or PREDICTION+READY (e/λ+ℓ/λ: e until the "
        "prediction, ℓ until ready for the next batch, e.g. tent=1+1.43); repeatable; switches to deterministic "
        "timing",
    )
    timing.add_argument(
        "--costs",
        type=Path,
        default=None,
        metavar="FILE",
        help="deterministic costs from a cost table or run folder (costs.json)",
    )
    timing.add_argument(
        "--baseline-latency-ms",
        type=float,
        default=None,
        help="λ, the plain (non-adapting) model's latency per batch in ms: skips its calibration; with --cost, "
        "the cost model's λ (default: measured, mean + 6σ of timed calls)",
    )
    timing.add_argument(
        "--calibration-calls",
        type=int,
        default=DEFAULT_CALIBRATION_CALLS,
        help=f"timed calls calibrating λ (after {DEFAULT_WARMUP_CALLS} warm-up calls)",
    )
    timing.add_argument(
        "--warmup-calls",
        type=int,
        default=DEFAULT_WARMUP_CALLS,
        help="untimed method calls on the first batch before measuring",
    )


def _add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the runs (``run``: one per stream) or scenarios (``sweep``) execute: here or on Ray."""
    cluster = parser.add_argument_group("cluster (docs/tta_eval.md, 'Cluster')")
    cluster.add_argument(
        "--workers",
        type=integer_at_least(1),
        default=1,
        metavar="N",
        help="runs at once on a local Ray cluster of N CPUs; 1 runs them one after the other in this process "
        "without Ray (not --num-workers, the DataLoader's)",
    )
    cluster.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="run on an existing Ray cluster (auto, host:port or ray://host:port); run folders must be on a file "
        "system every node shares",
    )
    cluster.add_argument(
        "--gpus-per-task",
        type=float,
        default=None,
        metavar="F",
        help="with --device cuda on Ray: GPUs each run asks for (default 1; a fraction in (0, 1] shares a GPU)",
    )


def open_executor(arguments: argparse.Namespace) -> tuple[AbstractContextManager[Executor], TaskOptions]:
    """The executor of ``--workers`` / ``--ray-address`` and what each task asks of it."""
    from ccc.execution import open_executor
    from tta_eval.cluster import task_options

    serial = arguments.ray_address is None and arguments.workers == 1
    options = task_options(arguments.device, not serial, arguments.gpus_per_task)
    return open_executor(arguments.workers, arguments.ray_address, serial=serial), options


def per_stream(arguments: argparse.Namespace) -> list[argparse.Namespace]:
    """One namespace per ``--stream`` (each run's stream-dependent defaults follow its own stream)."""
    if len(arguments.stream) > 1 and arguments.name is not None:
        raise ValueError(
            f"--name names one run folder, but {len(arguments.stream)} streams were given: leave it out "
            "(each run folder is named after its stream)"
        )
    return [argparse.Namespace(**{**vars(arguments), "stream": stream}) for stream in arguments.stream]


def _collapse_reference(text: str) -> str | float | None:
    if text == "source":
        return "source"
    if text.lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(
            f"--collapse-reference must be 'source', 'none' or an accuracy in [0, 1], got {text!r}"
        ) from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"--collapse-reference accuracy must be in [0, 1], got {value}")
    return value


def episode_settings(arguments: argparse.Namespace) -> dict[str, object]:
    if arguments.episodic_domain:
        return {"reset": "domain", "domain_key": arguments.episodic_domain, "nonfinite_loss": arguments.nonfinite_loss}
    if arguments.episodic_every is not None:
        return {
            "reset": "batches",
            "reset_every_batches": arguments.episodic_every,
            "domain_key": arguments.domain_key,
            "nonfinite_loss": arguments.nonfinite_loss,
        }
    return {"domain_key": arguments.domain_key, "nonfinite_loss": arguments.nonfinite_loss}


def _cost_model(arguments: argparse.Namespace) -> CostModel | None:
    """Deterministic costs from --costs and --cost, with λ from the table or --baseline-latency-ms."""
    if arguments.costs is None and not arguments.cost:
        return None
    latency = seconds_from_ms("--baseline-latency-ms", arguments.baseline_latency_ms)
    base = CostModel.load(arguments.costs) if arguments.costs is not None else None
    costs = dict(base.costs) if base is not None else {}
    given: dict[str, str] = {}
    for text in arguments.cost:
        label, separator, value = text.rpartition("=")
        if not separator or not label:
            raise ValueError(f"--cost must look like LABEL=COST (units of λ), e.g. tent=2.5; got {text!r}")
        if label in given:
            raise ValueError(
                f"--cost {label} is given twice ({label}={given[label]} and {label}={value}); give it once"
            )
        given[label] = value
        costs[label] = MethodCost.parse(value)
    if latency is None:
        if base is None:
            raise ValueError("--cost needs λ: give --baseline-latency-ms (ms) or a cost table with --costs")
        latency = base.baseline_latency
    origin = (
        base.origin
        if base is not None and not arguments.cost
        else ("given" if base is None else f"{base.origin} + --cost")
    )
    plain = base.plain if base is not None else PLAIN_MODEL_COST
    return CostModel(latency, tuple(costs.items()), plain, origin)


def _model_spec(arguments: argparse.Namespace) -> ModelSpec | None:
    """The model the user chose, or None to let the stream's world choose (``resolve_experiment``)."""
    from ccc.models import DEFAULT_MODEL, ModelSpec

    if arguments.demo:
        if arguments.model is not None or arguments.weights is not None:
            raise ValueError("--demo selects the demo model: do not combine it with --model or --weights")
        return ModelSpec(WORLD_MODELS[DEMO_WORLD])
    if arguments.model is None and arguments.weights is None and arguments.normalization == "auto":
        return None
    return ModelSpec(arguments.model or DEFAULT_MODEL, arguments.weights, arguments.normalization)


def stream_options(arguments: argparse.Namespace) -> StreamOptions:
    """The options given to the stream's opener: the batch size, the workers and what each stream
    source's own options set (``StreamSource.from_options``)."""
    fields: dict[str, object] = {}
    for source in stream_sources():
        fields.update(source.from_options({option.dest: getattr(arguments, option.dest) for option in source.options}))
    return StreamOptions(batch_size=arguments.batch_size, num_workers=arguments.num_workers, **fields)


def experiment_settings(arguments: argparse.Namespace, protocol: EpisodeSettings) -> ExperimentSettings:
    from tta_eval.settings import ExperimentSettings, MethodSpec

    cost_model = _cost_model(arguments)
    _check_precision(arguments)
    return ExperimentSettings(
        stream=arguments.stream,
        methods=tuple(MethodSpec.parse(text) for text in arguments.method),
        model=_model_spec(arguments),
        output_root=arguments.out,
        run_name=arguments.name,
        device=arguments.device,
        stream_options=stream_options(arguments),
        max_samples=arguments.max_samples,
        protocol=protocol,
        cost_model=cost_model,
        baseline_latency=None
        if cost_model is not None
        else seconds_from_ms("--baseline-latency-ms", arguments.baseline_latency_ms),
        calibration_calls=arguments.calibration_calls,
        warmup_calls=arguments.warmup_calls,
        window=arguments.window,
        collapse_reference=_collapse_reference(arguments.collapse_reference),
        collapse_span=arguments.collapse_span,
        overwrite=arguments.overwrite,
        progress=not arguments.no_progress,
        checkpoint_every=arguments.checkpoint_every,
        precision=arguments.precision,
        channels_last=arguments.channels_last,
        method_settings=arguments.settings,
    )
