"""torch's float dtypes as Triton's types: the kernels' working types, passed to them as constexprs."""

from __future__ import annotations

import torch
import triton.language as tl

__all__ = ["float_type"]

_FLOAT_TYPES = {torch.float32: tl.float32, torch.float64: tl.float64}


def float_type(dtype: torch.dtype) -> tl.dtype:
    """Triton's type of ``dtype``, ``torch.float32`` or ``torch.float64``.

    Raises:
        ValueError: another dtype, one line.
    """
    if dtype not in _FLOAT_TYPES:
        raise ValueError(f"the kernels compute in float32 or float64, got {dtype}")
    return _FLOAT_TYPES[dtype]
