"""ccc.validation: the one owner of the library's integer and number argument checks."""

from __future__ import annotations

import numpy as np
import pytest

from ccc.stream.schedule import ScheduleError
from ccc.stream.spec import PlanError
from ccc.validation import check_integer, check_non_negative_int, check_positive_int


def test_integers_python_or_numpy_come_back_as_int() -> None:
    assert check_integer("grid_size", 21, 2) == 21
    value = check_positive_int("limit", np.int64(7))
    assert value == 7 and type(value) is int
    assert check_non_negative_int("start", np.uint8(0)) == 0
    assert check_integer("index", 399, 0, 399) == 399


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("speed", 0, 1), "speed must be an integer >= 1, got 0"),
        (("speed", True, 1), "speed must be an integer >= 1, got True"),
        (("speed", 2.0, 1), "speed must be an integer >= 1, got 2.0"),
        (("speed", "3", 1), "speed must be an integer >= 1, got '3'"),
        (("index", -1, 0, 399), "index must be an integer >= 0, got -1"),
        (("batch_size", 100_000, 1, 65_536), r"batch_size must be an integer in \[1, 65,536\], got 100,000"),
    ],
)
def test_messages_name_parameter_expectation_and_value(arguments: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_integer(*arguments)


def test_a_module_raises_its_own_error_type() -> None:
    with pytest.raises(PlanError, match="seed must be an integer >= 0, got -1"):
        check_non_negative_int("seed", -1, error=PlanError)
    with pytest.raises(ScheduleError, match=r"step must be an integer in \[0, 9\], got 10"):
        check_integer("step", 10, 0, 9, error=ScheduleError)
