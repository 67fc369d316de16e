"""ccc.cli.common: the shared argument types and the one user-error wrapper of the console scripts."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ccc.cli.common import (
    INTERRUPTED_EXIT_CODE,
    STOPPED_EXIT_CODE,
    USER_ERROR_EXIT_CODE,
    float_list,
    integer_at_least,
    name_list,
    run_command,
)
from tests.builders import REPOSITORY, cli_user_error


def test_integer_at_least_accepts_separators_and_names_the_bound() -> None:
    assert integer_at_least(1)("7_500,000") == 7_500_000
    assert integer_at_least(0)("0") == 0
    with pytest.raises(argparse.ArgumentTypeError, match="must be an integer >= 1, got 0"):
        integer_at_least(1)("0")
    with pytest.raises(argparse.ArgumentTypeError, match="must be an integer >= 0, got 'x'"):
        integer_at_least(0)("x")


def test_lists() -> None:
    assert name_list(" fog, snow,,") == ["fog", "snow"]
    assert float_list("40,20,0") == [40.0, 20.0, 0.0]
    with pytest.raises(argparse.ArgumentTypeError, match="expected comma-separated numbers, got '40,x'"):
        float_list("40,x")


def test_run_command_turns_user_errors_into_one_line(capsys) -> None:
    def fail() -> int:
        raise ValueError("--speed must be\n  positive")

    assert run_command("ccc-x", fail) == USER_ERROR_EXIT_CODE
    assert capsys.readouterr().err == "ccc-x: error: --speed must be positive\n"

    def interrupt() -> int:
        raise KeyboardInterrupt

    assert run_command("ccc-x", interrupt, interrupted="interrupted; rerun to resume") == INTERRUPTED_EXIT_CODE
    assert capsys.readouterr().err == "ccc-x: interrupted; rerun to resume\n"
    assert run_command("ccc-x", lambda: 0) == 0

    def missing() -> int:
        return len(open("/nonexistent/table.npz").read())

    assert run_command("ccc-x", missing) == USER_ERROR_EXIT_CODE
    assert capsys.readouterr().err == "ccc-x: error: /nonexistent/table.npz: No such file or directory\n"

    def bug() -> int:
        raise KeyError("not a user error")

    with pytest.raises(KeyError):
        run_command("ccc-x", bug, (ValueError,))


def test_run_command_reports_a_stopped_run_with_exit_code_1(capsys) -> None:
    def stop() -> int:
        raise RuntimeError("non-finite loss at batch 3")

    assert run_command("ccc-x", stop, stopped=(RuntimeError,)) == STOPPED_EXIT_CODE
    assert capsys.readouterr().err == "ccc-x: stopped: non-finite loss at batch 3\n"


@pytest.mark.parametrize(
    ("module", "argv", "message"),
    [
        (
            "ccc.cli.generate",
            ["--demo", "--imagenet", "/nonexistent"],
            "ccc-generate: error: --demo uses the demo world's own images",
        ),
        ("ccc.cli.verify", ["/nonexistent"], "ccc-verify: error: /nonexistent is not a folder"),
        (
            "ccc.cli.verify",
            [".", "--calibration", "table.npz"],
            "ccc-verify: error: pass both --calibration and --imagenet",
        ),
        (
            "ccc.cli.calibrate",
            ["info", "/nonexistent.npz"],
            "ccc-calibrate: error: /nonexistent.npz: cannot read calibration table",
        ),
        (
            "ccc.cli.corruption_grid",
            ["--image", "/nonexistent.png"],
            "ccc-corruption-grid: error: cannot read --image /nonexistent.png",
        ),
        ("tta_eval.cli", ["methods", "no-such-method"], "tta-eval: error: no method matches 'no-such-method'"),
    ],
    ids=["ccc-generate", "ccc-verify", "ccc-verify-options", "ccc-calibrate", "ccc-corruption-grid", "tta-eval"],
)
def test_every_console_script_reports_a_user_error_in_one_line(
    module: str, argv: list[str], message: str, tmp_path: Path
) -> None:
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    result = subprocess.run(
        [sys.executable, "-m", module, *argv],
        capture_output=True,
        text=True,
        env=environment,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == USER_ERROR_EXIT_CODE, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and result.stderr.startswith(message), (
        result.stderr
    )


@pytest.mark.parametrize(
    ("module", "argv", "message"),
    [
        ("ccc.cli.generate", ["--bogus"], "ccc-generate: error: unrecognized arguments: --bogus (see --help)"),
        ("ccc.cli.verify", [], "ccc-verify: error: the following arguments are required: DIR (see --help)"),
        ("ccc.cli.mirror", ["--bogus"], "ccc-mirror: error: the following arguments are required: SOURCE, DIR"),
        (
            "ccc.cli.calibrate",
            ["compute", "--demo", "--preprocessing", "random", "--out", "x.npz"],
            "ccc-calibrate compute: error: argument --preprocessing: invalid choice: 'random'",
        ),
        ("ccc.cli.corruption_grid", ["--bogus"], "ccc-corruption-grid: error: unrecognized arguments: --bogus"),
        ("tta_eval.cli", ["run"], "tta-eval run: error: the following arguments are required: --stream"),
    ],
    ids=["ccc-generate", "ccc-verify", "ccc-mirror", "ccc-calibrate-compute", "ccc-corruption-grid", "tta-eval-run"],
)
def test_every_parser_mistake_is_one_line(module: str, argv: list[str], message: str, capsys) -> None:
    """Mistakes argparse itself finds (unknown options, bad choices, missing arguments), in every console
    script and subcommand: one line naming --help, exit code 2, not argparse's usage block."""
    import importlib

    line = cli_user_error(importlib.import_module(module).main, capsys, argv)
    assert line.startswith(message) and line.endswith("(see --help)"), line
