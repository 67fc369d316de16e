"""``tta_eval.run_folder``, the one owner of the run and sweep folders' files: a summary carries the
status and the hash of the config it was written for, and ``load_run`` accepts only complete runs of
their own config; clearing a run folder removes every output of a previous run; preparing a sweep
folder refuses to overwrite silently and removes a previous sweep's tables but not its runs."""

from __future__ import annotations

import pytest

from tta_eval.run_folder import (
    CONFIG_FILE,
    COSTS_FILE,
    PLOT_STEM,
    SUMMARY_FILE,
    SWEEP_RESULTS_CSV,
    SWEEP_RUNS_FOLDER,
    clear_run_folder,
    load_run,
    prepare_sweep_folder,
    records_path,
    run_status,
    write_config,
    write_summary,
)


def write_run(run_dir, stopped=None):  # type: ignore[no-untyped-def]
    clear_run_folder(run_dir)
    write_config(run_dir, {"stream": "synthetic:"})
    write_summary(run_dir, {"samples": 32, "methods": {}, **run_status(run_dir, stopped)})


def test_a_complete_run_of_its_own_config_loads(tmp_path):
    write_run(tmp_path / "run")
    run = load_run(tmp_path / "run")
    assert run.name == "run" and run.config == {"stream": "synthetic:"} and run.summary["status"] == "complete"


def test_a_stopped_run_or_another_config_is_refused(tmp_path):
    write_run(tmp_path / "stopped", stopped="KeyboardInterrupt: ")
    with pytest.raises(ValueError, match="is incomplete: it stopped after 32 samples"):
        load_run(tmp_path / "stopped")
    write_run(tmp_path / "changed")
    write_config(tmp_path / "changed", {"stream": "other"})
    with pytest.raises(ValueError, match="its summary.json was written for another config.json"):
        load_run(tmp_path / "changed")


def test_clearing_removes_every_output_of_a_previous_run(tmp_path):
    run_dir = tmp_path / "run"
    write_run(run_dir)
    records_path(run_dir, "tent:learning_rate=0.1").write_text("old")
    for name in (COSTS_FILE, f"{PLOT_STEM}.png", f"{PLOT_STEM}.svg", "notes.txt"):
        (run_dir / name).write_text("old")
    clear_run_folder(run_dir)
    assert sorted(path.name for path in run_dir.rglob("*")) == ["notes.txt", "records"]
    assert not (run_dir / SUMMARY_FILE).exists() and not (run_dir / CONFIG_FILE).exists()


def test_preparing_a_sweep_folder_keeps_runs_and_removes_old_tables(tmp_path):
    sweep_dir = tmp_path / "sweep"
    (sweep_dir / SWEEP_RUNS_FOLDER).mkdir(parents=True)
    (sweep_dir / SWEEP_RESULTS_CSV).write_text("old")
    (sweep_dir / "utility_alfarra.png").write_text("old")
    with pytest.raises(ValueError, match="already exists; choose another --name or pass --overwrite"):
        prepare_sweep_folder(sweep_dir, overwrite=False)
    prepare_sweep_folder(sweep_dir, overwrite=True)
    assert [path.name for path in sweep_dir.iterdir()] == [SWEEP_RUNS_FOLDER]
