"""One evaluation run: model + stream + methods + protocol → run folder; and sweeps of protocol runs.

The layouts of the run folder and the sweep folder, and their files, are ``tta_eval.run_folder``'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
import platform
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch
import torchvision

import tta_eval
from ccc.execution import DEFAULT_TASK_OPTIONS, Executor, SerialExecutor, TaskOptions
from tta_eval.checkpoint import (
    DEFAULT_CHECKPOINT_EVERY,
    Checkpoint,
    Checkpointer,
    check_checkpoint_config,
    check_checkpoint_model,
    check_same_run,
    model_sha256,
    read_checkpoint,
    remove_checkpoint,
    restore_config,
)
from tta_eval.methods import create, get_method, resolve_config
from tta_eval.metrics import DEFAULT_COLLAPSE_SPAN, DEFAULT_WINDOW
from ccc.models import ModelSpec, load_model, resolve_device
from tta_eval.plots import plot_best_method_map, plot_utility_curves
from tta_eval.protocols import (
    CostModel,
    EpisodeSettings,
    LatencyCalibration,
    OfflineProtocol,
    PRECISIONS,
    RunContext,
    Timing,
    calibrate_baseline_latency,
    get_protocol,
    protocol_entries,
    run_protocol,
)
from tta_eval.protocols._execution import precision_autocast
from tta_eval.protocols.timing import DEFAULT_CALIBRATION_CALLS, DEFAULT_WARMUP_CALLS, measured_cost
from tta_eval.records import CsvRecordWriter, RecordTable
from tta_eval.reports import (
    ALL_DOMAINS,
    SOURCE_METHOD,
    best_methods,
    plot_run,
    run_title,
    scores_table,
    summarise_run,
    sweep_rows,
    sweep_table,
    write_rows_csv,
)
from tta_eval.run_folder import (
    BEST_METHOD_STEM,
    CONFIG_FILE,
    COSTS_FILE,
    SUMMARY_FILE,
    SWEEP_FILE,
    SWEEP_RESULTS_CSV,
    SWEEP_RESULTS_MARKDOWN,
    SWEEP_RUNS_FOLDER,
    UTILITY_STEM,
    check_run_folder,
    clear_run_folder,
    is_unfinished_run,
    load_run,
    lock_run_folder,
    open_records,
    prepare_sweep_folder,
    read_config,
    records_path,
    run_status,
    safe_file_name,
    write_config,
    write_json,
    write_summary,
)
from tta_eval.streams import (
    DEMO_WORLD,
    WORLD_MODELS,
    SizedStream,
    StreamDescription,
    StreamOptions,
    as_batch,
    describe_stream_source,
    limit_samples,
    open_stream_source,
    stream_length,
)
from ccc.options import parse_options
from ccc.validation import MAX_SAMPLES, check_choice, check_integer, check_positive, check_positive_int

logger = logging.getLogger(__name__)

DEMO_MODEL = WORLD_MODELS[DEMO_WORLD]


@dataclass(frozen=True)
class MethodSpec:
    """A method to run: ``label`` (unique in the run, used for file names), registry ``name``, overrides."""

    label: str
    name: str
    options: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def parse(cls, text: str) -> MethodSpec:
        """Parse "name" or "name:option=value,option=value" (label = the text); validates name and options."""
        name, _, option_text = text.partition(":")
        options = parse_options(option_text, f"method {name!r}")
        resolve_config(name, **options)
        return cls(label=text, name=name, options=tuple(options.items()))


@dataclass(frozen=True)
class ExperimentSettings:
    """Everything a run needs.

    stream: stream source text (see ``tta_eval.streams.open_stream_source``); methods: labels
    unique; none: the stream world's demonstration methods (demo streams), else an error; model:
    None for the model of the stream's world (the demo model for demo-world streams, ResNet-50
    otherwise); max_samples: stop after this many samples (None: whole stream); window: samples per
    accuracy window; collapse_reference: "source" (the source model is added to the run when not
    requested) or a fixed accuracy in [0, 1], or None; collapse_span: samples; window and
    collapse_span None: fitted to the stream's length (``fitted_window``); run_name: folder name
    under output_root (default: the stream's name); overwrite: allow replacing an existing run
    folder. world_defaults: on a demo-world stream, give each method the demo's options
    (``ccc.demo.DEMO_METHOD_OPTIONS``) where ``methods`` does not set them.

    protocol: any protocol's settings (``tta_eval.protocols``). cost_model: deterministic timing
    with these costs (None: measured wall time). baseline_latency: λ in seconds for measured
    timing (None: calibrated on the first batch when the protocol needs it, with
    ``calibration_calls`` timed calls after 5 warm-up calls); with a cost model λ is the model's.
    warmup_calls: untimed method calls before measuring (see ``Timing``). checkpoint_every: samples
    between checkpoints (0: none; None: ``tta_eval.checkpoint.DEFAULT_CHECKPOINT_EVERY``).
    precision, channels_last: the methods' arithmetic and memory format (``RunContext``; λ is
    calibrated in the same precision).
    """

    stream: str
    methods: tuple[MethodSpec, ...] = ()
    model: ModelSpec | None = None
    output_root: Path = Path("results")
    run_name: str | None = None
    device: str = "cpu"
    stream_options: StreamOptions = StreamOptions()
    max_samples: int | None = None
    protocol: EpisodeSettings = OfflineProtocol()
    cost_model: CostModel | None = None
    baseline_latency: float | None = None
    calibration_calls: int = DEFAULT_CALIBRATION_CALLS
    warmup_calls: int = DEFAULT_WARMUP_CALLS
    window: int | None = None
    collapse_reference: str | float | None = SOURCE_METHOD
    collapse_span: int | None = None
    overwrite: bool = False
    progress: bool = True
    world_defaults: bool = True
    checkpoint_every: int | None = None
    precision: str = "fp32"
    channels_last: bool = False

    def __post_init__(self) -> None:
        labels = [method.label for method in self.methods]
        duplicates = sorted({label for label in labels if labels.count(label) > 1})
        if duplicates:
            raise ValueError(f"each method may be given once per run, got duplicates: {', '.join(duplicates)}")
        if self.max_samples is not None:
            check_positive_int("max_samples", self.max_samples, MAX_SAMPLES)
        if self.window is not None:
            check_positive_int("window", self.window, MAX_SAMPLES)
        if self.collapse_span is not None:
            check_positive_int("collapse_span", self.collapse_span, MAX_SAMPLES)
        if isinstance(self.collapse_reference, str) and self.collapse_reference != SOURCE_METHOD:
            raise ValueError(
                f"collapse_reference must be 'source', an accuracy in [0, 1] or None, got {self.collapse_reference!r}"
            )
        if isinstance(self.collapse_reference, float) and not 0.0 <= self.collapse_reference <= 1.0:
            raise ValueError(f"collapse_reference accuracy must be in [0, 1], got {self.collapse_reference}")
        if self.baseline_latency is not None:
            check_positive("baseline_latency", self.baseline_latency)
            if self.cost_model is not None:
                raise ValueError(
                    "give the baseline latency λ either in the cost model or as baseline_latency, not both "
                    f"(got {self.cost_model.baseline_latency!r} and {self.baseline_latency!r})"
                )
        check_choice("precision", self.precision, PRECISIONS)
        check_positive_int("calibration_calls", self.calibration_calls)
        if self.checkpoint_every is not None:
            check_integer("checkpoint_every", self.checkpoint_every, 0, MAX_SAMPLES)
        if self.calibration_calls < 2:
            raise ValueError(f"calibration_calls must be >= 2, got {self.calibration_calls}")

    def timing(self, device: str) -> Timing:
        """The run's clock settings (methods' registry names for cost look-ups)."""
        names = tuple((method.label, method.name) for method in self.resolved_methods())
        return Timing(device, self.cost_model, names, self.warmup_calls)

    def resolved_checkpoint_every(self) -> int:
        """Samples between checkpoints (0: none)."""
        return DEFAULT_CHECKPOINT_EVERY if self.checkpoint_every is None else self.checkpoint_every

    def resolved_methods(self) -> tuple[MethodSpec, ...]:
        """The methods to run: the requested ones, plus the source model when it is the collapse reference."""
        methods = self.methods
        if self.collapse_reference == SOURCE_METHOD and not any(method.label == SOURCE_METHOD for method in methods):
            methods = (MethodSpec(SOURCE_METHOD, SOURCE_METHOD), *methods)
        return methods

    def resolved_run_name(self) -> str:
        """``run_name`` or a folder-safe name derived from the stream (its run folder's name for CCC shards,
        with ``_rendered`` for a ``ccc-render:`` stream)."""
        if self.run_name:
            return self.run_name
        return default_run_name(describe_stream_source(self.stream, self.stream_options))


def default_run_name(stream: StreamDescription) -> str:
    """The folder-safe name of a run folder evaluating ``stream`` when ``--name`` is not given."""
    return safe_file_name(stream.run_name or stream.name) or "run"


WINDOWS_PER_STREAM = 20
"""A fitted accuracy window gives at least this many windows over the stream."""

COLLAPSE_SPAN_WINDOWS = 5
"""A fitted collapse span lasts this many windows (the paper's 50,000 samples for 10,000-sample windows)."""

SUGGESTED_RESETS_PER_STREAM = 10
"""A reset interval suggested for a stream too short for a method's own resets gives this many resets."""


def fitted_window(samples: int | None) -> int:
    """Accuracy window (samples) for a stream of ``samples`` samples (None: unknown length).

    The largest of 1, 2, 5 × 10^k that gives at least ``WINDOWS_PER_STREAM`` windows, at most the
    paper's ``DEFAULT_WINDOW`` (10,000), so full-length CCC streams keep the paper's value.
    """
    if samples is None:
        return DEFAULT_WINDOW
    check_positive_int("samples", samples)
    limit = max(1, samples // WINDOWS_PER_STREAM)
    window = 1
    for exponent in range(len(str(limit))):
        for mantissa in (1, 2, 5):
            if mantissa * 10**exponent <= limit:
                window = mantissa * 10**exponent
    return min(window, DEFAULT_WINDOW)


@dataclass(frozen=True)
class ResolvedExperiment:
    """Settings with every stream-dependent default filled in, what is known of the stream, and one
    line per choice made for the user (to print before the run)."""

    settings: ExperimentSettings
    stream: StreamDescription
    notes: tuple[str, ...]


def _with_world_methods(settings: ExperimentSettings, notes: list[str]) -> tuple[MethodSpec, ...]:
    """The demo world's methods and options where ``settings`` leaves them open."""
    from ccc.demo import DEMO_METHOD_OPTIONS, DEMO_METHODS

    methods = settings.methods or tuple(MethodSpec(name, name) for name in DEMO_METHODS)
    if not settings.methods:
        notes.append(f"demo world: methods {', '.join(DEMO_METHODS)} (pass --method to choose)")
    if not settings.world_defaults:
        return methods
    applied = []
    updated = []
    for method in methods:
        given = dict(method.options)
        reset_given = bool({"reset", "reset_every"} & given.keys())  # one option, two spellings
        added = {
            option: value
            for option, value in DEMO_METHOD_OPTIONS.get(method.name, {}).items()
            if option not in given and not (reset_given and option in ("reset", "reset_every"))
        }
        if added:
            applied.append(f"{method.label}: {', '.join(f'{option}={value:g}' for option, value in added.items())}")
        updated.append(dataclasses.replace(method, options=tuple({**added, **given}.items())))
    if applied:
        notes.append(f"demo world settings (docs/demo.md; the demo's, not the paper's): {'; '.join(applied)}")
    return tuple(updated)


def _check_world_model(model: ModelSpec, stream: StreamDescription, stream_text: str) -> None:
    if model.name == DEMO_MODEL and stream.world is not None and stream.world != DEMO_WORLD:
        raise ValueError(
            f"the demo model (--demo) fits only streams of the demo world, but stream {stream_text!r} was rendered "
            "from an ImageNet-layout folder: drop --demo (and choose --model)"
        )


def _reset_notes(methods: tuple[MethodSpec, ...], batch_size: int, samples: int | None) -> list[str]:
    """A note for each method whose periodic reset never fires within ``samples`` samples."""
    if samples is None:
        return []
    notes = []
    for method in methods:
        reset_every = resolve_config(method.name, **dict(method.options))[1].interval()
        if reset_every is not None and reset_every * batch_size >= samples:
            suggestion = max(1, samples // (batch_size * SUGGESTED_RESETS_PER_STREAM))
            notes.append(
                f"note: {method.label} resets every {reset_every:,} batches ({reset_every * batch_size:,} samples), but the stream "
                f"has {samples:,} samples: it never resets and equals its method without resets; "
                f"e.g. --method {method.name}:reset_every={suggestion}"
            )
    return notes


def resolve_experiment(settings: ExperimentSettings) -> ResolvedExperiment:
    """Fill in what ``settings`` leaves to the stream: model and methods of its world, window and
    collapse span fitted to its length (``fitted_window``; explicit values always win); one note
    per choice and per method whose reset interval exceeds the stream.

    Reads only what is known of the stream (``describe_stream_source``: a manifest, a folder's file
    names), not its samples. Raises ValueError for a stream that names nothing, no methods outside
    the demo world, or the demo model on a stream of another world.
    """
    stream = describe_stream_source(settings.stream, settings.stream_options)
    notes: list[str] = []
    demo = stream.world == DEMO_WORLD
    methods = _with_world_methods(settings, notes) if demo else settings.methods
    if not methods:
        raise ValueError("pass at least one method (--method NAME, repeatable; see 'tta-eval methods')")
    model = settings.model
    if model is None:
        model = ModelSpec(DEMO_MODEL) if demo else ModelSpec()
        if demo:
            notes.append(f"demo world stream: evaluating the demo model ({DEMO_MODEL}, docs/demo.md)")
    _check_world_model(model, stream, settings.stream)
    samples = (
        stream.samples
        if settings.max_samples is None
        else min(settings.max_samples, stream.samples or settings.max_samples)
    )
    window = settings.window if settings.window is not None else fitted_window(samples)
    span = (
        settings.collapse_span
        if settings.collapse_span is not None
        else min(DEFAULT_COLLAPSE_SPAN, COLLAPSE_SPAN_WINDOWS * window)
    )
    fitted = [
        text
        for text, given in (
            (f"window {window:,} samples", settings.window),
            (f"collapse span {span:,}", settings.collapse_span),
        )
        if given is None
    ]
    if fitted:
        basis = (
            f"fitted to the stream's {samples:,} samples"
            if samples is not None
            else "the paper's values; stream length unknown"
        )
        notes.append(f"{' and '.join(fitted)} ({basis}; --window, --collapse-span to change)")
    if settings.checkpoint_every is None and (samples is None or samples > DEFAULT_CHECKPOINT_EVERY):
        notes.append(
            f"checkpoint every {DEFAULT_CHECKPOINT_EVERY:,} samples, to resume the run if it is interrupted (--checkpoint-every to change, 0: none)"
        )
    run_name = settings.run_name or default_run_name(stream)
    resolved = dataclasses.replace(
        settings, methods=methods, model=model, window=window, collapse_span=span, run_name=run_name
    )
    notes += _reset_notes(resolved.resolved_methods(), settings.stream_options.batch_size, samples)
    return ResolvedExperiment(resolved, stream, tuple(notes))


def resolved_config(
    settings: ExperimentSettings, methods: tuple[MethodSpec, ...], stream: StreamDescription
) -> dict[str, Any]:
    """JSON-serialisable record of everything that determined the run; stream: what is known of the
    stream (``describe_stream_source``): its name, and how its bytes were verified ("sha256" or None)."""
    method_configs = {}
    for method in methods:
        config, reset = resolve_config(method.name, **dict(method.options))
        method_configs[method.label] = {
            "method": method.name,
            "config": dataclasses.asdict(config),
            "reset": reset.text(),
            "reset_every": reset.interval(),
            "description": get_method(method.name).description,
        }
    return {
        "stream": settings.stream,
        "stream_name": stream.name,
        "stream_options": dataclasses.asdict(settings.stream_options),
        "stream_verification": stream.verification,
        "max_samples": settings.max_samples,
        "model": dataclasses.asdict(settings.model),
        "device": settings.device,
        "precision": settings.precision,
        "channels_last": settings.channels_last,
        "methods": method_configs,
        "protocol": settings.protocol.to_json(),
        "timing": settings.timing(settings.device).to_json(),
        "baseline_latency_seconds": settings.baseline_latency,
        "window": settings.window,
        "collapse_reference": settings.collapse_reference,
        "collapse_span": settings.collapse_span,
        "versions": {
            "tta_eval": tta_eval.__version__,
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "python": platform.python_version(),
        },
    }


def _peek(stream: Iterable[Any]) -> tuple[Any, Iterable[Any]]:
    """The first item of ``stream`` and an iterable yielding all items, that one included."""
    iterator = iter(stream)
    first = next(iterator, None)
    if first is None:
        raise ValueError("the stream yielded no batches")
    chained = itertools.chain([first], iterator)
    length = stream_length(stream)
    return first, chained if length is None else SizedStream(chained, length)


@dataclass(frozen=True)
class BaselineLatency:
    """λ of a run: seconds (None if not needed), and how it was obtained."""

    seconds: float | None
    source: str
    calibration: LatencyCalibration | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "baseline_latency_seconds": self.seconds,
            "baseline_latency_source": self.source,
            "calibration": None if self.calibration is None else self.calibration.to_json(),
        }


def _baseline_latency(
    settings: ExperimentSettings, model: torch.nn.Module, stream: Iterable[Any], device: torch.device
) -> tuple[BaselineLatency, Iterable[Any]]:
    """λ from the cost model, the settings, or a calibration of the plain model on the first batch."""
    if settings.cost_model is not None:
        return BaselineLatency(settings.cost_model.baseline_latency, "cost model"), stream
    if settings.baseline_latency is not None:
        return BaselineLatency(settings.baseline_latency, "given"), stream
    if not settings.protocol.needs_baseline_latency:
        return BaselineLatency(None, "not needed"), stream
    first, stream = _peek(stream)
    with precision_autocast(settings.precision, device):
        calibration = calibrate_baseline_latency(
            model, as_batch(first, 0).images, device, DEFAULT_WARMUP_CALLS, settings.calibration_calls
        )
    return BaselineLatency(calibration.baseline_latency, "calibrated", calibration), stream


def check_model_classes(
    model: torch.nn.Module, batch: Any, device: torch.device, num_classes: int | None, model_name: str
) -> None:
    """Refuse a model whose logits do not fit the stream's labels.

    One forward pass (no gradients; the model is in evaluation mode, so nothing changes) on the first
    batch: the logits' width must equal ``num_classes`` when the stream's class count is known (e.g.
    16 for the demo world), and exceed every label of the batch otherwise. Raises ValueError.
    """
    with torch.no_grad():
        width = int(model(batch.images.to(device)).shape[-1])
    if num_classes is not None and width != num_classes:
        raise ValueError(
            f"model {model_name!r} predicts {width:,} classes, but the stream's labels come from {num_classes:,} classes; "
            "choose a model trained for this stream's classes (demo-world streams: leave --model out, or --demo)"
        )
    highest = int(batch.labels.max())
    if highest >= width:
        raise ValueError(
            f"model {model_name!r} predicts {width:,} classes, but the stream has label {highest:,}; choose a model for these classes"
        )


def _measured_costs(tables: dict[str, RecordTable], baseline_latency: float, run_name: str) -> CostModel | None:
    """Each method's mean e/λ and ℓ/λ over its adapted batches (methods never adapted are left out)."""
    costs = []
    for label, table in tables.items():
        adapted = table.column("adapted")
        if adapted.any():
            costs.append(
                (
                    label,
                    measured_cost(
                        table.column("pickup_to_prediction")[adapted],
                        table.column("prediction_to_ready")[adapted],
                        baseline_latency,
                    ),
                )
            )
    return CostModel(baseline_latency, tuple(costs), origin=f"measured in run {run_name}") if costs else None


def run_experiment(
    settings: ExperimentSettings,
    model: torch.nn.Module | None = None,
    choices: Sequence[str] = (),
    notify: Callable[[str], None] = logger.info,
) -> Path:
    """Run every method of ``settings`` over the stream in lockstep under its protocol and write the run
    folder; returns it.

    model: the already loaded classifier of ``settings.model`` (on the run's device), e.g. shared by
    the scenarios of a sweep so that a randomly initialised factory gives every run the same
    weights; None loads it. choices: lines saying what was chosen for the user when ``settings`` were
    resolved earlier (``resolve_experiment``'s notes), recorded in config.json with this call's own.
    notify: receives the line saying that an unfinished run is resumed ("resuming run X from
    sample S"). Methods work on copies; the model itself is not modified. Raises ValueError for user
    mistakes (bad names, options, paths, streams, labels, costs, thresholds) before or during the
    run, and NonFiniteLossError under the "stop" policy after writing what was recorded.

    Completeness: with ``overwrite`` the previous run's outputs are removed before anything else is
    written; records are flushed row by row; summary.json is written last (atomically) with
    ``status`` "complete" and ``config_sha256`` (the sha256 of config.json), or with status
    "stopped" and the reason when the run ended early. A folder with config.json and no summary.json
    did not finish (killed, or its disk filled up). ``tta_eval.run_folder.load_run`` refuses all but
    complete runs of their own config.

    Resumption: every ``checkpoint_every`` samples a checkpoint is written (``tta_eval.checkpoint``).
    Without ``overwrite``, an unfinished run of the same config (config.json without a complete
    summary) continues from its last checkpoint (from the start when it has none); an unfinished
    run of another config, or a checkpoint written by another command, is refused with one line
    naming what differs; a complete run is refused. A deleted config.json is restored from the
    checkpoint (which carries it) when the command is the checkpoint's.

    Locking: the run holds the run folder's lock (``tta_eval.run_folder.lock_run_folder``) from
    before it looks at the folder until it ends; a folder another run is writing is refused with
    one line naming that run's process.
    """
    resolved = resolve_experiment(settings)
    settings = resolved.settings
    methods = settings.resolved_methods()
    device = resolve_device(settings.device)
    timing = settings.timing(str(device))
    timing.check_methods([method.label for method in methods])
    with lock_run_folder(settings.output_root / settings.resolved_run_name()) as run_dir:
        return _run_in_folder(resolved, run_dir, methods, timing, device, model, choices, notify)


def _run_in_folder(
    resolved: ResolvedExperiment,
    run_dir: Path,
    methods: tuple[MethodSpec, ...],
    timing: Timing,
    device: torch.device,
    model: torch.nn.Module | None,
    choices: Sequence[str],
    notify: Callable[[str], None],
) -> Path:
    """``run_experiment`` once it holds the lock of ``run_dir``: check the folder, then resume or start the run."""
    settings = resolved.settings
    config = resolved_config(settings, methods, resolved.stream)
    config["choices"] = [*choices, *resolved.notes]
    if not settings.overwrite and restore_config(run_dir, config):
        notify(f"run {run_dir.name}: {CONFIG_FILE} restored from its checkpoint")
    check_run_folder(run_dir, settings.overwrite, resume=not settings.overwrite)
    checkpoint = None
    if not settings.overwrite and is_unfinished_run(run_dir):
        check_same_run(run_dir, read_config(run_dir), config)
        checkpoint = read_checkpoint(run_dir, device)
        if checkpoint is None:
            notify(f"run {run_dir.name} has no checkpoint: starting it over")
        else:
            check_checkpoint_config(run_dir, checkpoint, config)
    if checkpoint is not None:
        return _resume_run(
            settings, run_dir, methods, timing, device, checkpoint, resolved.stream.samples, model, notify
        )
    stream = open_stream_source(settings.stream, settings.stream_options)
    if settings.max_samples is not None:
        stream = limit_samples(stream, settings.max_samples)
    if model is None:
        model = load_model(settings.model, device)
    first, stream = _peek(stream)
    check_model_classes(model, as_batch(first, 0), device, resolved.stream.num_classes, settings.model.name)
    modules = {method.label: create(method.name, model, **dict(method.options)) for method in methods}
    latency, stream = _baseline_latency(settings, model, stream, device)
    settings.protocol.check_baseline_latency(latency.seconds)
    clear_run_folder(run_dir)
    config.update(latency.to_json())
    write_config(run_dir, config)
    tables = {label: RecordTable() for label in modules}
    handles = {label: open_records(run_dir, label) for label in modules}
    return _record_run(
        settings, run_dir, methods, timing, device, latency, model_sha256(model), modules, stream, tables, handles, None
    )


def _resume_run(
    settings: ExperimentSettings,
    run_dir: Path,
    methods: tuple[MethodSpec, ...],
    timing: Timing,
    device: torch.device,
    checkpoint: Checkpoint,
    stream_samples: int | None,
    model: torch.nn.Module | None,
    notify: Callable[[str], None],
) -> Path:
    """Continue the run in ``run_dir`` from ``checkpoint``: its records cut to the rows it covers,
    its methods built from the model (``model``, or loaded when None) and given their saved state,
    protocol state and random states restored, the stream opened at its position (stream_samples:
    the stream's length when known; a checkpoint at its end leaves nothing to read)."""
    consumed = checkpoint.samples
    ends = [limit for limit in (stream_samples, settings.max_samples) if limit is not None]
    stream: Iterable[Any] = []
    if not ends or consumed < min(ends):
        stream = open_stream_source(settings.stream, settings.stream_options, start=consumed)
        if settings.max_samples is not None:
            stream = limit_samples(stream, settings.max_samples - consumed)
    if model is None:
        model = load_model(settings.model, device)
    digest = model_sha256(model)
    check_checkpoint_model(run_dir, checkpoint, digest)
    modules = {method.label: create(method.name, model, **dict(method.options)) for method in methods}
    notify(f"resuming run {run_dir.name} from sample {consumed:,}")
    (run_dir / SUMMARY_FILE).unlink(missing_ok=True)
    latency = _saved_latency(checkpoint.extra["baseline_latency"])
    tables = {}
    handles: dict[str, TextIO] = {}
    try:
        for label, size in checkpoint.records.items():
            handles[label] = open_records(run_dir, label, keep_bytes=size)
            tables[label] = RecordTable.read_csv(records_path(run_dir, label))
    except BaseException:
        for handle in handles.values():
            handle.close()
        raise
    return _record_run(
        settings, run_dir, methods, timing, device, latency, digest, modules, stream, tables, handles, checkpoint
    )


def _saved_latency(saved: dict[str, Any]) -> BaselineLatency:
    """The ``BaselineLatency`` a checkpoint holds as ``dataclasses.asdict``."""
    calibration = saved["calibration"]
    return BaselineLatency(
        saved["seconds"], saved["source"], None if calibration is None else LatencyCalibration(**calibration)
    )


def _record_run(
    settings: ExperimentSettings,
    run_dir: Path,
    methods: tuple[MethodSpec, ...],
    timing: Timing,
    device: torch.device,
    latency: BaselineLatency,
    model_digest: str,
    modules: dict[str, torch.nn.Module],
    stream: Iterable[Any],
    tables: dict[str, RecordTable],
    handles: dict[str, TextIO],
    resume: Checkpoint | None,
) -> Path:
    """Run the protocol, write each record as it comes, checkpoint (bound to ``model_digest``, the
    ``model_sha256`` of the weights the run started from), then finish the run folder."""
    finish = functools.partial(_finish_run, settings, run_dir, tables, methods, timing.mode, latency)
    every = settings.resolved_checkpoint_every()
    start = 0 if resume is None else resume.samples
    checkpointer = None
    if every:
        config_text = (run_dir / CONFIG_FILE).read_text()
        checkpointer = Checkpointer(
            run_dir,
            every,
            config_text,
            handles,
            {"baseline_latency": dataclasses.asdict(latency), "model_sha256": model_digest},
            start,
        )
    try:
        context = RunContext(
            device,
            settings.progress,
            timing,
            latency.seconds,
            checkpointer,
            resume,
            settings.precision,
            settings.channels_last,
        )
        records = run_protocol(modules, stream, settings.protocol, context)
        writers = {label: CsvRecordWriter(handle, header=resume is None) for label, handle in handles.items()}
        for record in records:
            try:
                writers[record.method].write(record)
            except OSError as error:
                path = records_path(run_dir, record.method)
                raise OSError(
                    error.errno, f"{error.strerror or error}; run {run_dir.name!r} is incomplete", str(path)
                ) from error
            tables[record.method].append(record)
        for handle in handles.values():
            handle.close()
    except BaseException as error:
        for handle in handles.values():
            with contextlib.suppress(OSError):
                handle.close()
        try:
            finish(f"{type(error).__name__}: {error}")
        except OSError as summary_error:
            logger.warning("could not write the summary of the stopped run %s: %s", run_dir, summary_error)
        raise
    finish(None)
    remove_checkpoint(run_dir)
    logger.info("run written to %s", run_dir)
    return run_dir


def _finish_run(
    settings: ExperimentSettings,
    run_dir: Path,
    tables: dict[str, RecordTable],
    methods: tuple[MethodSpec, ...],
    timing_mode: str,
    latency: BaselineLatency,
    stopped: str | None,
) -> None:
    """Write plots, measured costs and, last, summary.json (status and config hash) of a run that
    recorded at least one batch per method; nothing otherwise (the folder then reads as unfinished)."""
    if not all(len(table) for table in tables.values()):
        return
    summary = summarise_run(
        tables,
        {method.label: method.name for method in methods},
        settings.window,
        settings.collapse_reference,
        settings.collapse_span,
        settings.protocol,
        latency.seconds,
    )
    summary["run"] = run_dir.name
    summary.update(run_status(run_dir, stopped))
    summary["timing"] = {"mode": timing_mode, **latency.to_json()}
    if settings.cost_model is not None:
        summary["timing"]["cost_model_origin"] = settings.cost_model.origin
    stream = read_config(run_dir).get("stream_name") or settings.stream
    plot_run(summary, run_dir, title=run_title(stream, settings.protocol.name))
    if settings.cost_model is None and latency.seconds is not None:
        measured = _measured_costs(tables, latency.seconds, run_dir.name)
        if measured is not None:
            measured.save(run_dir / COSTS_FILE)
    write_summary(run_dir, summary)


# --- sweeps -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepSettings:
    """A grid of protocol runs over one stream and set of methods.

    experiment: the settings shared by every scenario run (stream, methods, model, timing, episode
    settings of its protocol); its ``run_name`` names the sweep folder under ``output_root``.
    grids: (protocol name, values) pairs, each protocol at most once, values in its settings' units
    (its ``SweepAxis``: e.g. alfarra: stream speeds η in (0, 1]; discrete: utilisations ρ > 0;
    continuous: thresholds T in seconds, one offline run scored for each; amortised: budgets B in
    seconds >= 0). options: (option flag, value) pairs of the protocols' options that a sweep also
    takes (``SweepAxis.shared_options``, e.g. ("--buffer", 2), ("--strict", True)); a protocol's
    default where absent. At least one grid must be non-empty. λ is calibrated once (or taken from
    the settings or the cost model) and shared by all scenario runs.
    """

    experiment: ExperimentSettings
    grids: tuple[tuple[str, tuple[float, ...]], ...] = ()
    options: tuple[tuple[str, object], ...] = ()

    def __post_init__(self) -> None:
        names = [name for name, _ in self.grids]
        for name in names:
            if get_protocol(name).sweep is None:
                swept = ", ".join(entry.name for entry in protocol_entries() if entry.sweep is not None)
                raise ValueError(f"protocol {name!r} has no sweep axis; protocols that can be swept: {swept}")
        if len(set(names)) != len(names):
            raise ValueError(f"each protocol may have one grid, got {', '.join(names)}")
        shared = [
            flag for entry in protocol_entries() if entry.sweep is not None for flag in entry.sweep.shared_options
        ]
        unknown = sorted(set(dict(self.options)) - set(shared))
        if unknown:
            raise ValueError(f"sweep options must be among {', '.join(shared)}, got {', '.join(unknown)}")
        if not any(values for _, values in self.grids):
            options = ", ".join(entry.sweep.option for entry in protocol_entries() if entry.sweep is not None)
            raise ValueError(f"a sweep needs at least one grid ({options}), got none")
        self.scenarios()

    def scenarios(self) -> list[tuple[str, EpisodeSettings]]:
        """(folder name, protocol settings) of every scenario run, validated, protocols in registry order."""
        episode = self.experiment.protocol.episode()
        grids = dict(self.grids)
        given = dict(self.options)
        scenarios: list[tuple[str, EpisodeSettings]] = []
        for entry in protocol_entries():
            if entry.sweep is None or not grids.get(entry.name):
                continue
            flags = {option.flag: option.dest for option in entry.options}
            shared = {flags[flag]: given[flag] for flag in entry.sweep.shared_options if given.get(flag) is not None}
            scenarios += entry.sweep.scenarios(tuple(grids[entry.name]), {**episode, **shared})
        names = [name for name, _ in scenarios]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"each grid value may be given once, got duplicates: {', '.join(duplicates)}")
        return scenarios


def _sweep_baseline_latency(settings: ExperimentSettings, model: torch.nn.Module) -> BaselineLatency:
    if settings.cost_model is not None:
        return BaselineLatency(settings.cost_model.baseline_latency, "cost model")
    if settings.baseline_latency is not None:
        return BaselineLatency(settings.baseline_latency, "given")
    device = resolve_device(settings.device)
    stream = open_stream_source(settings.stream, settings.stream_options)
    first, _ = _peek(stream)
    with precision_autocast(settings.precision, device):
        calibration = calibrate_baseline_latency(
            model, as_batch(first, 0).images, device, DEFAULT_WARMUP_CALLS, settings.calibration_calls
        )
    return BaselineLatency(calibration.baseline_latency, "calibrated", calibration)


def _plot_sweep(rows: list[dict[str, Any]], sweep_dir: Path) -> list[Path]:
    scenarios = list(dict.fromkeys(row["scenario"] for row in rows))
    domains = list(dict.fromkeys(row["domain"] for row in rows))
    methods = list(dict.fromkeys(row["method"] for row in rows))
    domains = [ALL_DOMAINS, *(domain for domain in domains if domain != ALL_DOMAINS)]
    paths = plot_best_method_map(best_methods(rows), scenarios, domains, methods, sweep_dir / BEST_METHOD_STEM)
    overall = [row for row in rows if row["domain"] == ALL_DOMAINS]
    for entry in protocol_entries():
        if entry.sweep is None:
            continue
        protocol, axis_label = entry.name, entry.sweep.label
        selected = [row for row in overall if row["protocol"] == protocol and row["parameter"] is not None]
        if not selected:
            continue
        curves: dict[str, tuple[list[float], list[float]]] = {}
        for row in selected:
            parameters, utilities = curves.setdefault(row["method"], ([], []))
            parameters.append(float(row["parameter"]))
            utilities.append(float(row["utility"]) if row["utility"] is not None else float("nan"))
        values = [float(row["parameter"]) for row in selected]
        log_x = min(values) > 0 and max(values) / min(values) > 10
        paths += plot_utility_curves(
            curves,
            axis_label,
            sweep_dir / f"{UTILITY_STEM}{protocol}",
            title=f"utility against {axis_label} ({protocol} protocol)",
            log_x=log_x,
        )
    return paths


def _on_run_device(function: Callable[..., Any], settings: ExperimentSettings, model: torch.nn.Module) -> Any:
    """``function(settings, model)`` with ``model`` moved to the run's device (a sweep's task: the
    driver may hold the model on another device than the node running the task)."""
    return function(settings, model.to(resolve_device(settings.device)))


def run_sweep(
    settings: SweepSettings, executor: Executor | None = None, options: TaskOptions = DEFAULT_TASK_OPTIONS
) -> Path:
    """Run every scenario of ``settings`` and write the sweep folder (see the module docstring); returns it.

    The model is loaded once and shared by all scenario runs. executor: where λ is calibrated and
    the scenario runs execute, each as one task with ``options`` (``tta_eval.cluster.task_options``;
    default: one after the other in this process); on a distributed executor the model is loaded
    on the CPU here and sent to every task, which moves it to the run's device. Raises ValueError
    for user mistakes, as ``run_experiment``. The sweep folder is locked while the sweep runs, as a
    run folder is (``tta_eval.run_folder.lock_run_folder``).
    """
    executor = executor or SerialExecutor()
    resolved = resolve_experiment(settings.experiment)
    with lock_run_folder(resolved.settings.output_root / resolved.settings.resolved_run_name(), "sweep") as sweep_dir:
        return _sweep_in_folder(settings, resolved, sweep_dir, executor, options)


def _sweep_in_folder(
    settings: SweepSettings, resolved: ResolvedExperiment, sweep_dir: Path, executor: Executor, options: TaskOptions
) -> Path:
    """``run_sweep`` once it holds the lock of ``sweep_dir``."""
    base = resolved.settings
    prepare_sweep_folder(sweep_dir, base.overwrite)
    base.timing(base.device).check_methods([method.label for method in base.resolved_methods()])
    executor.check_resources(options)
    model = load_model(base.model, torch.device("cpu") if executor.distributed else resolve_device(base.device))
    model_handle = executor.put(model)
    latency = executor.get(
        executor.submit(_on_run_device, _sweep_baseline_latency, base, model_handle, options=options)
    )
    scenarios = []
    for name, protocol in settings.scenarios():
        logger.info("sweep scenario %s", name)
        scenario = dataclasses.replace(
            base,
            protocol=protocol,
            output_root=sweep_dir / SWEEP_RUNS_FOLDER,
            run_name=name,
            baseline_latency=None if base.cost_model is not None else latency.seconds,
            overwrite=True,
            progress=base.progress and not executor.distributed,
        )
        scenarios.append(executor.submit(_on_run_device, run_experiment, scenario, model_handle, options=options))
    runs = [load_run(executor.get(handle)) for handle in scenarios]
    rows = sweep_rows(runs)
    write_rows_csv(rows, sweep_dir / SWEEP_RESULTS_CSV)
    scenario_tables = "\n".join(
        scores_table({label: method.get("protocol_scores", []) for label, method in run.summary["methods"].items()})
        for run in runs
    )
    (sweep_dir / SWEEP_RESULTS_MARKDOWN).write_text(
        f"Utility (%) per method and scenario, over all domains (best in bold); timing: {base.timing(base.device).mode}, "
        f"λ = {1e3 * latency.seconds:.4g} ms ({latency.source}).\n\n" + sweep_table(rows) + "\n" + scenario_tables
    )
    write_json(
        sweep_dir / SWEEP_FILE,
        {
            "scenarios": [name for name, _ in settings.scenarios()],
            "timing": {"mode": base.timing(base.device).mode, **latency.to_json()},
            "config": resolved_config(base, base.resolved_methods(), resolved.stream),
            "rows": rows,
        },
    )
    _plot_sweep(rows, sweep_dir)
    logger.info("sweep written to %s", sweep_dir)
    return sweep_dir
