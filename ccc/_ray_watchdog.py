"""Watchdog of a local Ray cluster: ends the cluster's processes when the command that started it ends.

Run by :func:`ccc.execution.ray_session` as ``python _ray_watchdog.py DRIVER_PID SESSION_DIR`` with
a pipe on standard input whose other end only the driver holds. While the driver lives, the watchdog
notes once a second the cluster's processes: the driver's descendants whose command line names the
cluster's session folder (GCS, raylet, dashboard, log monitor) and every process below those (agents,
workers); other children of the driver are never touched. When the pipe reaches end
of file — the driver exited or was killed, even with SIGKILL — it sends SIGTERM to every noted
process still alive (same pid and start time) and to their descendants, then SIGKILL after a grace
period. Ray's own fate sharing stops the GCS and raylet, but its agents otherwise outlive a killed
driver by a minute or more.

Standalone on purpose (standard library only, Linux ``/proc``): it must start fast and must not
import the package it guards.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

POLL_SECONDS = 1.0
GRACE_SECONDS = 2.0


def _processes() -> dict[int, tuple[int, str]]:
    """pid → (parent pid, start time) of every process visible in /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                text = handle.read().decode("utf-8", "replace")
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        table[int(entry)] = (int(fields[1]), fields[19])
    return table


def _descendants(roots: set[int], table: dict[int, tuple[int, str]]) -> set[int]:
    found: set[int] = set()
    frontier = set(roots)
    while frontier:
        children = {pid for pid, (parent, _) in table.items() if parent in frontier and pid not in found}
        found |= children
        frontier = children
    return found


def _signal_all(noted: dict[int, str], signal_number: int) -> int:
    """Send ``signal_number`` to the noted processes still alive and to their descendants; how many."""
    table = _processes()
    alive = {pid for pid, start in noted.items() if table.get(pid, (0, ""))[1] == start}
    targets = alive | _descendants(alive, table)
    for pid in targets:
        try:
            os.kill(pid, signal_number)
        except (ProcessLookupError, PermissionError):
            continue
    return len(targets)


def _names_session(pid: int, session_dir: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return session_dir in handle.read()
    except OSError:
        return False


def watch(driver_pid: int, session_dir: str) -> None:
    """Note the cluster's processes until standard input closes, then end those still running."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the driver; this process follows it
    marker = session_dir.encode()
    noted: dict[int, str] = {}
    while True:
        table = _processes()
        # This process names the session folder too (its argument): never note it.
        below = _descendants({driver_pid}, table) - {os.getpid()}
        roots = {pid for pid in below if pid in noted or _names_session(pid, marker)}
        for pid in roots | _descendants(roots, table):
            noted.setdefault(pid, table[pid][1])
        readable, _, _ = select.select([sys.stdin], [], [], POLL_SECONDS)
        if readable and not os.read(sys.stdin.fileno(), 4096):
            break
    if _signal_all(noted, signal.SIGTERM):
        deadline = time.monotonic() + GRACE_SECONDS
        while time.monotonic() < deadline and _signal_all(noted, 0):
            time.sleep(0.1)
        _signal_all(noted, signal.SIGKILL)


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.argv[2])
