"""The pixel conversions between the renderer's steps (:mod:`ccc.render_torch.numerics`) as Triton kernels:
:func:`unit_float32`, :func:`byte_levels`, :func:`unit_values` and :func:`unit_of_levels` (each program a block of
consecutive values of the input's memory, written to the same places of the output's: the two share their strides,
:func:`_flat_output`), and :func:`truncate_rows_into` (each program a block of one sample, written to the output's
sample it goes to).

Every value is read once and its result written once, computed with the composition's operations in its
order, each rounded once as ATen rounds it:

- ``x · 255`` in the input's dtype, as ATen multiplies a float tensor by a Python number (the number, exact
  in either dtype, cast to the tensor's);
- ``clamp`` as ATen's on the CPU (:func:`_clamp`): a NaN stays NaN, ``-0.0`` stays ``-0.0``;
- ``/ 255`` correctly rounded (:func:`_divide`): float32's ``div.rn.f32`` by
  :func:`triton.language.math.div_rn` (Triton's ``/`` compiles to the approximate ``div.full.f32``),
  float64's ``/`` is ``div.rn.f64``: ATen's IEEE division by the 0-dim divisor of
  :func:`~ccc.render_torch.numerics.divide`;
- ``torch.round`` (halves to even) by :func:`_round_half_to_even`: Triton's interpreter has no libdevice
  ``rint``, so the rounding is one IEEE addition and one subtraction, exact on the whole float domain;
- casts from float64 to float32 round to nearest (``cvt.rn.f32.f64``) as ATen's, casts to integers
  truncate (of whole numbers here: exact).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from . import launch
from ._types import float_type

__all__ = ["byte_levels", "truncate_rows_into", "unit_float32", "unit_of_levels", "unit_values"]

_BLOCK = 1024

"""Triton's float dtypes of torch's (a working dtype is a constant of the kernel)."""


@triton.jit
def _clamp(values, low, high):
    """``torch.clamp(values, low, high)`` as ATen computes it on the CPU: a bound where the value lies beyond it,
    the value itself otherwise (a NaN, and ``-0.0`` at the bound 0 keep their bits). Comparisons and choices:
    no minimum or maximum instruction, whose choice between zeros of both signs varies."""
    raised = tl.where(values < low, low, values)
    return tl.where(raised > high, high, raised)


@triton.jit
def _divide(values, divisor):
    """``values / divisor`` correctly rounded in the values' dtype (float32 or float64)."""
    if values.dtype == tl.float32:
        quotient = tl.math.div_rn(values, divisor)
    else:
        quotient = values / divisor
    return quotient


@triton.jit
def _round_half_to_even(values):
    """``torch.round(values)`` (float32 or float64): to the nearest integer, halves to the even one, the sign kept
    (``-0.3`` → ``-0.0``), NaN and infinities unchanged.

    Below ``2**p`` (``p`` the mantissa's bits: 23 or 52) the magnitude plus ``2**p`` lies in ``[2**p, 2**(p+1)]``,
    where the floats are the integers: the addition rounds the magnitude to the nearest integer, halves to the
    even one (``2**p`` is even), and subtracting ``2**p`` again is exact. From ``2**p`` on every float is an
    integer and stays as it is.
    """
    if values.dtype == tl.float32:
        whole = 8388608.0  # 2**23
        negative = values.to(tl.int32, bitcast=True) < 0
    else:
        whole = 4503599627370496.0  # 2**52
        negative = values.to(tl.int64, bitcast=True) < 0
    magnitude = tl.abs(values)
    rounded = (magnitude + whole) - whole
    rounded = tl.where(negative, -rounded, rounded)
    return tl.where(magnitude < whole, rounded, values)


@triton.jit
def _unit_float32_kernel(levels, output, count, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < count
    values = tl.load(levels + offsets, mask=inside, other=0.0)
    if SCALE != 1:
        values = values * SCALE
    clamped = _clamp(values, 0.0, 255.0)
    target = tl.floor(clamped)
    unit = _divide(clamped, 255.0).to(tl.float32)
    middle = _divide(target + 0.5, 255.0).to(tl.float32)
    # the pipeline's float32 truncation of the unit value, against the level it must give
    kept = tl.floor(unit * 255.0) == target.to(tl.float32)
    tl.store(output + offsets, tl.where(kept, unit, middle), mask=inside)


@triton.jit
def _truncated(values):
    """``floor(clamp(values · 255, 0, 255)) / 255`` in the values' dtype."""
    return _divide(tl.floor(_clamp(values * 255.0, 0.0, 255.0)), 255.0)


@triton.jit
def _truncate_rows_kernel(
    values,
    rows,
    output,
    size_1,
    size_2,
    size_3,
    values_stride_0,
    values_stride_1,
    values_stride_2,
    values_stride_3,
    output_stride_0,
    output_stride_1,
    output_stride_2,
    output_stride_3,
    BLOCK: tl.constexpr,
):
    sample = tl.program_id(0).to(tl.int64)  # the sample of the values, written to the output's sample rows[sample]
    elements = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)  # within a sample, row-major over sizes 1..3
    inside = elements < size_1 * size_2 * size_3
    third = (elements % size_3).to(tl.int64)
    second = (elements // size_3 % size_2).to(tl.int64)
    first = (elements // (size_3 * size_2)).to(tl.int64)
    source = values + sample * values_stride_0 + first * values_stride_1 + second * values_stride_2
    read = tl.load(source + third * values_stride_3, mask=inside, other=0.0)
    target = output + tl.load(rows + sample) * output_stride_0 + first * output_stride_1 + second * output_stride_2
    tl.store(target + third * output_stride_3, _truncated(read), mask=inside)


@triton.jit
def _byte_levels_kernel(images, output, count, DIVIDE: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < count
    values = tl.load(images + offsets, mask=inside, other=0.0)
    levels = _round_half_to_even(values * 255.0).to(output.dtype.element_ty)
    if DIVIDE:
        levels = _divide(levels, 255.0)
    tl.store(output + offsets, levels, mask=inside)


@triton.jit
def _unit_of_levels_kernel(levels, output, count, WORKING: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < count
    values = tl.load(levels + offsets, mask=inside, other=0).to(WORKING)
    tl.store(output + offsets, _divide(values, 255.0).to(output.dtype.element_ty), mask=inside)


def _flat_output(values: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """``values`` and an empty output of ``dtype`` with the same strides, both dense: element ``i`` of one's
    memory is element ``i`` of the other's. ``torch.empty_like`` keeps a dense input's strides (any layout:
    the input is read in place, and the output has the layout ATen's elementwise result would have); an
    input it cannot keep (overlapping, or with gaps) is copied contiguous first."""
    output = torch.empty_like(values, dtype=dtype)
    if output.stride() != values.stride():
        values = values.contiguous()
        output = torch.empty_like(values, dtype=dtype)
    return values, output


def _convert(kernel: object, values: Tensor, dtype: torch.dtype, **constants: object) -> Tensor:
    """``kernel`` over every value of ``values`` (any shape and strides) into a new tensor of ``dtype`` and
    their shape, ``_BLOCK`` values per program."""
    values, output = _flat_output(values, dtype)
    count = values.numel()
    if count:
        grid = (triton.cdiv(count, _BLOCK),)
        launch(kernel, grid, values.device, values, output, count, **constants, BLOCK=_BLOCK)
    return output


def unit_float32(levels: Tensor, scale: int) -> Tensor:
    """The kernel's launch: float64 or float32 ``levels`` (any shape and strides) times the whole number
    ``scale`` → float32 of their shape, :func:`ccc.render_torch.numerics.unit_float32`."""
    return _convert(_unit_float32_kernel, levels, torch.float32, SCALE=scale)


def truncate_rows_into(output: Tensor, rows: Tensor, values: Tensor) -> None:
    """The kernel's launch: ``output[rows] = truncate_to_levels(values)`` for float ``output`` (B, C, H, W),
    int64 ``rows`` (N,) of distinct samples of it and ``values`` (N, C, H, W) of its dtype, any strides. The
    programs run through the samples' values in the output's memory order (its dimensions 1..3 by decreasing
    stride): the writes are in order, and so are the reads of values of the output's layout."""
    if not len(rows) or not output[0].numel():
        return
    order = (0, *sorted(range(1, 4), key=lambda dimension: -output.stride(dimension)))
    output_view, values_view = output.permute(order), values.permute(order)
    sizes = output_view.shape[1:]
    grid = (len(rows), triton.cdiv(output[0].numel(), _BLOCK))
    launch(
        _truncate_rows_kernel,
        grid,
        output.device,
        values_view,
        rows.contiguous(),
        output_view,
        *sizes,
        *values_view.stride(),
        *output_view.stride(),
        BLOCK=_BLOCK,
    )


def byte_levels(images: Tensor, dtype: torch.dtype) -> Tensor:
    """The kernel's launch: float ``images`` (any shape and strides) → ``round(x · 255)`` as ``dtype`` (a float
    dtype, or an integer one holding the levels: values in [0, 1])."""
    return _convert(_byte_levels_kernel, images, dtype, DIVIDE=False)


def unit_values(images: Tensor, dtype: torch.dtype) -> Tensor:
    """The kernel's launch: float ``images`` (any shape and strides) → ``round(x · 255) / 255`` in ``dtype``
    (float32 or float64), the level cast to ``dtype`` before the division."""
    return _convert(_byte_levels_kernel, images, dtype, DIVIDE=True)


def unit_of_levels(levels: Tensor, working: torch.dtype, dtype: torch.dtype) -> Tensor:
    """The kernel's launch: ``levels`` (uint8 or float, any shape and strides) → ``levels / 255`` as ``dtype``,
    cast to the float dtype ``working`` first and divided there."""
    return _convert(_unit_of_levels_kernel, levels, dtype, WORKING=float_type(working))
