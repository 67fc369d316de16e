"""Pillow's resampling pass (:func:`ccc.render_torch._resample.resample_pass`) as one Triton kernel.

Each program computes a block of one output row: for each tap it reads the tap's input row (its index and
integer weight are scalars of the program) and accumulates ``level · weight`` in int32, then rounds, shifts
and clamps as Pillow does. Integer arithmetic: the bytes of the ATen composition on every device. The
input may be any strided (B, L, M, C) view (the transposed planes of the second pass are read in place,
never copied).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from . import launch

__all__ = ["resample_pass"]

_BLOCK = 256


@triton.jit
def _resample_pass_kernel(
    levels,
    index,
    weight,
    output,
    length,
    outputs,
    row_elements,
    channels,
    taps,
    stride_sample,
    stride_line,
    stride_column,
    stride_channel,
    PRECISION_BITS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # sample · outputs + output line
    sample = row // outputs
    elements = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)  # column · channels + channel
    inside = elements < row_elements
    offsets = (elements // channels).to(tl.int64) * stride_column + (elements % channels).to(tl.int64) * stride_channel
    total = tl.zeros([BLOCK], dtype=tl.int32)
    for tap in range(taps):
        line = tl.load(index + row * taps + tap).to(tl.int64) - sample * length
        tap_weight = tl.load(weight + row * taps + tap).to(tl.int32)
        level = tl.load(levels + sample * stride_sample + line * stride_line + offsets, mask=inside, other=0)
        total += level.to(tl.int32) * tap_weight
    total = (total + (1 << (PRECISION_BITS - 1))) >> PRECISION_BITS
    total = tl.minimum(tl.maximum(total, 0), 255)
    tl.store(output + row * row_elements + elements, total.to(tl.uint8), mask=inside)


def resample_pass(levels: Tensor, index: Tensor, weight: Tensor, precision_bits: int) -> Tensor:
    """The kernel's launch: uint8 ``levels`` (B, L, M, C), ``index`` (B, O, T) rows of the (B·L, M·C) view,
    ``weight`` (B, O, T) integer weights with ``precision_bits`` fraction bits → uint8 (B, O, M, C)."""
    batch, length, columns, channels = levels.shape
    outputs, taps = index.shape[1], index.shape[2]
    output = torch.empty((batch, outputs, columns, channels), dtype=torch.uint8, device=levels.device)
    row_elements = columns * channels
    grid = (batch * outputs, triton.cdiv(row_elements, _BLOCK))
    launch(
        _resample_pass_kernel,
        grid,
        levels.device,
        levels,
        index.contiguous(),
        weight.contiguous(),
        output,
        length,
        outputs,
        row_elements,
        channels,
        taps,
        *levels.stride(),
        PRECISION_BITS=precision_bits,
        BLOCK=_BLOCK,
    )
    return output
