"""Sweeps: a grid of protocol runs (scenarios) over one stream and one set of methods, written to a
sweep folder.

The model is loaded once and λ obtained once (calibrated, given, or the cost model's), both shared
by every scenario run; each scenario is one ``tta_eval.experiment.run_experiment`` into the sweep
folder's ``runs/``. The sweep folder's layout and files are ``tta_eval.run_folder``'s: results.csv
and results.md (utility per method, scenario and domain), sweep.json (scenarios, timing, config,
rows), the best-method map and one utility plot per swept protocol.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ccc.execution import DEFAULT_TASK_OPTIONS, Executor, SerialExecutor, TaskOptions
from ccc.models import load_model, resolve_device
from tta_eval.experiment import run_experiment
from tta_eval.plots import plot_best_method_map, plot_utility_curves
from tta_eval.protocols import EpisodeSettings, get_protocol, protocol_entries
from tta_eval.reports import ALL_DOMAINS, best_methods, scores_table, sweep_rows, sweep_table, write_rows_csv
from tta_eval.run import BaselineLatency, calibrate_latency, known_baseline_latency, peek_stream, resolved_config
from tta_eval.run_folder import (
    BEST_METHOD_STEM,
    SWEEP_FILE,
    SWEEP_RESULTS_CSV,
    SWEEP_RESULTS_MARKDOWN,
    SWEEP_RUNS_FOLDER,
    UTILITY_STEM,
    RunResult,
    load_run,
    lock_run_folder,
    prepare_sweep_folder,
    write_json,
)
from tta_eval.settings import ExperimentSettings, ResolvedExperiment, resolve_experiment
from tta_eval.streams import open_stream_source

logger = logging.getLogger(__name__)


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
    """λ shared by every scenario run: the cost model's or the settings', else calibrated on the
    stream's first batch (whatever the protocol: a scenario may need it)."""
    latency = known_baseline_latency(settings, needed=True)
    if latency is not None:
        return latency
    device = resolve_device(settings.device)
    first, _ = peek_stream(open_stream_source(settings.stream, settings.stream_options))
    return calibrate_latency(settings, model, first, device)


def _plot_sweep(rows: list[dict[str, Any]], sweep_dir: Path) -> list[Path]:
    """The best-method map and one utility curve plot per swept protocol; returns the files written."""
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
    """``run_sweep`` once it holds the lock of ``sweep_dir``: the model loaded and λ obtained once, one
    task per scenario run, then the sweep's results."""
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
    _write_sweep_results(settings, resolved, latency, runs, sweep_dir)
    logger.info("sweep written to %s", sweep_dir)
    return sweep_dir


def _write_sweep_results(
    settings: SweepSettings,
    resolved: ResolvedExperiment,
    latency: BaselineLatency,
    runs: list[RunResult],
    sweep_dir: Path,
) -> None:
    """results.csv, results.md, sweep.json and the plots of the finished scenario ``runs``."""
    base = resolved.settings
    rows = sweep_rows(runs)
    write_rows_csv(rows, sweep_dir / SWEEP_RESULTS_CSV)
    scenario_tables = "\n".join(
        scores_table({label: method.get("protocol_scores", []) for label, method in run.summary["methods"].items()})
        for run in runs
    )
    (sweep_dir / SWEEP_RESULTS_MARKDOWN).write_text(
        "Utility (%) per method and scenario, over all domains (best in bold); "
        f"timing: {base.timing(base.device).mode}, "
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
