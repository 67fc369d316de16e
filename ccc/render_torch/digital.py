"""Digital corruptions in torch: brightness, contrast, saturate, pixelate, jpeg and elastic.

The first five are deterministic and follow the CPU path (``ccc.corruptions.digital``) closely:

- brightness, saturate: scikit-image's RGB→HSV→RGB formulas (as ``ccc.corruptions._kernels.adjust_hsv``
  evaluates them) on whole tensors in the working dtype (float64: the CPU's bytes), from the inputs'
  exact byte levels ``round(x * 255) / 255``;
- contrast: the reference's float64 arithmetic around each image's per-channel mean (in the working dtype);
- pixelate: Pillow's BOX down- and up-resize as exact integer matrices (:mod:`._resample`): Pillow's bytes;
- jpeg: a JPEG round trip at ``round(quality)`` in libjpeg-turbo's integer arithmetic
  (:mod:`.jpeg`): Pillow's bytes, one call for the whole batch with per-sample qualities.

Each corruption is registered as its host half, ``prepare_<name>`` (the registry's contract: host
severities float64 (B,) in (0, 5], a :class:`SampleRandom` (unused by the first five), the images' size, the
working float dtype (``torch.float64`` or ``torch.float32``; pixelate and jpeg are integer arithmetic and
ignore it) and the batch's upload), and exported whole under its name. The step takes images float32
(B, 3, H, W) whose values are byte levels ``k / 255`` (as the pipeline passes them) and returns float32
(B, 3, H, W) in [0, 1], the reference's value before its uint8 truncation over 255 (rounded to float32 so
that ``floor(x * 255)`` gives the reference's byte).

Elastic transform (ImageNet-C's ``elastic_transform``, registered as ``elastic``; digital on the CPU
side too) mirrors :func:`ccc.corruptions.digital.elastic` step by step with per-sample severities:

1. affine jitter: three control points move by ``uniform(-jitter, jitter)``; the affine map is
   solved per sample and applied like OpenCV 5's ``warpAffine`` (``INTER_LINEAR``,
   ``BORDER_REFLECT_101``): the inverse map in float32 with OpenCV's fused multiply-adds, and
   reflect-101 neighbours;
2. displacement fields: ``uniform(-1, 1)`` noise smoothed by a Gaussian with scipy's ``reflect``
   borders, as one folded smoothing matrix per sample and axis (the CPU path's
   :func:`~ccc.corruptions.filters.reflect_smoothing_matrix`, bit for bit: the host folds each sample's
   kernel onto one period, the device assembles the matrices; exact for any kernel width, and batched
   although sigma differs per sample), scaled by ``alpha``;
3. sampling like ``scipy.ndimage.map_coordinates(order=1, mode="reflect")``: coordinates folded
   about the pixel edges, float64 bilinear sums stored as float32.

Given the same draws, the result equals the CPU path (``docs/fidelity.md``, "The torch backend"). In
the float32 mode (``dtype=torch.float32``) the float64 steps run in float32 and the fused multiply-adds
are plain float32 multiply-adds. Both samplings are ``ccc::`` operators (:func:`warp_affine_reflect_101`,
:func:`sample_shifted_bilinear_reflect`): on CUDA one Triton kernel each (:mod:`._triton.elastic`), elsewhere
their ATen compositions, the same bits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from ccc.corruptions.filters import reflect_folded_kernel

from ._resample import prepare_resample
from ._triton import fuses
from ._upload import BatchUpload
from .jpeg import jpeg_round_trip
from .numerics import byte_levels, divide, unit_float32, unit_values
from .parameters import per_sample_parameters
from .registry import CorruptionStep, register_torch_corruption

if TYPE_CHECKING:
    from .random import SampleRandom

__all__ = [
    "adjust_hsv",
    "brightness",
    "contrast",
    "elastic",
    "jpeg",
    "pixelate",
    "prepare_brightness",
    "prepare_contrast",
    "prepare_elastic",
    "prepare_jpeg",
    "prepare_pixelate",
    "prepare_saturate",
    "sample_bilinear_reflect",
    "sample_shifted_bilinear_reflect",
    "saturate",
    "warp_affine_reflect_101",
]


def adjust_hsv(unit: Tensor, value_shift: Tensor, saturation_scale: Tensor, saturation_shift: Tensor) -> Tensor:
    """RGB → HSV → adjust → RGB with scikit-image's formulas, elementwise in ``unit``'s dtype.

    Args:
        unit: float64 (or float32) (B, 3, H, W) in [0, 1].
        value_shift, saturation_scale, saturation_shift: (B, 1, 1) each, of ``unit``'s dtype.

    Returns:
        (B, 3, H, W) of ``unit``'s dtype: V becomes ``clip(V + value_shift, 0, 1)``, S
        ``clip(S * scale + shift, 0, 1)``, hue kept; ``rgb2hsv``'s tie rule (blue over green over red) and
        ``hsv2rgb``'s sector table.
    """
    red, green, blue = unit.unbind(1)
    value = torch.maximum(torch.maximum(red, green), blue)
    delta = value - torch.minimum(torch.minimum(red, green), blue)
    grey = delta == 0
    safe_delta = torch.where(grey, 1.0, delta)
    saturation = torch.where(grey, 0.0, delta / torch.where(grey, 1.0, value))
    sector = torch.where(
        blue == value,
        4.0 + (red - green) / safe_delta,
        torch.where(green == value, 2.0 + (blue - red) / safe_delta, (green - blue) / safe_delta),
    )
    hue = torch.where(grey, 0.0, torch.remainder(divide(sector, 6.0), 1.0))
    value = torch.clamp(value + value_shift, 0.0, 1.0)
    saturation = torch.clamp(saturation * saturation_scale + saturation_shift, 0.0, 1.0)
    hue_sector = torch.floor(hue * 6.0)
    fraction = hue * 6.0 - hue_sector
    p = value * (1.0 - saturation)
    q = value * (1.0 - fraction * saturation)
    t = value * (1.0 - (1.0 - fraction) * saturation)
    index = torch.remainder(hue_sector.to(torch.int64), 6)
    table = torch.stack(
        [
            torch.stack([value, t, p]),
            torch.stack([q, value, p]),
            torch.stack([p, value, t]),
            torch.stack([p, q, value]),
            torch.stack([t, p, value]),
            torch.stack([value, p, q]),
        ]
    )
    return torch.gather(table, 0, index.expand(1, 3, *index.shape)).squeeze(0).transpose(0, 1)


def _hsv_corruption(images: Tensor, value_shift: Tensor, scale: Tensor, shift: Tensor) -> Tensor:
    unit = unit_values(images, value_shift.dtype)
    adjusted = adjust_hsv(unit, value_shift.view(-1, 1, 1), scale.view(-1, 1, 1), shift.view(-1, 1, 1))
    return unit_float32(torch.clamp(adjusted, 0, 1) * 255)


def prepare_brightness(
    severities: Tensor, random: SampleRandom, size: tuple[int, int], dtype: torch.dtype, upload: BatchUpload
) -> CorruptionStep:
    """Add the severity's shift (0.1..0.5) to the HSV value."""
    staged = upload.tables(per_sample_parameters("brightness", severities).numpy(), float_dtype=dtype)

    def step(images: Tensor) -> Tensor:
        shift = staged.tensor()
        return _hsv_corruption(images, shift, torch.ones_like(shift), torch.zeros_like(shift))

    return step


def prepare_saturate(
    severities: Tensor, random: SampleRandom, size: tuple[int, int], dtype: torch.dtype, upload: BatchUpload
) -> CorruptionStep:
    """Scale the HSV saturation by the severity's factor (0.3..20) and add its offset (0..0.2)."""
    staged = upload.tables(per_sample_parameters("saturate", severities).numpy(), float_dtype=dtype)

    def step(images: Tensor) -> Tensor:
        parameters = staged.tensor()
        return _hsv_corruption(images, torch.zeros_like(parameters[:, 0]), parameters[:, 0], parameters[:, 1])

    return step


def prepare_contrast(
    severities: Tensor, random: SampleRandom, size: tuple[int, int], dtype: torch.dtype, upload: BatchUpload
) -> CorruptionStep:
    """``clip((x - mean) * factor + mean, 0, 1)`` with each image's per-channel mean, factor 0.4..0.05."""
    staged = upload.tables(per_sample_parameters("contrast", severities).numpy(), float_dtype=dtype)

    def step(images: Tensor) -> Tensor:
        unit = unit_values(images, dtype)
        means = unit.mean(dim=(2, 3), keepdim=True)
        return unit_float32(torch.clamp((unit - means) * staged.tensor().view(-1, 1, 1, 1) + means, 0, 1) * 255)

    return step


def prepare_pixelate(
    severities: Tensor, random: SampleRandom, size: tuple[int, int], dtype: torch.dtype, upload: BatchUpload
) -> CorruptionStep:
    """Pillow BOX resize to ``int(side * factor)`` (factor 0.6..0.25) and back, bytes equal to Pillow's.

    Each sample has its own reduced size; both resizes run on the whole batch at once
    (:func:`._resample.prepare_resample`).
    """
    factors = per_sample_parameters("pixelate", severities).tolist()
    height, width = size
    batch = len(factors)
    reduced = np.array([(int(height * factor), int(width * factor)) for factor in factors], dtype=np.int64)
    whole = np.tile(np.array([0, 0, width, height], dtype=np.int64), (batch, 1))
    small_shape = tuple(reduced.max(axis=0).tolist())
    down = prepare_resample(whole, reduced, small_shape, "box", None, size, upload)
    reduced_boxes = np.concatenate([np.zeros_like(reduced), reduced[:, ::-1]], axis=1)
    full = np.tile(np.array([height, width], dtype=np.int64), (batch, 1))
    up = prepare_resample(reduced_boxes, full, size, "box", None, small_shape, upload)

    def step(images: Tensor) -> Tensor:
        levels = byte_levels(images, torch.float32).to(torch.uint8).permute(0, 2, 3, 1)
        return divide(up(down(levels)).permute(0, 3, 1, 2).to(torch.float32), 255.0)

    return step


def prepare_jpeg(
    severities: Tensor, random: SampleRandom, size: tuple[int, int], dtype: torch.dtype, upload: BatchUpload
) -> CorruptionStep:
    """JPEG round trip at quality ``round(table(severity))`` (85..7, rounded half to even like Python's
    ``round``), all samples in one :func:`ccc.render_torch.jpeg.jpeg_round_trip` call."""
    staged = upload.tables(torch.round(per_sample_parameters("jpeg", severities)).to(torch.int64).numpy())

    def step(images: Tensor) -> Tensor:
        levels = byte_levels(images, torch.float32).to(torch.uint8)
        return divide(jpeg_round_trip(levels, staged.tensor()).to(torch.float32), 255.0)

    return step


_SMOOTHING_TRUNCATE = 3.0
"""Kernel radius of the displacement smoothing, in units of sigma (the reference's ``truncate=3``)."""


def _gather(images: Tensor, rows: Tensor, columns: Tensor) -> Tensor:
    """``images[b, :, rows[b], columns[b]]``: images (B, C, H, W), int64 indices (B, h, w) → (B, C, h, w)."""
    batch, channels, _, width = images.shape
    index = (rows * width + columns).reshape(batch, 1, -1).expand(-1, channels, -1)
    return images.reshape(batch, channels, -1).gather(2, index).reshape(batch, channels, *rows.shape[1:])


def _reflect_101(index: Tensor, length: int) -> Tensor:
    """OpenCV's ``BORDER_REFLECT_101`` for integer indices (…, 2, 1 | 0, 1, …, n-1 | n-2, …)."""
    period = 2 * (length - 1)
    folded = torch.remainder(index, period)
    return torch.where(folded >= length, period - folded, folded)


def _affine_matrices(source: Tensor, target: Tensor) -> Tensor:
    """Per-sample inverse affine maps as ``warpAffine`` uses them.

    Args:
        source: float32 (3, 2) control points, target: float32 (B, 3, 2) moved points (OpenCV's x, y), on
            the same device (the render path solves them on the host).

    Returns:
        float64 (B, 2, 3): the map from output pixel (x, y, 1) to source coordinates, i.e. the
        inverse (OpenCV's ``invertAffineTransform`` formulas) of ``getAffineTransform(source, target)``.
    """
    homogeneous = torch.cat([source.double(), torch.ones(3, 1, dtype=torch.float64, device=source.device)], dim=1)
    forward = torch.linalg.solve(homogeneous.expand(target.shape[0], 3, 3), target.double()).transpose(1, 2)
    a, b, c = forward[:, 0, 0], forward[:, 0, 1], forward[:, 0, 2]
    d, e, f = forward[:, 1, 0], forward[:, 1, 1], forward[:, 1, 2]
    determinant = a * e - b * d
    inverse_determinant = torch.where(determinant != 0, 1.0 / determinant, torch.zeros_like(determinant))
    a_inverse, b_inverse = e * inverse_determinant, -b * inverse_determinant
    d_inverse, e_inverse = -d * inverse_determinant, a * inverse_determinant
    c_inverse = -a_inverse * c - b_inverse * f
    f_inverse = -d_inverse * c - e_inverse * f
    first = torch.stack([a_inverse, b_inverse, c_inverse], dim=1)
    second = torch.stack([d_inverse, e_inverse, f_inverse], dim=1)
    return torch.stack([first, second], dim=1)


def _fused_multiply_add(a: Tensor, b: Tensor, c: Tensor, dtype: torch.dtype) -> Tensor:
    """float32 ``a * b + c`` rounded once (OpenCV's ``v_fma``) with ``dtype`` float64 (the float32 product is
    exact in float64); with float32, the plain float32 ``a * b + c`` (two roundings)."""
    return (a.to(dtype) * b.to(dtype) + c.to(dtype)).float()


def _composed_warp_affine_reflect_101(images: Tensor, inverse: Tensor, dtype: torch.dtype) -> Tensor:
    """:func:`warp_affine_reflect_101` in ATen operations."""
    _, _, height, width = images.shape
    m = inverse.float()[:, :, :, None]
    xs = torch.arange(width, dtype=torch.float32, device=images.device)[None, None, :]
    ys = torch.arange(height, dtype=torch.float32, device=images.device)[None, :, None]
    source_x = _fused_multiply_add(m[:, 0, 0, None], xs, ys * m[:, 0, 1, None] + m[:, 0, 2, None], dtype)
    source_y = _fused_multiply_add(m[:, 1, 0, None], xs, ys * m[:, 1, 1, None] + m[:, 1, 2, None], dtype)
    x0, y0 = torch.floor(source_x), torch.floor(source_y)
    alpha, beta = (source_x - x0)[:, None], (source_y - y0)[:, None]
    x0, y0 = x0.long(), y0.long()
    columns = (_reflect_101(x0, width), _reflect_101(x0 + 1, width))
    rows = (_reflect_101(y0, height), _reflect_101(y0 + 1, height))
    top_left, top_right = _gather(images, rows[0], columns[0]), _gather(images, rows[0], columns[1])
    bottom_left, bottom_right = _gather(images, rows[1], columns[0]), _gather(images, rows[1], columns[1])
    top = _fused_multiply_add(alpha, top_right - top_left, top_left, dtype)
    bottom = _fused_multiply_add(alpha, bottom_right - bottom_left, bottom_left, dtype)
    return _fused_multiply_add(beta, bottom - top, top, dtype)


@torch.library.custom_op("ccc::warp_affine_reflect_101", mutates_args=())
def warp_affine_reflect_101(images: Tensor, inverse: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
    """``cv2.warpAffine(image, M, (W, H), borderMode=BORDER_REFLECT_101)`` per sample (OpenCV 5, float32).

    Args:
        images: float32 (B, C, H, W), any range, H and W >= 2.
        inverse: float64 (B, 2, 3), output (x, y, 1) → source (x, y) (the inverse of ``M``); float32 is
            used as is.
        dtype: ``torch.float64`` emulates OpenCV's fused multiply-adds exactly, ``torch.float32`` does not.

    Returns:
        float32 (B, C, H, W), with OpenCV's float32 arithmetic: the map rounded to float32, a row
        term ``y * m1 + m2`` (float32, two roundings), the source coordinate ``fma(m0, x, row term)``,
        fractions ``s - floor(s)``, reflect-101 neighbours and the interpolation
        ``fma(beta, fma(alpha, f11 - f10, f10) - fma(alpha, f01 - f00, f00), fma(alpha, f01 - f00, f00))``.
        In ATen operations (:func:`_composed_warp_affine_reflect_101`), or on CUDA in one Triton kernel that
        reads each output value's four source values and writes the result alone (:mod:`._triton.elastic`,
        where :func:`~._triton.fuses`): the same bits either way.
    """
    return _composed_warp_affine_reflect_101(images, inverse, dtype)


@warp_affine_reflect_101.register_kernel("cuda")
def _warp_affine_reflect_101_cuda(images: Tensor, inverse: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
    if not fuses(images.device):
        return _composed_warp_affine_reflect_101(images, inverse, dtype)
    from ._triton.elastic import warp_affine_reflect_101 as kernel

    return kernel(images, inverse, dtype)


@warp_affine_reflect_101.register_fake
def _warp_affine_reflect_101_shape(images: Tensor, inverse: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
    return images.new_empty(images.shape, dtype=torch.float32)


def _smoothing_matrices(length: int, folded: Tensor) -> Tensor:
    """Each sample's folded reflect smoothing matrix, assembled on ``folded``'s device: (B, length, length).

    ``folded``: (B, 2 · length) per-sample folded kernels (:func:`~ccc.corruptions.filters.reflect_folded_kernel`).
    Entry ``(i, j)`` adds the two folded taps that reach ``j`` from ``i``: the CPU path's matrix
    (:func:`~ccc.corruptions.filters.reflect_smoothing_matrix`) bit for bit in float64, since its
    accumulation adds the same two values to zero.
    """
    period = 2 * length
    rows = torch.arange(length, device=folded.device)[:, None]
    columns = torch.arange(length, device=folded.device)[None, :]
    return folded[:, (columns - rows) % period] + folded[:, (period - 1 - columns - rows) % period]


def _reflect_coordinates(coordinates: Tensor, length: int) -> Tensor:
    """scipy's ``mode="reflect"`` for real coordinates: fold about -0.5 and ``length - 0.5``."""
    period = 2.0 * length
    folded = torch.remainder(coordinates + 0.5, period)
    folded = torch.where(folded >= length, period - folded, folded) - 0.5
    inside = (coordinates >= -0.5) & (coordinates <= length - 0.5)
    return torch.where(inside, coordinates, folded)


def sample_bilinear_reflect(images: Tensor, rows: Tensor, columns: Tensor) -> Tensor:
    """``scipy.ndimage.map_coordinates(channel, (rows, columns), order=1, mode="reflect")`` per channel.

    Args:
        images: float32 (B, C, H, W); rows, columns: float64 (B, H, W) source coordinates (any values),
            or float32 (the float32 mode): their dtype is the computation's.

    Returns:
        float32 (B, C, H, W): bilinear sums in scipy's order (in float64: scipy's values), stored as float32.
    """
    _, _, height, width = images.shape
    rows = _reflect_coordinates(rows, height)
    columns = _reflect_coordinates(columns, width)
    row_floor, column_floor = torch.floor(rows), torch.floor(columns)
    row_weight, column_weight = (rows - row_floor)[:, None], (columns - column_floor)[:, None]
    r0, q0 = row_floor.long(), column_floor.long()
    r1, q1 = torch.clamp(r0 + 1, 0, height - 1), torch.clamp(q0 + 1, 0, width - 1)
    r0, q0 = torch.clamp(r0, 0, height - 1), torch.clamp(q0, 0, width - 1)
    source = images.to(rows.dtype)
    output = (1.0 - row_weight) * (1.0 - column_weight) * _gather(source, r0, q0)
    output = output + (1.0 - row_weight) * column_weight * _gather(source, r0, q1)
    output = output + row_weight * (1.0 - column_weight) * _gather(source, r1, q0)
    output = output + row_weight * column_weight * _gather(source, r1, q1)
    return output.float()


def _composed_sample_shifted_bilinear_reflect(
    images: Tensor, shift_rows: Tensor, shift_columns: Tensor, dtype: torch.dtype
) -> Tensor:
    """:func:`sample_shifted_bilinear_reflect` in ATen operations: the coordinate fields, then
    :func:`sample_bilinear_reflect`."""
    batch, _, height, width = images.shape
    rows = torch.arange(height, dtype=dtype, device=images.device)[None, :, None].expand(batch, -1, width)
    columns = torch.arange(width, dtype=dtype, device=images.device)[None, None, :].expand(batch, height, -1)
    return sample_bilinear_reflect(images, rows + shift_rows.to(dtype), columns + shift_columns.to(dtype))


@torch.library.custom_op("ccc::sample_shifted_bilinear_reflect", mutates_args=())
def sample_shifted_bilinear_reflect(
    images: Tensor, shift_rows: Tensor, shift_columns: Tensor, dtype: torch.dtype
) -> Tensor:
    """:func:`sample_bilinear_reflect` at the pixel grid displaced by per-pixel shifts (elastic's sampling).

    Args:
        images: float32 (B, C, H, W).
        shift_rows, shift_columns: float32 (or float64) (B, H, W) displacements in pixels, finite (the
            coordinates below 2**62 in magnitude).
        dtype: the computation's, ``torch.float64`` (scipy's) or ``torch.float32``.

    Returns:
        float32 (B, C, H, W): ``sample_bilinear_reflect(images, y + shift_rows, x + shift_columns)``, each
        coordinate one addition in ``dtype`` of the whole pixel index and the shift converted to ``dtype``. In
        ATen operations (:func:`_composed_sample_shifted_bilinear_reflect`), or on CUDA in one Triton kernel
        that reads the shifts and each output value's four source values and writes the result alone (no
        coordinate field: :mod:`._triton.elastic`, where :func:`~._triton.fuses`): the same bits either way.
    """
    return _composed_sample_shifted_bilinear_reflect(images, shift_rows, shift_columns, dtype)


@sample_shifted_bilinear_reflect.register_kernel("cuda")
def _sample_shifted_bilinear_reflect_cuda(
    images: Tensor, shift_rows: Tensor, shift_columns: Tensor, dtype: torch.dtype
) -> Tensor:
    if not fuses(images.device):
        return _composed_sample_shifted_bilinear_reflect(images, shift_rows, shift_columns, dtype)
    from ._triton.elastic import sample_shifted_bilinear_reflect as kernel

    return kernel(images, shift_rows, shift_columns, dtype)


@sample_shifted_bilinear_reflect.register_fake
def _sample_shifted_bilinear_reflect_shape(
    images: Tensor, shift_rows: Tensor, shift_columns: Tensor, dtype: torch.dtype
) -> Tensor:
    return images.new_empty(images.shape, dtype=torch.float32)


def prepare_elastic(
    severities: Tensor, random: SampleRandom, size: tuple[int, int], dtype: torch.dtype, upload: BatchUpload
) -> CorruptionStep:
    """Random affine jitter, then a smooth random displacement field (ImageNet-C's elastic transform).

    Args:
        severities: float64 (B,) in (0, 5]; parameters (alpha, sigma, jitter) in pixels from ``ELASTIC_TABLE``.
        random: three draws per sample: ``uniform(3, 2)`` jitter (on the host, here: it shapes the affine
            maps), then ``uniform(H, W)`` for the column displacement and ``uniform(H, W)`` for the row
            displacement (on the device, in the step).
        size: the images' (H, W) in pixels.
        dtype: the working float dtype (``torch.float64``: the CPU's arithmetic; or ``torch.float32``).
        upload: the batch's upload: the per-sample numbers (alpha, the affine maps) and the folded kernels of
            both axes.

    Returns:
        The step: float32 (B, 3, H, W) in [0, 1] → float32 (B, 3, H, W) in [0, 1], exact given the same draws
        (to float64 rounding of the smoothing).
    """
    batch = len(severities)
    height, width = size
    parameters = per_sample_parameters("elastic", severities)
    sigmas, jitter = parameters[:, 1].tolist(), parameters[:, 2, None, None]
    centre = torch.tensor([height // 2, width // 2], dtype=torch.float32)
    square = min(height, width) // 3
    corner = torch.tensor([square, -square], dtype=torch.float32)
    source = torch.stack([centre + square, centre + corner, centre - square])
    offsets = (-jitter + (jitter - -jitter) * random.on_host().uniform(3, 2).double()).float()
    inverse = _affine_matrices(source, source + offsets)
    staged = upload.tables(
        torch.cat([parameters[:, :1], inverse.reshape(batch, 6)], dim=1).to(torch.float64).numpy(),
        np.stack([reflect_folded_kernel(height, sigma, _SMOOTHING_TRUNCATE) for sigma in sigmas]),
        np.stack([reflect_folded_kernel(width, sigma, _SMOOTHING_TRUNCATE) for sigma in sigmas]),
        float_dtype=dtype,
    )

    def step(images: Tensor) -> Tensor:
        table, row_folded, column_folded = staged.tensors()
        alpha, maps = table[:, 0, None, None], table[:, 1:].reshape(batch, 2, 3)
        warped = warp_affine_reflect_101(images, maps, dtype)
        row_smoothing = _smoothing_matrices(height, row_folded)
        column_smoothing = _smoothing_matrices(width, column_folded)
        shifts = []
        # both fields' uniform(-1, 1) draws in one computation, elementwise the same arithmetic
        for noise in (-1.0 + (1.0 - -1.0) * random.uniform_draws(2, height, width, dtype=dtype)).unbind(1):
            # float32 fields (the reference's): the sampling adds them to the grid in the working dtype
            shifts.append((row_smoothing @ noise @ column_smoothing.transpose(1, 2) * alpha).float())
        shift_columns, shift_rows = shifts
        return torch.clamp(sample_shifted_bilinear_reflect(warped, shift_rows, shift_columns, dtype), 0, 1)

    return step


brightness = register_torch_corruption("brightness", prepare_brightness)
contrast = register_torch_corruption("contrast", prepare_contrast)
elastic = register_torch_corruption("elastic", prepare_elastic)
pixelate = register_torch_corruption("pixelate", prepare_pixelate)
jpeg = register_torch_corruption("jpeg", prepare_jpeg)
saturate = register_torch_corruption("saturate", prepare_saturate)
