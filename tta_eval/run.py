"""One tta-eval run as an object: its folder, methods, timing, device, config and record files, and
its phases.

``tta_eval.experiment.run_experiment`` drives a ``Run`` through them, holding the run folder's lock:

1. ``checkpoint_to_resume``: ``tta_eval.resume.find_checkpoint`` checks the folder (restores a
   deleted config.json from the checkpoint, refuses another command's run) and finds the checkpoint
   of an unfinished run, if any, checked against the folder and the stream (its methods, position,
   records sizes and random states) before any file changes;
2. ``open_stream``: the stream from its start, or from the checkpoint's position;
3. ``start`` (a new run: check the model against the stream, build the methods, obtain λ, write
   config.json, open empty records) or ``resume`` (build the methods; ``tta_eval.resume.restore_records``
   checks the model is the one the checkpoint's run started from and cuts the records to the
   checkpoint);
4. ``record``: the protocol loop, each record written as it comes, checkpoints every
   ``checkpoint_every`` samples;
5. ``finish`` (plots, measured costs, summary.json "complete", the checkpoint removed) or, when the
   loop raised, ``stop`` (the same outputs with status "stopped" and the reason).

The run folder's layout and files are ``tta_eval.run_folder``'s; the checkpoint's record is
``tta_eval.checkpoint``'s; resuming is ``tta_eval.resume``'s (the methods' saved states and the random
states are loaded by the protocol loop, ``tta_eval.protocols._execution``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import platform
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import torch

import tta_eval
from ccc.models import resolve_device
from tta_eval.checkpoint import Checkpoint, Checkpointer, model_sha256, remove_checkpoint
from tta_eval.methods import create, get_method, resolve_config
from tta_eval.protocols import (
    CostModel,
    LatencyCalibration,
    RunContext,
    calibrate_baseline_latency,
    precision_autocast,
    run_protocol,
)
from tta_eval.protocols.timing import DEFAULT_WARMUP_CALLS, measured_cost
from tta_eval.records import CsvRecordWriter, RecordTable
from tta_eval.reports import plot_run, run_title, summarise_run
from tta_eval.resume import find_checkpoint, restore_records
from tta_eval.run_folder import (
    CONFIG_FILE,
    COSTS_FILE,
    clear_run_folder,
    open_records,
    read_config,
    records_path,
    run_status,
    write_config,
    write_summary,
)
from tta_eval.streams import SizedStream, StreamDescription, as_batch, limit_samples, open_stream_source, stream_length

if TYPE_CHECKING:
    from tta_eval.settings import ExperimentSettings, MethodSpec, ResolvedExperiment

logger = logging.getLogger(__name__)


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
            "torchvision": metadata.version("torchvision"),  # not imported: it costs seconds
            "python": platform.python_version(),
        },
    }


def peek_stream(stream: Iterable[Any]) -> tuple[Any, Iterable[Any]]:
    """The first item of ``stream`` and an iterable yielding all items, that one included (sized when
    ``stream`` is); ValueError when the stream yields nothing."""
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
        """JSON-serialisable form (config.json, summary.json, sweep.json)."""
        return {
            "baseline_latency_seconds": self.seconds,
            "baseline_latency_source": self.source,
            "calibration": None if self.calibration is None else self.calibration.to_json(),
        }

    def to_state(self) -> dict[str, Any]:
        """Plain values for a checkpoint (``dataclasses.asdict``)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> BaselineLatency:
        """The ``BaselineLatency`` whose ``to_state`` is ``state``."""
        calibration = state["calibration"]
        return cls(
            state["seconds"], state["source"], None if calibration is None else LatencyCalibration(**calibration)
        )


def known_baseline_latency(settings: ExperimentSettings, needed: bool) -> BaselineLatency | None:
    """λ without a calibration: the cost model's, the settings' or, when not ``needed``, none; None
    when it must be calibrated (``calibrate_latency``)."""
    if settings.cost_model is not None:
        return BaselineLatency(settings.cost_model.baseline_latency, "cost model")
    if settings.baseline_latency is not None:
        return BaselineLatency(settings.baseline_latency, "given")
    if not needed:
        return BaselineLatency(None, "not needed")
    return None


def calibrate_latency(
    settings: ExperimentSettings, model: torch.nn.Module, batch: Any, device: torch.device
) -> BaselineLatency:
    """λ calibrated on the plain ``model`` with the images of ``batch`` (a stream item), in the
    settings' precision, after ``DEFAULT_WARMUP_CALLS`` warm-up calls."""
    with precision_autocast(settings.precision, device):
        calibration = calibrate_baseline_latency(
            model, as_batch(batch, 0).images, device, DEFAULT_WARMUP_CALLS, settings.calibration_calls
        )
    return BaselineLatency(calibration.baseline_latency, "calibrated", calibration)


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
            f"model {model_name!r} predicts {width:,} classes, "
            f"but the stream's labels come from {num_classes:,} classes; "
            "choose a model trained for this stream's classes (demo-world streams: leave --model out, or --demo)"
        )
    highest = int(batch.labels.max())
    if highest >= width:
        raise ValueError(
            f"model {model_name!r} predicts {width:,} classes, but the stream has label {highest:,}; "
            "choose a model for these classes"
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


class Run:
    """One run of resolved settings into its run folder, phase by phase (see the module docstring).

    resolved: ``tta_eval.settings.resolve_experiment``'s result; choices: lines saying what was
    chosen for the user earlier, recorded in config.json before the resolution's own notes. Building a
    ``Run`` touches no file: it resolves the device, checks that the timing knows every method (a cost
    model must cost each) and computes config.json's content. The caller holds the folder's lock
    (``tta_eval.run_folder.lock_run_folder(run.folder)``) from ``checkpoint_to_resume`` to ``finish``.

    Attributes: settings (resolved), stream_description (what is known of the stream), methods (the
    source model included when it is the collapse reference), device, timing, folder, config
    (config.json without λ); after ``start`` or ``resume``: modules (label → method), latency (λ),
    tables (label → records so far).
    """

    def __init__(self, resolved: ResolvedExperiment, choices: Sequence[str] = ()) -> None:
        self.settings = resolved.settings
        self.stream_description = resolved.stream
        self.methods = self.settings.resolved_methods()
        self.device = resolve_device(self.settings.device)
        self.timing = self.settings.timing(str(self.device))
        self.timing.check_methods([method.label for method in self.methods])
        self.folder = self.settings.output_root / self.settings.resolved_run_name()
        self.config = resolved_config(self.settings, self.methods, self.stream_description)
        self.config["method_settings"] = resolved.method_settings
        self.config["choices"] = [*choices, *resolved.notes]
        self.modules: dict[str, torch.nn.Module] = {}
        self.latency: BaselineLatency | None = None
        self.tables: dict[str, RecordTable] = {}
        self._handles: dict[str, TextIO] = {}
        self._batches: Iterable[Any] = ()
        self._resumed_from: Checkpoint | None = None
        self._checkpointer: Checkpointer | None = None

    # --- before the run: the folder and the stream -----------------------------------------------------

    def checkpoint_to_resume(self, notify: Callable[[str], None]) -> Checkpoint | None:
        """Check the run folder and return the checkpoint to resume from; None: start the run
        (``tta_eval.resume.find_checkpoint`` for this run's folder, config, methods and stream; its
        ValueErrors are one line each)."""
        labels = [method.label for method in self.methods]
        return find_checkpoint(
            self.folder, self.config, labels, self._end(), self.device, self.settings.overwrite, notify
        )

    def _end(self) -> int | None:
        """Samples the run covers when known: the stream's length, or ``max_samples`` when smaller."""
        ends = [limit for limit in (self.stream_description.samples, self.settings.max_samples) if limit is not None]
        return min(ends) if ends else None

    def open_stream(self, checkpoint: Checkpoint | None) -> Iterable[Any]:
        """The stream's batches from its start, or from ``checkpoint``'s position (nothing when the
        checkpoint is at the stream's end), up to ``max_samples`` samples in all."""
        start = 0 if checkpoint is None else checkpoint.samples
        end = self._end()
        if checkpoint is not None and end is not None and start >= end:
            return []
        stream = open_stream_source(self.settings.stream, self.settings.stream_options, start=start)
        if self.settings.max_samples is not None:
            stream = limit_samples(stream, self.settings.max_samples - start)
        return stream

    # --- the phases -------------------------------------------------------------------------------------

    def start(self, model: torch.nn.Module, stream: Iterable[Any]) -> None:
        """Start the run from the stream's first sample: check that ``model`` (on the run's device)
        fits the stream's labels, build the methods from it, obtain λ (calibrated on the first batch
        when the protocol needs it and no cost model or value gives it) and check it fits the
        protocol; then replace what an earlier run left in the folder, write config.json (with λ) and
        open empty records. ValueError, before any file is changed, for a model or λ that does not fit."""
        first, self._batches = peek_stream(stream)
        check_model_classes(
            model, as_batch(first, 0), self.device, self.stream_description.num_classes, self.settings.model.name
        )
        self.modules = self._build_methods(model)
        latency = known_baseline_latency(self.settings, self.settings.protocol.needs_baseline_latency)
        if latency is None:
            latency = calibrate_latency(self.settings, model, first, self.device)
        self.settings.protocol.check_baseline_latency(latency.seconds)
        clear_run_folder(self.folder)
        write_config(self.folder, {**self.config, **latency.to_json()})
        self.latency = latency
        self.tables = {label: RecordTable() for label in self.modules}
        self._handles = {label: open_records(self.folder, label) for label in self.modules}
        self._checkpointer = self._new_checkpointer(latency, model_sha256(model), 0)

    def resume(
        self, model: torch.nn.Module, stream: Iterable[Any], checkpoint: Checkpoint, notify: Callable[[str], None]
    ) -> None:
        """Continue the run from ``checkpoint`` (``checkpoint_to_resume``) over ``stream``
        (``open_stream(checkpoint)``): build the methods from ``model`` (the protocol loop loads their
        saved state), restore the folder to the checkpoint (``tta_eval.resume.restore_records``: a
        model other than the one the run started from is refused, ValueError, before any file
        changes), say so to ``notify`` and take λ from the checkpoint."""
        digest = model_sha256(model)
        self.modules = self._build_methods(model)
        self._handles, self.tables = restore_records(self.folder, checkpoint, digest)
        notify(f"resuming run {self.folder.name} from sample {checkpoint.samples:,}")
        latency = BaselineLatency.from_state(checkpoint.extra["baseline_latency"])
        self.latency = latency
        self._batches = stream
        self._resumed_from = checkpoint
        self._checkpointer = self._new_checkpointer(latency, digest, checkpoint.samples)

    def record(self) -> None:
        """The protocol loop: run the protocol over the stream, write each record to its method's
        records as it comes (an OSError, e.g. a full disk, says the run is incomplete) and keep it in
        ``tables``; checkpoints are written every ``checkpoint_every`` samples; the records are closed
        at the end. After ``start`` or ``resume``; on an exception call ``stop``."""
        if self.latency is None:
            raise RuntimeError("start or resume the run before recording it")
        settings = self.settings
        context = RunContext(
            self.device,
            settings.progress,
            self.timing,
            self.latency.seconds,
            self._checkpointer,
            self._resumed_from,
            settings.precision,
            settings.channels_last,
        )
        records = run_protocol(self.modules, self._batches, settings.protocol, context)
        header = self._resumed_from is None
        writers = {label: CsvRecordWriter(handle, header=header) for label, handle in self._handles.items()}
        for record in records:
            try:
                writers[record.method].write(record)
            except OSError as error:
                path = records_path(self.folder, record.method)
                raise OSError(
                    error.errno, f"{error.strerror or error}; run {self.folder.name!r} is incomplete", str(path)
                ) from error
            self.tables[record.method].append(record)
        for handle in self._handles.values():
            handle.close()

    def finish(self) -> Path:
        """Write the outputs of the complete run (plots, measured costs, summary.json last with status
        "complete"), remove its checkpoint; returns the run folder."""
        self._write_outputs(None)
        remove_checkpoint(self.folder)
        logger.info("run written to %s", self.folder)
        return self.folder

    def stop(self, error: BaseException) -> None:
        """Close the records of a run whose protocol loop raised ``error`` and write its outputs with
        status "stopped" and the reason (a failure to write them is logged: ``error`` is what the
        caller raises). The checkpoint stays, so the run can be resumed."""
        for handle in self._handles.values():
            with contextlib.suppress(OSError):
                handle.close()
        try:
            self._write_outputs(f"{type(error).__name__}: {error}")
        except OSError as summary_error:
            logger.warning("could not write the summary of the stopped run %s: %s", self.folder, summary_error)

    # --- helpers ------------------------------------------------------------------------------------------

    def _build_methods(self, model: torch.nn.Module) -> dict[str, torch.nn.Module]:
        """Each method built on (a copy of) ``model`` with its options, by label."""
        return {method.label: create(method.name, model, **dict(method.options)) for method in self.methods}

    def _new_checkpointer(self, latency: BaselineLatency, model_digest: str, start: int) -> Checkpointer | None:
        """The checkpointer bound to config.json as written, carrying λ and the model's weights' sha256
        (``model_digest``, checked when the run resumes); start: samples already consumed. None
        without checkpoints."""
        every = self.settings.resolved_checkpoint_every()
        if not every:
            return None
        extra = {"baseline_latency": latency.to_state(), "model_sha256": model_digest}
        return Checkpointer(self.folder, every, (self.folder / CONFIG_FILE).read_text(), self._handles, extra, start)

    def _summary(self, latency: BaselineLatency, stopped: str | None) -> dict[str, Any]:
        """summary.json's content: scores, status (``stopped``: the reason, None when complete), timing."""
        settings = self.settings
        summary = summarise_run(
            self.tables,
            {method.label: method.name for method in self.methods},
            settings.window,
            settings.collapse_reference,
            settings.collapse_span,
            settings.protocol,
            latency.seconds,
        )
        summary["run"] = self.folder.name
        summary.update(run_status(self.folder, stopped))
        summary["timing"] = {"mode": self.timing.mode, **latency.to_json()}
        if settings.cost_model is not None:
            summary["timing"]["cost_model_origin"] = settings.cost_model.origin
        return summary

    def _write_outputs(self, stopped: str | None) -> None:
        """Write plots, measured costs and, last, summary.json (status and config hash) of a run that
        recorded at least one batch per method; nothing otherwise (the folder then reads as unfinished)."""
        latency = self.latency
        if latency is None or not all(len(table) for table in self.tables.values()):
            return
        summary = self._summary(latency, stopped)
        stream = read_config(self.folder).get("stream_name") or self.settings.stream
        plot_run(summary, self.folder, title=run_title(stream, self.settings.protocol.name))
        if self.settings.cost_model is None and latency.seconds is not None:
            measured = _measured_costs(self.tables, latency.seconds, self.folder.name)
            if measured is not None:
                measured.save(self.folder / COSTS_FILE)
        write_summary(self.folder, summary)
