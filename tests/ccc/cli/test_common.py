"""ccc.cli._common: the shared argument types and the one user-error wrapper of the console scripts."""

from __future__ import annotations

import argparse

import pytest

from ccc.cli._common import INTERRUPTED_EXIT_CODE, USER_ERROR_EXIT_CODE, float_list, integer_at_least, name_list, run_command


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
