"""ImageMagick's motion blur (:func:`ccc.render_torch.numerics.motion_blur_levels`) as one Triton kernel.

Each program computes a block of one output row of one channel of one sample. For each tap, in tap order, it
reads the tap's flat start in the padded planes and its weight (scalars of the program), finds the tapped
pixel by clamping the row and columns to the image (the pixel that the composition's replicate padding
holds there, without writing the padded planes), and makes the composition's product
``(level · 257) · weight``, each rounded once; the products are summed from the first one in tap order. The
sum is clamped to [0, 65535], rounded (``floor(· + 0.5)``) and floor-divided by 257 in integers: the
quantum is a whole number in [0, 65535], where ATen's floating floor division (``fmod``, then the
quotient of the multiple of 257, floored) gives exactly that integer quotient.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from . import launch

__all__ = ["motion_blur"]

_BLOCK = 128


@triton.jit
def _motion_blur_kernel(
    levels,
    weights,
    starts,
    output,
    taps,
    channels,
    height,
    width,
    pad_rows,
    pad_columns,
    stride_sample,
    stride_channel,
    stride_row,
    stride_column,
    QUANTUM_PER_LEVEL: tl.constexpr,
    QUANTUM_RANGE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    line = tl.program_id(0).to(tl.int64)  # (sample · channels + channel) · height + output row
    row = line % height
    plane = line // height
    sample = plane // channels
    channel = plane % channels
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = columns < width
    source = levels + sample * stride_sample + channel * stride_channel
    padded_width = width + 2 * pad_columns
    total = tl.zeros([BLOCK], dtype=output.dtype.element_ty)
    for tap in range(taps):
        # the tap's offsets as a flat start in the padded planes: (row + pad_rows) · padded_width + column + pad_columns
        start = tl.load(starts + sample * taps + tap).to(tl.int64)
        weight = tl.load(weights + sample * taps + tap)
        tapped_row = tl.minimum(tl.maximum(row + start // padded_width - pad_rows, 0), height - 1)
        tapped_columns = tl.minimum(tl.maximum(columns + (start % padded_width - pad_columns), 0), width - 1)
        level = tl.load(source + tapped_row * stride_row + tapped_columns * stride_column, mask=inside, other=0.0)
        product = (level * QUANTUM_PER_LEVEL) * weight
        # the sum starts from the first product itself, as the composition's does
        total = tl.where(tap == 0, product, total + product)
    quantum = tl.floor(tl.minimum(tl.maximum(total, 0.0), QUANTUM_RANGE) + 0.5)
    blurred = quantum.to(tl.int32) // QUANTUM_PER_LEVEL
    tl.store(output + line * width + columns, blurred.to(output.dtype.element_ty), mask=inside)


def motion_blur(
    levels: Tensor,
    weights: Tensor,
    starts: Tensor,
    padding: tuple[int, int],
    quantum_per_level: int,
    quantum_range: float,
) -> Tensor:
    """The kernel's launch: float64 or float32 ``levels`` (B, C, H, W) integer levels in [0, 255], any strides;
    ``weights`` (B, T) of the levels' dtype and ``starts`` (B, T) int64 flat offsets into the planes padded
    by ``padding`` (rows, columns), as :func:`~ccc.render_torch.numerics.motion_blur_tables` makes them; the
    quanta per level (an integer) and the largest quantum → (B, C, H, W) levels of the levels' dtype."""
    batch, channels, height, width = levels.shape
    output = torch.empty((batch, channels, height, width), dtype=levels.dtype, device=levels.device)
    grid = (batch * channels * height, triton.cdiv(width, _BLOCK))
    launch(
        _motion_blur_kernel,
        grid,
        levels.device,
        levels,
        weights.contiguous(),
        starts.contiguous(),
        output,
        weights.shape[1],
        channels,
        height,
        width,
        *padding,
        *levels.stride(),
        QUANTUM_PER_LEVEL=quantum_per_level,
        QUANTUM_RANGE=quantum_range,
        BLOCK=_BLOCK,
    )
    return output
