"""Tests of ccc.execution's executor patterns on the serial executor (the Ray executor runs the same
patterns in tests/ccc/test_generate.py, tests/ccc/cli/test_calibrate_compute.py; per-task options on a
real cluster in tests/tta_eval/test_cluster.py), and of what Ray tasks ask for (a stand-in ``ray``)."""

from __future__ import annotations

import os

import pytest

from ccc.execution import RayExecutor, SerialExecutor, TaskFailedError, TaskOptions, open_executor


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


def test_task_options_are_checked() -> None:
    assert TaskOptions(cpus=0.5, gpus=0.25).gpus == 0.25
    assert TaskOptions(gpus=2).gpus == 2
    with pytest.raises(ValueError, match="cpus must be a finite number > 0, got 0"):
        TaskOptions(cpus=0)
    with pytest.raises(ValueError, match="gpus must be a finite number >= 0, got -1"):
        TaskOptions(gpus=-1)
    with pytest.raises(ValueError, match=r"gpus must be a fraction in \(0, 1\] or a whole number, got 1.5"):
        TaskOptions(gpus=1.5)


def test_the_serial_executor_takes_task_options_and_has_nothing_to_check() -> None:
    executor = SerialExecutor()
    options = TaskOptions(cpus=4, gpus=1, retry_exceptions=(), working_directory="/")
    executor.check_resources(options)
    assert executor.get(executor.submit(add, 1, 2, options=options)) == 3


class FakeRay:
    """The part of the ``ray`` module RayExecutor uses, recording what tasks ask for."""

    def __init__(self, nodes: list[dict]) -> None:
        import ray

        self.exceptions = ray.exceptions
        self._nodes = nodes
        self.requests: list[dict] = []
        self.crash = False

    def nodes(self) -> list[dict]:
        return self._nodes

    def cluster_resources(self) -> dict:
        return {"CPU": 4}

    def remote(self, function):  # type: ignore[no-untyped-def]
        fake = self

        class Options:
            def __init__(self, **options) -> None:  # type: ignore[no-untyped-def]
                fake.requests.append(options)

            def remote(self, *arguments):  # type: ignore[no-untyped-def]
                return (function, arguments)

        class Remote:
            options = Options

        return Remote()

    def get(self, handle):  # type: ignore[no-untyped-def]
        if self.crash:
            raise self.exceptions.WorkerCrashedError()
        function, arguments = handle
        return function(*arguments)


def test_ray_tasks_ask_for_their_options_and_run_in_their_folder(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("ray")
    fake = FakeRay([{"Alive": True, "Resources": {"CPU": 2, "GPU": 1}}])
    executor = RayExecutor(fake, max_retries=2)
    assert executor.get(executor.submit(add, 1, 2)) == 3
    no_events = {"enable_task_events": False}
    asked = {"num_cpus": 1.0, "num_gpus": 0.0, "max_retries": 2, "retry_exceptions": [OSError], **no_events}
    assert fake.requests[-1] == asked
    options = TaskOptions(cpus=2, gpus=0.5, retry_exceptions=(), working_directory=str(tmp_path))
    assert executor.get(executor.submit(os.getcwd, options=options)) == str(tmp_path)
    asked = {"num_cpus": 2, "num_gpus": 0.5, "max_retries": 2, "retry_exceptions": False, **no_events}
    assert fake.requests[-1] == asked
    executor.check_resources(options)
    fake.crash = True
    with pytest.raises(TaskFailedError, match="^a task failed after 2 retries: WorkerCrashedError"):
        executor.get(executor.submit(add, 1, 2))


def test_ray_tasks_and_workers_leave_no_task_events_in_the_cluster() -> None:
    """Ray's GCS keeps an event record (≈ 3.6 kB) of every task up to 100,000 tasks: a long render, one task per
    25 images, would grow the GCS by ≈ 350 MB; every task and worker call is submitted with its events off."""
    pytest.importorskip("ray")
    fake = FakeRay([{"Alive": True, "Resources": {"CPU": 2}}])
    executor = RayExecutor(fake)
    executor.submit(add, 1, 2)
    executor.start_workers(int, count=1)
    assert [request["enable_task_events"] for request in fake.requests] == [False, False]


def test_giving_ray_tasks_up_does_not_call_ray_cancel() -> None:
    """With Ray 2.60, ``ray.cancel`` racing a task's completion aborts the driver (RayExecutor.cancel's docstring):
    tasks given up are left to end with the job."""
    pytest.importorskip("ray")
    fake = FakeRay([{"Alive": True, "Resources": {"CPU": 2}}])
    cancelled: list = []
    fake.cancel = lambda handle, **options: cancelled.append(handle)  # type: ignore[attr-defined]
    executor = RayExecutor(fake)
    executor.cancel([executor.submit(add, 1, 2), executor.submit(add, 3, 4)])
    assert cancelled == []


def test_ray_refuses_a_task_no_node_can_hold() -> None:
    pytest.importorskip("ray")
    fake = FakeRay([{"Alive": True, "Resources": {"CPU": 2}}, {"Alive": False, "Resources": {"CPU": 8, "GPU": 8}}])
    message = (
        r"each task asks for 1 CPUs and 1 GPUs, but no node of the Ray cluster has as much "
        r"\(its nodes: 2 CPUs, 0 GPUs\)"
    )
    with pytest.raises(ValueError, match=message):
        RayExecutor(fake).check_resources(TaskOptions(gpus=1))
