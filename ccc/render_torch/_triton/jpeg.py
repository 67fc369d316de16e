"""The integer JPEG round trip (:func:`ccc.render_torch.jpeg.integer_jpeg_round_trip`) as two Triton kernels.

- :func:`decoded_components`: each program takes a few MCUs (16×16 pixels: four luma blocks, one Cb and
  one Cr block), reads their RGB levels at the codec's edge-padded positions, converts them to YCbCr,
  downsamples the chroma, and runs each 8×8 block through the forward DCT, quantisation, dequantisation
  and the inverse DCT in registers; it writes the decoded luma and chroma samples as uint8.
- :func:`upsample_to_rgb`: each program takes a run of pixels, upsamples the chroma at them from its four
  nearest chroma samples and converts YCbCr to RGB.

Integer arithmetic throughout, the composition's integers on every device: the DCT passes are the same
8×8 integer matrix products (the sums' order differs, and int32 sums wrap modulo 2³², so every order
gives the same sum once the true sum fits, which the module documentation of :mod:`ccc.render_torch.jpeg`
bounds below 2³⁰); ``>>`` of signed int32 is an arithmetic shift in Triton as in ATen; the one division
has non-negative operands, where truncation and flooring agree.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .._libjpeg import FORWARD_SHIFTS, INVERSE_SHIFTS, fix16
from . import launch

__all__ = ["decoded_components", "upsample_to_rgb"]

_MCUS = 2
"""MCUs per program of :func:`decoded_components`: 8 luma and 4 chroma blocks, tiles of 4,096 products."""
_BLOCK = 1024
"""Pixels per program of :func:`upsample_to_rgb`."""

# jccolor's coefficients (16-bit fixed point) and its rounding terms
_LUMA_RED = tl.constexpr(fix16(0.299))
_LUMA_GREEN = tl.constexpr(fix16(0.587))
_LUMA_BLUE = tl.constexpr(fix16(0.114))
_CB_RED = tl.constexpr(-fix16(0.16874))
_CB_GREEN = tl.constexpr(-fix16(0.33126))
_CR_GREEN = tl.constexpr(-fix16(0.41869))
_CR_BLUE = tl.constexpr(-fix16(0.08131))
_HALF = tl.constexpr(fix16(0.5))
_CHROMA_ROUNDING = tl.constexpr((128 << 16) + (1 << 15) - 1)
# jdcolor's coefficients
_RED_CR = tl.constexpr(fix16(1.40200))
_GREEN_CB = tl.constexpr(-fix16(0.34414))
_GREEN_CR = tl.constexpr(-fix16(0.71414))
_BLUE_CB = tl.constexpr(fix16(1.77200))
# the DCT passes' descales
_FORWARD_ROWS_SHIFT = tl.constexpr(FORWARD_SHIFTS[0])
_FORWARD_COLUMNS_SHIFT = tl.constexpr(FORWARD_SHIFTS[1])
_INVERSE_COLUMNS_SHIFT = tl.constexpr(INVERSE_SHIFTS[0])
_INVERSE_ROWS_SHIFT = tl.constexpr(INVERSE_SHIFTS[1])


@triton.jit
def _descale(sums, SHIFT: tl.constexpr):
    """Round int32 ``sums`` to ``SHIFT`` fewer fraction bits (arithmetic shift: towards -∞ after the bias)."""
    return (sums + 2 ** (SHIFT - 1)) >> SHIFT


@triton.jit
def _transform_rows(blocks, matrix, SHIFT: tl.constexpr):
    """Each row ``v`` of int32 (N, 8, 8) ``blocks`` → ``descale(matrix @ v)``: ``matrix`` an (8, 8) tile."""
    return _descale(tl.sum(blocks[:, :, None, :] * matrix[None, None, :, :], axis=3), SHIFT)


@triton.jit
def _transform_columns(blocks, matrix, SHIFT: tl.constexpr):
    """Each column ``v`` of int32 (N, 8, 8) ``blocks`` → ``descale(matrix @ v)``."""
    return _descale(tl.sum(matrix[None, :, :, None] * blocks[:, None, :, :], axis=2), SHIFT)


@triton.jit
def _block_round_trip(samples, forward, inverse, steps):
    """int32 (N, 8, 8) samples in [0, 255] → their decoded samples, int32 in [0, 255]: level shift, forward
    DCT (rows, then columns), quantisation by ``steps`` (int32 (N, 8, 8), >= 1) rounded half away from zero,
    dequantisation, inverse DCT (columns, then rows), level shift back, clamp."""
    coefficients = _transform_rows(samples - 128, forward, _FORWARD_ROWS_SHIFT)
    coefficients = _transform_columns(coefficients, forward, _FORWARD_COLUMNS_SHIFT)
    # trunc((c ± 4·step) / (8·step)) · step in magnitudes: both operands of the division are >= 0
    quotients = (tl.abs(coefficients) + 4 * steps) // (8 * steps)
    dequantised = tl.where(coefficients < 0, -quotients, quotients) * steps
    decoded = _transform_columns(dequantised, inverse, _INVERSE_COLUMNS_SHIFT)
    decoded = _transform_rows(decoded, inverse, _INVERSE_ROWS_SHIFT)
    return tl.minimum(tl.maximum(decoded + 128, 0), 255)


@triton.jit
def _chroma_at(images, offsets, rows, columns, stride_line, stride_column, stride_channel, valid):
    """jccolor's Cb and Cr (int32, before the downsampling's sums) of the pixels at ``rows``, ``columns``."""
    pixels = offsets + rows.to(tl.int64) * stride_line + columns.to(tl.int64) * stride_column
    red = tl.load(images + pixels, mask=valid, other=0).to(tl.int32)
    green = tl.load(images + pixels + stride_channel, mask=valid, other=0).to(tl.int32)
    blue = tl.load(images + pixels + 2 * stride_channel, mask=valid, other=0).to(tl.int32)
    blue_difference = _CB_RED * red + _CB_GREEN * green + _HALF * blue
    red_difference = _HALF * red + _CR_GREEN * green + _CR_BLUE * blue
    return (blue_difference + _CHROMA_ROUNDING) >> 16, (red_difference + _CHROMA_ROUNDING) >> 16


@triton.jit
def _decoded_components_kernel(
    images,
    steps,
    matrices,
    luma_out,
    chroma_out,
    height,
    width,
    chroma_height,
    chroma_width,
    mcu_columns,
    image_mcus,
    all_mcus,
    stride_sample,
    stride_channel,
    stride_line,
    stride_column,
    MCUS: tl.constexpr,
):
    eight = tl.arange(0, 8)
    block_rows = eight[None, :, None]
    block_columns = eight[None, None, :]
    forward = tl.load(matrices + eight[:, None] * 8 + eight[None, :])
    inverse = tl.load(matrices + 64 + eight[:, None] * 8 + eight[None, :])
    frequencies = block_rows * 8 + block_columns

    # Luma: four blocks per MCU, (MCU, block row, block column) along the tiles' first axis; the
    # planes extended by repeating their last row and column.
    quarter = tl.arange(0, 4 * MCUS)
    mcu = tl.program_id(0) * MCUS + quarter // 4
    valid = (mcu < all_mcus)[:, None, None]
    sample = (mcu // image_mcus).to(tl.int64)[:, None, None]
    mcu_row = ((mcu % image_mcus) // mcu_columns)[:, None, None]
    mcu_column = ((mcu % image_mcus) % mcu_columns)[:, None, None]
    lines = mcu_row * 16 + ((quarter // 2) % 2 * 8)[:, None, None] + block_rows
    columns = mcu_column * 16 + (quarter % 2 * 8)[:, None, None] + block_columns
    pixels = (
        sample * stride_sample
        + tl.minimum(lines, height - 1).to(tl.int64) * stride_line
        + tl.minimum(columns, width - 1).to(tl.int64) * stride_column
    )
    red = tl.load(images + pixels, mask=valid, other=0).to(tl.int32)
    green = tl.load(images + pixels + stride_channel, mask=valid, other=0).to(tl.int32)
    blue = tl.load(images + pixels + 2 * stride_channel, mask=valid, other=0).to(tl.int32)
    luma = (_LUMA_RED * red + _LUMA_GREEN * green + _LUMA_BLUE * blue + (1 << 15)) >> 16
    luma_steps = tl.load(steps + sample * 128 + frequencies, mask=valid, other=1)
    luma = _block_round_trip(luma, forward, inverse, luma_steps)
    stored = valid & (lines < height) & (columns < width)
    plane = sample * height * width + lines.to(tl.int64) * width + columns
    tl.store(luma_out + plane, luma.to(tl.uint8), mask=stored)

    # Chroma: one Cb and one Cr block per MCU. Each sample sums 2×2 pixels of the planes extended to an even
    # height and a multiple of 16 columns by repeating their last row and column; the downsampled planes'
    # rows past the last are copies of it (the codec pads them after downsampling).
    mcu = tl.program_id(0) * MCUS + tl.arange(0, MCUS)
    valid = (mcu < all_mcus)[:, None, None]
    sample = (mcu // image_mcus).to(tl.int64)[:, None, None]
    mcu_row = ((mcu % image_mcus) // mcu_columns)[:, None, None]
    mcu_column = ((mcu % image_mcus) % mcu_columns)[:, None, None]
    chroma_lines = mcu_row * 8 + block_rows
    chroma_columns = mcu_column * 8 + block_columns
    top = 2 * tl.minimum(chroma_lines, chroma_height - 1)
    bottom = tl.minimum(top + 1, height - 1)
    left = tl.minimum(2 * chroma_columns, width - 1)
    right = tl.minimum(2 * chroma_columns + 1, width - 1)
    offsets = sample * stride_sample
    cb_top_left, cr_top_left = _chroma_at(images, offsets, top, left, stride_line, stride_column, stride_channel, valid)
    cb_top_right, cr_top_right = _chroma_at(
        images, offsets, top, right, stride_line, stride_column, stride_channel, valid
    )
    cb_bottom_left, cr_bottom_left = _chroma_at(
        images, offsets, bottom, left, stride_line, stride_column, stride_channel, valid
    )
    cb_bottom_right, cr_bottom_right = _chroma_at(
        images, offsets, bottom, right, stride_line, stride_column, stride_channel, valid
    )
    bias = chroma_columns % 2 + 1  # jcsample's alternating 1, 2 (block columns start at even indices)
    blue_difference = (cb_top_left + cb_top_right + cb_bottom_left + cb_bottom_right + bias) >> 2
    red_difference = (cr_top_left + cr_top_right + cr_bottom_left + cr_bottom_right + bias) >> 2
    chroma_steps = tl.load(steps + sample * 128 + 64 + frequencies, mask=valid, other=1)
    blue_difference = _block_round_trip(blue_difference, forward, inverse, chroma_steps)
    red_difference = _block_round_trip(red_difference, forward, inverse, chroma_steps)
    stored = valid & (chroma_lines < chroma_height) & (chroma_columns < chroma_width)
    chroma_plane = chroma_height * chroma_width
    plane = sample * 2 * chroma_plane + chroma_lines.to(tl.int64) * chroma_width + chroma_columns
    tl.store(chroma_out + plane, blue_difference.to(tl.uint8), mask=stored)
    tl.store(chroma_out + plane + chroma_plane, red_difference.to(tl.uint8), mask=stored)


def decoded_components(images: Tensor, steps: Tensor, matrices: Tensor) -> tuple[Tensor, Tensor]:
    """The first kernel's launch: uint8 ``images`` (B, 3, H, W) (any strides), int32 ``steps`` (B, 2, 8, 8),
    int32 ``matrices`` (2, 8, 8) (the forward and inverse DCT matrices) → decoded uint8 luma (B, H, W)
    and chroma (B, 2, ⌈H/2⌉, ⌈W/2⌉), as :func:`ccc.render_torch.jpeg.decoded_components`."""
    batch, _, height, width = images.shape
    chroma_height, chroma_width = (height + 1) // 2, (width + 1) // 2
    luma = torch.empty((batch, height, width), dtype=torch.uint8, device=images.device)
    chroma = torch.empty((batch, 2, chroma_height, chroma_width), dtype=torch.uint8, device=images.device)
    mcu_columns = triton.cdiv(width, 16)
    image_mcus = triton.cdiv(height, 16) * mcu_columns
    all_mcus = batch * image_mcus
    launch(
        _decoded_components_kernel,
        (triton.cdiv(all_mcus, _MCUS),),
        images.device,
        images,
        steps.contiguous(),
        matrices.contiguous(),
        luma,
        chroma,
        height,
        width,
        chroma_height,
        chroma_width,
        mcu_columns,
        image_mcus,
        all_mcus,
        *images.stride(),
        MCUS=_MCUS,
    )
    return luma, chroma


@triton.jit
def _upsampled(chroma, here, across, along, diagonal, bias):
    """jdsample's fancy h2v2 upsampling of one output pixel from the chroma samples at offsets ``here``
    (its own), ``across`` (the nearest row's), ``along`` (the nearest column's) and ``diagonal``."""
    own = 3 * tl.load(chroma + here).to(tl.int32) + tl.load(chroma + across).to(tl.int32)
    beside = 3 * tl.load(chroma + along).to(tl.int32) + tl.load(chroma + diagonal).to(tl.int32)
    return (3 * own + beside + bias) >> 4


@triton.jit
def _upsample_to_rgb_kernel(
    luma,
    chroma,
    output,
    height,
    width,
    chroma_height,
    chroma_width,
    REPLICATE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    sample = tl.program_id(0).to(tl.int64)
    pixels = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = pixels < height * width
    line = pixels // width
    column = pixels % width
    chroma_line = line // 2
    chroma_column = column // 2
    if REPLICATE:
        # libjpeg-turbo copies each sample 2×2 for chroma widths <= 2; the neighbours all being the sample
        # itself, the fancy sum is 16 · sample + bias (bias < 16), whose >> 4 is that copy
        nearest_line = chroma_line
        nearest_column = chroma_column
    else:
        nearest_line = tl.where(
            line % 2 == 0, tl.maximum(chroma_line - 1, 0), tl.minimum(chroma_line + 1, chroma_height - 1)
        )
        nearest_column = tl.where(
            column % 2 == 0, tl.maximum(chroma_column - 1, 0), tl.minimum(chroma_column + 1, chroma_width - 1)
        )
    bias = tl.where(column % 2 == 0, 8, 7)
    # out-of-image lanes read sample 0 of the plane (offset 0 of every term) and store nothing
    here = tl.where(inside, chroma_line * chroma_width + chroma_column, 0).to(tl.int64)
    across = tl.where(inside, nearest_line * chroma_width + chroma_column, 0).to(tl.int64)
    along = tl.where(inside, chroma_line * chroma_width + nearest_column, 0).to(tl.int64)
    diagonal = tl.where(inside, nearest_line * chroma_width + nearest_column, 0).to(tl.int64)
    chroma_plane = chroma_height * chroma_width
    blue_plane = chroma + sample * 2 * chroma_plane
    blue_difference = _upsampled(blue_plane, here, across, along, diagonal, bias) - 128
    red_difference = _upsampled(blue_plane + chroma_plane, here, across, along, diagonal, bias) - 128

    plane = height * width
    level = tl.load(luma + sample * plane + pixels, mask=inside, other=0).to(tl.int32)
    red = level + ((_RED_CR * red_difference + (1 << 15)) >> 16)
    green = level + ((_GREEN_CB * blue_difference + _GREEN_CR * red_difference + (1 << 15)) >> 16)
    blue = level + ((_BLUE_CB * blue_difference + (1 << 15)) >> 16)
    image = output + sample * 3 * plane + pixels
    tl.store(image, tl.minimum(tl.maximum(red, 0), 255).to(tl.uint8), mask=inside)
    tl.store(image + plane, tl.minimum(tl.maximum(green, 0), 255).to(tl.uint8), mask=inside)
    tl.store(image + 2 * plane, tl.minimum(tl.maximum(blue, 0), 255).to(tl.uint8), mask=inside)


def upsample_to_rgb(luma: Tensor, chroma: Tensor) -> Tensor:
    """The second kernel's launch: uint8 ``luma`` (B, H, W) and ``chroma`` (B, 2, ⌈H/2⌉, ⌈W/2⌉) → uint8 RGB
    (B, 3, H, W), as :func:`ccc.render_torch.jpeg.upsample_to_rgb`."""
    batch, height, width = luma.shape
    chroma_height, chroma_width = chroma.shape[2:]
    output = torch.empty((batch, 3, height, width), dtype=torch.uint8, device=luma.device)
    launch(
        _upsample_to_rgb_kernel,
        (batch, triton.cdiv(height * width, _BLOCK)),
        luma.device,
        luma.contiguous(),
        chroma.contiguous(),
        output,
        height,
        width,
        chroma_height,
        chroma_width,
        REPLICATE=chroma_width <= 2,
        BLOCK=_BLOCK,
    )
    return output
