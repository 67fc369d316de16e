"""JPEG round trips of uint8 batches as integer tensor arithmetic (the stream's final quality-85 step and
the ``jpeg`` corruption), on any device, one quality per sample.

A round trip needs no entropy coding: Huffman coding is lossless, so decoding an encoded image gives
back the quantised coefficients unchanged, and the decoded pixels follow from the pixels, the quality
and the codec's arithmetic alone. This module computes them with the arithmetic of libjpeg-turbo, the
codec behind Pillow (``Image.save(format="JPEG", quality=q)`` then ``Image.open(...).convert("RGB")``,
the CPU path's encode and decode), stage by stage, all in int32:

1. RGB → YCbCr with 16-bit fixed-point coefficients (libjpeg-turbo's ``jccolor``), Cb and Cr rounded
   with ``1/2 − 2⁻¹⁶`` so that they never exceed 255;
2. 4:2:0 chroma (Pillow's default for RGB): 2×2 sums with the alternating bias 1, 2, 1, 2, … along a
   row, ``>> 2`` (``jcsample``'s h2v2 downsampling). Edges as the encoder pads them: the full-resolution
   planes are extended by repeating the last row to an even height and the last column to a multiple
   of 16 (``jcsample``'s right-edge expansion), the downsampled planes by repeating their last row to
   a multiple of 8 (``jcprepct``'s bottom-edge expansion), luma by repeating its last row and column;
3. 8×8 forward DCT, "islow" (``jfdctint``): rows, then columns, 13-bit constants, descaled by rounding
   shifts between and after the passes (coefficients scaled by 8);
4. quantisation by ``8 · Q`` rounded half away from zero (``jcdctmgr``; its reciprocal multiplication
   equals this division for every divisor and every coefficient of 8-bit samples, checked exhaustively
   by ``tests/ccc/render_torch/test_jpeg.py``), with the standard tables (ITU T.81 Annex K) scaled by
   quality like ``jcparam``'s ``jpeg_set_quality(quality, force_baseline=TRUE)``, which Pillow calls:
   scale ``5000 / q`` below 50, ``200 − 2q`` from 50, entries ``(base · scale + 50) / 100`` clamped to
   [1, 255];
5. dequantisation and the 8×8 inverse DCT, "islow" (``jidctint``): columns, then rows, range-limited
   to [0, 255] around 128;
6. chroma upsampling (``jdsample``): "fancy" h2v2 (triangle) upsampling, weights 3/4 and 1/4 along each
   axis, biases 8 and 7 on the even and odd output columns, ``>> 4``, the planes' first and last real
   row and column repeated outwards (``jdmainct``'s context rows, ``jdsample``'s edge columns); for a
   chroma width ≤ 2 (image width ≤ 4) libjpeg-turbo replicates each chroma sample 2×2 instead;
7. YCbCr → RGB with ``jdcolor``'s fixed-point tables, clamped to [0, 255].

Each DCT pass is an integer 8×8 matrix product followed by a rounding right shift: libjpeg-turbo's
butterflies (:func:`_forward_butterfly`, :func:`_inverse_butterfly`) are linear with integer constants
until their final descale, so their matrices (evaluated on unit vectors at import) give exactly their
pre-descale sums. Products are elementwise int32 multiplications and sums (integer ``@`` is not
supported on CUDA). int32 never overflows: both matrices are 2¹³ · √8 times an orthogonal matrix to
four digits (largest singular value 23,172), so by Cauchy–Schwarz every sum and partial sum of a pass
is at most 23,172 times the L2 norm of its input vector, and a block's L2 (Frobenius) norm is at most
1,024 as level-shifted samples, 11,590 after the forward row pass, 2,045 as dequantised coefficients
(the DCT's 1,024 plus at most ``Q / 2 ≤ 127.5`` of rounding per coefficient) and 23,142 after the
inverse column pass; hence every sum is below 23,172 · 23,142 < 2³⁰. The colour conversions stay
below 2²⁶.

The range limit of the inverse DCT is a clamp to [0, 255]: libjpeg-turbo's SIMD code (which Pillow's
x86 and Arm builds run) saturates; its C table clamps only within [−512, 511] of 128 and wraps beyond,
which encoded 8-bit images do not reach in practice (binary noise at quality 1 decodes to [−362, 345]).

Operations per call are independent of the batch size (no per-sample loop, no host read of device
data): the constant tables are copied to a device once per process, the per-sample quantisation tables
are built on the device from the qualities.

The stages are two operators, stages 1 to 5 (:func:`decoded_components`, uint8 decoded luma and chroma
planes) and 6 to 7 (:func:`upsample_to_rgb`): ATen compositions on every device, and on CUDA one Triton
kernel each (:mod:`._triton.jpeg`), which keep the blocks in registers and give the same integers.
"""

from __future__ import annotations

import warnings
from functools import lru_cache
from typing import Callable, Sequence

import torch
from torch import Tensor
from torchvision.io import decode_jpeg, encode_jpeg

from ._libjpeg import CONST_BITS, FORWARD_SHIFTS, INVERSE_SHIFTS, fix16
from ._triton import fuses
from ._upload import to_device

__all__ = ["FINAL_QUALITY", "integer_jpeg_round_trip", "jpeg_round_trip", "quantisation_tables"]

FINAL_QUALITY = 85
"""Quality of the stream's final JPEG encoding (``ccc.render.JPEG_QUALITY``)."""

_CODEC_DEPRECATION = "The image decoding and encoding capabilities of TorchVision are deprecated"
"""torchvision 0.29 deprecates its codecs in favour of TorchCodec (not a dependency); silenced around the calls."""

_LUMA_TABLE = (
    (16, 11, 10, 16, 24, 40, 51, 61),
    (12, 12, 14, 19, 26, 58, 60, 55),
    (14, 13, 16, 24, 40, 57, 69, 56),
    (14, 17, 22, 29, 51, 87, 80, 62),
    (18, 22, 37, 56, 68, 109, 103, 77),
    (24, 35, 55, 64, 81, 104, 113, 92),
    (49, 64, 78, 87, 103, 121, 120, 101),
    (72, 92, 95, 98, 112, 100, 103, 99),
)
"""ITU T.81 Annex K luminance quantisation table, row-major (vertical frequency, horizontal frequency)."""

_CHROMA_TABLE = (
    (17, 18, 24, 47, 99, 99, 99, 99),
    (18, 21, 26, 66, 99, 99, 99, 99),
    (24, 26, 56, 99, 99, 99, 99, 99),
    (47, 66, 99, 99, 99, 99, 99, 99),
) + ((99,) * 8,) * 4
"""ITU T.81 Annex K chrominance quantisation table, row-major."""

_FIX13 = {
    "0.298631336": 2446,
    "0.390180644": 3196,
    "0.541196100": 4433,
    "0.765366865": 6270,
    "0.899976223": 7373,
    "1.175875602": 9633,
    "1.501321110": 12299,
    "1.847759065": 15137,
    "1.961570560": 16069,
    "2.053119869": 16819,
    "2.562915447": 20995,
    "3.072711026": 25172,
}
"""The islow DCTs' constants: ``round(c · 2¹³)`` for the cosine combinations ``c`` that name them."""


def _forward_butterfly(x: Sequence[int]) -> list[int]:
    """libjpeg-turbo's islow forward 1-D DCT of 8 integers before its descale, every output at scale 2¹³.

    The codec leaves outputs 0 and 4 unscaled and shifts them left by PASS1_BITS in the row pass or
    descales them by PASS1_BITS in the column pass; scaled by 2¹³ they take the common descale shift of
    their pass exactly (a multiple of 2¹³ plus the rounding bias shifts like the unscaled value).
    """
    fix = _FIX13
    sum07, diff07 = x[0] + x[7], x[0] - x[7]
    sum16, diff16 = x[1] + x[6], x[1] - x[6]
    sum25, diff25 = x[2] + x[5], x[2] - x[5]
    sum34, diff34 = x[3] + x[4], x[3] - x[4]
    even_sum, even_diff = sum07 + sum34, sum07 - sum34
    odd_sum, odd_diff = sum16 + sum25, sum16 - sum25
    out = [0] * 8
    out[0] = (even_sum + odd_sum) << CONST_BITS
    out[4] = (even_sum - odd_sum) << CONST_BITS
    rotated = (odd_diff + even_diff) * fix["0.541196100"]
    out[2] = rotated + even_diff * fix["0.765366865"]
    out[6] = rotated - odd_diff * fix["1.847759065"]
    out[7], out[5], out[3], out[1] = _odd_part(diff34, diff25, diff16, diff07)
    return out


def _odd_part(a: int, b: int, c: int, d: int) -> tuple[int, int, int, int]:
    """The islow DCTs' shared odd part (figure 8 of Loeffler, Ligtenberg and Moschytz) of four integers."""
    fix = _FIX13
    shared = (a + c + b + d) * fix["1.175875602"]
    ad = (a + d) * -fix["0.899976223"]
    bc = (b + c) * -fix["2.562915447"]
    ac = (a + c) * -fix["1.961570560"] + shared
    bd = (b + d) * -fix["0.390180644"] + shared
    return (
        a * fix["0.298631336"] + ad + ac,
        b * fix["2.053119869"] + bc + bd,
        c * fix["3.072711026"] + bc + ac,
        d * fix["1.501321110"] + ad + bd,
    )


def _inverse_butterfly(x: Sequence[int]) -> list[int]:
    """libjpeg-turbo's islow inverse 1-D DCT of 8 integers before its descale (scale 2¹³)."""
    fix = _FIX13
    rotated = (x[2] + x[6]) * fix["0.541196100"]
    low_diff = rotated - x[6] * fix["1.847759065"]
    low_sum = rotated + x[2] * fix["0.765366865"]
    dc_sum, dc_diff = (x[0] + x[4]) << CONST_BITS, (x[0] - x[4]) << CONST_BITS
    even = (dc_sum + low_sum, dc_diff + low_diff, dc_diff - low_diff, dc_sum - low_sum)
    odd7, odd5, odd3, odd1 = _odd_part(x[7], x[5], x[3], x[1])
    odd = (odd1, odd3, odd5, odd7)
    return [even[n] + odd[n] for n in range(4)] + [even[3 - n] - odd[3 - n] for n in range(4)]


def _butterfly_matrix(butterfly: Callable[[Sequence[int]], list[int]]) -> list[list[int]]:
    """The 8×8 integer matrix ``M`` with ``butterfly(x) == M @ x`` (columns: the unit vectors' images)."""
    columns = [butterfly([int(k == j) for k in range(8)]) for j in range(8)]
    return [[columns[j][n] for j in range(8)] for n in range(8)]


_CONSTANTS = torch.tensor(
    [_butterfly_matrix(_forward_butterfly), _butterfly_matrix(_inverse_butterfly), _LUMA_TABLE, _CHROMA_TABLE],
    dtype=torch.int32,
)
"""int32 (4, 8, 8): forward and inverse DCT matrices, luma and chroma base quantisation tables."""


@lru_cache(maxsize=16)
def _constants_on(device: torch.device) -> Tensor:
    """:data:`_CONSTANTS` on ``device``, copied there once per process."""
    return to_device(_CONSTANTS, device)


def quantisation_tables(qualities: Tensor) -> Tensor:
    """libjpeg's ``jpeg_set_quality(q, force_baseline=TRUE)`` tables for each sample, on its device.

    Args:
        qualities: integer (B,) JPEG qualities; values outside [1, 100] are clamped, as libjpeg does.

    Returns:
        int32 (B, 2, 8, 8): luma and chroma quantisation steps in [1, 255], row-major (vertical,
        horizontal frequency), on ``qualities.device``.
    """
    quality = qualities.to(torch.int32).clamp(1, 100)
    scale = torch.where(quality < 50, 5000 // quality, 200 - 2 * quality)
    return ((_constants_on(qualities.device)[2:] * scale[:, None, None, None] + 50) // 100).clamp(1, 255)


def jpeg_round_trip(images: Tensor, quality: int | Tensor = FINAL_QUALITY) -> Tensor:
    """Encode every image as a baseline 4:2:0 JPEG at its quality and decode it: Pillow's decoded bytes.

    Args:
        images: uint8 (B, 3, H, W) RGB on any device, H and W ≥ 1.
        quality: JPEG quality, an int in [1, 100] for the whole batch or an integer tensor (B,) on
            ``images.device`` (values outside [1, 100] clamped, as libjpeg does).

    Returns:
        uint8 (B, 3, H, W) on ``images.device``, equal to Pillow's decode of Pillow's ``quality``
        encode of each image. On the CPU libjpeg-turbo itself computes it (``torchvision.io``, the
        library Pillow uses, one call per distinct quality: about 8× faster there than the tensor
        arithmetic); on every other device :func:`integer_jpeg_round_trip`, which gives the same bytes
        (``tests/ccc/render_torch/test_jpeg.py`` checks both against Pillow).
    """
    qualities = _qualities(images, quality)
    if images.device.type != "cpu":
        return integer_jpeg_round_trip(images, qualities)
    output = torch.empty_like(images)
    levels = qualities.clamp(1, 100).tolist()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_CODEC_DEPRECATION, category=DeprecationWarning)
        for level in sorted(set(levels)):
            members = [k for k, other in enumerate(levels) if other == level]
            encoded = encode_jpeg([images[k].contiguous() for k in members], quality=level)
            output[members] = torch.stack(decode_jpeg(encoded))
    return output


def _qualities(images: Tensor, quality: int | Tensor) -> Tensor:
    """``quality`` checked against ``images`` (see :func:`jpeg_round_trip`) as a tensor (B,) on their device."""
    if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1] != 3 or 0 in images.shape[2:]:
        raise ValueError(f"images must be uint8 (B, 3, H, W) with H, W >= 1, got {images.dtype} {tuple(images.shape)}")
    batch = images.shape[0]
    device = images.device
    if isinstance(quality, Tensor):
        if quality.shape != (batch,) or quality.dtype.is_floating_point or quality.device != device:
            raise ValueError(
                f"quality must be an integer tensor ({batch},) on {device}, "
                f"got {quality.dtype} {tuple(quality.shape)} on {quality.device}"
            )
        return quality
    if isinstance(quality, bool) or not isinstance(quality, int) or not 1 <= quality <= 100:
        raise ValueError(f"quality must be an int in [1, 100] or a tensor, got {quality!r}")
    return torch.full((batch,), quality, dtype=torch.int32, device=device)


def integer_jpeg_round_trip(images: Tensor, quality: int | Tensor = FINAL_QUALITY) -> Tensor:
    """:func:`jpeg_round_trip` as integer tensor arithmetic (the module documentation), on any device.

    Arguments and result as :func:`jpeg_round_trip`; the operations do not depend on the batch size and
    read no device data on the host. Two operators: :func:`decoded_components` (stages 1 to 5) and
    :func:`upsample_to_rgb` (stages 6 and 7), each one Triton kernel on CUDA.
    """
    qualities = _qualities(images, quality)
    if images.shape[0] == 0:
        return images.clone()
    luma, chroma = decoded_components(images, quantisation_tables(qualities))
    return upsample_to_rgb(luma, chroma)


def _composed_components(images: Tensor, steps: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`decoded_components` in ATen operations: the whole planes, stage by stage."""
    _, _, height, width = images.shape
    forward, inverse = _constants_on(images.device)[:2].unbind(0)
    tables = steps.permute(2, 3, 0, 1)

    luma, chroma = _rgb_to_ycbcr(images.to(torch.int32))
    luma_planes = _pad(luma[:, None], _round_up(height, 8), _round_up(width, 8))
    chroma_planes = _downsample(_pad(chroma, _round_up(height, 2), _round_up(width, 16)))
    chroma_height, chroma_width = (height + 1) // 2, (width + 1) // 2
    chroma_planes = _pad(chroma_planes, _round_up(chroma_height, 8), chroma_planes.shape[-1])

    luma_blocks, chroma_blocks = _to_blocks(luma_planes), _to_blocks(chroma_planes)
    luma_count = luma_blocks.shape[-1]
    blocks = torch.cat([luma_blocks, chroma_blocks], dim=-1).sub_(128)
    coefficients = _dct_pass(_dct_pass(blocks, forward, FORWARD_SHIFTS[0], 1), forward, FORWARD_SHIFTS[1], 0)
    # Quantisation steps per block: the luma blocks come first, then the two chroma planes' blocks.
    chroma_count = blocks.shape[-1] - luma_count
    block_steps = torch.cat(
        [tables[..., :1].expand(-1, -1, -1, luma_count), tables[..., 1:].expand(-1, -1, -1, chroma_count)], -1
    )
    dequantised = _quantise_dequantise(coefficients, block_steps)
    samples = _dct_pass(_dct_pass(dequantised, inverse, INVERSE_SHIFTS[0], 0), inverse, INVERSE_SHIFTS[1], 1)
    samples = samples.add_(128).clamp_(0, 255).to(torch.uint8)

    luma_samples = _from_blocks(samples[..., :luma_count], luma_planes.shape)[:, 0, :height, :width]
    chroma_samples = _from_blocks(samples[..., luma_count:], chroma_planes.shape)[..., :chroma_height, :chroma_width]
    return luma_samples.contiguous(), chroma_samples.contiguous()


@torch.library.custom_op("ccc::jpeg_decoded_components", mutates_args=())
def decoded_components(images: Tensor, steps: Tensor) -> tuple[Tensor, Tensor]:
    """Stages 1 to 5 of the round trip (the module documentation): what a decoder holds before upsampling.

    Args:
        images: uint8 (B, 3, H, W) RGB levels, H and W >= 1.
        steps: int32 (B, 2, 8, 8) luma and chroma quantisation steps in [1, 255]
            (:func:`quantisation_tables`).

    Returns:
        The decoded luma, uint8 (B, H, W), and chroma (Cb, Cr), uint8 (B, 2, ⌈H/2⌉, ⌈W/2⌉), the padding
        of the codec's blocks cut off: in ATen operations (:func:`_composed_components`), or on CUDA one
        Triton kernel per 16×16 pixels' blocks (:mod:`._triton.jpeg`, where :func:`~._triton.fuses`). The
        same integers either way.
    """
    return _composed_components(images, steps)


@decoded_components.register_kernel("cuda")
def _decoded_components_cuda(images: Tensor, steps: Tensor) -> tuple[Tensor, Tensor]:
    if not fuses(images.device):
        return _composed_components(images, steps)
    from ._triton.jpeg import decoded_components as kernel

    return kernel(images, steps, _constants_on(images.device)[:2])


@decoded_components.register_fake
def _decoded_components_shape(images: Tensor, steps: Tensor) -> tuple[Tensor, Tensor]:
    batch, _, height, width = images.shape
    luma = images.new_empty((batch, height, width))
    return luma, images.new_empty((batch, 2, (height + 1) // 2, (width + 1) // 2))


def _composed_upsample_to_rgb(luma: Tensor, chroma: Tensor) -> Tensor:
    """:func:`upsample_to_rgb` in ATen operations."""
    _, height, width = luma.shape
    upsampled = _upsample(chroma.to(torch.int32), height, width)
    return _ycbcr_to_rgb(luma.to(torch.int32), upsampled)


@torch.library.custom_op("ccc::jpeg_upsample_to_rgb", mutates_args=())
def upsample_to_rgb(luma: Tensor, chroma: Tensor) -> Tensor:
    """Stages 6 and 7 of the round trip: chroma upsampled (:func:`_upsample`) and YCbCr converted to RGB.

    Args:
        luma: uint8 (B, H, W) decoded luma.
        chroma: uint8 (B, 2, ⌈H/2⌉, ⌈W/2⌉) decoded Cb and Cr.

    Returns:
        uint8 (B, 3, H, W) RGB levels: in ATen operations (:func:`_composed_upsample_to_rgb`), or on CUDA
        one Triton kernel (:mod:`._triton.jpeg`, where :func:`~._triton.fuses`). The same bytes either way.
    """
    return _composed_upsample_to_rgb(luma, chroma)


@upsample_to_rgb.register_kernel("cuda")
def _upsample_to_rgb_cuda(luma: Tensor, chroma: Tensor) -> Tensor:
    if not fuses(luma.device):
        return _composed_upsample_to_rgb(luma, chroma)
    from ._triton.jpeg import upsample_to_rgb as kernel

    return kernel(luma, chroma)


@upsample_to_rgb.register_fake
def _upsample_to_rgb_shape(luma: Tensor, chroma: Tensor) -> Tensor:
    return luma.new_empty((luma.shape[0], 3, *luma.shape[1:]))


def _round_up(size: int, multiple: int) -> int:
    """The smallest multiple of ``multiple`` (≥ 1) that is ≥ ``size``."""
    return -(-size // multiple) * multiple


def _pad(planes: Tensor, height: int, width: int) -> Tensor:
    """Extend (..., h, w) planes to (..., height ≥ h, width ≥ w) by repeating their last row and column."""
    rows, columns = planes.shape[-2:]
    if height > rows:
        planes = torch.cat([planes, planes[..., -1:, :].expand(*planes.shape[:-2], height - rows, columns)], dim=-2)
    if width > columns:
        planes = torch.cat([planes, planes[..., -1:].expand(*planes.shape[:-1], width - columns)], dim=-1)
    return planes


def _rgb_to_ycbcr(rgb: Tensor) -> tuple[Tensor, Tensor]:
    """int32 (B, 3, H, W) levels → luma int32 (B, H, W) and chroma int32 (B, 2, H, W), all in [0, 255]."""
    red, green, blue = rgb.unbind(1)
    half, centre = 1 << 15, 128 << 16
    luma = (fix16(0.299) * red + fix16(0.587) * green + fix16(0.114) * blue + half) >> 16
    blue_difference = -fix16(0.16874) * red - fix16(0.33126) * green + fix16(0.5) * blue
    red_difference = fix16(0.5) * red - fix16(0.41869) * green - fix16(0.08131) * blue
    chroma = (torch.stack([blue_difference, red_difference], dim=1) + (centre + half - 1)) >> 16
    return luma, chroma


def _downsample(planes: Tensor) -> Tensor:
    """h2v2 downsampling of int32 (B, C, 2h, 2w) planes → (B, C, h, w): 2×2 sums plus bias 1, 2, 1, 2, …, ``>> 2``."""
    sums = planes[..., 0::2, 0::2] + planes[..., 0::2, 1::2] + planes[..., 1::2, 0::2] + planes[..., 1::2, 1::2]
    bias = torch.arange(sums.shape[-1], device=planes.device, dtype=torch.int32) % 2 + 1
    return (sums + bias) >> 2


def _to_blocks(planes: Tensor) -> Tensor:
    """int32 (B, C, 8m, 8n) planes → (8, 8, B, C·m·n): the samples of each 8×8 block (row, column)
    along the first two axes, the blocks plane by plane, row-major, along the last."""
    batch, channels, height, width = planes.shape
    blocks = planes.reshape(batch, channels, height // 8, 8, width // 8, 8).permute(3, 5, 0, 1, 2, 4)
    return blocks.reshape(8, 8, batch, -1)


def _from_blocks(blocks: Tensor, shape: torch.Size) -> Tensor:
    """The inverse of :func:`_to_blocks` for planes of ``shape`` (B, C, 8m, 8n)."""
    batch, channels, height, width = shape
    planes = blocks.reshape(8, 8, batch, channels, height // 8, width // 8).permute(2, 3, 4, 0, 5, 1)
    return planes.reshape(shape)


def _dct_pass(blocks: Tensor, matrix: Tensor, shift: int, axis: int) -> Tensor:
    """One islow pass over int32 (8, 8, ...) blocks along ``axis`` (0: columns, 1: rows):
    ``(matrix @ v + 2^(shift-1)) >> shift`` for every vector ``v`` along it.

    The product is eight multiply-adds of whole slices (the blocks' other axes stay innermost and
    contiguous), which every device runs in int32.
    """
    vectors = blocks.movedim(axis, 0).unbind(0)
    weights = matrix.reshape(8, 8, *(1,) * (blocks.ndim - 1)).unbind(1)
    output = weights[0] * vectors[0]
    for k in range(1, 8):
        output.addcmul_(weights[k], vectors[k])
    return output.add_(1 << (shift - 1)).bitwise_right_shift_(shift).movedim(0, axis)


def _quantise_dequantise(coefficients: Tensor, steps: Tensor) -> Tensor:
    """Divide int32 coefficients (scaled by 8) by ``8 · step``, rounding half away from zero, and multiply
    back by ``step`` (broadcastable int32 in [1, 255]): the dequantised coefficients a decoder reads."""
    rounded = coefficients + coefficients.sign() * (4 * steps)
    return torch.div(rounded, 8 * steps, rounding_mode="trunc").mul_(steps)


def _upsample(chroma: Tensor, height: int, width: int) -> Tensor:
    """libjpeg-turbo's h2v2 chroma upsampling of int32 (B, 2, h, w) → (B, 2, height, width).

    Fancy (triangle) upsampling when ``w > 2``, else each sample repeated 2×2 (as the codec chooses).
    """
    if chroma.shape[-1] <= 2:
        output = chroma.repeat_interleave(2, dim=-2).repeat_interleave(2, dim=-1)
        return output[..., :height, :width]
    nearest = 3 * chroma
    above = torch.cat([chroma[..., :1, :], chroma[..., :-1, :]], dim=-2)
    below = torch.cat([chroma[..., 1:, :], chroma[..., -1:, :]], dim=-2)
    column_sums = torch.stack([nearest + above, nearest + below], dim=-2).flatten(-3, -2)
    nearest = 3 * column_sums
    left = torch.cat([column_sums[..., :1], column_sums[..., :-1]], dim=-1)
    right = torch.cat([column_sums[..., 1:], column_sums[..., -1:]], dim=-1)
    output = torch.stack([(nearest + left + 8) >> 4, (nearest + right + 7) >> 4], dim=-1).flatten(-2)
    return output[..., :height, :width]


def _ycbcr_to_rgb(luma: Tensor, chroma: Tensor) -> Tensor:
    """int32 luma (B, H, W) and chroma (B, 2, H, W) in [0, 255] → uint8 RGB (B, 3, H, W)."""
    blue_difference, red_difference = (chroma - 128).unbind(1)
    half = 1 << 15
    red = luma + ((fix16(1.40200) * red_difference + half) >> 16)
    green = luma + ((-fix16(0.34414) * blue_difference - fix16(0.71414) * red_difference + half) >> 16)
    blue = luma + ((fix16(1.77200) * blue_difference + half) >> 16)
    return torch.stack([red, green, blue], dim=1).clamp_(0, 255).to(torch.uint8)
