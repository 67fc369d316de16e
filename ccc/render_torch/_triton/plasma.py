"""One level of fog's diamond-square plasma fractal (:func:`ccc.render_torch.weather.diamond_square_level`) as
one Triton kernel.

Each program takes a block of one sample's ``s × s`` squares of the level (``s`` the corners a side, every
``step``-th row and column of the map). For the square ``(i, j)`` it writes the square's centre, the diamond
on the corner row above it, ``(i·step, j·step + half)``, and the diamond on the corner column left of it,
``(i·step + half, j·step)``. The diamonds need the centres of the squares above and to the left, which other
programs write: the program computes them again from their corners, with the same operations (the same bits),
so it reads only corners and draws, which no program writes (indices wrap around, as ``torch.roll``'s).

Every value is the composition's operations in its order, each rounded once: the perturbation
``wibble · (low + span · draw)``, the sums with the composition's parenthesisation, and ``perturbation +
0.25 · total`` (the product exact: ATen's ``add`` with ``alpha`` rounds once, and so do these two operations).
"""

from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

from . import launch

__all__ = ["diamond_square_level"]

_BLOCK = 256


@triton.jit
def _perturbation(draws, wibble, low, span, mask):
    """``wibble · (low + span · draw)`` of the draws at the pointers ``draws``."""
    draw = tl.load(draws, mask=mask, other=0.0)
    return wibble * (low + span * draw)


@triton.jit
def _centre(square, top_left, bottom_left, top_right, bottom_right):
    """A square's centre: its perturbation plus a quarter of its corners' sum, summed as the composition's
    ``corners + roll(corners)`` along the rows, then along the columns."""
    total = (top_left + bottom_left) + (top_right + bottom_right)
    return square + 0.25 * total


@triton.jit
def _diamond_square_kernel(
    height_map,
    draws,
    scales,
    side,
    step,
    map_stride_0,
    map_stride_1,
    map_stride_2,
    draws_stride_0,
    draws_stride_1,
    draws_stride_2,
    draws_stride_3,
    scales_stride_0,
    scales_stride_1,
    BLOCK: tl.constexpr,
):
    sample = tl.program_id(0).to(tl.int64)
    squares = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)  # row-major over the s × s squares
    inside = squares < side * side
    i = squares // side
    j = squares % side
    above = tl.where(i == 0, side - 1, i - 1).to(tl.int64)
    below = tl.where(i == side - 1, 0, i + 1).to(tl.int64)
    left = tl.where(j == 0, side - 1, j - 1).to(tl.int64)
    right = tl.where(j == side - 1, 0, j + 1).to(tl.int64)
    i = i.to(tl.int64)
    j = j.to(tl.int64)
    half = step // 2

    scale = scales + sample * scales_stride_0
    wibble = tl.load(scale)
    low = tl.load(scale + scales_stride_1)
    span = tl.load(scale + 2 * scales_stride_1)

    corners = height_map + sample * map_stride_0
    corner_row_stride = step * map_stride_1
    corner_column_stride = step * map_stride_2
    corner = corners + i * corner_row_stride + j * corner_column_stride
    here = tl.load(corner, mask=inside, other=0.0)
    corner_above = corners + above * corner_row_stride
    corner_below = corners + below * corner_row_stride
    corner_i = corners + i * corner_row_stride
    c_above = tl.load(corner_above + j * corner_column_stride, mask=inside, other=0.0)
    c_above_right = tl.load(corner_above + right * corner_column_stride, mask=inside, other=0.0)
    c_below = tl.load(corner_below + j * corner_column_stride, mask=inside, other=0.0)
    c_below_left = tl.load(corner_below + left * corner_column_stride, mask=inside, other=0.0)
    c_below_right = tl.load(corner_below + right * corner_column_stride, mask=inside, other=0.0)
    c_left = tl.load(corner_i + left * corner_column_stride, mask=inside, other=0.0)
    c_right = tl.load(corner_i + right * corner_column_stride, mask=inside, other=0.0)

    # the level's three draws: square centres, diamonds on corner rows, diamonds on corner columns
    field = draws + sample * draws_stride_0
    squares_field = field + i * draws_stride_2 + j * draws_stride_3
    square = _perturbation(squares_field, wibble, low, span, inside)
    row = _perturbation(squares_field + draws_stride_1, wibble, low, span, inside)
    column = _perturbation(squares_field + 2 * draws_stride_1, wibble, low, span, inside)
    square_above = _perturbation(field + above * draws_stride_2 + j * draws_stride_3, wibble, low, span, inside)
    square_left = _perturbation(field + i * draws_stride_2 + left * draws_stride_3, wibble, low, span, inside)

    centre = _centre(square, here, c_below, c_right, c_below_right)
    centre_above = _centre(square_above, c_above, here, c_above_right, c_right)
    centre_left = _centre(square_left, c_left, c_below_left, here, c_below)
    row_diamond = row + 0.25 * ((centre + centre_above) + (here + c_right))
    column_diamond = column + 0.25 * ((centre + centre_left) + (here + c_below))

    tl.store(corner + half * map_stride_1 + half * map_stride_2, centre, mask=inside)
    tl.store(corner + half * map_stride_2, row_diamond, mask=inside)
    tl.store(corner + half * map_stride_1, column_diamond, mask=inside)


def diamond_square_level(height_map: Tensor, scales: Tensor, draws: Tensor, step: int) -> None:
    """The kernel's launch: one diamond-square level on ``height_map`` (B, n, n), float64 or float32, any
    strides, in place; ``scales`` (B, 3) the level's wibble, low and span, ``draws`` (B, 3, s, s) its
    uniforms (both of the map's dtype, any strides), ``step`` = n / s the corners' spacing in points, >= 2."""
    batch, side = draws.shape[0], draws.shape[-1]
    if not batch:
        return
    grid = (batch, triton.cdiv(side * side, _BLOCK))
    launch(
        _diamond_square_kernel,
        grid,
        height_map.device,
        height_map,
        draws,
        scales,
        side,
        step,
        *height_map.stride(),
        *draws.stride(),
        *scales.stride(),
        BLOCK=_BLOCK,
    )
