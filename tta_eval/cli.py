"""Command line: ``tta-eval run``, ``sweep``, ``rescore``, ``compare``, ``methods``.

User mistakes end with a one-line "tta-eval: error: …" on stderr and exit code 2, never a traceback
(:func:`ccc.cli.common.run_command`).
Times on the command line carry their unit in the option name (``--threshold-ms``, ``--budget-s``).
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from typing import TYPE_CHECKING

from ccc.cli.common import HelpFormatter, count, examples, integer_at_least, run_command
from ccc.execution import RayUnavailableError, TaskFailedError
from ccc.validation import LOADER_WORKERS_PER_CPU, MIN_LOADER_WORKERS_LIMIT, max_loader_workers
from tta_eval.metrics import DEFAULT_COLLAPSE_SPAN, DEFAULT_WINDOW
from tta_eval.protocols import (
    CostModel,
    EpisodeSettings,
    MethodCost,
    NonFiniteLossError,
    OfflineProtocol,
    PRECISIONS,
    get_protocol,
    list_protocols,
    protocol_entries,
    seconds_from_ms,
)
from tta_eval.protocols.timing import DEFAULT_CALIBRATION_CALLS, DEFAULT_WARMUP_CALLS, PLAIN_MODEL_COST
from tta_eval.streams import (
    DEMO_WORLD,
    WORLD_MODELS,
    StreamOptions,
    default_domain_key,
    stream_schemes,
    stream_sources,
)

# The experiment, the methods, the models (torch) and the reports (matplotlib) are imported by the
# commands that use them, so that --help answers at once.
if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from ccc.execution import Executor, TaskOptions
    from tta_eval.experiment import ExperimentSettings, ResolvedExperiment
    from tta_eval.run_folder import RunResult
    from ccc.models import ModelSpec

PROGRAM = "tta-eval"


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
        default=64,
        help="samples per batch (each method predicts, then adapts, once per batch)",
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
        help="torchvision model name, timm:NAME (needs pip install timm) or 'module:function' factory "
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
        "pretrained_cfg mean/std for timm models)",
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


def _open_executor(arguments: argparse.Namespace) -> tuple[AbstractContextManager[Executor], TaskOptions]:
    """The executor of ``--workers`` / ``--ray-address`` and what each task asks of it."""
    from ccc.execution import open_executor
    from tta_eval.cluster import task_options

    serial = arguments.ray_address is None and arguments.workers == 1
    options = task_options(arguments.device, not serial, arguments.gpus_per_task)
    return open_executor(arguments.workers, arguments.ray_address, serial=serial), options


def _per_stream(arguments: argparse.Namespace) -> list[argparse.Namespace]:
    """One namespace per ``--stream`` (each run's stream-dependent defaults follow its own stream)."""
    if len(arguments.stream) > 1 and arguments.name is not None:
        raise ValueError(
            f"--name names one run folder, but {len(arguments.stream)} streams were given: leave it out "
            "(each run folder is named after its stream)"
        )
    return [argparse.Namespace(**{**vars(arguments), "stream": stream}) for stream in arguments.stream]


DEMO_STREAM = "ccc:shards/demo_baseline_30_transition+speed_100_seed_43"
"""README command 1's stream; its run folder is results/demo_baseline_30_transition+speed_100_seed_43."""
RUN_EXAMPLES = (
    (
        "tta-eval run --stream ccc:shards/demo_baseline_30_transition+speed_200_seed_43_images_10000 "
        "--method source --method bn --method tent --method rdumb",
        "a demo stream (ccc-generate --help) with methods of your choice; its manifest selects the demo model",
    ),
    (
        "tta-eval run --stream ccc:shards/baseline_20_transition+speed_2000_seed_43 "
        "--method source --method eata --method rdumb --device cuda",
        "a paper stream with ResNet-50, on a GPU",
    ),
    (
        f"tta-eval run --stream {DEMO_STREAM} --method tent --protocol discrete --utilisation 0.5 "
        "--out results/discrete",
        "Tempora's discrete scenario: a batch arrives every 2λ "
        "(a folder of its own beside README command 1's offline run)",
    ),
    (
        f"tta-eval run --stream {DEMO_STREAM} "
        "--stream ccc:shards/demo_baseline_30_transition+speed_200_seed_43_images_10000 "
        "--method tent --method eta --workers 2 --out results/two_streams",
        "two streams, two run folders, at the same time on a local Ray cluster (--ray-address: an existing one)",
    ),
)
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


def _build_parser() -> argparse.ArgumentParser:
    """The ``tta-eval`` parser: one subcommand per command, each with its own options and examples."""
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Evaluate test-time adaptation methods over a stream: offline, Alfarra et al.'s and "
        "Tempora's time-constrained protocols.",
        formatter_class=HelpFormatter,
        epilog=examples(*RUN_EXAMPLES[:1], *COMPARE_EXAMPLES[:1], "tta-eval methods")
        + "\n\n'tta-eval COMMAND --help' shows a command's options and more examples.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_run_command(commands)
    _add_sweep_command(commands)
    _add_rescore_command(commands)
    _add_compare_command(commands)
    _add_methods_command(commands)
    return parser


def _add_run_command(commands: argparse._SubParsersAction) -> None:
    """``tta-eval run``: the experiment's options, the cluster's and the protocols'."""
    run = commands.add_parser(
        "run",
        help="run methods over a stream and write a run folder",
        description="Run methods over a stream and write a run folder (config, records, summary, accuracy plot).",
        formatter_class=HelpFormatter,
        epilog=examples(*RUN_EXAMPLES),
    )
    _add_experiment_arguments(run)
    _add_cluster_arguments(run)
    protocol = run.add_argument_group("protocol")
    protocol.add_argument(
        "--protocol",
        choices=list_protocols(),
        default=OfflineProtocol.name,
        help="; ".join(f"{entry.name}: {entry.summary}" for entry in protocol_entries()) + " (docs/protocols.md)",
    )
    for entry in protocol_entries():
        for option in entry.options:
            protocol.add_argument(option.flag, default=None, **option.arguments)


SWEEP_EXAMPLES = (
    (
        f"tta-eval sweep --stream {DEMO_STREAM} --method bn --method tent --speeds 1,0.5,0.25 --name sweep_speeds",
        "Alfarra et al.'s stream speeds",
    ),
    (
        f"tta-eval sweep --stream {DEMO_STREAM} --method tent --method eta --utilisations 1,0.5,0.25 "
        "--thresholds-ms 50,200 --name sweep_tempora",
        "Tempora's discrete and continuous scenarios",
    ),
)
"""Example commands ending the help of ``sweep``."""


def _add_sweep_command(commands: argparse._SubParsersAction) -> None:
    """``tta-eval sweep``: the experiment's options, the cluster's and one grid per swept protocol."""
    sweep = commands.add_parser(
        "sweep",
        help="grid of protocol runs: results table, best-method map, utility plots",
        description="A grid of protocol runs over one stream: results table, best-method map, utility plots.",
        formatter_class=HelpFormatter,
        epilog=examples(*SWEEP_EXAMPLES),
    )
    _add_experiment_arguments(sweep)
    _add_cluster_arguments(sweep)
    grids = sweep.add_argument_group("grids (comma-separated; at least one)")
    for entry in protocol_entries():
        if entry.sweep is not None:
            grids.add_argument(
                entry.sweep.option,
                dest=f"grid_{entry.name}",
                default="",
                metavar=entry.sweep.metavar,
                help=entry.sweep.help,
            )
    for entry in protocol_entries():
        shared = (
            option for option in entry.options if entry.sweep is not None and option.flag in entry.sweep.shared_options
        )
        for option in shared:
            grids.add_argument(option.flag, default=None, **option.arguments)


RUN_FOLDER = "results/demo_baseline_30_transition+speed_100_seed_43"
"""README command 1's run folder (``DEMO_STREAM``'s), named in the examples of ``rescore``."""


def _add_rescore_command(commands: argparse._SubParsersAction) -> None:
    """``tta-eval rescore``: saved runs' continuous utility for other thresholds."""
    rescore = commands.add_parser(
        "rescore",
        help="continuous utility of saved runs for other thresholds",
        description="Tempora's continuous utility of saved runs for other thresholds T (from their timing traces).",
        formatter_class=HelpFormatter,
        epilog=examples(
            (
                f"tta-eval rescore {RUN_FOLDER} --threshold-ms 50 --threshold-ms 400 --baseline-latency-ms 40",
                "README command 1's run: an offline run stores no λ, so give it (a continuous run's is used)",
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


def _add_compare_command(commands: argparse._SubParsersAction) -> None:
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


def _add_methods_command(commands: argparse._SubParsersAction) -> None:
    """``tta-eval methods``: the registered methods and their defaults."""
    methods = commands.add_parser(
        "methods",
        help="list registered methods with their defaults",
        description="List registered methods with their defaults (the options of --method NAME:OPTION=VALUE).",
        formatter_class=HelpFormatter,
        epilog=examples("tta-eval methods", ("tta-eval methods 'e*a'", "eta, eata")),
    )
    methods.add_argument("pattern", nargs="?", default="*", help="shell-style name pattern")


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


def _episode_settings(arguments: argparse.Namespace) -> dict[str, object]:
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


def _protocol_values(arguments: argparse.Namespace, entry_name: str) -> dict[str, object]:
    """The values of protocol ``entry_name``'s options (None: not given); ValueError for a given
    option of another protocol."""
    for entry in protocol_entries():
        for option in entry.options:
            if entry.name != entry_name and getattr(arguments, option.dest, None) is not None:
                raise ValueError(f"{option.flag} applies to --protocol {entry.name}, got --protocol {entry_name}")
    return {option.dest: getattr(arguments, option.dest) for option in get_protocol(entry_name).options}


def _protocol(arguments: argparse.Namespace) -> EpisodeSettings:
    entry = get_protocol(arguments.protocol)
    values = _protocol_values(arguments, entry.name)
    episode = _episode_settings(arguments)
    if episode.get("domain_key") is None:
        episode["domain_key"] = default_domain_key(arguments.stream)
    return entry.from_options(values, episode)


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


def _stream_options(arguments: argparse.Namespace) -> StreamOptions:
    """The options given to the stream's opener: the batch size, the workers and what each stream
    source's own options set (``StreamSource.from_options``)."""
    fields: dict[str, object] = {}
    for source in stream_sources():
        fields.update(source.from_options({option.dest: getattr(arguments, option.dest) for option in source.options}))
    return StreamOptions(batch_size=arguments.batch_size, num_workers=arguments.num_workers, **fields)


def _experiment_settings(arguments: argparse.Namespace, protocol: EpisodeSettings) -> ExperimentSettings:
    from tta_eval.experiment import ExperimentSettings, MethodSpec

    cost_model = _cost_model(arguments)
    _check_precision(arguments)
    return ExperimentSettings(
        stream=arguments.stream,
        methods=tuple(MethodSpec.parse(text) for text in arguments.method),
        model=_model_spec(arguments),
        output_root=arguments.out,
        run_name=arguments.name,
        device=arguments.device,
        stream_options=_stream_options(arguments),
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
    )


def _timing_line(summary: dict) -> str:
    timing = summary.get("timing", {})
    latency = timing.get("baseline_latency_seconds")
    described = f", λ = {1e3 * latency:.4g} ms ({timing.get('baseline_latency_source')})" if latency is not None else ""
    if timing.get("mode") == "deterministic":
        return f"timing: deterministic cost model ({timing.get('cost_model_origin', 'given')}){described}"
    return f"timing: measured wall time{described}"


def _run(arguments: argparse.Namespace) -> int:
    from tta_eval.cluster import print_line, run_experiments
    from tta_eval.experiment import resolve_experiment
    from tta_eval.reports import adaptation_notes, comparison_table, run_scores, scores_table
    from tta_eval.run_folder import PLOT_STEM, load_run

    streams = _per_stream(arguments)
    several = len(streams) > 1
    resolved = [resolve_experiment(_experiment_settings(namespace, _protocol(namespace))) for namespace in streams]
    for experiment in resolved:
        for note in experiment.notes:
            print(f"{experiment.settings.resolved_run_name()}: {note}" if several else note)
    finished = []

    def report(experiment: ResolvedExperiment, folder: Path | None, error: BaseException | None) -> None:
        finished.append(experiment)
        outcome = f"written to {folder}" if error is None else f"failed: {type(error).__name__}: {error}"
        print(
            f"[{len(finished)}/{len(resolved)}] run {experiment.settings.resolved_run_name()}: "
            f"{' '.join(outcome.split())}",
            flush=True,
        )

    executor_context, options = _open_executor(arguments)
    with executor_context as executor:
        run_dirs = run_experiments(
            resolved, executor, options, on_finished=report if several else None, notify=print_line
        )
    runs = [load_run(run_dir) for run_dir in run_dirs]
    print(comparison_table(runs), end="")
    for run in runs:
        scores = scores_table(run_scores(run))
        if scores:
            print()
            print(f"{run.path.name}:\n" if several else "", end="")
            print(scores, end="")
        for note in adaptation_notes(run):
            print(note)
        print(_timing_line(run.summary))
        print(f"run folder: {run.path}")
    next_plot = run_dirs[0] / (PLOT_STEM + ".png")
    print(f"next: open {next_plot}\n      {_compare_hint(runs)}")
    return 0


def _compare_hint(runs: list[RunResult]) -> str:
    """The ``tta-eval compare`` command for ``runs`` (just written) and the runs beside them: their
    folder, or, when compare would refuse it (another run of one of their methods on the same stream,
    an unfinished run), the run folders it takes together, the new ones first."""
    from tta_eval.reports import comparison_cells
    from tta_eval.run_folder import find_run_folders, load_run

    parent = runs[0].path.parent
    picked = list(runs)
    left_out = 0
    for path in find_run_folders([parent]):
        if any(path == run.path for run in runs):
            continue
        try:
            candidate = [*picked, load_run(path)]
            comparison_cells(candidate)
        except ValueError:
            left_out += 1
            continue
        picked = candidate
    if not left_out:
        return f"tta-eval compare {parent}      # with the other runs there"
    folders = " ".join(shlex.quote(str(run.path)) for run in picked)
    return (
        f"tta-eval compare {folders}      # {parent} also holds {count(left_out, 'run')} "
        "that compare cannot put beside these "
        "(the same method on the same stream, or unfinished): name the run folders to compare"
    )


def _grid(option: str, text: str, scale: float = 1.0) -> tuple[float, ...]:
    if not text.strip():
        return ()
    try:
        return tuple(float(part) * scale for part in text.split(","))
    except ValueError:
        raise ValueError(f"{option} must be comma-separated numbers, got {text!r}") from None


def _sweep(arguments: argparse.Namespace) -> int:
    from tta_eval.experiment import resolve_experiment
    from tta_eval.sweep import SweepSettings, run_sweep
    from tta_eval.run_folder import SWEEP_RESULTS_MARKDOWN

    if len(arguments.stream) > 1:
        raise ValueError(
            f"a sweep runs over one stream, got {len(arguments.stream)} --stream; run one sweep per stream"
        )
    arguments = _per_stream(arguments)[0]
    resolved = resolve_experiment(_experiment_settings(arguments, OfflineProtocol(**_episode_settings(arguments))))
    for note in resolved.notes:
        print(note)
    swept = [entry for entry in protocol_entries() if entry.sweep is not None]
    grids = tuple(
        (entry.name, _grid(entry.sweep.option, getattr(arguments, f"grid_{entry.name}"), entry.sweep.unit))
        for entry in swept
    )
    shared = tuple(
        (option.flag, getattr(arguments, option.dest))
        for entry in swept
        for option in entry.options
        if option.flag in entry.sweep.shared_options
    )
    settings = SweepSettings(experiment=resolved.settings, grids=grids, options=shared)
    executor_context, options = _open_executor(arguments)
    with executor_context as executor:
        sweep_dir = run_sweep(settings, executor, options)
    print((sweep_dir / SWEEP_RESULTS_MARKDOWN).read_text(), end="")
    print(f"sweep folder: {sweep_dir}")
    return 0


def _rescore(arguments: argparse.Namespace) -> int:
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


def _compare(arguments: argparse.Namespace) -> int:
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


def _methods(arguments: argparse.Namespace) -> int:
    from tta_eval.methods import get_method, list_methods
    from tta_eval.methods.registry import reset_policy_defaults

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
    print("reset policies, for any method (--method NAME:reset=POLICY:param=value:…; docs/methods.md):")
    for policy in reset_policy_defaults():
        print(f"    {policy}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tta-eval`` console script; returns the exit code (0 success, 1 run stopped by
    ``--nonfinite-loss stop``, 2 user error, 130 interrupted)."""
    parser = _build_parser()
    arguments = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if arguments.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    handlers = {"run": _run, "sweep": _sweep, "rescore": _rescore, "compare": _compare, "methods": _methods}
    user_errors = (ValueError, OSError, RayUnavailableError, TaskFailedError)
    return run_command(
        PROGRAM, lambda: handlers[arguments.command](arguments), user_errors, stopped=(NonFiniteLossError,)
    )


if __name__ == "__main__":
    sys.exit(main())
