"""OpenCV's float64 separable filter of byte levels (:func:`ccc.render_torch.numerics.separable_opencv_levels`)
as two Triton kernels: the row pass and the symmetric column pass.

- :func:`opencv_rows_from_levels`: each program computes a block of one (sample, channel) plane, elements in
  row-major order. For each tap it reads the level of the tap's column (clamped into the row: the replicated
  border, no padded copy), looks up the tap's product and minus its rounding error in the sample's tables,
  and adds them to the running total with :class:`~ccc.render_torch.numerics._FusedMultiplyAdd`'s eight
  float64 operations in their order (the first tap: its product alone).
- :func:`opencv_symmetric_columns`: each program computes a block of one plane of the rows: the centre row
  times the centre weight, then per offset the rows below and above (clamped into the plane: the replicated
  border) added, multiplied by the offset's weight and added to the total, offsets in increasing order.

Every float operation rounds once, in the composition's order: the launches
(:func:`~ccc.render_torch._triton.launch`) turn fp fusion off, so the column pass's multiply and add are not
contracted into a fused multiply-add.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from . import launch

__all__ = ["opencv_rows_from_levels", "opencv_symmetric_columns"]

_BLOCK = 256

_LEVELS = 256
"""Entries of a tap's table: one per byte level."""


@triton.jit
def _rows_from_levels_kernel(
    levels,
    products,
    errors,
    rows,
    channels,
    height,
    width,
    taps,
    stride_sample,
    stride_channel,
    stride_line,
    stride_column,
    LEVELS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    plane = tl.program_id(0).to(tl.int64)  # sample · channels + channel
    sample = plane // channels
    elements = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)  # line · width + column
    inside = elements < height * width
    column = elements % width
    line_levels = levels + sample * stride_sample + (plane % channels) * stride_channel
    line_levels += (elements // width).to(tl.int64) * stride_line
    sample_tables = sample * taps * LEVELS
    radius = taps // 2
    source = tl.minimum(tl.maximum(column - radius, 0), width - 1).to(tl.int64)
    level = tl.load(line_levels + source * stride_column, mask=inside, other=0).to(tl.int32)
    total = tl.load(products + sample_tables + level, mask=inside, other=0.0)
    for tap in range(1, taps):
        source = tl.minimum(tl.maximum(column + (tap - radius), 0), width - 1).to(tl.int64)
        level = tl.load(line_levels + source * stride_column, mask=inside, other=0).to(tl.int32)
        entry = sample_tables + tap * LEVELS + level
        product = tl.load(products + entry, mask=inside, other=0.0)
        error = tl.load(errors + entry, mask=inside, other=0.0)
        # Knuth's two-sum of product and total, its error corrected by the product's: _FusedMultiplyAdd.add
        summed = product + total
        virtual = summed - product
        scratch = product - (summed - virtual)
        scratch = scratch + (total - virtual)
        scratch = scratch - error
        total = summed + scratch
    tl.store(rows + plane * height * width + elements, total, mask=inside)


@triton.jit
def _symmetric_columns_kernel(
    rows,
    kernels,
    columns,
    channels,
    height,
    width,
    taps,
    BLOCK: tl.constexpr,
):
    plane = tl.program_id(0).to(tl.int64)  # sample · channels + channel
    weights = kernels + (plane // channels) * taps
    elements = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)  # line · width + column
    inside = elements < height * width
    line = elements // width
    column = elements % width
    plane_rows = rows + plane * height * width
    radius = taps // 2
    total = tl.load(plane_rows + elements, mask=inside, other=0.0) * tl.load(weights + radius)
    for offset in range(1, radius + 1):
        below = tl.load(plane_rows + tl.minimum(line + offset, height - 1) * width + column, mask=inside, other=0.0)
        above = tl.load(plane_rows + tl.maximum(line - offset, 0) * width + column, mask=inside, other=0.0)
        total = total + (below + above) * tl.load(weights + radius + offset)
    tl.store(columns + plane * height * width + elements, total, mask=inside)


def opencv_rows_from_levels(levels: Tensor, products: Tensor, errors: Tensor) -> Tensor:
    """The row pass's launch: ``levels`` (B, C, H, W) float32 or uint8 holding integers 0..255 (any strides),
    ``products`` and ``errors`` (B, K, 256) float64 (tap k's product with level v and minus its rounding error)
    → float64 (B, C, H, W), K odd."""
    batch, channels, height, width = levels.shape
    taps = products.shape[1]
    rows = torch.empty((batch, channels, height, width), dtype=torch.float64, device=levels.device)
    grid = (batch * channels, triton.cdiv(height * width, _BLOCK))
    launch(
        _rows_from_levels_kernel,
        grid,
        levels.device,
        levels,
        products.contiguous(),
        errors.contiguous(),
        rows,
        channels,
        height,
        width,
        taps,
        *levels.stride(),
        LEVELS=_LEVELS,
        BLOCK=_BLOCK,
    )
    return rows


def opencv_symmetric_columns(rows: Tensor, kernels: Tensor) -> Tensor:
    """The column pass's launch: ``rows`` (B, C, H, W) float64, ``kernels`` (B, K) float64, K odd and each
    kernel symmetric about K // 2 → float64 (B, C, H, W)."""
    batch, channels, height, width = rows.shape
    columns = torch.empty((batch, channels, height, width), dtype=torch.float64, device=rows.device)
    grid = (batch * channels, triton.cdiv(height * width, _BLOCK))
    launch(
        _symmetric_columns_kernel,
        grid,
        rows.device,
        rows.contiguous(),
        kernels.contiguous(),
        columns,
        channels,
        height,
        width,
        kernels.shape[1],
        BLOCK=_BLOCK,
    )
    return columns
