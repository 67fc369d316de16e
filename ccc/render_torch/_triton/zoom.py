"""The centre zoom (:func:`ccc.render_torch.numerics.zoom`) and zoom blur's sum of zooms
(:func:`ccc.render_torch.blur.zoom_blur_sum`) as Triton kernels.

Each program computes a block of one output row of one channel of one sample, for every zoom of the tables:
the row's neighbour indices and weights are scalars of the program, the columns' a block of the tables. Each
output value reads its four source values (two rows at the two neighbour columns) and runs the composition's
float operations in its order, each rounded once: the rows interpolated at each neighbour column
(``source[low_r, c] · lower_r + source[high_r, c] · upper_r``), then those two interpolated along the row
(``· lower_c + · upper_c``), then the cast to the result's dtype. The source is read in its own dtype and
converted to the weights' as the composition converts it. No intermediate image is written.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from . import launch

__all__ = ["zoom", "zoom_sum"]

_BLOCK = 128


@triton.jit
def _zoomed_block(
    source,
    row_low,
    row_high,
    row_lower,
    row_upper,
    column_low,
    column_high,
    column_lower,
    column_upper,
    zoom_sample,
    row,
    columns,
    inside,
    height,
    width,
    stride_row,
    stride_column,
    RESULT: tl.constexpr,
):
    """One zoom's block of one output row: ``zoom_sample`` is the zoom's row of the (Z·B, ·) tables, ``source``
    points at the sample's channel plane; the values cast to ``RESULT``."""
    working = row_upper.dtype.element_ty
    row_at = zoom_sample * height + row
    low_line = source + tl.load(row_low + row_at) * stride_row
    high_line = source + tl.load(row_high + row_at) * stride_row
    lower_r = tl.load(row_lower + row_at)
    upper_r = tl.load(row_upper + row_at)
    columns_at = zoom_sample * width + columns
    low_c = tl.load(column_low + columns_at, mask=inside, other=0) * stride_column
    high_c = tl.load(column_high + columns_at, mask=inside, other=0) * stride_column
    lower_c = tl.load(column_lower + columns_at, mask=inside, other=0.0)
    upper_c = tl.load(column_upper + columns_at, mask=inside, other=0.0)
    # the rows pass at the two neighbour columns: product, product, sum, each rounded (no contraction)
    at_low = tl.load(low_line + low_c, mask=inside, other=0.0).to(working) * lower_r
    at_low = at_low + tl.load(high_line + low_c, mask=inside, other=0.0).to(working) * upper_r
    at_high = tl.load(low_line + high_c, mask=inside, other=0.0).to(working) * lower_r
    at_high = at_high + tl.load(high_line + high_c, mask=inside, other=0.0).to(working) * upper_r
    zoomed = at_low * lower_c
    zoomed = zoomed + at_high * upper_c
    return zoomed.to(RESULT)


@triton.jit
def _zoom_kernel(
    images,
    row_low,
    row_high,
    row_lower,
    row_upper,
    column_low,
    column_high,
    column_lower,
    column_upper,
    present,
    output,
    zooms,
    batch,
    channels,
    height,
    width,
    stride_sample,
    stride_channel,
    stride_row,
    stride_column,
    SUM: tl.constexpr,
    BLOCK: tl.constexpr,
):
    line = tl.program_id(0).to(tl.int64)  # (sample · channels + channel) · height + output row
    row = line % height
    plane = line // height
    sample = plane // channels
    channel = plane % channels
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = columns < width
    source = images + sample * stride_sample + channel * stride_channel
    rows_per_zoom = tl.num_programs(0).to(tl.int64)  # B · C · H
    total = tl.zeros([BLOCK], dtype=output.dtype.element_ty)
    for zoom in range(zooms):
        zoomed = _zoomed_block(
            source,
            row_low,
            row_high,
            row_lower,
            row_upper,
            column_low,
            column_high,
            column_lower,
            column_upper,
            zoom * batch + sample,
            row,
            columns,
            inside,
            height,
            width,
            stride_row,
            stride_column,
            output.dtype.element_ty,
        )
        if SUM:  # the zooms' weighted values added one after the other, from zero
            total = total + zoomed * tl.load(present + zoom * batch + sample)
        else:  # each zoom stored
            tl.store(output + (zoom * rows_per_zoom + line) * width + columns, zoomed, mask=inside)
    if SUM:
        tl.store(output + line * width + columns, total, mask=inside)


def _launch(images: Tensor, tables: tuple[Tensor, ...], present: Tensor | None, output: Tensor) -> None:
    """The kernel over every output row and block of columns of ``images``, its tables flattened to (Z·B, ·):
    the weighted sum of the zooms where ``present`` is given, each zoom otherwise."""
    batch, channels, height, width = images.shape
    zooms = tables[0].numel() // (batch * height)
    grid = (batch * channels * height, triton.cdiv(width, _BLOCK))
    launch(
        _zoom_kernel,
        grid,
        images.device,
        images,
        *(table.contiguous() for table in tables),
        output if present is None else present.contiguous(),  # unread without the sum
        output,
        zooms,
        batch,
        channels,
        height,
        width,
        *images.stride(),
        SUM=present is not None,
        BLOCK=_BLOCK,
    )


def zoom(images: Tensor, tables: tuple[Tensor, ...], dtype: torch.dtype) -> Tensor:
    """The kernel's launch: float ``images`` (B, C, H, W), any strides; ``tables`` the eight
    :class:`~ccc.render_torch.numerics.ZoomTables` (rows' int64 lows and highs and lower and upper weights
    (*S, B, H), then the columns' (*S, B, W), the weights of the working dtype) → ``dtype`` (*S, B, C, H, W)."""
    batch, channels, height, width = images.shape
    output = torch.empty((*tables[0].shape[:-2], batch, channels, height, width), dtype=dtype, device=images.device)
    _launch(images, tables, None, output)
    return output


def zoom_sum(images: Tensor, tables: tuple[Tensor, ...], present: Tensor) -> Tensor:
    """The kernel's launch: float ``images`` (B, C, H, W), any strides; ``tables`` the eight
    :class:`~ccc.render_torch.numerics.ZoomTables` of Z zooms ((Z, B, H) and (Z, B, W)); ``present`` float32
    (Z, B) → float32 (B, C, H, W), ``Σ_z float32(zoom_z) · present[z]`` added in zoom order from 0."""
    output = torch.empty(images.shape, dtype=torch.float32, device=images.device)
    _launch(images, tables, present, output)
    return output
