"""Tests of ccc.execution's executor patterns on the serial executor (the Ray executor runs the same
patterns in tests/ccc/test_generate.py, tests/ccc/cli/test_calibrate_compute.py)."""

from __future__ import annotations

import pytest

from ccc.execution import SerialExecutor, open_executor


def add(offset: int, item: int) -> int:
    if item == 3:
        raise LookupError(f"bad item {item}")
    return offset + item


def test_map_ordered_yields_in_item_order_and_consumes_items_lazily() -> None:
    consumed = []

    def items():
        for item in (5, 1, 2):
            consumed.append(item)
            yield item

    results = SerialExecutor().map_ordered(add, 10, items())
    assert next(results) == 15
    assert consumed == [5]
    assert list(results) == [11, 12]


def test_map_ordered_raises_the_original_exception_after_the_earlier_results() -> None:
    results = SerialExecutor().map_ordered(add, 0, range(6))
    assert [next(results) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(LookupError, match="^bad item 3$"):
        next(results)


def test_workers_hold_their_state_and_handles_pass_as_values() -> None:
    executor = SerialExecutor()
    base = executor.put(100)
    workers = executor.start_workers(lambda start, step: [start, step], base, 7, count=1)

    def advance(state: list[int], times: int) -> int:
        state[0] += state[1] * times
        return state[0]

    assert list(executor.map_on_workers(workers, advance, [1, 2])) == [107, 121]
    doubled = executor.submit(lambda value: 2 * value, base)
    assert executor.get(executor.submit(lambda value, extra: value + extra, doubled, 1)) == 201


def test_arguments_are_checked() -> None:
    executor = SerialExecutor()
    with pytest.raises(ValueError, match="max_in_flight must be an integer >= 1, got 0"):
        list(executor.map_ordered(add, 0, [1], max_in_flight=0))
    with pytest.raises(ValueError, match="count must be an integer >= 1, got 0"):
        executor.start_workers(list, count=0)


def test_open_executor_serial_needs_no_ray() -> None:
    with open_executor(serial=True) as executor:
        assert isinstance(executor, SerialExecutor)
        assert not executor.distributed
