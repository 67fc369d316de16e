"""``tta-eval run``: methods over one or more streams, one run folder per stream."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from ccc.cli.common import count, examples
from tta_eval.protocols import EpisodeSettings, OfflineProtocol, get_protocol, list_protocols, protocol_entries
from tta_eval.streams import default_domain_key

from .options import (
    DEMO_STREAM,
    add_experiment_command,
    episode_settings,
    experiment_settings,
    open_executor,
    per_stream,
)

if TYPE_CHECKING:
    from tta_eval.run_folder import RunResult
    from tta_eval.settings import ResolvedExperiment

__all__ = ["RUN_EXAMPLES", "add_command", "execute", "protocol_settings"]

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
        "(a folder of its own beside the README's 224×224 demo run)",
    ),
    (
        f"tta-eval run --stream {DEMO_STREAM} "
        "--stream ccc:shards/demo_baseline_30_transition+speed_200_seed_43_images_10000 "
        "--method tent --method eta --workers 2 --out results/two_streams",
        "two streams, two run folders, at the same time on a local Ray cluster (--ray-address: an existing one)",
    ),
)


def add_command(commands: argparse._SubParsersAction) -> None:
    """``tta-eval run``: the experiment's options, the cluster's and the protocols'."""
    run = add_experiment_command(
        commands,
        "run",
        "run methods over a stream and write a run folder",
        "Run methods over a stream and write a run folder (config, records, summary, accuracy plot).",
        examples(*RUN_EXAMPLES),
    )
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


def _protocol_values(arguments: argparse.Namespace, entry_name: str) -> dict[str, object]:
    """The values of protocol ``entry_name``'s options (None: not given); ValueError for a given
    option of another protocol."""
    for entry in protocol_entries():
        for option in entry.options:
            if entry.name != entry_name and getattr(arguments, option.dest, None) is not None:
                raise ValueError(f"{option.flag} applies to --protocol {entry.name}, got --protocol {entry_name}")
    return {option.dest: getattr(arguments, option.dest) for option in get_protocol(entry_name).options}


def protocol_settings(arguments: argparse.Namespace) -> EpisodeSettings:
    entry = get_protocol(arguments.protocol)
    values = _protocol_values(arguments, entry.name)
    episode = episode_settings(arguments)
    if episode.get("domain_key") is None:
        episode["domain_key"] = default_domain_key(arguments.stream)
    return entry.from_options(values, episode)


def _timing_line(summary: dict) -> str:
    timing = summary.get("timing", {})
    latency = timing.get("baseline_latency_seconds")
    described = f", λ = {1e3 * latency:.4g} ms ({timing.get('baseline_latency_source')})" if latency is not None else ""
    if timing.get("mode") == "deterministic":
        return f"timing: deterministic cost model ({timing.get('cost_model_origin', 'given')}){described}"
    return f"timing: measured wall time{described}"


def execute(arguments: argparse.Namespace) -> int:
    from tta_eval.cluster import print_line, run_experiments
    from tta_eval.reports import adaptation_notes, comparison_table, run_scores, scores_table
    from tta_eval.run_folder import PLOT_STEM, load_run
    from tta_eval.settings import resolve_experiment

    streams = per_stream(arguments)
    several = len(streams) > 1
    resolved = [
        resolve_experiment(experiment_settings(namespace, protocol_settings(namespace))) for namespace in streams
    ]
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

    executor_context, options = open_executor(arguments)
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
