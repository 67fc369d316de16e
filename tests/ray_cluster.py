"""A real two-node Ray cluster on this machine (`ray start --head` plus `ray start --address`), for
the slow tests that run generation and evaluation with ``--ray-address``."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TextIO

NODES_UP_SECONDS = 240
"""How long the two nodes may take to register with the head."""
NODE_STARTS = 3
"""How often the second node is started when it exits without registering (a timeout under load)."""


def free_port() -> int:
    """A TCP port of 127.0.0.1 that is free now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def node_arguments() -> list[str]:
    """Ports of one Ray node, chosen free so that two nodes (and other clusters) can share this machine."""
    return [
        "--num-cpus=1",
        "--object-store-memory=80000000",
        "--block",
        "--disable-usage-stats",
        f"--node-manager-port={free_port()}",
        f"--object-manager-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
    ]


def stop_node(process: subprocess.Popen) -> None:
    """Stop a ``ray start --block`` node: SIGTERM its process group, then SIGKILL what is left.

    (A head node whose last worker node is gone can wait up to 30 s "draining"; 5 s of grace is plenty
    for a node with no tasks.)
    """
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=20)


def _start_node(command: list[str], log: TextIO, environment: Mapping[str, str], folder: Path) -> subprocess.Popen:
    """A ``ray start … --block`` node in its own process group, logging to ``log``."""
    return subprocess.Popen(
        [*command, *node_arguments()],
        env=dict(environment),
        cwd=folder,
        start_new_session=True,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _alive_nodes(address: str, environment: Mapping[str, str]) -> str:
    """How many nodes of the cluster at ``address`` are alive, as a driver in a fresh process counts them ("" when
    it cannot connect)."""
    count = (
        f"import ray; ray.init(address='{address}', logging_level='ERROR'); "
        "print(sum(node['Alive'] for node in ray.nodes()))"
    )
    probe = subprocess.run(
        [sys.executable, "-c", count], env=dict(environment), capture_output=True, text=True, timeout=60
    )
    return probe.stdout.strip().splitlines()[-1] if probe.returncode == 0 and probe.stdout.strip() else ""


@contextlib.contextmanager
def two_node_ray_cluster(log_folder: Path, environment: Mapping[str, str]) -> Iterator[str]:
    """Start a head node, then a second node (1 CPU each; the second started again, up to
    :data:`NODE_STARTS` times, when it exits without registering) with ``environment``, wait until both are
    alive and yield the cluster's address ("127.0.0.1:PORT"); both nodes are stopped when the block
    ends. Their logs are ``log_folder``/head.log and node.log. The nodes run in a private, short
    temporary folder: ``ray start`` records the cluster address there instead of in
    /tmp/ray/ray_current_cluster, where a plain ``ray.init()`` elsewhere on this machine would find
    it; and a driver started elsewhere proves that tasks run in the driver's folder."""
    temporary = Path(tempfile.mkdtemp(prefix="ccc-ray-", dir="/tmp"))
    port = free_port()
    address = f"127.0.0.1:{port}"
    nodes: list[subprocess.Popen] = []
    with contextlib.ExitStack() as logs:
        head_log = logs.enter_context(open(log_folder / "head.log", "w"))
        node_log = logs.enter_context(open(log_folder / "node.log", "w"))
        head_command = [
            "ray", "start", "--head", f"--port={port}", "--include-dashboard=false",
            f"--ray-client-server-port={free_port()}", f"--temp-dir={temporary}",
        ]  # fmt: skip
        node_command = ["ray", "start", f"--address={address}", f"--temp-dir={temporary}"]
        try:
            # The head first, then the node: a node started beside a head still starting (or beside another
            # cluster's start on a loaded machine) can time out registering, and is then started again.
            deadline = time.monotonic() + NODES_UP_SECONDS
            nodes.append(_start_node(head_command, head_log, environment, temporary))
            alive = ""
            while time.monotonic() < deadline and alive not in ("1", "2"):
                time.sleep(3)
                alive = _alive_nodes(address, environment)
            starts = 0
            while time.monotonic() < deadline and alive != "2":
                if len(nodes) == 1 or (nodes[-1].poll() is not None and starts < NODE_STARTS):
                    if len(nodes) > 1:
                        stop_node(nodes.pop())  # and whatever it left in its process group
                    node_log.write(f"--- start {starts + 1} of the second node\n")
                    node_log.flush()
                    nodes.append(_start_node(node_command, node_log, environment, temporary))
                    starts += 1
                time.sleep(3)
                alive = _alive_nodes(address, environment)
            assert alive == "2", (
                f"the two-node cluster did not come up; head log: {(log_folder / 'head.log').read_text()[-2000:]}"
                f"; node log: {(log_folder / 'node.log').read_text()[-2000:]}"
            )
            yield address
        finally:
            for node in reversed(nodes):
                stop_node(node)
            shutil.rmtree(temporary, ignore_errors=True)
