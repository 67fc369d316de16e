"""A run's settings and their resolution against the stream, below the run and the pipeline.

:class:`ExperimentSettings` (what the user asked for, with :class:`MethodSpec` per method),
:func:`resolve_experiment` (the stream's world, window and collapse span filled in, one note per
choice) and its result :class:`ResolvedExperiment`. ``tta_eval.run.Run`` and
``tta_eval.experiment.run_experiment`` build on these; this module imports neither.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccc.models import ModelSpec
from ccc.options import parse_options
from ccc.stream.spec import SET_MODEL_OPTIONS
from ccc.validation import MAX_SAMPLES, check_choice, check_integer, check_positive, check_positive_int
from tta_eval.checkpoint import DEFAULT_CHECKPOINT_EVERY
from tta_eval.method_settings import MethodSettings, format_options, get_method_settings
from tta_eval.methods import resolve_config
from tta_eval.metrics import DEFAULT_COLLAPSE_SPAN, DEFAULT_WINDOW
from tta_eval.protocols import PRECISIONS, CostModel, EpisodeSettings, OfflineProtocol, Timing
from tta_eval.protocols.timing import DEFAULT_CALIBRATION_CALLS, DEFAULT_WARMUP_CALLS
from tta_eval.reports import SOURCE_METHOD
from tta_eval.run_folder import safe_file_name
from tta_eval.streams import (
    DEFAULT_BATCH_SIZE,
    DEMO_WORLD,
    WORLD_MODELS,
    StreamDescription,
    StreamOptions,
    describe_stream_source,
)

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
    folder. method_settings: the name of method settings (``tta_eval.method_settings``: cifar10,
    cifar100, demo) that give each method their options where ``methods`` does not set them, and the
    run their batch size where ``stream_options`` gives none; None: none, except on a demo-world
    stream with world_defaults, which gets the demo's (``ccc.demo.DEMO_METHOD_OPTIONS``).

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
    method_settings: str | None = None
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
        if self.method_settings is not None:
            get_method_settings(self.method_settings)
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


def fitted_window(samples: int | None, batch_size: int = 1) -> int:
    """Accuracy window (samples) for a stream of ``samples`` samples (None: unknown length) read in
    batches of ``batch_size`` samples (>= 1).

    The largest of 1, 2, 5 × 10^k that gives at least ``WINDOWS_PER_STREAM`` windows, at most the
    paper's ``DEFAULT_WINDOW`` (10,000), so full-length CCC streams keep the paper's value; but at
    least one batch (or the whole stream when it is shorter): the samples of a batch are predicted
    by one state of the model, so a window of a fraction of a batch (2 samples of a 64-sample run)
    only adds noise.
    """
    if samples is None:
        return DEFAULT_WINDOW
    check_positive_int("samples", samples)
    check_positive_int("batch_size", batch_size)
    limit = max(1, samples // WINDOWS_PER_STREAM)
    window = 1
    for exponent in range(len(str(limit))):
        for mantissa in (1, 2, 5):
            if mantissa * 10**exponent <= limit:
                window = mantissa * 10**exponent
    return max(min(window, DEFAULT_WINDOW), min(batch_size, samples))


@dataclass(frozen=True)
class ResolvedExperiment:
    """Settings with every stream-dependent default filled in, what is known of the stream, and one
    line per choice made for the user (to print before the run). method_settings: what the run uses
    of its method settings (config.json's ``method_settings``): their ``name``, their ``batch_size``
    when the run reads batches of it (else None) and per method label the ``options`` that hold the
    settings' values (option → value); None when the run has none."""

    settings: ExperimentSettings
    stream: StreamDescription
    notes: tuple[str, ...]
    method_settings: dict[str, Any] | None = None


def _world_methods(settings: ExperimentSettings, notes: list[str]) -> tuple[MethodSpec, ...]:
    """``settings.methods``, or the demo world's methods when it names none."""
    from ccc.demo import DEMO_METHODS

    if settings.methods:
        return settings.methods
    notes.append(f"demo world: methods {', '.join(DEMO_METHODS)} (pass --method to choose)")
    return tuple(MethodSpec(name, name) for name in DEMO_METHODS)


def _with_method_settings(
    methods: tuple[MethodSpec, ...], chosen: MethodSettings | None, notes: list[str]
) -> tuple[MethodSpec, ...]:
    """``methods`` with the options ``chosen`` gives them where their own options leave them open
    (``MethodSettings.open_options``); one note naming what was added."""
    if chosen is None:
        return methods
    added_by_label = {}
    updated = []
    for method in methods:
        given = dict(method.options)
        added = chosen.open_options(method.name, given)
        if added:
            added_by_label[method.label] = added
        updated.append(dataclasses.replace(method, options=tuple({**added, **given}.items())))
    if added_by_label:
        listed = "; ".join(f"{label}: {format_options(options)}" for label, options in added_by_label.items())
        notes.append(f"{chosen.heading}: {listed}")
    return tuple(updated)


def _method_settings_record(
    chosen: MethodSettings | None, methods: tuple[MethodSpec, ...], batch_size: int
) -> dict[str, Any] | None:
    """What of ``chosen`` the run uses (config.json's ``method_settings``): its name, its batch size
    when the run reads batches of ``batch_size`` samples of that size (else None), and per method
    label the options whose values are the settings' values. Resolving resolved settings again gives
    the same record."""
    if chosen is None:
        return None
    options = {}
    for method in methods:
        held = dict(method.options)
        same = {
            option: setting.value
            for option, setting in chosen.options.get(method.name, {}).items()
            if option in held and held[option] == setting.value
        }
        if same:
            options[method.label] = same
    own = chosen.batch_size.value if chosen.batch_size is not None else None
    return {"name": chosen.name, "batch_size": own if own == batch_size else None, "options": options}


def _settings_batch_size(chosen: MethodSettings | None, given: int | None, stream: StreamDescription) -> int | None:
    """The batch size ``chosen`` gives the run: its own when the user gave none (``given`` None) and
    the stream fixes none of its own; else None."""
    if chosen is None or chosen.batch_size is None or given is not None:
        return None
    return chosen.batch_size.value if stream.batch_size in (None, chosen.batch_size.value) else None


def _check_world_model(model: ModelSpec, stream: StreamDescription, stream_text: str) -> None:
    if model.name == DEMO_MODEL and stream.world is not None and stream.world != DEMO_WORLD:
        of_demo = stream.world in WORLD_MODELS
        raise ValueError(
            f"the demo model (--demo) fits only streams of the demo world, but stream {stream_text!r} was rendered "
            + (
                f"from its {stream.world} world: drop --demo (its own model, {WORLD_MODELS[stream.world]}, is chosen)"
                if of_demo
                else "from an ImageNet-layout folder: drop --demo (and choose --model)"
            )
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
                f"note: {method.label} resets every {reset_every:,} batches "
                f"({reset_every * batch_size:,} samples), but the stream "
                f"has {samples:,} samples: it never resets and equals its method without resets; "
                f"e.g. --method {method.name}:reset_every={suggestion}"
            )
    return notes


def _world_model(settings: ExperimentSettings, stream: StreamDescription, notes: list[str]) -> ModelSpec:
    """``settings.model``, or the model of the stream's world (the demo model for demo-world streams,
    with a note; ResNet-50 otherwise); ValueError for the demo model on a stream of another world."""
    model = settings.model
    if model is None and stream.world in SET_MODEL_OPTIONS:
        raise ValueError(
            f"stream {settings.stream!r} holds {stream.world} images (corruption_set {stream.world}): choose a model "
            f"for them, e.g. {SET_MODEL_OPTIONS[stream.world]} (docs/tta_eval.md)"
        )
    if model is None:
        demo_model = WORLD_MODELS.get(stream.world or "")
        model = ModelSpec() if demo_model is None else ModelSpec(demo_model)
        if demo_model is not None:
            notes.append(f"demo world stream: evaluating the demo model ({demo_model}, docs/demo.md)")
    _check_world_model(model, stream, settings.stream)
    return model


def _fitted_window_and_span(
    settings: ExperimentSettings, samples: int | None, batch_size: int, notes: list[str]
) -> tuple[int, int]:
    """The accuracy window and collapse span in samples: the settings' values, or fitted to the
    stream's ``samples`` (None: unknown length) in batches of ``batch_size`` with a note saying so."""
    window = settings.window if settings.window is not None else fitted_window(samples, batch_size)
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
    return window, span


def resolve_experiment(settings: ExperimentSettings) -> ResolvedExperiment:
    """Fill in what ``settings`` leaves to the stream: model and methods of its world, window and
    collapse span fitted to its length (``fitted_window``; explicit values always win); the method
    settings' options and batch size where the user's leave them open; one note per choice and per
    method whose reset interval exceeds the stream.

    Reads only what is known of the stream (``describe_stream_source``: a manifest, a folder's file
    names), not its samples. Raises ValueError for a stream that names nothing, no methods outside
    the demo world, or the demo model on a stream of another world.
    """
    named = get_method_settings(settings.method_settings) if settings.method_settings is not None else None
    named_batch_size = named.batch_size if named is not None else None
    stream_options = settings.stream_options.resolved(
        DEFAULT_BATCH_SIZE if named_batch_size is None else named_batch_size.value
    )
    stream = describe_stream_source(settings.stream, stream_options)
    notes: list[str] = []
    demo = stream.world in WORLD_MODELS
    methods = _world_methods(settings, notes) if demo else settings.methods
    if not methods:
        raise ValueError("pass at least one method (--method NAME, repeatable; see 'tta-eval methods')")
    # Named settings replace the demo world's; the demo's have no batch size of their own.
    chosen = named or (get_method_settings(stream.world) if demo and settings.world_defaults else None)
    settings_batch_size = _settings_batch_size(chosen, settings.stream_options.batch_size, stream)
    if chosen is not None and settings_batch_size is not None:
        notes.append(f"{chosen.heading}: batch size {settings_batch_size} (--batch-size to change)")
    methods = _with_method_settings(methods, chosen, notes)
    model = _world_model(settings, stream, notes)
    samples = (
        stream.samples
        if settings.max_samples is None
        else min(settings.max_samples, stream.samples or settings.max_samples)
    )
    samples_per_batch = stream.batch_size or stream_options.batch_size
    window, span = _fitted_window_and_span(settings, samples, samples_per_batch, notes)
    if settings.checkpoint_every is None and (samples is None or samples > DEFAULT_CHECKPOINT_EVERY):
        notes.append(
            f"checkpoint every {DEFAULT_CHECKPOINT_EVERY:,} samples, to resume the run if it is interrupted "
            "(--checkpoint-every to change, 0: none)"
        )
    run_name = settings.run_name or default_run_name(stream)
    resolved = dataclasses.replace(
        settings,
        methods=methods,
        model=model,
        stream_options=stream_options,
        window=window,
        collapse_span=span,
        run_name=run_name,
    )
    notes += _reset_notes(resolved.resolved_methods(), samples_per_batch, samples)
    record = _method_settings_record(chosen, methods, samples_per_batch)
    return ResolvedExperiment(resolved, stream, tuple(notes), record)
