"""Starting and stopping Ray the same way for every command (generation, calibration).

Ray orchestrates; it owns no logic. Commands call :func:`ray_session` with ``--workers`` and
``--ray-address`` and submit plain functions. Local clusters get: token authentication off
(``RAY_AUTH_MODE=disabled``, Ray 2.60 otherwise writes ``~/.ray/auth_token``), no dashboard, and a
capped object store (Ray's default is 30% of RAM).
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Iterator

logger = logging.getLogger(__name__)

DEFAULT_OBJECT_STORE_BYTES = 512 * 2**20
"""Object store size for a local cluster started by a command (shards and images are small)."""


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
    try:
        if address is None:
            # address="local": always start a new cluster, never attach to one a `ray start` left
            # recorded in /tmp/ray (Ray would then refuse num_cpus).
            ray.init(
                address="local",
                num_cpus=workers,
                include_dashboard=False,
                object_store_memory=object_store_bytes,
                logging_level=logging.WARNING,
            )
        else:
            ray.init(address=address, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as error:
        target = f"the Ray cluster at {address}" if address else "a local Ray cluster"
        raise RayUnavailableError(f"could not start or reach {target}: {error}") from error
    logger.info("Ray: %s CPUs available", ray.cluster_resources().get("CPU", 0))
    try:
        yield ray
    finally:
        ray.shutdown()
