"""The time-constrained protocols on the command line: run, rescore, sweep, and user mistakes."""

from __future__ import annotations

import csv
import json

import pytest

from tests.tta_eval.tta_helpers import run_cli

TINY_MODEL = "tests.tta_eval.tta_helpers:make_tiny_cnn"
STREAM = "synthetic:num_batches=12,batch_size=16,domain_length=4,image_size=8"
DETERMINISTIC = ["--cost", "tent=2.5", "--cost", "bn=1+0.25", "--baseline-latency-ms", "10"]


def base(tmp_path, command: str = "run") -> list[str]:
    return [
        command,
        "--stream",
        STREAM,
        "--model",
        TINY_MODEL,
        "--method",
        "tent",
        "--method",
        "bn",
        "--domain-key",
        "domain",
        "--window",
        "64",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]


def test_discrete_run_reports_its_decomposition_and_timing_mode(tmp_path, capsys):
    code, out, err = run_cli(
        capsys,
        *base(tmp_path),
        "--name",
        "d",
        "--protocol",
        "discrete",
        "--utilisation",
        "1",
        "--buffer",
        "0",
        *DETERMINISTIC,
    )
    assert code == 0, err
    assert "discrete ρ=100% b=0:" in out and "| method | U (%) | α (%) | ā served (%) |" in out
    assert "timing: deterministic cost model (given), λ = 10 ms (cost model)" in out
    summary = json.loads((tmp_path / "d" / "summary.json").read_text())
    score = summary["methods"]["tent"]["protocol_scores"][0]
    assert score["availability"] == pytest.approx(4 / 12)  # served: 0, 3, 6, 9
    config = json.loads((tmp_path / "d" / "config.json").read_text())
    assert config["protocol"] == {
        "name": "discrete",
        "reset": "never",
        "reset_every_batches": None,
        "domain_key": "domain",
        "nonfinite_loss": "continue",
        "interval": None,
        "utilisation": 1.0,
        "buffer": 0,
    }
    assert (
        config["timing"]["mode"] == "deterministic"
        and config["timing"]["cost_model"]["methods"]["tent"]["prediction_to_ready"] == 1.5
    )


def test_rescore_recomputes_continuous_utility_for_new_thresholds(tmp_path, capsys):
    code, _, err = run_cli(
        capsys, *base(tmp_path), "--name", "c", "--protocol", "continuous", "--threshold-ms", "20", *DETERMINISTIC
    )
    assert code == 0, err
    summary = json.loads((tmp_path / "c" / "summary.json").read_text())
    code, out, err = run_cli(
        capsys,
        "rescore",
        str(tmp_path / "c"),
        "--threshold-ms",
        "20",
        "--threshold-ms",
        "80",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert code == 0, err
    assert "run c (λ = 10 ms):" in out and "continuous T=80 ms:" in out
    rescored = json.loads((tmp_path / "r.json").read_text())
    assert rescored["methods"]["tent"][0]["utility"] == summary["methods"]["tent"]["protocol_scores"][0]["utility"]
    assert rescored["methods"]["tent"][1]["utility"] > rescored["methods"]["tent"][0]["utility"]
    code, out, _ = run_cli(
        capsys, "rescore", str(tmp_path / "c"), "--threshold-ms", "200", "--baseline-latency-ms", "100"
    )
    assert code == 0 and "run c (λ = 100 ms):" in out


def test_sweep_writes_table_heat_map_and_curves(tmp_path, capsys):
    arguments = [
        *base(tmp_path, "sweep"),
        "--name",
        "s",
        *DETERMINISTIC,
        "--speeds",
        "1,0.5",
        "--utilisations",
        "1",
        "--thresholds-ms",
        "20,50",
        "--budgets-s",
        "0.05",
    ]
    code, out, err = run_cli(capsys, *arguments)
    assert code == 0, err
    sweep = tmp_path / "s"
    assert "| method | offline | continuous T=20 ms | continuous T=50 ms | alfarra η=1 | alfarra η=0.5 |" in out
    with open(sweep / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    scenarios = {row["scenario"] for row in rows}
    assert scenarios == {
        "offline",
        "continuous T=20 ms",
        "continuous T=50 ms",
        "alfarra η=1",
        "alfarra η=0.5",
        "discrete ρ=100% b=1",
        "amortised B=0.05 s",
    }
    assert {row["domain"] for row in rows} == {"all", "noise-3", "contrast-3", "brightness-3"}
    assert {row["method"] for row in rows} == {"source", "tent", "bn"}
    tent_speed = {
        row["parameter"]: float(row["adapted_batch_fraction"])
        for row in rows
        if row["method"] == "tent" and row["protocol"] == "alfarra" and row["domain"] == "all"
    }
    assert tent_speed == {"1.0": pytest.approx(4 / 12), "0.5": pytest.approx(6 / 12)}
    for stem in ("best_method", "utility_alfarra", "utility_discrete", "utility_continuous", "utility_amortised"):
        assert (sweep / f"{stem}.png").stat().st_size > 1000 and (sweep / f"{stem}.svg").exists()
    assert sorted(path.name for path in (sweep / "runs").iterdir()) == [
        "alfarra_eta=0.5",
        "alfarra_eta=1",
        "amortised_B=0.05s",
        "continuous",
        "discrete_rho=1",
    ]
    assert json.loads((sweep / "sweep.json").read_text())["timing"]["mode"] == "deterministic"
    code, _, err = run_cli(capsys, *arguments)
    assert code == 2 and "already exists" in err


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ["--protocol", "discrete", "--budget-s", "1"],
            "--budget-s applies to --protocol amortised, got --protocol discrete",
        ),
        (["--protocol", "amortised"], "--protocol amortised needs --budget-s B"),
        (["--protocol", "discrete"], "--protocol discrete needs --utilisation ρ or --interval-ms γ"),
        (["--protocol", "continuous"], "--protocol continuous needs at least one --threshold-ms T"),
        (
            ["--protocol", "continuous", "--threshold-ms", "-5"],
            "--threshold-ms must be a positive number of milliseconds, got -5.0",
        ),
        (
            ["--protocol", "continuous", "--threshold-ms", "5", *DETERMINISTIC],
            "threshold must be greater than the baseline latency λ = 10 ms, got 5 ms",
        ),
        (["--protocol", "alfarra", "--speed", "2"], "speed must be in (0, 1], got 2.0"),
        (["--protocol", "alfarra", "--relative-speed", "0"], "relative_speed must be an integer >= 1, got 0"),
        (["--protocol", "discrete", "--utilisation", "0"], "utilisation must be a finite number > 0, got 0.0"),
        (["--speed", "0.5"], "--speed applies to --protocol alfarra, got --protocol offline"),
        (["--cost", "tent=2"], "--cost needs λ: give --baseline-latency-ms (ms) or a cost table with --costs"),
        (["--cost", "tent", "--baseline-latency-ms", "10"], "--cost must look like LABEL=COST"),
        (["--cost", "tent=fast", "--baseline-latency-ms", "10"], "a cost must be 'TOTAL' or 'PREDICTION+READY'"),
        (
            ["--cost", "tent=1_0", "--baseline-latency-ms", "10"],
            "option 'cost' of --cost must be a finite decimal number (e.g. 16, 0.5, 2e-4), got '1_0'",
        ),
        (
            ["--cost", "tent=1e-400+1", "--baseline-latency-ms", "10"],
            "option 'cost' of --cost must be a finite decimal number, got '1e-400'",
        ),
        (
            ["--cost", "tent=2", "--cost", "tent=3", "--baseline-latency-ms", "10"],
            "--cost tent is given twice (tent=2 and tent=3); give it once",
        ),
        (
            ["--cost", "tent=2", "--baseline-latency-ms", "10"],
            "the cost model has no cost for method 'bn'; give one with --cost bn=TOTAL",
        ),
        (["--costs", "no/such/costs.json"], "cost table 'no/such/costs.json' does not exist"),
        (["--protocol", "alfarra", "--calibration-calls", "1"], "calibration_calls must be >= 2, got 1"),
    ],
)
def test_run_mistakes_give_one_line_and_exit_code_2(tmp_path, capsys, arguments, message):
    code, _, err = run_cli(capsys, *base(tmp_path), *arguments)
    assert code == 2, err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_rescore_and_sweep_mistakes_give_one_line_and_exit_code_2(tmp_path, capsys):
    code, _, err = run_cli(capsys, *base(tmp_path), "--name", "a", "--protocol", "alfarra", *DETERMINISTIC)
    assert code == 0, err
    cases = [
        (["rescore", str(tmp_path / "a"), "--threshold-ms", "50"], "run 'a' used protocol 'alfarra'"),
        (["rescore", str(tmp_path), "--threshold-ms", "50"], "is not a tta-eval run folder (no summary.json)"),
        ([*base(tmp_path, "sweep"), *DETERMINISTIC], "a sweep needs at least one grid"),
        (
            [*base(tmp_path, "sweep"), *DETERMINISTIC, "--speeds", "1,fast"],
            "--speeds must be comma-separated numbers, got '1,fast'",
        ),
        (
            [*base(tmp_path, "sweep"), *DETERMINISTIC, "--speeds", "1,1"],
            "each grid value may be given once, got duplicates: alfarra_eta=1",
        ),
        (
            [*base(tmp_path, "sweep"), *DETERMINISTIC, "--budgets-s", "-1"],
            "budget must be a finite number >= 0, got -1.0",
        ),
    ]
    for arguments, message in cases:
        code, _, err = run_cli(capsys, *arguments)
        assert code == 2, (arguments, err)
        assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_offline_run_rescored_with_a_given_baseline_latency(tmp_path, capsys):
    code, _, err = run_cli(capsys, *base(tmp_path), "--name", "o")
    assert code == 0, err
    code, _, err = run_cli(capsys, "rescore", str(tmp_path / "o"), "--threshold-ms", "50")
    assert (
        code == 2
        and "has no stored baseline latency λ (protocol 'offline'); give one with --baseline-latency-ms" in err
    )
    code, out, err = run_cli(
        capsys, "rescore", str(tmp_path / "o"), "--threshold-ms", "5000", "--baseline-latency-ms", "1000"
    )
    assert code == 0, err
    assert "| tent |" in out
