"""The elastic transform's two samplings (:mod:`ccc.render_torch.digital`) as Triton kernels.

- :func:`warp_affine_reflect_101`: OpenCV's ``warpAffine`` (``INTER_LINEAR``, ``BORDER_REFLECT_101``) of
  float32 images through per-sample inverse maps;
- :func:`sample_shifted_bilinear_reflect`: ``scipy.ndimage.map_coordinates(order=1, mode="reflect")`` at the
  pixel grid plus per-sample shift fields, the grid added in the kernel (no coordinate field is written).

Each program computes a block of one output row of one sample: the source coordinates, their neighbours
and weights once, then for every channel the four source values read and interpolated. Every float
operation is the composition's, in its order, each rounded once (the launches go through
:func:`~ccc.render_torch._triton.launch`, fp fusion off: no multiply and add is contracted into a fused
multiply-add). Three steps are written differently from the compositions, with the same results:

- floors: of float64 values, float32 ones converted (exactly) and their floors back: Triton compiles a
  float32 floor for sm_90 to ``cvt.rmi.ftz.f32.f32``, which flushes a subnormal value to zero first;
- integer remainders: Triton's ``%`` is C's (the sign of the dividend), torch's the sign of the divisor; a
  negative remainder is moved up by the (positive) divisor, as torch does;
- torch's float remainder ``fmod(a, b)`` (then ``+ b`` where negative), for ``b = 2 · length`` a whole
  number: with ``k = trunc(a)`` (exact) and ``f = a - k`` (exact), ``fmod(a, b) = (k rem b) + f``, the
  integer remainder taken in int64. The real value ``a - b · trunc(a / b)`` is that sum (``f`` has the sign
  of ``a`` and ``|f| < 1``, so ``trunc(a / b) = trunc(k / b)``), and it is a float (``fmod`` is exact), so
  the one rounded addition gives it exactly. Only the sign of a zero remainder can differ (``+0`` for
  ``fmod``'s ``-0``), which the next steps erase (``±0 - 0.5`` is ``-0.5`` either way). It needs
  ``|a| < 2**63``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from . import launch
from ._types import float_type

__all__ = ["sample_shifted_bilinear_reflect", "warp_affine_reflect_101"]

_BLOCK = 128


@triton.jit
def _multiply_add(a, b, c, WORKING: tl.constexpr):
    """float32 ``a · b + c`` through ``WORKING``: float64 rounds the sum once then to float32 (the float32
    product is exact in float64), float32 rounds the product and the sum."""
    return (a.to(WORKING) * b.to(WORKING) + c.to(WORKING)).to(tl.float32)


@triton.jit
def _floor(values):
    """``floor`` of float32 or float64 ``values``, subnormal ones included: Triton's float32 floor flushes a
    subnormal value to zero first (``floor(-1e-40)`` would be -0, not -1), its float64 floor does not, and the
    floor of a float32 value is a float32 value."""
    return tl.floor(values.to(tl.float64)).to(values.dtype)


@triton.jit
def _reflect_101(index, length):
    """OpenCV's ``BORDER_REFLECT_101`` of int64 ``index`` into ``[0, length)`` (``length >= 2``)."""
    period = 2 * (length - 1)
    folded = index % period
    folded = tl.where(folded < 0, folded + period, folded)
    return tl.where(folded >= length, period - folded, folded)


@triton.jit
def _warp_affine_kernel(
    images,
    inverse,
    output,
    channels,
    height,
    width,
    stride_sample,
    stride_channel,
    stride_row,
    stride_column,
    stride_map_sample,
    stride_map_row,
    stride_map_column,
    WORKING: tl.constexpr,
    BLOCK: tl.constexpr,
):
    line = tl.program_id(0).to(tl.int64)  # sample · height + output row
    sample = line // height
    row = (line % height).to(tl.float32)
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = columns < width
    first = inverse + sample * stride_map_sample
    second = first + stride_map_row
    m00 = tl.load(first).to(tl.float32)
    m01 = tl.load(first + stride_map_column).to(tl.float32)
    m02 = tl.load(first + 2 * stride_map_column).to(tl.float32)
    m10 = tl.load(second).to(tl.float32)
    m11 = tl.load(second + stride_map_column).to(tl.float32)
    m12 = tl.load(second + 2 * stride_map_column).to(tl.float32)
    xs = columns.to(tl.float32)
    source_x = _multiply_add(m00, xs, row * m01 + m02, WORKING)
    source_y = _multiply_add(m10, xs, row * m11 + m12, WORKING)
    floor_x = _floor(source_x)
    floor_y = _floor(source_y)
    alpha = source_x - floor_x
    beta = source_y - floor_y
    x0 = floor_x.to(tl.int64)
    y0 = floor_y.to(tl.int64)
    left = _reflect_101(x0, width) * stride_column
    right = _reflect_101(x0 + 1, width) * stride_column
    top_row = _reflect_101(y0, height) * stride_row
    bottom_row = _reflect_101(y0 + 1, height) * stride_row
    sample_images = images + sample * stride_sample
    output_line = output + (sample * channels * height + line % height) * width + columns
    # int64 steps between planes: a channel's offsets past 2**31 do not wrap
    channel_step = tl.cast(stride_channel, tl.int64)
    output_step = tl.cast(height, tl.int64) * width
    for channel in range(channels):
        plane = sample_images + channel * channel_step
        top_left = tl.load(plane + top_row + left, mask=inside, other=0.0)
        top_right = tl.load(plane + top_row + right, mask=inside, other=0.0)
        bottom_left = tl.load(plane + bottom_row + left, mask=inside, other=0.0)
        bottom_right = tl.load(plane + bottom_row + right, mask=inside, other=0.0)
        top = _multiply_add(alpha, top_right - top_left, top_left, WORKING)
        bottom = _multiply_add(alpha, bottom_right - bottom_left, bottom_left, WORKING)
        value = _multiply_add(beta, bottom - top, top, WORKING)
        tl.store(output_line + channel * output_step, value, mask=inside)


def warp_affine_reflect_101(images: Tensor, inverse: Tensor, dtype: torch.dtype) -> Tensor:
    """The kernel's launch: float32 ``images`` (B, C, H, W), H and W >= 2, any strides; ``inverse`` float64 or
    float32 (B, 2, 3), any strides, output (x, y, 1) → source (x, y), rounded to float32 in the kernel;
    ``dtype`` float64 (OpenCV's fused multiply-adds) or float32 → float32 (B, C, H, W), as
    :func:`ccc.render_torch.digital.warp_affine_reflect_101` describes it."""
    batch, channels, height, width = images.shape
    output = torch.empty((batch, channels, height, width), dtype=torch.float32, device=images.device)
    grid = (batch * height, triton.cdiv(width, _BLOCK))
    launch(
        _warp_affine_kernel,
        grid,
        images.device,
        images,
        inverse,
        output,
        channels,
        height,
        width,
        *images.stride(),
        *inverse.stride(),
        WORKING=float_type(dtype),
        BLOCK=_BLOCK,
    )
    return output


@triton.jit
def _reflect_coordinates(coordinates, length):
    """scipy's ``mode="reflect"`` of real ``coordinates`` about -0.5 and ``length - 0.5``, as
    :func:`ccc.render_torch.digital._reflect_coordinates` computes it (its ``torch.remainder`` exactly: module
    docstring)."""
    working = coordinates.dtype
    period = 2 * length
    period_value = tl.cast(period, working)
    length_value = tl.cast(length, working)
    shifted = coordinates + 0.5
    whole = shifted.to(tl.int64)  # truncated toward zero
    remainder = (whole % period).to(working) + (shifted - whole.to(working))
    remainder = tl.where(remainder < 0, remainder + period_value, remainder)
    folded = tl.where(remainder >= length_value, period_value - remainder, remainder) - 0.5
    inside = (coordinates >= -0.5) & (coordinates <= length_value - 0.5)
    return tl.where(inside, coordinates, folded)


@triton.jit
def _shifted_bilinear_kernel(
    images,
    shift_rows,
    shift_columns,
    output,
    channels,
    height,
    width,
    stride_sample,
    stride_channel,
    stride_row,
    stride_column,
    WORKING: tl.constexpr,
    BLOCK: tl.constexpr,
):
    line = tl.program_id(0).to(tl.int64)  # sample · height + output row
    sample = line // height
    row = line % height
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = columns < width
    shifts_at = line * width + columns
    shift_row = tl.load(shift_rows + shifts_at, mask=inside, other=0.0).to(WORKING)
    shift_column = tl.load(shift_columns + shifts_at, mask=inside, other=0.0).to(WORKING)
    rows = _reflect_coordinates(row.to(WORKING) + shift_row, height)
    source_columns = _reflect_coordinates(columns.to(WORKING) + shift_column, width)
    row_floor = _floor(rows)
    column_floor = _floor(source_columns)
    row_weight = rows - row_floor
    column_weight = source_columns - column_floor
    # the reflected coordinates lie in [-0.5, length - 0.5]: their floors in [-1, length - 1]
    r0 = row_floor.to(tl.int32)
    q0 = column_floor.to(tl.int32)
    top_row = tl.minimum(tl.maximum(r0, 0), height - 1).to(tl.int64) * stride_row
    bottom_row = tl.minimum(tl.maximum(r0 + 1, 0), height - 1).to(tl.int64) * stride_row
    left = tl.minimum(tl.maximum(q0, 0), width - 1).to(tl.int64) * stride_column
    right = tl.minimum(tl.maximum(q0 + 1, 0), width - 1).to(tl.int64) * stride_column
    # the composition's weight products, ((1 - rw) · (1 - cw)) · value and so on: the same per channel
    top_left_weight = (1.0 - row_weight) * (1.0 - column_weight)
    top_right_weight = (1.0 - row_weight) * column_weight
    bottom_left_weight = row_weight * (1.0 - column_weight)
    bottom_right_weight = row_weight * column_weight
    sample_images = images + sample * stride_sample
    output_line = output + (sample * channels * height + row) * width + columns
    # int64 steps between planes: a channel's offsets past 2**31 do not wrap
    channel_step = tl.cast(stride_channel, tl.int64)
    output_step = tl.cast(height, tl.int64) * width
    for channel in range(channels):
        plane = sample_images + channel * channel_step
        value = top_left_weight * tl.load(plane + top_row + left, mask=inside, other=0.0).to(WORKING)
        value = value + top_right_weight * tl.load(plane + top_row + right, mask=inside, other=0.0).to(WORKING)
        value = value + bottom_left_weight * tl.load(plane + bottom_row + left, mask=inside, other=0.0).to(WORKING)
        value = value + bottom_right_weight * tl.load(plane + bottom_row + right, mask=inside, other=0.0).to(WORKING)
        tl.store(output_line + channel * output_step, value.to(tl.float32), mask=inside)


def sample_shifted_bilinear_reflect(
    images: Tensor, shift_rows: Tensor, shift_columns: Tensor, dtype: torch.dtype
) -> Tensor:
    """The kernel's launch: float ``images`` (B, C, H, W), any strides; float ``shift_rows``, ``shift_columns``
    (B, H, W) in pixels (finite; the coordinates below 2**62 in magnitude); ``dtype`` float64 or float32, the
    computation's → float32 (B, C, H, W), as :func:`ccc.render_torch.digital.sample_shifted_bilinear_reflect`
    describes it."""
    batch, channels, height, width = images.shape
    output = torch.empty((batch, channels, height, width), dtype=torch.float32, device=images.device)
    grid = (batch * height, triton.cdiv(width, _BLOCK))
    launch(
        _shifted_bilinear_kernel,
        grid,
        images.device,
        images,
        shift_rows.contiguous(),
        shift_columns.contiguous(),
        output,
        channels,
        height,
        width,
        *images.stride(),
        WORKING=float_type(dtype),
        BLOCK=_BLOCK,
    )
    return output
