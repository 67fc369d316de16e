"""One evaluation run: model + stream + methods → run folder with config, records, summary, plots.

Run folder layout (``<output_root>/<run_name>/``):
  config.json        resolved settings: stream, model, every method's full config, protocol, versions
  records/<label>.csv one row per batch and method (see ``tta_eval.records``), written as the run goes
  summary.json       per method: accuracy, windowed accuracy, per-domain accuracy, collapse, resets
  accuracy.png/.svg  windowed accuracy over samples, the source model dashed
"""

from __future__ import annotations

import dataclasses
import logging
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torchvision

import tta_eval
from tta_eval.methods import create, get_method, resolve_config
from tta_eval.metrics import DEFAULT_COLLAPSE_SPAN, DEFAULT_WINDOW
from tta_eval.models import ModelSpec, load_model, resolve_device
from tta_eval.protocols import OfflineProtocol, run_offline
from tta_eval.records import CsvRecordWriter, RecordTable
from tta_eval.reports import CONFIG_FILE, RECORDS_FOLDER, SOURCE_METHOD, SUMMARY_FILE, plot_run, summarise_run, write_json
from tta_eval.streams import StreamOptions, limit_samples, open_stream_source, parse_options
from tta_eval.validation import check_positive_int

logger = logging.getLogger(__name__)

FLUSH_EVERY_ROWS = 1000


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

    stream: stream source text (see ``tta_eval.streams.open_stream_source``); methods: at least
    one, labels unique; max_samples: stop after this many samples (None: whole stream); window:
    samples per accuracy window; collapse_reference: "source" (the source model is added to the
    run when not requested) or a fixed accuracy in [0, 1], or None; collapse_span: samples;
    run_name: folder name under output_root (default: derived from the stream); overwrite: allow
    replacing an existing run folder.
    """

    stream: str
    methods: tuple[MethodSpec, ...]
    model: ModelSpec = ModelSpec()
    output_root: Path = Path("results")
    run_name: str | None = None
    device: str = "cpu"
    stream_options: StreamOptions = StreamOptions()
    max_samples: int | None = None
    protocol: OfflineProtocol = OfflineProtocol()
    window: int = DEFAULT_WINDOW
    collapse_reference: str | float | None = SOURCE_METHOD
    collapse_span: int = DEFAULT_COLLAPSE_SPAN
    overwrite: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        if not self.methods:
            raise ValueError("methods must list at least one method, got none")
        labels = [method.label for method in self.methods]
        duplicates = sorted({label for label in labels if labels.count(label) > 1})
        if duplicates:
            raise ValueError(f"each method may be given once per run, got duplicates: {', '.join(duplicates)}")
        if self.max_samples is not None:
            check_positive_int("max_samples", self.max_samples)
        check_positive_int("window", self.window)
        check_positive_int("collapse_span", self.collapse_span)
        if isinstance(self.collapse_reference, str) and self.collapse_reference != SOURCE_METHOD:
            raise ValueError(
                f"collapse_reference must be 'source', an accuracy in [0, 1] or None, got {self.collapse_reference!r}"
            )
        if isinstance(self.collapse_reference, float) and not 0.0 <= self.collapse_reference <= 1.0:
            raise ValueError(f"collapse_reference accuracy must be in [0, 1], got {self.collapse_reference}")

    def resolved_methods(self) -> tuple[MethodSpec, ...]:
        """The methods to run: the requested ones, plus the source model when it is the collapse reference."""
        methods = self.methods
        if self.collapse_reference == SOURCE_METHOD and not any(method.label == SOURCE_METHOD for method in methods):
            methods = (MethodSpec(SOURCE_METHOD, SOURCE_METHOD), *methods)
        return methods

    def resolved_run_name(self) -> str:
        """``run_name`` or a folder-safe name derived from the stream text."""
        if self.run_name:
            return self.run_name
        stem = Path(self.stream.rstrip("/")).name if Path(self.stream).is_dir() else self.stream
        return safe_file_name(stem) or "run"


def safe_file_name(text: str) -> str:
    """``text`` with every character outside [A-Za-z0-9._=+-] replaced by '_'."""
    return re.sub(r"[^A-Za-z0-9._=+-]", "_", text).strip("._")


def resolved_config(settings: ExperimentSettings, methods: tuple[MethodSpec, ...]) -> dict[str, Any]:
    """JSON-serialisable record of everything that determined the run."""
    method_configs = {}
    for method in methods:
        config, reset_every = resolve_config(method.name, **dict(method.options))
        method_configs[method.label] = {
            "method": method.name,
            "config": dataclasses.asdict(config),
            "reset_every": reset_every,
            "description": get_method(method.name).description,
        }
    return {
        "stream": settings.stream,
        "stream_options": dataclasses.asdict(settings.stream_options),
        "max_samples": settings.max_samples,
        "model": dataclasses.asdict(settings.model),
        "device": settings.device,
        "methods": method_configs,
        "protocol": dataclasses.asdict(settings.protocol),
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


def _prepare_run_folder(settings: ExperimentSettings) -> Path:
    run_dir = settings.output_root / settings.resolved_run_name()
    if run_dir.exists() and any(run_dir.iterdir()) and not settings.overwrite:
        raise ValueError(f"run folder {str(run_dir)!r} already exists; choose another --name or pass --overwrite")
    (run_dir / RECORDS_FOLDER).mkdir(parents=True, exist_ok=True)
    for stale in (run_dir / RECORDS_FOLDER).glob("*.csv"):
        stale.unlink()
    return run_dir


def run_experiment(settings: ExperimentSettings) -> Path:
    """Run every method of ``settings`` over the stream in lockstep and write the run folder; returns it.

    Raises ValueError for user mistakes (bad names, options, paths, streams, labels) before or
    during the run, and NonFiniteLossError under the "stop" policy after writing what was recorded.
    """
    methods = settings.resolved_methods()
    device = resolve_device(settings.device)
    stream = open_stream_source(settings.stream, settings.stream_options)
    if settings.max_samples is not None:
        stream = limit_samples(stream, settings.max_samples)
    model = load_model(settings.model, device)
    modules = {method.label: create(method.name, model, **dict(method.options)) for method in methods}
    run_dir = _prepare_run_folder(settings)
    write_json(run_dir / CONFIG_FILE, resolved_config(settings, methods))
    tables = {label: RecordTable() for label in modules}
    handles = {
        label: open(run_dir / RECORDS_FOLDER / f"{safe_file_name(label)}.csv", "w", newline="") for label in modules
    }
    stopped: str | None = None
    try:
        writers = {label: CsvRecordWriter(handle) for label, handle in handles.items()}
        for record in run_offline(modules, stream, settings.protocol, device, settings.progress):
            tables[record.method].append(record)
            writers[record.method].write(record)
            if len(tables[record.method]) % FLUSH_EVERY_ROWS == 0:
                handles[record.method].flush()
    except BaseException as error:
        stopped = f"{type(error).__name__}: {error}"
        raise
    finally:
        for handle in handles.values():
            handle.close()
        if all(len(table) for table in tables.values()):
            summary = summarise_run(
                tables,
                {method.label: method.name for method in methods},
                settings.window,
                settings.collapse_reference,
                settings.collapse_span,
            )
            summary["run"] = run_dir.name
            summary["stopped"] = stopped
            write_json(run_dir / SUMMARY_FILE, summary)
            plot_run(summary, run_dir, title=run_dir.name)
    logger.info("run written to %s", run_dir)
    return run_dir
