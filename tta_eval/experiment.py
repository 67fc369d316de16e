"""One evaluation run end to end: ``run_experiment``, the pipeline settings → stream → model → start
or resume → protocol loop → finish.

The settings and their resolution against the stream are ``tta_eval.settings``'s; the run itself
(folder, methods, timing, records and its phases) is ``tta_eval.run.Run``; sweeps of protocol runs are
``tta_eval.sweep``'s; the run folder's layout and files are ``tta_eval.run_folder``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ccc.models import load_model
from tta_eval.run import Run
from tta_eval.run_folder import lock_run_folder
from tta_eval.settings import ExperimentSettings, resolve_experiment

__all__ = ["run_experiment"]

logger = logging.getLogger(__name__)


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
    run = Run(resolved, choices)
    with lock_run_folder(run.folder):
        checkpoint = run.checkpoint_to_resume(notify)
        stream = run.open_stream(checkpoint)
        if model is None:
            model = load_model(run.settings.model, run.device)
        if checkpoint is None:
            run.start(model, stream)
        else:
            run.resume(model, stream, checkpoint, notify)
        try:
            run.record()
        except BaseException as error:
            run.stop(error)
            raise
        return run.finish()
