"""Fused Triton kernels of the torch renderer on CUDA, and the rule that chooses them.

The renderer's steps are compositions of ATen operations; on a GPU each one reads and writes whole
images in device memory, so the hottest steps (the resampling passes, OpenCV's filters, the zooms, the
random streams) are written once more here as single Triton kernels that keep their intermediate values
in registers. Each is a torch operator ``ccc::<name>`` (``torch.library.custom_op``) defined by the module
that owns its step, with three implementations:

- the ATen composition, the reference, on every device but CUDA (and on CUDA where :func:`fuses` says no);
- its Triton kernel, from this package, on CUDA where :func:`fuses` says yes;
- a fake one giving the output's shape and dtype (torch's ``meta`` device, tracing).

A kernel computes the same bits as its composition: integer steps are exact on every device, and the
float ones run the composition's IEEE operations in its order, compiled with ``enable_fp_fusion=False``
(no multiply and add contracted into one fused multiply-add, which would round once where the composition
rounds twice); every launch goes through :func:`launch`, which passes it and runs the kernel on its tensors'
device. ``tests/ccc/render_torch/test_triton_*.py`` run every kernel in Triton's interpreter on the
CPU against its composition, bit for bit, and compile it for an H100 (sm_90) to check the PTX and the LLVM IR. The
kernel modules import Triton; this package's ``__init__`` does not, so the renderer imports without it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
from typing import Any

import torch

__all__ = ["FP_FUSION", "KERNELS_VARIABLE", "KERNEL_ARCHITECTURE", "fuses", "kernels_choice", "launch"]

KERNELS_VARIABLE = "CCC_TORCH_KERNELS"
"""Environment variable: ``aten`` runs the ATen compositions on CUDA too (to compare, or where a kernel
fails on a GPU); unset or ``triton``, the Triton kernels."""

FP_FUSION = False
"""``enable_fp_fusion`` of every kernel launch: no contraction of a multiply and an add."""


@functools.cache
def _triton_importable() -> bool:
    return importlib.util.find_spec("triton") is not None


KERNEL_ARCHITECTURE = (8, 0)
"""The oldest NVIDIA compute capability the kernels run on: Triton supports Ampere (8.0) and later, and the
kernels are compiled and checked for NVIDIA's backend (ROCm's devices, also ``cuda`` in torch, keep the
compositions)."""


@functools.cache
def _supported(index: int) -> bool:
    return torch.version.hip is None and torch.cuda.get_device_capability(index) >= KERNEL_ARCHITECTURE


def kernels_choice() -> str:
    """:data:`KERNELS_VARIABLE` of this process: ``triton`` (the default) or ``aten``.

    Raises:
        ValueError: any other value, one line.
    """
    choice = os.environ.get(KERNELS_VARIABLE, "triton")
    if choice not in ("aten", "triton"):
        raise ValueError(f"{KERNELS_VARIABLE}={choice!r}: expected 'aten' or 'triton'")
    return choice


def fuses(device: torch.device) -> bool:
    """Whether the renderer's ``ccc::`` operators run their Triton kernels on ``device``: an NVIDIA GPU of compute
    capability 8.0 or later (:data:`KERNEL_ARCHITECTURE`), with Triton installed, unless :data:`KERNELS_VARIABLE`
    is ``aten``.

    Raises:
        ValueError: :data:`KERNELS_VARIABLE` set to something else than ``aten`` or ``triton``, one line.
    """
    if device.type != "cuda" or kernels_choice() == "aten" or not _triton_importable():
        return False
    return _supported(torch.cuda.current_device() if device.index is None else device.index)


def launch(kernel: Any, grid: tuple[int, ...], device: torch.device, *args: object, **constants: object) -> None:
    """``kernel[grid](*args, **constants)`` on ``device``, with ``enable_fp_fusion=FP_FUSION``.

    Triton launches on the current CUDA device and its current stream, whatever device the tensors are on;
    torch's own operators switch to their tensors' device first, and so does this (a render on ``cuda:1``
    while ``cuda:0`` is current). On other devices (Triton's interpreter on the CPU, in the tests) the
    kernel is called as it is.
    """
    guard = torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
    with guard:
        kernel[grid](*args, **constants, enable_fp_fusion=FP_FUSION)
