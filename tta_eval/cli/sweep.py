"""``tta-eval sweep``: a grid of protocol runs over one stream."""

from __future__ import annotations

import argparse

from ccc.cli.common import examples
from tta_eval.protocols import OfflineProtocol, protocol_entries

from .options import (
    DEMO_STREAM,
    add_experiment_command,
    episode_settings,
    experiment_settings,
    open_executor,
    per_stream,
)

__all__ = ["SWEEP_EXAMPLES", "add_command", "execute"]

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


def add_command(commands: argparse._SubParsersAction) -> None:
    """``tta-eval sweep``: the experiment's options, the cluster's and one grid per swept protocol."""
    sweep = add_experiment_command(
        commands,
        "sweep",
        "grid of protocol runs: results table, best-method map, utility plots",
        "A grid of protocol runs over one stream: results table, best-method map, utility plots.",
        examples(*SWEEP_EXAMPLES),
    )
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


def _grid(option: str, text: str, scale: float = 1.0) -> tuple[float, ...]:
    if not text.strip():
        return ()
    try:
        return tuple(float(part) * scale for part in text.split(","))
    except ValueError:
        raise ValueError(f"{option} must be comma-separated numbers, got {text!r}") from None


def execute(arguments: argparse.Namespace) -> int:
    from tta_eval.run_folder import SWEEP_RESULTS_MARKDOWN
    from tta_eval.settings import resolve_experiment
    from tta_eval.sweep import SweepSettings, run_sweep

    if len(arguments.stream) > 1:
        raise ValueError(
            f"a sweep runs over one stream, got {len(arguments.stream)} --stream; run one sweep per stream"
        )
    arguments = per_stream(arguments)[0]
    resolved = resolve_experiment(experiment_settings(arguments, OfflineProtocol(**episode_settings(arguments))))
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
    executor_context, options = open_executor(arguments)
    with executor_context as executor:
        sweep_dir = run_sweep(settings, executor, options)
    print((sweep_dir / SWEEP_RESULTS_MARKDOWN).read_text(), end="")
    print(f"sweep folder: {sweep_dir}")
    return 0
