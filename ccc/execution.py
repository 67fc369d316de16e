"""Where work runs: in this process or on a Ray cluster, behind one interface (:class:`Executor`).

Generation, calibration (and evaluation) hand their work to an executor; Ray orchestrates and holds
no domain logic. An executor offers a few primitives, the subset of Ray the callers need:

- :meth:`~Executor.submit` a plain function as a task (arguments may be handles of earlier
  results: they arrive as values, without passing through the driver on Ray);
- :meth:`~Executor.start_workers`: stateful workers, each building its state once with
  ``setup(*arguments)`` (e.g. loading a model), then answering :meth:`Worker.submit` calls
  ``function(state, *arguments)``;
- :meth:`~Executor.wait`, :meth:`~Executor.get`, :meth:`~Executor.put`, :meth:`~Executor.cancel`;
- per task, :class:`TaskOptions`: the CPUs and GPUs (fractions allowed) a task asks of the cluster,
  which of its own exceptions are retried (a task whose worker or node dies is always retried, up to
  ``max_retries`` times) and the folder it runs in; :meth:`~Executor.check_resources` refuses,
  before anything runs, a request no node of the cluster can ever satisfy (Ray would wait forever);

and two patterns built on them: :meth:`~Executor.map_ordered` (a pure function over items, results in
item order, a bounded number in flight) and :meth:`~Executor.map_on_workers` (items spread over
stateful workers, results in completion order).

- :class:`SerialExecutor` runs every call at once in this process (tests, ``--workers 1`` / ``0``);
- :class:`RayExecutor` submits Ray tasks and actors to the cluster :func:`ray_session` connected to.

:func:`open_executor` picks one. A task's exception reaches the caller as the original exception
(not Ray's wrapper), so both executors raise the same errors; a task that still fails because its
worker or node died after its retries raises :class:`TaskFailedError`.

Ray sessions: local clusters get token authentication off (``RAY_AUTH_MODE=disabled``, Ray 2.60
otherwise writes ``~/.ray/auth_token``), no dashboard, a capped object store (Ray's default is 30% of
RAM), and a watchdog process (``ccc/_ray_watchdog.py``, Linux) that ends the cluster's processes when
the command ends, even when it is killed with SIGKILL.

Every task and worker call is submitted with Ray's task events off (``enable_task_events=False``, a
per-task option, so on an existing cluster too): Ray's GCS otherwise keeps an event record of each task,
about 3.6 kB, up to ``RAY_task_events_max_num_task_in_gcs`` tasks (100,000), which grew a long render's GCS
by 0.14 kB per image (one task per 25 images) up to ~350 MB. The cost: these tasks do not appear in the
dashboard's task list or ``ray list tasks``.

An address is probed before Ray is asked to join it: Ray itself retries a dead address, or one where
something else listens, for minutes, printing warnings. The probe opens a TCP connection, then a
gRPC channel (Ray's protocol: the HTTP/2 handshake must complete), within
``$CCC_RAY_CONNECT_TIMEOUT`` seconds (default 30) in all, else fails with one line naming the address.

To add an execution backend (e.g. a process pool), implement the primitives of :class:`Executor`
in a subclass here; the callers and the two patterns need no change.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccc.validation import check_non_negative, check_non_negative_int, check_positive, check_positive_int

__all__ = [
    "DEFAULT_TASK_OPTIONS",
    "Executor",
    "RayExecutor",
    "RayUnavailableError",
    "SerialExecutor",
    "TaskFailedError",
    "TaskOptions",
    "Worker",
    "connect_timeout_seconds",
    "open_executor",
    "probe_ray_address",
    "ray_session",
]

logger = logging.getLogger(__name__)

DEFAULT_OBJECT_STORE_BYTES = 512 * 2**20
"""Object store size for a local cluster started by a command (shards and images are small)."""

CONNECT_TIMEOUT_VARIABLE = "CCC_RAY_CONNECT_TIMEOUT"
DEFAULT_CONNECT_TIMEOUT_SECONDS = 30.0
DEFAULT_RAY_PORT = 6379
DEFAULT_RAY_CLIENT_PORT = 10001


class RayUnavailableError(RuntimeError):
    """Ray is not installed or the cluster cannot be reached."""


class TaskFailedError(RuntimeError):
    """A task failed for a reason outside its own code (its worker or node died) after its retries."""


@dataclass(frozen=True)
class TaskOptions:
    """What one task asks of the cluster, which of its own exceptions are worth a retry, where it runs.

    Attributes:
        cpus: CPUs the task holds while it runs, > 0 (fractions allowed).
        gpus: GPUs, >= 0: a fraction in (0, 1] shares a GPU between tasks, larger values must be whole.
        retry_exceptions: exception types raised by the task that are retried like a dead worker
            (e.g. ``OSError`` for a flaky disk); others reach the caller at once. Empty: only
            infrastructure failures (a dead worker or node) are retried.
        working_directory: the folder the task runs in, e.g. the driver's, so that relative paths in
            its arguments mean what they mean to the driver (the folder must exist at that path on
            every node); None: wherever the worker process runs.
    """

    cpus: float = 1.0
    gpus: float = 0.0
    retry_exceptions: tuple[type[Exception], ...] = (OSError,)
    working_directory: str | None = None

    def __post_init__(self) -> None:
        check_positive("cpus", self.cpus)
        check_non_negative("gpus", self.gpus)
        if self.gpus > 1 and self.gpus != int(self.gpus):
            raise ValueError(f"gpus must be a fraction in (0, 1] or a whole number, got {self.gpus:g}")


DEFAULT_TASK_OPTIONS = TaskOptions()
"""One CPU, no GPU, ``OSError`` retried, the worker's folder: what :meth:`Executor.submit` asks by default."""


def _call_in(directory: str, function: Callable[..., Any], *arguments: Any) -> Any:
    """``function(*arguments)`` in the folder ``directory`` (the body of a task with a working directory)."""
    os.chdir(directory)
    return function(*arguments)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as error:
        raise RayUnavailableError("Ray is not installed: pip install 'ray[default]'") from error
    return ray


@contextlib.contextmanager
def ray_session(
    workers: int | None = None, address: str | None = None, object_store_bytes: int = DEFAULT_OBJECT_STORE_BYTES
) -> Iterator[Any]:
    """Yield the ``ray`` module connected to a cluster, shut down on exit if this call started it.

    Args:
        workers: CPUs of a local cluster started here, in [1, this machine's CPUs] (default: all);
            ignored with ``address``.
        address: an existing cluster (``"auto"``, ``"host:port"`` or ``"ray://host:port"``); None
            starts a local one. An already initialised Ray is reused as it is.
        object_store_bytes: object store cap of a local cluster started here.

    Raises:
        RayUnavailableError: Ray missing, the address cannot be reached (message names it), or
            ``workers`` outside [1, this machine's CPUs] for a local cluster (Ray would start that
            many worker slots; checked before Ray starts).
    """
    ray = _import_ray()
    if ray.is_initialized():
        yield ray
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    watchdog: subprocess.Popen[bytes] | None = None
    if address is None and workers is not None:
        _check_local_workers(workers)
    try:
        if address is None:
            # address="local": always start a new cluster, never attach to one a `ray start` left
            # recorded in /tmp/ray (Ray would then refuse num_cpus).
            context = ray.init(
                address="local",
                num_cpus=workers,
                include_dashboard=False,
                object_store_memory=object_store_bytes,
                logging_level=logging.WARNING,
            )
            watchdog = _start_watchdog(context.address_info.get("session_dir"))
        else:
            probe_ray_address(address, connect_timeout_seconds())
            ray.init(address=address, logging_level=logging.WARNING)
    except RayUnavailableError:
        raise
    except (ConnectionError, RuntimeError, ValueError) as error:
        target = f"the Ray cluster at {address}" if address else "a local Ray cluster"
        raise RayUnavailableError(f"could not start or reach {target}: {error}") from error
    logger.info("Ray: %s CPUs available", ray.cluster_resources().get("CPU", 0))
    try:
        yield ray
    finally:
        ray.shutdown()
        if watchdog is not None:
            watchdog.stdin.close()  # type: ignore[union-attr]
            watchdog.wait()


def _check_local_workers(workers: int) -> None:
    """RayUnavailableError unless ``workers`` is in [1, this machine's CPUs] (the bound of every
    command's ``--workers`` for a local cluster)."""
    cpus = os.cpu_count() or 1
    if not 1 <= workers <= cpus:
        raise RayUnavailableError(
            f"--workers must be in [1, {cpus}] for a local Ray cluster (this machine's CPUs), got {workers}; "
            "use --ray-address for a cluster with more"
        )


def connect_timeout_seconds() -> float:
    """Seconds to wait for a Ray address to answer: ``$CCC_RAY_CONNECT_TIMEOUT`` or 30.

    Raises RayUnavailableError for a value that is not a positive number.
    """
    text = os.environ.get(CONNECT_TIMEOUT_VARIABLE, "")
    if not text:
        return DEFAULT_CONNECT_TIMEOUT_SECONDS
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise RayUnavailableError(f"{CONNECT_TIMEOUT_VARIABLE} must be a positive number of seconds, got {text!r}")
    return value


def _address_endpoint(address: str) -> tuple[str, int] | None:
    """(host, port) that ``address`` ("auto", "host:port", "ray://host:port") connects to; None for
    "auto" without a recorded cluster (Ray then fails at once by itself)."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "")
        if not address:
            try:
                address = Path(tempfile.gettempdir(), "ray", "ray_current_cluster").read_text().strip()
            except OSError:
                return None
        if not address or address == "auto":
            return None
    default_port = DEFAULT_RAY_CLIENT_PORT if address.startswith("ray://") else DEFAULT_RAY_PORT
    parsed = urllib.parse.urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        port = parsed.port or default_port
    except ValueError:
        raise RayUnavailableError(
            f"--ray-address must look like auto, host:port or ray://host:port, got {address!r}"
        ) from None
    if not parsed.hostname:
        raise RayUnavailableError(f"--ray-address must look like auto, host:port or ray://host:port, got {address!r}")
    return parsed.hostname, port


def probe_ray_address(address: str, timeout_seconds: float) -> None:
    """Check within ``timeout_seconds`` in all that a gRPC server (Ray's GCS or client server)
    answers at the Ray ``address``: a TCP connection, then a completed HTTP/2 handshake (skipped
    when ``RAY_USE_TLS`` is set).

    Raises RayUnavailableError naming the address (refused, unknown host, no answer in time, or a
    server that accepts connections but does not speak gRPC).
    """
    endpoint = _address_endpoint(address)
    if endpoint is None:
        return
    deadline = time.monotonic() + timeout_seconds
    wait_longer = f"set {CONNECT_TIMEOUT_VARIABLE} to wait longer"
    try:
        with socket.create_connection(endpoint, timeout=timeout_seconds):
            reason = None
    except TimeoutError:
        reason = f"no answer within {timeout_seconds:g} s ({wait_longer})"
    except OSError as error:
        reason = error.strerror or str(error)
    if reason is None and not _tls_enabled() and not _grpc_answers(endpoint, deadline - time.monotonic()):
        reason = (
            f"it accepts connections but does not answer as a Ray cluster within {timeout_seconds:g} s ({wait_longer})"
        )
    if reason is not None:
        raise RayUnavailableError(f"cannot reach the Ray cluster at {address} ({endpoint[0]}:{endpoint[1]}): {reason}")


def _tls_enabled() -> bool:
    return os.environ.get("RAY_USE_TLS", "0").strip().lower() not in ("", "0", "false")


def _grpc_answers(endpoint: tuple[str, int], timeout_seconds: float) -> bool:
    """Whether a gRPC (HTTP/2) channel to ``endpoint`` becomes ready within ``timeout_seconds``."""
    import grpc  # a dependency of Ray

    host, port = endpoint
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    channel = grpc.insecure_channel(target)
    try:
        grpc.channel_ready_future(channel).result(timeout=max(timeout_seconds, 0.1))
    except grpc.FutureTimeoutError:
        return False
    finally:
        channel.close()
    return True


def _start_watchdog(session_dir: str | None) -> subprocess.Popen[bytes] | None:
    """Start ``ccc/_ray_watchdog.py`` for the local cluster of ``session_dir`` (Linux only)."""
    if session_dir is None or not Path("/proc/self/stat").exists():
        logger.debug("no watchdog for the local Ray cluster (no session folder or no /proc)")
        return None
    script = Path(__file__).with_name("_ray_watchdog.py")
    return subprocess.Popen(
        [sys.executable, str(script), str(os.getpid()), session_dir], stdin=subprocess.PIPE, start_new_session=True
    )


_END = object()  # sentinel of an exhausted item iterator


class Worker(abc.ABC):
    """A stateful worker of an executor (see :meth:`Executor.start_workers`)."""

    @abc.abstractmethod
    def submit(self, function: Callable[..., Any], *arguments: Any) -> Any:
        """Start ``function(state, *arguments)`` on this worker; returns a handle of its result."""
        raise NotImplementedError


class Executor(abc.ABC):
    """Runs plain functions as tasks and on stateful workers; see the module docstring.

    Handles are opaque: pass them to :meth:`get`, :meth:`wait`, :meth:`cancel`, or as arguments of
    later calls (where they arrive as the values they stand for).

    Attributes:
        distributed: whether calls run in other processes (then functions and arguments are pickled).
        max_in_flight: default bound of calls submitted by :meth:`map_ordered` but not yet consumed.
    """

    distributed: bool = False
    max_in_flight: int = 1

    @property
    @abc.abstractmethod
    def cpus(self) -> int:
        """CPUs calls can run on at once."""
        raise NotImplementedError

    @property
    @abc.abstractmethod
    def gpus(self) -> int:
        """GPUs available to workers."""
        raise NotImplementedError

    @abc.abstractmethod
    def put(self, value: Any) -> Any:
        """A handle of ``value``, to send it once to many calls."""
        raise NotImplementedError

    @abc.abstractmethod
    def submit(self, function: Callable[..., Any], *arguments: Any, options: TaskOptions = DEFAULT_TASK_OPTIONS) -> Any:
        """Start ``function(*arguments)`` as a task with ``options`` (default: one CPU); returns a
        handle of its result."""
        raise NotImplementedError

    def check_resources(self, options: TaskOptions) -> None:
        """Raise ValueError when no node could ever run a task with ``options`` (nothing to check
        here: an executor running in this process uses what the machine has)."""

    @abc.abstractmethod
    def start_workers(self, setup: Callable[..., Any], *arguments: Any, count: int, gpus: int = 0) -> list[Worker]:
        """``count`` (>= 1) workers, each holding ``setup(*arguments)``; each takes one CPU and ``gpus`` GPUs."""
        raise NotImplementedError

    @abc.abstractmethod
    def wait(self, handles: Sequence[Any]) -> list[Any]:
        """Those of ``handles`` that are finished: at least one, unless about a second passed
        (a finite wait keeps the caller responsive to Ctrl-C)."""
        raise NotImplementedError

    @abc.abstractmethod
    def get(self, handle: Any) -> Any:
        """The result behind ``handle``; a failed call raises its original exception."""
        raise NotImplementedError

    def cancel(self, handles: Iterable[Any]) -> None:
        """Give up the calls behind ``handles`` (results not needed any more)."""

    def map_ordered(
        self,
        function: Callable[[Any, Any], Any],
        shared: Any,
        items: Iterable[Any],
        max_in_flight: int | None = None,
        options: TaskOptions = DEFAULT_TASK_OPTIONS,
    ) -> Iterator[Any]:
        """Yield ``function(shared, item)`` for each item, in item order; ``shared`` is sent once.

        ``items`` is consumed lazily; at most ``max_in_flight`` (>= 1, default :attr:`max_in_flight`)
        calls are submitted but not yet yielded, which bounds memory. Each call is a task with
        ``options`` (e.g. one GPU each). Closing the iterator gives up the calls still running (:meth:`cancel`).
        """
        limit = self.max_in_flight if max_in_flight is None else max_in_flight
        check_positive_int("max_in_flight", limit)
        shared_handle = self.put(shared)
        remaining = iter(items)
        pending: dict[Any, int] = {}
        finished: dict[int, Any] = {}
        submitted = yielded = 0
        exhausted = False
        try:
            while True:
                while not exhausted and len(pending) + len(finished) < limit:
                    item = next(remaining, _END)
                    if item is _END:
                        exhausted = True
                        break
                    pending[self.submit(function, shared_handle, item, options=options)] = submitted
                    submitted += 1
                if yielded in finished:
                    yield finished.pop(yielded)
                    yielded += 1
                    continue
                if not pending:
                    return
                for handle in self.wait(list(pending)):
                    finished[pending.pop(handle)] = self.get(handle)
        finally:
            self.cancel(pending)

    def map_on_workers(
        self, workers: Sequence[Worker], function: Callable[[Any, Any], Any], items: Iterable[Any], per_worker: int = 2
    ) -> Iterator[Any]:
        """Yield ``function(state, item)`` for each item, computed on ``workers``, in completion order.

        Each worker holds up to ``per_worker`` (>= 1) items (one running, the others queued) and is
        given the next item as soon as one of its items finishes.
        """
        check_positive_int("per_worker", per_worker)
        remaining = iter(items)
        in_flight: dict[Any, Worker] = {}

        def feed(worker: Worker) -> None:
            item = next(remaining, _END)
            if item is not _END:
                in_flight[worker.submit(function, item)] = worker

        for worker in workers:
            for _ in range(per_worker):
                feed(worker)
        while in_flight:
            for handle in self.wait(list(in_flight)):
                worker = in_flight.pop(handle)
                result = self.get(handle)
                feed(worker)
                yield result


class _Done:
    """Serial handle: the outcome of a call already made."""

    __slots__ = ("error", "value")

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value = value
        self.error = error


def _serial_call(function: Callable[..., Any], arguments: tuple[Any, ...]) -> _Done:
    values = [argument.value if isinstance(argument, _Done) else argument for argument in arguments]
    for argument in arguments:
        if isinstance(argument, _Done) and argument.error is not None:
            return argument
    try:
        return _Done(function(*values))
    except Exception as error:  # re-raised by SerialExecutor.get, as Ray re-raises a task's error
        return _Done(error=error)


class _SerialWorker(Worker):
    def __init__(self, state: Any) -> None:
        self._state = state

    def submit(self, function: Callable[..., Any], *arguments: Any) -> _Done:
        return _serial_call(function, (self._state, *arguments))


class SerialExecutor(Executor):
    """Runs every call at once, in this process, when it is submitted (one call in flight by default)."""

    @property
    def cpus(self) -> int:
        """1: one call at a time."""
        return 1

    @property
    def gpus(self) -> int:
        """0: workers run in this process, on whatever device they choose."""
        return 0

    def put(self, value: Any) -> _Done:
        """A handle of ``value``."""
        return _Done(value)

    def submit(
        self, function: Callable[..., Any], *arguments: Any, options: TaskOptions = DEFAULT_TASK_OPTIONS
    ) -> _Done:
        """Call ``function(*arguments)`` now, in this process's folder (``options`` reserve nothing); its
        exception is kept for :meth:`get`."""
        return _serial_call(function, arguments)

    def start_workers(self, setup: Callable[..., Any], *arguments: Any, count: int, gpus: int = 0) -> list[Worker]:
        """``count`` workers built in this process (``gpus`` is not checked)."""
        check_positive_int("count", count)
        workers: list[Worker] = []
        for _ in range(count):
            state = _serial_call(setup, arguments)
            if state.error is not None:
                raise state.error
            workers.append(_SerialWorker(state.value))
        return workers

    def wait(self, handles: Sequence[Any]) -> list[Any]:
        """The first handle (every call is already finished)."""
        return list(handles[:1])

    def get(self, handle: Any) -> Any:
        """The value behind ``handle``, or its call's exception raised."""
        if handle.error is not None:
            raise handle.error
        return handle.value


class _RayWorkerState:
    """Ray actor of a :class:`RayExecutor` worker: ``setup(*arguments)`` once, then calls on it."""

    def __init__(self, setup: Callable[..., Any], *arguments: Any) -> None:
        self.state = setup(*arguments)

    def call(self, function: Callable[..., Any], *arguments: Any) -> Any:
        return function(self.state, *arguments)


class _RayWorker(Worker):
    def __init__(self, actor: Any) -> None:
        self._actor = actor

    def submit(self, function: Callable[..., Any], *arguments: Any) -> Any:
        return self._actor.call.remote(function, *arguments)


class RayExecutor(Executor):
    """Ray tasks and actors on the cluster ``ray`` is connected to (see :func:`ray_session`).

    Args:
        ray: the connected ``ray`` module.
        max_in_flight: default of :meth:`map_ordered`, >= 1 (default: twice the cluster's CPUs).
        max_retries: retries of a task whose worker died or that raised ``OSError``, >= 0.
    """

    distributed = True

    def __init__(self, ray: Any, max_in_flight: int | None = None, max_retries: int = 3) -> None:
        if max_in_flight is not None:
            check_positive_int("max_in_flight", max_in_flight)
        check_non_negative_int("max_retries", max_retries)
        self._ray = ray
        self.max_retries = max_retries
        self.max_in_flight = max_in_flight or max(2, 2 * self.cpus)
        self._remote_functions: dict[Any, Any] = {}

    @property
    def cpus(self) -> int:
        """The cluster's CPUs."""
        return int(self._ray.cluster_resources().get("CPU", 1))

    @property
    def gpus(self) -> int:
        """The cluster's GPUs."""
        return int(self._ray.cluster_resources().get("GPU", 0))

    def put(self, value: Any) -> Any:
        """``ray.put(value)``."""
        return self._ray.put(value)

    def submit(self, function: Callable[..., Any], *arguments: Any, options: TaskOptions = DEFAULT_TASK_OPTIONS) -> Any:
        """One Ray task with ``options``, retried up to ``max_retries`` times on a dead worker or node
        and on the task's ``options.retry_exceptions``; without task events (see the module docstring)."""
        if options.working_directory is not None:
            function, arguments = _call_in, (options.working_directory, function, *arguments)
        remote = self._remote_functions.get(function)
        if remote is None:
            remote = self._ray.remote(function)
            self._remote_functions[function] = remote
        retried = list(options.retry_exceptions) or False
        task = remote.options(
            num_cpus=options.cpus,
            num_gpus=options.gpus,
            max_retries=self.max_retries,
            retry_exceptions=retried,
            enable_task_events=False,
        )
        return task.remote(*arguments)

    def check_resources(self, options: TaskOptions) -> None:
        """Raise ValueError naming the request and the nodes when no alive node has ``options.cpus``
        CPUs and ``options.gpus`` GPUs (Ray would keep such a task waiting forever)."""
        nodes = [node.get("Resources", {}) for node in self._ray.nodes() if node.get("Alive")]
        if any(node.get("CPU", 0) >= options.cpus and node.get("GPU", 0) >= options.gpus for node in nodes):
            return
        have = (
            "; ".join(f"{node.get('CPU', 0):g} CPUs, {node.get('GPU', 0):g} GPUs" for node in nodes) or "no alive node"
        )
        raise ValueError(
            f"each task asks for {options.cpus:g} CPUs and {options.gpus:g} GPUs, "
            f"but no node of the Ray cluster has as much (its nodes: {have})"
        )

    def start_workers(self, setup: Callable[..., Any], *arguments: Any, count: int, gpus: int = 0) -> list[Worker]:
        """``count`` Ray actors (one CPU and ``gpus`` GPUs each) whose calls record no task events."""
        check_positive_int("count", count)
        actor_class = self._ray.remote(_RayWorkerState).options(num_cpus=1, num_gpus=gpus, enable_task_events=False)
        return [_RayWorker(actor_class.remote(setup, *arguments)) for _ in range(count)]

    def wait(self, handles: Sequence[Any]) -> list[Any]:
        """``ray.wait`` for one handle, at most one second."""
        ready, _ = self._ray.wait(list(handles), num_returns=1, timeout=1.0)
        return ready

    def get(self, handle: Any) -> Any:
        """``ray.get``, re-raising a task's own exception; TaskFailedError when its worker or node
        died (or was killed for memory) more often than it was retried."""
        exceptions = self._ray.exceptions
        try:
            return self._ray.get(handle)
        except exceptions.RayTaskError as error:
            cause = getattr(error, "cause", None)
            if isinstance(cause, Exception):
                raise cause from error
            raise
        except (
            exceptions.WorkerCrashedError,
            exceptions.NodeDiedError,
            exceptions.ObjectLostError,
            exceptions.OutOfMemoryError,
        ) as error:
            reason = " ".join(str(error).split())
            raise TaskFailedError(
                f"a task failed after {self.max_retries} retries: {type(error).__name__}: {reason}"
            ) from error

    def cancel(self, handles: Iterable[Any]) -> None:
        """Give up the tasks behind ``handles``: their results are dropped unread, and the tasks run to their
        end, or until Ray ends them with the job (the local cluster's shutdown, or the driver's exit on a
        cluster, which every command reaches right after giving tasks up).

        ``ray.cancel`` is not called: with Ray 2.60 a cancel that races the task's completion aborts the
        driver (``Check failed: it != submissible_tasks_.end()`` in ``TaskManager::CompletePendingTask``: the
        cancel fails the task while its reply is being handled). Measured with a loop of ``map_ordered`` calls
        whose fourth of 12 tiny tasks fails, on a local cluster of 2 CPUs: with ``ray.cancel`` the driver
        aborted within seconds in each of 3 runs; without it, 30 s and 60 s ran (over 4,000 and 8,000 failed
        calls). It had aborted the test suite's worker once in four runs.
        """


@contextlib.contextmanager
def open_executor(
    workers: int | None = None,
    address: str | None = None,
    *,
    serial: bool = False,
    object_store_bytes: int = DEFAULT_OBJECT_STORE_BYTES,
) -> Iterator[Executor]:
    """Yield a :class:`SerialExecutor` (``serial``) or a :class:`RayExecutor` in a :func:`ray_session`.

    Args:
        workers: CPUs of a local cluster started here (default: all); ignored with ``address``.
        address: an existing Ray cluster; None starts a local one.
        serial: run in this process without Ray (``workers`` and ``address`` are then ignored).
        object_store_bytes: object store cap of a local cluster started here.

    Raises:
        RayUnavailableError: Ray missing, or the address cannot be reached.
    """
    if serial:
        yield SerialExecutor()
        return
    with ray_session(workers, address, object_store_bytes) as ray:
        yield RayExecutor(ray)
