"""Starting and stopping Ray the same way for every command (generation, calibration).

Ray orchestrates; it owns no logic. Commands call :func:`ray_session` with ``--workers`` and
``--ray-address`` and submit plain functions. Local clusters get: token authentication off
(``RAY_AUTH_MODE=disabled``, Ray 2.60 otherwise writes ``~/.ray/auth_token``), no dashboard, a
capped object store (Ray's default is 30% of RAM), and a watchdog process (``ccc/_ray_watchdog.py``,
Linux) that ends the cluster's processes when the command ends, even when it is killed with SIGKILL.

An address is probed before Ray is asked to join it: Ray itself retries a dead address, or one where
something else listens, for minutes, printing warnings. The probe opens a TCP connection, then a
gRPC channel (Ray's protocol: the HTTP/2 handshake must complete), within
``$CCC_RAY_CONNECT_TIMEOUT`` seconds (default 30) in all, else fails with one line naming the address.
"""

from __future__ import annotations

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
from pathlib import Path
from typing import Any, Iterator

logger = logging.getLogger(__name__)

DEFAULT_OBJECT_STORE_BYTES = 512 * 2**20
"""Object store size for a local cluster started by a command (shards and images are small)."""

CONNECT_TIMEOUT_VARIABLE = "CCC_RAY_CONNECT_TIMEOUT"
DEFAULT_CONNECT_TIMEOUT_SECONDS = 30.0
DEFAULT_RAY_PORT = 6379
DEFAULT_RAY_CLIENT_PORT = 10001


class RayUnavailableError(RuntimeError):
    """Ray is not installed or the cluster cannot be reached."""


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as error:
        raise RayUnavailableError("Ray is not installed: pip install 'ray[default]'") from error
    return ray


@contextlib.contextmanager
def ray_session(workers: int | None = None, address: str | None = None, object_store_bytes: int = DEFAULT_OBJECT_STORE_BYTES) -> Iterator[Any]:
    """Yield the ``ray`` module connected to a cluster, shut down on exit if this call started it.

    Args:
        workers: CPUs of a local cluster started here (default: all); ignored with ``address``.
        address: an existing cluster (``"auto"``, ``"host:port"`` or ``"ray://host:port"``); None
            starts a local one. An already initialised Ray is reused as it is.
        object_store_bytes: object store cap of a local cluster started here.

    Raises:
        RayUnavailableError: Ray missing, or the address cannot be reached (message names it).
    """
    ray = _import_ray()
    if ray.is_initialized():
        yield ray
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    watchdog: subprocess.Popen[bytes] | None = None
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
        raise RayUnavailableError(f"--ray-address must look like auto, host:port or ray://host:port, got {address!r}") from None
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
        reason = f"it accepts connections but does not answer as a Ray cluster within {timeout_seconds:g} s ({wait_longer})"
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
