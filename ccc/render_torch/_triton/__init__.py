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
rounds twice). ``tests/ccc/render_torch/test_triton.py`` runs every kernel in Triton's interpreter on the
CPU against its composition, bit for bit, and compiles it for an H100 (sm_90) to check the PTX. The
kernel modules import Triton; this package's ``__init__`` does not, so the renderer imports without it.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import torch

__all__ = ["KERNELS_VARIABLE", "FP_FUSION", "fuses"]

KERNELS_VARIABLE = "CCC_TORCH_KERNELS"
"""Environment variable: ``aten`` runs the ATen compositions on CUDA too (to compare, or where a kernel
fails on a GPU); unset or ``triton``, the Triton kernels."""

FP_FUSION = False
"""``enable_fp_fusion`` of every kernel launch: no contraction of a multiply and an add."""


@functools.cache
def _triton_importable() -> bool:
    return importlib.util.find_spec("triton") is not None


def fuses(device: torch.device) -> bool:
    """Whether the renderer's ``ccc::`` operators run their Triton kernels on ``device``: a CUDA device, with
    Triton installed, unless :data:`KERNELS_VARIABLE` is ``aten``.

    Raises:
        ValueError: :data:`KERNELS_VARIABLE` set to something else than ``aten`` or ``triton``, one line.
    """
    choice = os.environ.get(KERNELS_VARIABLE, "triton")
    if choice not in ("aten", "triton"):
        raise ValueError(f"{KERNELS_VARIABLE}={choice!r}: expected 'aten' or 'triton'")
    return device.type == "cuda" and choice == "triton" and _triton_importable()
