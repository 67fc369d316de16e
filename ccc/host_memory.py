"""How the C allocator treats the large, short-lived buffers of tensor work on the CPU.

glibc's ``malloc`` serves a request above its mmap threshold (128 KiB at start, raised as large blocks
are freed, at most 32 MiB) with fresh pages from ``mmap`` and unmaps them on ``free``; freed heap memory
past its trim threshold (128 KiB) goes back to the kernel too. A network's activations on a batch
(tens of MB, allocated and freed on every batch) then pay page faults and the kernel's zeroing of every
page on every batch. Measured on the README's 224×224 demo evaluation (``tta-eval run`` on the 30,000-image
demo stream, 2 cores): 314 of 1,386 CPU seconds in the kernel; with the thresholds below, 455 s
wall and 8 s in the kernel. ``scripts/bench/host_memory.py`` (3,200 images, the demo's five methods):
72.8 s against 87.2 s, 2.9× fewer page faults, peak memory +8 % (``BENCHMARKS.md``, "Host memory").
Records are unchanged: only where memory comes from changes.

:func:`reuse_freed_memory` sets them for this process (``mallopt``) and, through the environment, for
the processes it starts (a local Ray cluster's workers, DataLoader workers); thresholds a user set in
the environment (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``) are kept. Every console
script calls it (``ccc.cli.common.run_command``). Elsewhere than glibc (macOS, musl, an allocator
loaded with ``LD_PRELOAD``) it changes nothing that matters.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

__all__ = ["ALLOCATOR_ENVIRONMENT", "MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "reuse_freed_memory"]

MMAP_THRESHOLD_BYTES = 32 * 2**20
"""Requests above this many bytes are mmap'd (glibc's largest dynamic threshold, fixed here)."""

TRIM_THRESHOLD_BYTES = 2**30
"""Freed memory at the top of the heap is returned to the kernel past this many bytes."""

ALLOCATOR_ENVIRONMENT = {
    "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD_BYTES),
    "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD_BYTES),
}
"""The same settings as glibc reads them from the environment when a process starts."""

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MALLOPT_PARAMETERS = {"MALLOC_TRIM_THRESHOLD_": _M_TRIM_THRESHOLD, "MALLOC_MMAP_THRESHOLD_": _M_MMAP_THRESHOLD}


def reuse_freed_memory() -> bool:
    """Keep freed tensor buffers in this process and in the processes it starts (see the module
    docstring); True when glibc's ``mallopt`` took both settings here, False elsewhere (nothing
    changed then but the environment). A variable already in the environment is the user's choice:
    neither overwritten nor applied here (glibc read it when this process started)."""
    for name, value in ALLOCATOR_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    library = ctypes.util.find_library("c")
    if library is None:
        return False
    mallopt = ctypes.CDLL(library).mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    applied = True
    for name, parameter in _MALLOPT_PARAMETERS.items():
        if os.environ[name] == ALLOCATOR_ENVIRONMENT[name]:
            applied = bool(mallopt(parameter, int(ALLOCATOR_ENVIRONMENT[name]))) and applied
    return applied
