"""Several evaluation runs on one executor (``ccc.execution``): one after the other in this process,
or at the same time as Ray tasks on a cluster.

A task is one run: one stream with all its methods in lockstep (each batch decoded once and given to
every method), i.e. one call of ``tta_eval.experiment.run_experiment``, the very call a serial
``tta-eval run`` makes, writing the same run folder. Runs are not split further into (stream, method)
tasks: a run folder's summary (collapse against the source model, the comparison plot) needs every
method's records, and lockstep decodes the stream once for all methods (docs/tta_eval.md, "Cluster",
has the measurements).

Everything the user can get wrong is checked here, in the driver, before any task starts: every
run's settings are resolved (``resolve_experiment``), run folders must be distinct, and the
executor must have a node that can hold one task (``--device cuda``: a GPU). Ray retries a task
whose worker or node died (``RayExecutor.max_retries`` times) by running the same run again into
the same folder, which resumes it from its last checkpoint (with ``overwrite`` a retry starts the
run over: the driver cannot replace a previous run before the task has checked the new one, so
the task does it); exceptions raised by the run itself (a user mistake, a stopped run) are not
retried.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from ccc.execution import Executor, TaskOptions
from tta_eval.experiment import run_experiment
from tta_eval.settings import ResolvedExperiment

logger = logging.getLogger(__name__)

RunFinished = Callable[[ResolvedExperiment, Path | None, BaseException | None], None]
"""Called in the driver as each run ends: (the run, its folder or None, its exception or None)."""


def task_options(device: str, distributed: bool, gpus_per_task: float | None = None) -> TaskOptions:
    """What one run asks of the cluster: one CPU, and on ``device`` "cuda" ``gpus_per_task`` GPUs
    (default 1; a fraction in (0, 1] shares a GPU between runs). Only a dead worker or node is
    retried. Distributed runs execute in this process's working folder, so that relative paths
    (streams, ``--out``, weights, cost tables) mean on every node what they mean here.

    Raises ValueError for ``gpus_per_task`` without a CUDA device, and for ``cuda:INDEX`` on a
    cluster (``distributed``), where each task is given its own GPU(s) as "cuda".
    """
    cuda = device.startswith("cuda")
    if gpus_per_task is not None and not cuda:
        raise ValueError(f"--gpus-per-task applies to --device cuda, got --device {device}")
    if cuda and distributed and device != "cuda":
        raise ValueError(
            f"--device {device} names a GPU of this machine; "
            "on a Ray cluster give --device cuda (each run is given its own GPU)"
        )
    gpus = (1.0 if gpus_per_task is None else gpus_per_task) if cuda else 0.0
    if cuda and gpus <= 0:
        raise ValueError(f"--gpus-per-task must be > 0, got {gpus_per_task:g}")
    try:
        return TaskOptions(
            cpus=1.0, gpus=gpus, retry_exceptions=(), working_directory=str(Path.cwd()) if distributed else None
        )
    except ValueError as error:
        raise ValueError(f"--gpus-per-task: {error}") from None


def check_run_folders(runs: Sequence[ResolvedExperiment]) -> None:
    """Raise ValueError when two runs would write the same run folder (naming it and the streams)."""
    seen: dict[Path, str] = {}
    for run in runs:
        settings = run.settings
        folder = settings.output_root / settings.resolved_run_name()
        if folder in seen:
            raise ValueError(
                f"streams {seen[folder]!r} and {settings.stream!r} would both write run folder {str(folder)!r}; "
                "give each stream once "
                "(several --stream are named after their streams; --name names one run only)"
            )
        seen[folder] = settings.stream


def print_line(line: str) -> None:
    """Print ``line`` on stdout at once: a ``notify`` for :func:`run_experiments` that a Ray task can
    carry (it pickles by its module's name; the builtin ``print`` does not once Ray has replaced
    ``builtins.print`` in the driver)."""
    print(line, flush=True)


def run_experiments(
    runs: Sequence[ResolvedExperiment],
    executor: Executor,
    options: TaskOptions,
    on_finished: RunFinished | None = None,
    notify: Callable[[str], None] = logger.info,
) -> list[Path]:
    """Run every resolved run as one task of ``executor`` with ``options``; returns their run
    folders in the order of ``runs``.

    All runs are submitted at once (the executor queues what the cluster cannot hold); progress bars
    are turned off for distributed runs. A failed run does not stop the others: each failure is
    logged (level INFO) and given to ``on_finished``, and once every run has ended the first
    failure (in the order of ``runs``) is raised as the run raised it (ValueError for a user
    mistake, ``NonFiniteLossError`` for a run stopped by ``--nonfinite-loss stop``,
    ``ccc.execution.TaskFailedError`` when its node kept dying). notify: receives each run's line
    saying it resumes an unfinished run (on a cluster it is called on the worker, so it must pickle
    by reference: a module-level function such as :func:`print_line`). Raises ValueError
    before anything runs for two runs sharing a folder or a request no node can hold.
    """
    check_run_folders(runs)
    executor.check_resources(options)
    handles = {}
    for index, run in enumerate(runs):
        settings = run.settings
        if executor.distributed:
            settings = dataclasses.replace(settings, progress=False)
        handles[executor.submit(run_experiment, settings, None, run.notes, notify, options=options)] = index
    folders: dict[int, Path] = {}
    failures: dict[int, BaseException] = {}
    try:
        while handles:
            for handle in executor.wait(list(handles)):
                index = handles.pop(handle)
                run = runs[index]
                try:
                    folders[index] = executor.get(handle)
                except Exception as error:  # every run's failure is reported; the first is raised below
                    failures[index] = error
                    logger.info("run %s failed: %s: %s", run.settings.resolved_run_name(), type(error).__name__, error)
                if on_finished is not None:
                    on_finished(run, folders.get(index), failures.get(index))
    finally:
        executor.cancel(handles)
    if failures:
        raise failures[min(failures)]
    return [folders[index] for index in range(len(runs))]
