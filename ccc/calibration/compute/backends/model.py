"""Where calibration work units run: :class:`ModelBackend` runs them with a model on an executor.

A calibration backend's :meth:`~ccc.calibration.compute.backends.registry.CalibrationBackend.run` takes work
units and calls ``on_result`` once per unit, as each finishes (in any order). :class:`ModelBackend`
holds no pixel or model logic: it calls :func:`ccc.calibration.compute.engine.render_base`,
:func:`~ccc.calibration.compute.engine.render_targets` and
:meth:`~ccc.calibration.compute.evaluator.ModelEvaluator.predict`, which alone decide the numbers, on an
executor of :mod:`ccc.execution` (which holds no calibration logic), so every executor and layout
gives identical results. Two layouts:

- whole units (``device="cpu"``, or any device on a :class:`~ccc.execution.SerialExecutor`): one
  worker per CPU slot holds the model *and* renders, running whole units with
  :func:`~ccc.calibration.compute.evaluator.execute_unit` (no images cross process boundaries, one core per
  worker), each fed a new unit as soon as it finishes one;
- split (``device="cuda"`` on Ray): tasks do the CPU work (decode, preprocess, corrupt: one task
  renders a unit's base images, further tasks render groups of about ``images_per_task`` target
  images from it); one worker per GPU holds the model and predicts. At most a bounded number of
  rendered groups are in flight, so the object store holds a few hundred MB at most.

Other backends (e.g. :class:`ccc.calibration.compute.backends.simulation.CorrelatedImagesBackend`, which draws
results instead of measuring them) implement
:class:`~ccc.calibration.compute.backends.registry.CalibrationBackend` directly. This module registers
:class:`ModelBackend` as the calibration backend ``model`` (:mod:`ccc.calibration.compute.backends.registry`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from ccc.calibration.compute.backends.registry import BackendEntry, BackendSetup, ResultCallback, register_backend
from ccc.calibration.compute.engine import (
    DEFAULT_IMAGES_PER_TASK,
    RenderContext,
    UnitResult,
    WorkUnit,
    count_correct,
    finish_base,
    render_base,
    render_targets,
    target_groups,
)
from ccc.calibration.compute.evaluator import ModelEvaluator, execute_unit
from ccc.execution import Executor
from ccc.models import ModelSource, ModelSpec, load_model

logger = logging.getLogger(__name__)


def build_evaluator(model: ModelSource, device: str, batch_size: int, amp: bool) -> ModelEvaluator:
    """A :class:`ModelEvaluator` for ``model`` on ``device`` (loading a ModelSpec with load_model)."""
    module = load_model(model, device) if isinstance(model, ModelSpec) else model
    return ModelEvaluator(module, device, batch_size, amp)


@dataclasses.dataclass
class _UnitWorker:
    """State of a whole-unit worker: what it renders from, its model, its task size."""

    context: RenderContext
    evaluator: ModelEvaluator
    images_per_task: int


def _start_unit_worker(
    context: RenderContext,
    model: ModelSource,
    device: str,
    batch_size: int,
    amp: bool,
    images_per_task: int,
    one_thread: bool,
) -> _UnitWorker:
    if one_thread:
        torch.set_num_threads(1)
    return _UnitWorker(context, build_evaluator(model, device, batch_size, amp), images_per_task)


def _execute(worker: _UnitWorker, unit: WorkUnit) -> UnitResult:
    return execute_unit(worker.context, unit, worker.evaluator, worker.images_per_task)


def _predict(evaluator: ModelEvaluator, images: NDArray[np.uint8]) -> NDArray[np.int64]:
    return evaluator.predict(images)


@dataclasses.dataclass
class _UnitProgress:
    unit: WorkUnit
    labels: NDArray[np.int64]
    parts: list[tuple[int, ...] | None]


class ModelBackend:
    """Measures work units with a model on ``executor`` (see the module docstring for the layouts).

    Args:
        executor: where the work runs (:mod:`ccc.execution`).
        context: what every unit renders from.
        model: a ModelSpec (loaded by each worker) or an ``nn.Module`` (shipped to the workers).
        device: ``"cpu"`` or ``"cuda[:index]"``.
        batch_size: images per forward pass.
        amp: float16 autocast (CUDA only).
        evaluators: number of model workers on Ray (default: GPUs with CUDA, else one per CPU of
            the cluster; on CPU each also renders and takes one CPU slot); one in this process.
        images_per_task: images rendered per task (memory per in-flight task ≈ this × H × W × 3 bytes).

    Raises:
        ValueError: CUDA on a Ray cluster without GPU, ``amp`` without CUDA, more evaluators than CPUs on CPU.
    """

    def __init__(
        self,
        executor: Executor,
        context: RenderContext,
        model: ModelSource,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        amp: bool = False,
        evaluators: int | None = None,
        images_per_task: int = DEFAULT_IMAGES_PER_TASK,
    ) -> None:
        if amp and not device.startswith("cuda"):
            raise ValueError(f"mixed precision (amp) needs a CUDA device, got device {device!r}")
        self.executor = executor
        self.context = context
        self.images_per_task = images_per_task
        self._split = device.startswith("cuda") and executor.distributed
        context_handle = executor.put(context)
        self._context_handle = context_handle
        if self._split:
            gpus = executor.gpus
            if gpus < 1:
                raise ValueError(f"device {device!r} requested but the Ray cluster has no GPU; use --device cpu")
            count = evaluators or gpus
            self._workers = executor.start_workers(build_evaluator, model, "cuda", batch_size, amp, count=count, gpus=1)
            self._max_in_flight = 2 * executor.cpus + 2 * count
        else:
            cpus = executor.cpus
            count = evaluators or cpus if executor.distributed else 1
            if count > cpus:
                raise ValueError(
                    f"evaluators must be at most the cluster's {cpus} CPUs on device cpu (each takes one), got {count}"
                )
            self._workers = executor.start_workers(
                _start_unit_worker,
                context_handle,
                model,
                device,
                batch_size,
                amp,
                images_per_task,
                executor.distributed,
                count=count,
            )
        logger.info(
            "calibration: %d %s on %s",
            count,
            "model worker(s)" if self._split else "worker(s) rendering and predicting",
            device,
        )

    def run(self, units: Sequence[WorkUnit], on_result: ResultCallback) -> None:
        """Execute ``units``; ``on_result`` runs in this process as units finish."""
        if self._split:
            self._run_split(units, on_result)
            return
        for result in self.executor.map_on_workers(self._workers, _execute, units):
            on_result(result)

    def _run_split(self, units: Sequence[WorkUnit], on_result: ResultCallback) -> None:
        """Rendering tasks feed model workers, results assembled per unit."""
        executor = self.executor
        parts = self._parts(units)
        in_flight: dict[Any, tuple[_UnitProgress, int]] = {}
        next_worker = 0
        exhausted = False
        while True:
            while not exhausted and len(in_flight) < self._max_in_flight:
                item = next(parts, None)
                if item is None:
                    exhausted = True
                    break
                progress, index, images = item
                handle = self._workers[next_worker % len(self._workers)].submit(_predict, images)
                next_worker += 1
                in_flight[handle] = (progress, index)
            if not in_flight:
                return
            for handle in executor.wait(list(in_flight)):
                progress, index = in_flight.pop(handle)
                progress.parts[index] = count_correct(executor.get(handle), progress.labels)
                if all(part is not None for part in progress.parts):
                    correct = tuple(value for part in progress.parts for value in part)  # type: ignore[union-attr]
                    on_result(UnitResult(progress.unit, correct, len(progress.labels)))

    def _parts(self, units: Sequence[WorkUnit]) -> Iterator[tuple[_UnitProgress, int, Any]]:
        """Submit rendering lazily: yields (unit progress, part index, handle of the rendered images)."""
        for unit in units:
            labels = self.context.block_labels(unit.block)
            groups = target_groups(unit, len(labels), self.images_per_task)
            progress = _UnitProgress(unit, labels, [None] * (len(groups) + int(unit.evaluate_base)))
            base = self.executor.submit(render_base, self._context_handle, unit.corruption, unit.severity, unit.block)
            index = 0
            if unit.evaluate_base:
                yield progress, index, self._finished(base)
                index += 1
            for group in groups:
                rendered = self.executor.submit(
                    render_targets, self._context_handle, base, unit.corruption, unit.severity, unit.block, group
                )
                yield progress, index, rendered
                index += 1

    def _finished(self, base: Any) -> Any:
        """The handle of a base as the model sees it: a rendering task applies the stream preprocessing's
        JPEG round trip (:func:`finish_base`); centre-crop bases go to the model as rendered."""
        if not self.context.image_set.preprocessing.jpeg_after_corruptions:
            return base
        return self.executor.submit(finish_base, self._context_handle, base)


def _model_backend(setup: BackendSetup) -> ModelBackend:
    setup.check_options("model", ("images_per_task",))
    return ModelBackend(
        setup.executor,
        setup.context,
        setup.model,
        device=setup.device,
        batch_size=setup.batch_size,
        amp=setup.amp,
        evaluators=setup.evaluators,
        **setup.options,
    )


register_backend(
    BackendEntry(
        "model",
        _model_backend,
        "a model measures the units on the executor (option: images_per_task, images rendered per task)",
    )
)
