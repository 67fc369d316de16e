"""Shared numerics of the torch corruptions: byte levels, and the filters several families apply.

The one owner of what more than one family computes (``ccc.corruptions`` keeps its own shared
filters in :mod:`ccc.corruptions.filters` and :mod:`ccc.corruptions.motion`; these are their torch
twins, fed by the same host-side kernels and taps):

- byte levels in and out of a corruption. The pipeline hands a corruption float32 images holding byte
  levels ``k / 255`` and truncates what it returns with :func:`truncate_to_levels`
  (``floor(clamp(x · 255, 0, 255))``, the reference's ``np.uint8``). The CPU path computes on the
  exact bytes and truncates its float64 result, so :func:`byte_levels` / :func:`unit_values` recover
  the CPU's exact inputs (``x · 255`` alone is off by a few 1e-6 and would flip truncations), and
  :func:`unit_float32` hands a pre-truncation result (float64, or float32 in the float32 mode) back
  as float32 such that the pipeline's float32 truncation gives the same byte as the result's own;
- OpenCV's separable filter in its own operation order (:func:`separable_opencv`, its fused
  multiply-adds emulated exactly in float64 by Dekker's products; :func:`separable_opencv_levels` for byte
  levels, its products looked up per level) and scipy's Gaussian kernels
  (:func:`gaussian_kernels`): gaussian and glass blur, spatter's smoothing;
- the centre zoom of ``clipped_zoom`` (:func:`zoom_tables`, :func:`zoom_device_tables`, :func:`zoom_with_tables`):
  zoom blur, snow;
- ImageMagick 6's MotionBlurImage through its 8-bit PNG round trip (:func:`motion_blur_tables`,
  :func:`motion_blur_with_tables`, :func:`imagemagick_motion_blur`): motion blur, snow;
- OpenCV's RGB → gray (:func:`opencv_gray`): snow.

Host-side tables are built here from the host severities and draws; the corruptions stage them in their
batch's one upload (:class:`._upload.BatchUpload`) and hand the device tensors to the filters
(:func:`imagemagick_motion_blur`, a whole call, uploads its own). Nothing here reads device data back.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import NDArray
from torch import Tensor

from ccc.corruptions.filters import scipy_gaussian_kernel, zoom_axis_tables
from ccc.corruptions.motion import motion_blur_taps

from ._triton import fuses
from ._upload import upload_tables

__all__ = [
    "byte_levels",
    "divide",
    "GATHER_ELEMENTS",
    "gather_elements",
    "gaussian_kernels",
    "imagemagick_motion_blur",
    "motion_blur_tables",
    "motion_blur_with_tables",
    "opencv_gray",
    "separable_opencv",
    "separable_opencv_levels",
    "truncate_rows_into",
    "truncate_to_levels",
    "unit_float32",
    "unit_of_levels",
    "unit_values",
    "ZoomTables",
    "zoom_device_tables",
    "zoom_tables",
    "zoom_with_tables",
]


def divide(values: Tensor, divisor: float) -> Tensor:
    """``values / divisor``, correctly rounded on every device (float tensor, any shape; ``divisor`` a number).

    CUDA divides a tensor by a Python number (a CPU scalar) as a multiplication by the number's
    reciprocal, which may differ from the division in the last bit (ATen's ``div_true_kernel_cuda``);
    dividing by a 0-dim tensor on the values' device keeps the IEEE division, the CPU's.
    """
    return values / _divisor(float(divisor), values.dtype, values.device)


@lru_cache(maxsize=64)
def _divisor(value: float, dtype: torch.dtype, device: torch.device) -> Tensor:
    """``value`` as a 0-dim tensor of ``dtype`` on ``device``, made once per process (not one fill per division);
    a normal tensor even when first asked for under ``torch.inference_mode``, so autograd may use it later."""
    with torch.inference_mode(False):
        return torch.full((), value, dtype=dtype, device=device)


def _composed_byte_levels(images: Tensor, dtype: torch.dtype) -> Tensor:
    """:func:`byte_levels` in ATen operations: a product, a rounding and a cast of whole images."""
    return torch.round(images * 255.0).to(dtype)


@torch.library.custom_op("ccc::byte_levels", mutates_args=())
def _byte_levels(images: Tensor, dtype: torch.dtype) -> Tensor:
    """:func:`byte_levels`: in ATen operations (:func:`_composed_byte_levels`), or on CUDA in one Triton kernel
    that reads the images and writes the levels alone (:mod:`._triton.levels`, where :func:`~._triton.fuses`)."""
    return _composed_byte_levels(images, dtype)


@_byte_levels.register_kernel("cuda")
def _byte_levels_cuda(images: Tensor, dtype: torch.dtype) -> Tensor:
    if not fuses(images.device):
        return _composed_byte_levels(images, dtype)
    from ._triton.levels import byte_levels as kernel

    return kernel(images, dtype)


@_byte_levels.register_fake
def _byte_levels_shape(images: Tensor, dtype: torch.dtype) -> Tensor:
    return torch.empty_like(images, dtype=dtype)


def byte_levels(images: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
    """The byte levels 0..255 of ``images`` (float32, any shape, values ``k / 255``) as integers of ``dtype``.

    Rounded in float32: ``float32(k / 255) · 255`` is within 1e-4 of ``k``, so the rounding is exact and
    no float64 temporary is needed; the integers are then exact in any float dtype, and in an integer dtype
    (``torch.uint8``: the bytes themselves). The operator ``ccc::byte_levels`` (one Triton kernel on CUDA).
    """
    return _byte_levels(images, dtype)


def _composed_unit_values(images: Tensor, dtype: torch.dtype) -> Tensor:
    """:func:`unit_values` in ATen operations: :func:`_composed_byte_levels`, then :func:`divide`."""
    return divide(_composed_byte_levels(images, dtype), 255.0)


@torch.library.custom_op("ccc::unit_values", mutates_args=())
def _unit_values(images: Tensor, dtype: torch.dtype) -> Tensor:
    """:func:`unit_values`: in ATen operations (:func:`_composed_unit_values`), or on CUDA in one Triton kernel
    that reads the images and writes the values alone (:mod:`._triton.levels`, where :func:`~._triton.fuses`)."""
    return _composed_unit_values(images, dtype)


@_unit_values.register_kernel("cuda")
def _unit_values_cuda(images: Tensor, dtype: torch.dtype) -> Tensor:
    if not fuses(images.device):
        return _composed_unit_values(images, dtype)
    from ._triton.levels import unit_values as kernel

    return kernel(images, dtype)


@_unit_values.register_fake
def _unit_values_shape(images: Tensor, dtype: torch.dtype) -> Tensor:
    return torch.empty_like(images, dtype=dtype)


def unit_values(images: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
    """``images`` (float32, any shape, values ``k / 255``) as the CPU path's ``uint8 / 255.0`` in ``dtype``
    (values in [0, 1]): in float64 bit-equal to numpy's ``k / 255.0``; in float32 the correctly rounded
    ``k / 255``, bit-equal to ``float32(k / 255.0)`` (one IEEE division either way). ``divide(byte_levels(images,
    dtype), 255.0)``, as the operator ``ccc::unit_values`` (one Triton kernel on CUDA)."""
    return _unit_values(images, dtype)


def _composed_unit_of_levels(levels: Tensor, working: torch.dtype, dtype: torch.dtype) -> Tensor:
    """:func:`unit_of_levels` in ATen operations: a cast, :func:`divide` and a cast of whole images."""
    return divide(levels.to(working), 255.0).to(dtype)


@torch.library.custom_op("ccc::unit_of_levels", mutates_args=())
def _unit_of_levels(levels: Tensor, working: torch.dtype, dtype: torch.dtype) -> Tensor:
    """:func:`unit_of_levels`: in ATen operations (:func:`_composed_unit_of_levels`), or on CUDA in one Triton
    kernel that reads the levels and writes the values alone (:mod:`._triton.levels`, where
    :func:`~._triton.fuses`)."""
    return _composed_unit_of_levels(levels, working, dtype)


@_unit_of_levels.register_kernel("cuda")
def _unit_of_levels_cuda(levels: Tensor, working: torch.dtype, dtype: torch.dtype) -> Tensor:
    if not fuses(levels.device):
        return _composed_unit_of_levels(levels, working, dtype)
    from ._triton.levels import unit_of_levels as kernel

    return kernel(levels, working, dtype)


@_unit_of_levels.register_fake
def _unit_of_levels_shape(levels: Tensor, working: torch.dtype, dtype: torch.dtype) -> Tensor:
    return torch.empty_like(levels, dtype=dtype)


def unit_of_levels(levels: Tensor, dtype: torch.dtype = torch.float32, working: torch.dtype | None = None) -> Tensor:
    """Byte levels → values in [0, 1]: ``divide(levels.to(working), 255.0).to(dtype)``.

    Args:
        levels: uint8, or float holding the integers 0..255, any shape.
        dtype: the result's float dtype.
        working: the float dtype of the division (one IEEE division, the CPU path's ``uint8 / 255.0`` in
            float64); by default ``dtype``.

    Returns:
        ``dtype``, the shape of ``levels``. The operator ``ccc::unit_of_levels`` (one Triton kernel on CUDA).
    """
    return _unit_of_levels(levels, working or dtype, dtype)


def _composed_unit_float32(levels: Tensor, scale: int) -> Tensor:
    """:func:`unit_float32` in ATen operations on whole images: the product by ``scale`` (none for 1), the
    clamp, floor, divisions, casts, the float32 truncation's check and the choice."""
    if scale != 1:
        levels = levels * scale
    clamped = levels.clamp(0.0, 255.0)
    target = clamped.floor()
    unit = divide(clamped, 255.0).to(torch.float32)
    middle = divide(target + 0.5, 255.0).to(torch.float32)
    return torch.where((unit * 255.0).floor() == target.to(torch.float32), unit, middle)


@torch.library.custom_op("ccc::unit_float32", mutates_args=())
def _unit_float32(levels: Tensor, scale: int) -> Tensor:
    """:func:`unit_float32`: in ATen operations (:func:`_composed_unit_float32`), or on CUDA in one Triton kernel
    that reads the levels and writes the float32 values alone (:mod:`._triton.levels`, where
    :func:`~._triton.fuses`)."""
    return _composed_unit_float32(levels, scale)


@_unit_float32.register_kernel("cuda")
def _unit_float32_cuda(levels: Tensor, scale: int) -> Tensor:
    if not fuses(levels.device):
        return _composed_unit_float32(levels, scale)
    from ._triton.levels import unit_float32 as kernel

    return kernel(levels, scale)


@_unit_float32.register_fake
def _unit_float32_shape(levels: Tensor, scale: int) -> Tensor:
    return torch.empty_like(levels, dtype=torch.float32)


def unit_float32(levels: Tensor, scale: int = 1) -> Tensor:
    """Pre-truncation values in grey levels (float64 or float32, any shape, any range) → float32 values / 255
    in [0, 1].

    ``scale``, a whole number, multiplies ``levels`` first (255: values in [0, 1] rather than grey levels), in
    their dtype: ``unit_float32(x, 255)`` is ``unit_float32(x * 255.0)`` bit for bit, without the product's
    image. The result ``y`` is ``float32(clamp(levels, 0, 255) / 255)``, except where the pipeline's float32
    ``floor(y · 255)`` would land on the other side of an integer than ``floor(clamp(levels, 0, 255))``
    in ``levels``' dtype (values within a float32 rounding of an integer, e.g. 204.99999999999997 or an
    exact 205 whose ``/ 255`` rounds down): there ``y`` is the middle of that level,
    ``(floor(levels) + 0.5) / 255``. So the pipeline's truncation equals the truncation of ``levels``
    everywhere (the CPU's float64 truncation when ``levels`` is the CPU's float64 value). The operator
    ``ccc::unit_float32`` (one Triton kernel on CUDA).
    """
    return _unit_float32(levels, scale)


def truncate_to_levels(images: Tensor) -> Tensor:
    """``floor(clip(x · 255, 0, 255)) / 255``: the reference's ``np.uint8`` truncation, float32 (B, 3, H, W)
    (a stage writes it into its output with :func:`truncate_rows_into`)."""
    return divide(torch.floor(torch.clamp(images * 255, 0, 255)), 255.0)


def _composed_truncate_rows_into(output: Tensor, rows: Tensor, values: Tensor) -> None:
    """:func:`truncate_rows_into` in ATen operations: :func:`truncate_to_levels`, then an index_put."""
    output[rows] = truncate_to_levels(values)


@torch.library.custom_op("ccc::truncate_rows_into", mutates_args=("output",))
def _truncate_rows_into(output: Tensor, rows: Tensor, values: Tensor) -> None:
    """:func:`truncate_rows_into`: in ATen operations (:func:`_composed_truncate_rows_into`), or on CUDA in one
    Triton kernel that reads the values and writes the output's rows alone (:mod:`._triton.levels`, where
    :func:`~._triton.fuses`)."""
    _composed_truncate_rows_into(output, rows, values)


@_truncate_rows_into.register_kernel("cuda")
def _truncate_rows_into_cuda(output: Tensor, rows: Tensor, values: Tensor) -> None:
    if not fuses(output.device):
        _composed_truncate_rows_into(output, rows, values)
        return
    from ._triton.levels import truncate_rows_into as kernel

    kernel(output, rows, values)


@_truncate_rows_into.register_fake
def _truncate_rows_into_shape(output: Tensor, rows: Tensor, values: Tensor) -> None:
    return None


def truncate_rows_into(output: Tensor, rows: Tensor, values: Tensor) -> None:
    """``output[rows] = truncate_to_levels(values)``, in place, without the truncated values' image.

    Args:
        output: float32 (B, C, H, W), any strides; its samples ``rows`` are overwritten.
        rows: int64 (N,) distinct samples of ``output``, on its device.
        values: float32 (N, C, H, W), any strides.

    The operator ``ccc::truncate_rows_into`` (one Triton kernel on CUDA).
    """
    _truncate_rows_into(output, rows, values)


_GAUSSIAN_TRUNCATE = 4.0
"""scikit-image's (scipy's) default kernel radius in units of sigma."""

_QUANTUM_PER_LEVEL = 257.0
"""16-bit quanta per 8-bit level (ImageMagick Q16 reading an 8-bit PNG)."""

_QUANTUM_RANGE = 65535.0
"""Largest 16-bit quantum (ImageMagick Q16)."""

_DEKKER_SPLITTER = 134217729.0
"""2**27 + 1: splits a float64 into two halves whose products are exact (Dekker)."""


def _split(values: Tensor) -> tuple[Tensor, Tensor]:
    """Dekker's split of float64 ``values`` into high and low halves (``high + low == values``)."""
    scaled = values * _DEKKER_SPLITTER
    high = scaled - (scaled - values)
    return high, values - high


def _product_and_error(
    weight: Tensor,
    weight_halves: tuple[Tensor, Tensor],
    values: Tensor,
    halves: tuple[Tensor, Tensor],
    product: Tensor | None = None,
    error: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """``values · weight`` rounded (float64, broadcast shapes) and minus its rounding error, exactly: Dekker's
    two-product. ``weight_halves`` and ``halves`` are :func:`_split` of ``weight`` and of ``values``; ``product``
    and ``error``, when given, are written in place (the filters' preallocated buffers)."""
    weight_high, weight_low = weight_halves
    value_high, value_low = halves
    product = torch.mul(values, weight, out=product)
    # minus the product's rounding error, p − vh·wh − vl·wh − vh·wl − vl·wl summed in that order: the negation,
    # step by step, of the error Dekker sums. Each product of halves is exact, so each addcmul rounds once,
    # whether a device fuses its multiply-add or not
    error = torch.addcmul(product, value_high, weight_high, value=-1, out=error)
    for high_or_low, weight_part in ((value_low, weight_high), (value_high, weight_low), (value_low, weight_low)):
        error.addcmul_(high_or_low, weight_part, value=-1)
    return product, error


class _FusedMultiplyAdd:
    """``total ← weight * values + total`` rounded once, as a hardware FMA, in plain float64 operations.

    The product is made exact with Dekker's two-product (:func:`_product_and_error`, here or looked up in a
    table of it) and added with Knuth's two-sum; the one remaining rounding of the three parts equals the
    FMA's except in double-rounding ties (none seen in the measurements). Works in place on preallocated
    (B, C, H, W) buffers: the filters call it once per tap on full images.
    """

    def __init__(self, like: Tensor) -> None:
        self.product = torch.empty_like(like)
        self.error = torch.empty_like(like)
        self.scratch = torch.empty_like(like)
        self.virtual = torch.empty_like(like)
        self.summed = torch.empty_like(like)

    def __call__(
        self,
        weight: Tensor,
        weight_halves: tuple[Tensor, Tensor],
        values: Tensor,
        halves: tuple[Tensor, Tensor],
        total: Tensor,
    ) -> Tensor:
        """Returns ``fma(weight, values, total)`` in one of its buffers; ``total`` is overwritten.

        ``weight`` broadcasts to ``values`` (B, C, H, W); ``weight_halves`` and ``halves`` are :func:`_split`
        of ``weight`` and of ``values``. The returned tensor is valid until the call after next (the buffers
        alternate with ``total``).
        """
        _product_and_error(weight, weight_halves, values, halves, self.product, self.error)
        return self.add(self.product, self.error, total)

    def add(self, product: Tensor, error: Tensor, total: Tensor) -> Tensor:
        """``fma`` from the product and minus its error (:func:`_product_and_error`), as :meth:`__call__`."""
        scratch, virtual, summed = self.scratch, self.virtual, self.summed
        torch.add(product, total, out=summed)
        torch.sub(summed, product, out=virtual)
        torch.sub(summed, virtual, out=scratch)
        torch.sub(product, scratch, out=scratch)
        total.sub_(virtual)
        scratch.add_(total)
        scratch.sub_(error)
        summed.add_(scratch)
        # The caller's old total becomes the next call's output buffer.
        self.summed = total
        return summed


def _column_pass(rows: Tensor, tap_weights: Sequence[Tensor], radius: int) -> Tensor:
    """OpenCV's symmetric column filter of the row pass's (B, C, H, W) result: mirrored rows added first,
    multiplied once per pair, replicated borders."""
    height = rows.shape[2]
    padded_rows = F.pad(rows, (0, 0, radius, radius), mode="replicate")
    columns = padded_rows[:, :, radius : radius + height] * tap_weights[radius]
    pair = torch.empty_like(columns)
    for offset in range(1, radius + 1):
        below = padded_rows[:, :, radius + offset : radius + offset + height]
        torch.add(below, padded_rows[:, :, radius - offset : radius - offset + height], out=pair)
        pair.mul_(tap_weights[radius + offset])
        columns.add_(pair)
    return columns


def separable_opencv(images: Tensor, kernels: Tensor) -> Tensor:
    """OpenCV's float64 ``sepFilter2D`` with replicated borders, in its operation order (per sample kernels).

    Args:
        images: float64 (B, C, H, W), or float32 (the float32 mode).
        kernels: (B, K) of the images' dtype, K odd, symmetric kernels centred at K // 2 (zero-padded as needed).

    Returns:
        (B, C, H, W) of the images' dtype. The row pass sums the taps left to right with fused
        multiply-adds, the column pass adds mirrored rows first and multiplies once per pair (OpenCV's
        symmetric column filter), as OpenCV 5 does on a CPU with FMA (measured bit-identical in float64,
        where the fused multiply-adds are emulated; float32 uses plain multiply-adds).
    """
    width = images.shape[3]
    radius = kernels.shape[1] // 2
    weights = kernels[:, :, None, None, None]
    tap_weights = weights.unbind(1)  # (B, 1, 1, 1) per tap: the views made once each
    padded = F.pad(images, (radius, radius, 0, 0), mode="replicate")
    rows = padded[..., :width] * tap_weights[0]
    if images.dtype == torch.float64:
        high, low = _split(padded)
        # every tap's weight split at once (elementwise: the bits of a split per tap)
        tap_highs, tap_lows = (part.unbind(1) for part in _split(weights))
        fused_multiply_add = _FusedMultiplyAdd(rows)
        for tap in range(1, 2 * radius + 1):
            window = slice(tap, tap + width)
            halves = (high[..., window], low[..., window])
            weight_halves = (tap_highs[tap], tap_lows[tap])
            rows = fused_multiply_add(tap_weights[tap], weight_halves, padded[..., window], halves, rows)
    else:
        for tap in range(1, 2 * radius + 1):
            rows.addcmul_(padded[..., tap : tap + width], tap_weights[tap])
    return _column_pass(rows, tap_weights, radius)


def separable_opencv_levels(levels: Tensor, kernels: Tensor) -> Tensor:
    """:func:`separable_opencv` of byte levels over 255: ``separable_opencv(levels / 255, kernels)`` bit for bit.

    Args:
        levels: float32 or uint8 (B, C, H, W) holding integers 0..255 (the images are ``levels / 255`` in the
            kernels' dtype, one IEEE division: the CPU path's ``uint8 / 255.0``).
        kernels: (B, K) float64, or float32 (the float32 mode), as in :func:`separable_opencv`.

    Returns:
        (B, C, H, W) of the kernels' dtype. In float64 the row pass's products and their rounding errors take
        256 values per sample and tap: they are made once per pass in tables (B, K, 256), with the operations
        :func:`separable_opencv` applies to every pixel, and gathered by level (two gathers per tap instead of
        a product and four multiply-adds on whole images); the fused additions and the column pass are
        :func:`separable_opencv`'s, run by the operators :func:`opencv_rows_from_levels` and
        :func:`opencv_symmetric_columns` (one Triton kernel each on CUDA). In float32 it is
        :func:`separable_opencv` itself.
    """
    if kernels.dtype != torch.float64:
        return separable_opencv(divide(levels.to(kernels.dtype), 255.0), kernels)
    values = divide(torch.arange(256, dtype=torch.float64, device=levels.device), 255.0)
    table_weights = kernels[:, :, None]
    products, errors = _product_and_error(table_weights, _split(table_weights), values, _split(values))
    return opencv_symmetric_columns(opencv_rows_from_levels(levels, products, errors), kernels)


def _composed_rows_from_levels(levels: Tensor, products: Tensor, errors: Tensor) -> Tensor:
    """:func:`opencv_rows_from_levels` in ATen operations: per tap, two gathers of whole planes from the
    tables by the replicate-padded levels, and :meth:`_FusedMultiplyAdd.add` on whole planes."""
    batch, channels, height, width = levels.shape
    radius = products.shape[1] // 2
    index = F.pad(levels, (radius, radius, 0, 0), mode="replicate").to(torch.int64)
    shape = (batch, channels, height, 256)

    def gathered(table: Tensor, tap: int, out: Tensor | None = None) -> Tensor:
        return torch.gather(table[:, tap, None, None, :].expand(shape), 3, index[..., tap : tap + width], out=out)

    rows = gathered(products, 0)  # the first tap's products, the row pass's start
    fused_multiply_add = _FusedMultiplyAdd(rows)
    for tap in range(1, 2 * radius + 1):
        product = gathered(products, tap, out=fused_multiply_add.product)
        error = gathered(errors, tap, out=fused_multiply_add.error)
        rows = fused_multiply_add.add(product, error, rows)
    return rows


@torch.library.custom_op("ccc::opencv_rows_from_levels", mutates_args=())
def opencv_rows_from_levels(levels: Tensor, products: Tensor, errors: Tensor) -> Tensor:
    """The float64 row pass of :func:`separable_opencv_levels`: OpenCV's fused multiply-adds of the taps, left
    to right, borders replicated.

    Args:
        levels: float32 or uint8 (B, C, H, W) holding integers 0..255.
        products: float64 (B, K, 256), K odd: tap k's weight times level v / 255, rounded.
        errors: float64 (B, K, 256): those products minus their exact values (:func:`_product_and_error`).

    Returns:
        float64 (B, C, H, W): per pixel the first tap's product, then each further tap's added as one fused
        multiply-add (:meth:`_FusedMultiplyAdd.add`), the tap k reading the column ``x + k - K // 2`` clamped
        into the row. In ATen operations (:func:`_composed_rows_from_levels`), or on CUDA in one Triton
        kernel (:mod:`._triton.opencv_filter`, where :func:`~._triton.fuses`): the same bits either way.
    """
    return _composed_rows_from_levels(levels, products, errors)


@opencv_rows_from_levels.register_kernel("cuda")
def _opencv_rows_from_levels_cuda(levels: Tensor, products: Tensor, errors: Tensor) -> Tensor:
    if not fuses(levels.device):
        return _composed_rows_from_levels(levels, products, errors)
    from ._triton.opencv_filter import opencv_rows_from_levels as kernel

    return kernel(levels, products, errors)


@opencv_rows_from_levels.register_fake
def _opencv_rows_from_levels_shape(levels: Tensor, products: Tensor, errors: Tensor) -> Tensor:
    return levels.new_empty(levels.shape, dtype=torch.float64)


def _composed_symmetric_columns(rows: Tensor, kernels: Tensor) -> Tensor:
    """:func:`opencv_symmetric_columns` in ATen operations: :func:`_column_pass` on whole planes."""
    return _column_pass(rows, kernels[:, :, None, None, None].unbind(1), kernels.shape[1] // 2)


@torch.library.custom_op("ccc::opencv_symmetric_columns", mutates_args=())
def opencv_symmetric_columns(rows: Tensor, kernels: Tensor) -> Tensor:
    """OpenCV's symmetric column filter (float64) of the row pass's result, borders replicated.

    Args:
        rows: float64 (B, C, H, W).
        kernels: float64 (B, K), K odd, each symmetric about K // 2.

    Returns:
        float64 (B, C, H, W): per pixel ``rows[y] · w[r]``, then for offsets d = 1..r in order
        ``(rows[y + d] + rows[y - d]) · w[r + d]`` added (r = K // 2, rows clamped into the plane). In ATen
        operations (:func:`_composed_symmetric_columns`), or on CUDA in one Triton kernel
        (:mod:`._triton.opencv_filter`, where :func:`~._triton.fuses`): the same bits either way.
    """
    return _composed_symmetric_columns(rows, kernels)


@opencv_symmetric_columns.register_kernel("cuda")
def _opencv_symmetric_columns_cuda(rows: Tensor, kernels: Tensor) -> Tensor:
    if not fuses(rows.device):
        return _composed_symmetric_columns(rows, kernels)
    from ._triton.opencv_filter import opencv_symmetric_columns as kernel

    return kernel(rows, kernels)


@opencv_symmetric_columns.register_fake
def _opencv_symmetric_columns_shape(rows: Tensor, kernels: Tensor) -> Tensor:
    return torch.empty_like(rows)


def gaussian_kernels(sigmas: list[float]) -> NDArray[np.float64]:
    """scipy's Gaussian kernels (truncated at 4 sigma) of ``sigmas`` (pixels, each > 0), float64 (B, K):
    zero-padded to the widest, centred at K // 2. A zero tap leaves every sum unchanged bit for bit, so a
    sample's blur does not depend on the other samples."""
    kernels = [scipy_gaussian_kernel(sigma, _GAUSSIAN_TRUNCATE) for sigma in sigmas]
    radius = max((len(kernel) - 1) // 2 for kernel in kernels)
    padded = np.zeros((len(kernels), 2 * radius + 1))
    for row, kernel in enumerate(kernels):
        own = (len(kernel) - 1) // 2
        padded[row, radius - own : radius + own + 1] = kernel
    return padded


def zoom_tables(height: int, width: int, factors: Sequence[float] | NDArray[np.float64]) -> list[NDArray]:
    """The CPU path's centre-zoom tables (:func:`ccc.corruptions.filters.zoom_axis_tables`) of factors >= 1.

    Args:
        height, width: the images' size in pixels.
        factors: B zoom factors, or an array of them of any shape S (e.g. (Z, B): Z zooms per sample).

    Returns, on the host (for :func:`zoom_device_tables`, once uploaded): row lows int64 (*S, H), row highs
    int64 (*S, H) (``min(low + 1, H - 1)``), row upper weights float64 (*S, H), then column lows, highs and
    upper weights (*S, W), every factor's at once (for a square, the rows' tables themselves).
    """
    factors = np.asarray(factors, dtype=np.float64)
    tables = []
    for length in dict.fromkeys((height, width)):  # a square's rows and columns share their tables
        lows, uppers = zoom_axis_tables(length, factors)
        tables += [lows, np.minimum(lows + 1, length - 1), uppers]
    return tables * 2 if height == width else tables


class ZoomTables(NamedTuple):
    """One centre zoom per sample on the device: each axis's neighbour indices (int64) and their weights
    (``1 - upper`` and ``upper``, of the working dtype), (B, H) for rows and (B, W) for columns, or with
    leading dimensions (Z, B, H) and (Z, B, W) for Z zooms per sample (:func:`zoom_device_tables` of several
    zooms)."""

    row_low: Tensor
    row_high: Tensor
    row_lower: Tensor
    row_upper: Tensor
    column_low: Tensor
    column_high: Tensor
    column_lower: Tensor
    column_upper: Tensor

    def slots(self, chosen: slice) -> ZoomTables:
        """The tables of the zooms ``chosen`` along the first dimension (Z)."""
        return ZoomTables(*(table[chosen] for table in self))


def zoom_device_tables(
    row_low: Tensor, row_high: Tensor, row_upper: Tensor, column_low: Tensor, column_high: Tensor, column_upper: Tensor
) -> ZoomTables:
    """:func:`zoom_tables` uploaded (any leading dimensions) → :class:`ZoomTables`, the weights' complements
    ``1 - upper`` computed once on the device, in the weights' dtype."""
    return ZoomTables(
        row_low, row_high, 1.0 - row_upper, row_upper, column_low, column_high, 1.0 - column_upper, column_upper
    )


def _composed_zoom(images: Tensor, tables: ZoomTables, dtype: torch.dtype) -> Tensor:
    """:func:`zoom` in ATen operations: the source expanded over the zooms, each pass two gathers of whole
    images, two products and a sum."""
    batch, channels, height, width = images.shape
    shape = (*tables.row_low.shape[:-2], batch, channels, height, width)
    source = images.to(tables.row_upper.dtype).expand(shape)

    def rows_at(index: Tensor) -> Tensor:
        return source.gather(-2, index[..., None, :, None].expand(shape))

    by_rows = rows_at(tables.row_low) * tables.row_lower[..., None, :, None]
    by_rows += rows_at(tables.row_high) * tables.row_upper[..., None, :, None]

    def columns_at(index: Tensor) -> Tensor:
        return by_rows.gather(-1, index[..., None, None, :].expand(shape))

    zoomed = columns_at(tables.column_low) * tables.column_lower[..., None, None, :]
    zoomed += columns_at(tables.column_high) * tables.column_upper[..., None, None, :]
    return zoomed.to(dtype)


@torch.library.custom_op("ccc::zoom", mutates_args=())
def zoom(images: Tensor, tables: list[Tensor], dtype: torch.dtype) -> Tensor:
    """Centre zoom of float ``images`` (B, C, H, W) with the eight :class:`ZoomTables` in their order (rows'
    (*S, B, H), columns' (*S, B, W)) → ``dtype`` (*S, B, C, H, W), as :func:`zoom_with_tables` describes it: in
    ATen operations (:func:`_composed_zoom`), or on CUDA in one Triton kernel that reads each output value's four
    source values and writes the result alone (:mod:`._triton.zoom`, where :func:`~._triton.fuses`). The same
    bits either way.
    """
    return _composed_zoom(images, ZoomTables(*tables), dtype)


@zoom.register_kernel("cuda")
def _zoom_cuda(images: Tensor, tables: list[Tensor], dtype: torch.dtype) -> Tensor:
    if not fuses(images.device):
        return _composed_zoom(images, ZoomTables(*tables), dtype)
    from ._triton.zoom import zoom as kernel

    return kernel(images, ZoomTables(*tables), dtype)


@zoom.register_fake
def _zoom_shape(images: Tensor, tables: list[Tensor], dtype: torch.dtype) -> Tensor:
    return images.new_empty((*tables[0].shape[:-2], *images.shape), dtype=dtype)


def zoom_with_tables(images: Tensor, tables: ZoomTables, dtype: torch.dtype) -> Tensor:
    """Centre zoom of each sample: ``clipped_zoom`` of the reference (scipy order 1).

    Args:
        images: float (B, C, H, W), computed in the weights' dtype (float64: scipy's arithmetic; images
            already of that dtype are not copied).
        tables: :func:`zoom_device_tables` of one zoom per sample ((B, H) and (B, W)), or of Z zooms per
            sample ((Z, B, H) and (Z, B, W)), on the images' device.
        dtype: the result's dtype (the reference casts each zoom to its input's dtype).

    Returns:
        (B, C, H, W), or (Z, B, C, H, W), of ``dtype``: rows interpolated first, then columns, in the
        weights' dtype, then cast. Several zooms are made in one set of operations, each with the arithmetic
        of a lone one; the images are read in their own memory layout (no copy). The operator :func:`zoom`
        (one Triton kernel on CUDA).
    """
    return zoom(images, list(tables), dtype)


def motion_blur_tables(
    height: int, width: int, radii: list[float], sigmas: list[float], angles: list[float]
) -> tuple[NDArray[np.float64], NDArray[np.int64], tuple[int, int]]:
    """ImageMagick 6's MotionBlurImage taps (:func:`ccc.corruptions.motion.motion_blur_taps`) of B samples.

    Args:
        height, width: the images' size in pixels.
        radii, sigmas: B radii and sigmas in pixels (each > 0).
        angles: B angles in degrees (0 = to the right, 90 = down).

    Returns:
        On the host: the weights float64 (B, T) in tap order (zero past a sample's own taps), each tap's
        flat offset int64 (B, T) into the planes padded by the third value, ``(rows, columns)``: offsets
        beyond the image size sample the same edge pixel as the size itself, so they are clamped, and the
        padding is the largest clamped offset, so that every tap is a per-sample shift of one index grid.
    """
    taps = [motion_blur_taps(radius, sigma, angle) for radius, sigma, angle in zip(radii, sigmas, angles)]
    count = max(len(tap.weights) for tap in taps)
    weights = np.zeros((len(taps), count))
    columns = np.zeros((len(taps), count), dtype=np.int64)
    rows = np.zeros((len(taps), count), dtype=np.int64)
    for index, tap in enumerate(taps):
        weights[index, : len(tap.weights)] = tap.weights
        columns[index, : len(tap.weights)] = tap.column_offsets
        rows[index, : len(tap.weights)] = tap.row_offsets
    rows = rows.clip(1 - height, height - 1)
    columns = columns.clip(1 - width, width - 1)
    pad_rows, pad_columns = int(np.abs(rows).max()), int(np.abs(columns).max())
    starts = (rows + pad_rows) * (width + 2 * pad_columns) + columns + pad_columns
    return weights, starts, (pad_rows, pad_columns)


GATHER_ELEMENTS = 1 << 25
"""Most values a filter of several shifted or zoomed copies gathers in one operation on a device other than the
CPU (256 MB in float64): motion blur's taps and zoom blur's zooms are gathered and weighted this many values at
a time (at least one tap or zoom), then summed one after the other."""


def gather_elements(device: torch.device) -> int:
    """Most values :func:`motion_blur_with_tables` and zoom blur gather in one operation on ``device``: 0 on the
    CPU (one tap or zoom at a time: its values stay in the caches, and a launch costs nothing there),
    :data:`GATHER_ELEMENTS` elsewhere (the GPU: launches are what count). The bytes are the same."""
    return 0 if device.type == "cpu" else GATHER_ELEMENTS


def _composed_motion_blur(levels: Tensor, weights: Tensor, starts: Tensor, pad_rows: int, pad_columns: int) -> Tensor:
    """:func:`motion_blur_levels` in ATen operations: the levels' quanta replicate-padded, each chunk of taps (at most
    :func:`gather_elements` values) gathered from the padded planes and weighted at once, the products then
    summed one tap after the other."""
    batch, channels, height, width = levels.shape
    device = levels.device
    padded_width = width + 2 * pad_columns
    padded = F.pad(levels * _QUANTUM_PER_LEVEL, (pad_columns, pad_columns, pad_rows, pad_rows), mode="replicate")
    flat = padded.reshape(batch, channels, -1)
    grid = (torch.arange(height, device=device)[:, None] * padded_width + torch.arange(width, device=device)).reshape(
        -1
    )

    taps, pixels = weights.shape[1], height * width
    chunk = max(1, min(taps, gather_elements(device) // (batch * channels * pixels)))
    total = None
    for first in range(0, taps, chunk):  # the products of `chunk` taps in one gather and one multiplication
        last = min(first + chunk, taps)
        index = (grid[None, None, :] + starts[:, first:last, None]).reshape(batch, 1, -1)
        products = flat.gather(2, index.expand(batch, channels, -1)).view(batch, channels, last - first, pixels)
        products *= weights[:, None, first:last, None]
        for tap_products in products.unbind(2):  # summed one tap after the other, in tap order
            if total is None:  # the sum from zero, whose first addition is exact (0 + p = p: levels, weights >= 0)
                total = tap_products
            else:
                total += tap_products
    quantum = (total.clamp(0.0, _QUANTUM_RANGE) + 0.5).floor()
    return torch.div(quantum, _QUANTUM_PER_LEVEL, rounding_mode="floor").reshape(batch, channels, height, width)


@torch.library.custom_op("ccc::motion_blur_levels", mutates_args=())
def motion_blur_levels(levels: Tensor, weights: Tensor, starts: Tensor, pad_rows: int, pad_columns: int) -> Tensor:
    """ImageMagick's motion blur of ``levels`` (B, C, H, W), as :func:`motion_blur_with_tables` describes it with
    ``padding`` = (``pad_rows``, ``pad_columns``): in ATen operations (:func:`_composed_motion_blur`), or on CUDA
    in one Triton kernel that reads the tapped levels where the padded planes would repeat them and writes the
    result alone (:mod:`._triton.motion_blur`, where :func:`~._triton.fuses`). The same bits either way."""
    return _composed_motion_blur(levels, weights, starts, pad_rows, pad_columns)


@motion_blur_levels.register_kernel("cuda")
def _motion_blur_cuda(levels: Tensor, weights: Tensor, starts: Tensor, pad_rows: int, pad_columns: int) -> Tensor:
    if not fuses(levels.device):
        return _composed_motion_blur(levels, weights, starts, pad_rows, pad_columns)
    from ._triton.motion_blur import motion_blur as kernel

    return kernel(levels, weights, starts, (pad_rows, pad_columns), int(_QUANTUM_PER_LEVEL), _QUANTUM_RANGE)


@motion_blur_levels.register_fake
def _motion_blur_shape(levels: Tensor, weights: Tensor, starts: Tensor, pad_rows: int, pad_columns: int) -> Tensor:
    return torch.empty_like(levels, memory_format=torch.contiguous_format)


def motion_blur_with_tables(levels: Tensor, weights: Tensor, starts: Tensor, padding: tuple[int, int]) -> Tensor:
    """ImageMagick 6's MotionBlurImage through an 8-bit PNG round trip, with :func:`motion_blur_tables`.

    Args:
        levels: float64 (or float32) (B, C, H, W) integer 8-bit levels in [0, 255].
        weights, starts: the tables' weights (of the levels' dtype) and flat offsets on the levels'
            device; padding as returned.

    Returns:
        (B, C, H, W) integer levels of the levels' dtype: ``floor(round(Σ_tap weight × 257 × level) / 257)``
        with the taps' products summed in tap order (in float64: ImageMagick's sums) and edge pixels repeated.
        The operator :func:`motion_blur_levels` (one Triton kernel on CUDA).
    """
    return motion_blur_levels(levels, weights, starts, *padding)


def imagemagick_motion_blur(levels: Tensor, radii: list[float], sigmas: list[float], angles: list[float]) -> Tensor:
    """:func:`motion_blur_with_tables` of ``levels`` (float64 or float32 (B, C, H, W) levels) with the taps
    of :func:`motion_blur_tables` (host radii, sigmas and angles), uploaded at once."""
    weights, starts, padding = motion_blur_tables(*levels.shape[-2:], radii, sigmas, angles)
    tables = upload_tables(levels.device, weights, starts, float_dtype=levels.dtype)
    return motion_blur_with_tables(levels, *tables, padding)


_GRAY_WEIGHTS = tuple(float(np.float32(weight)) for weight in (0.299, 0.587, 0.114))
"""OpenCV's RGB → gray weights (``cv2.COLOR_RGB2GRAY``), rounded to float32 as OpenCV stores them (Python
floats: scalars of the device arithmetic, no upload)."""


def opencv_gray(unit: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
    """``cv2.cvtColor(x, cv2.COLOR_RGB2GRAY)`` of float32 images, with OpenCV's SIMD operation order.

    Args:
        unit: float32 (B, 3, H, W).
        dtype: ``torch.float64`` emulates the fused multiply-adds exactly; ``torch.float32`` (the float32
            mode) uses plain float32 multiply-adds (an ulp away at most).

    Returns:
        float32 (B, 1, H, W): ``fma(B, 0.114, fma(R, 0.299, G * 0.587))`` in float32 (OpenCV 5 on a CPU
        with FMA; measured equal bit for bit). The fused steps are computed as float64 sums of exact
        float64 products rounded once to float32.
    """
    red_weight, green_weight, blue_weight = _GRAY_WEIGHTS
    red, green, blue = (unit[:, channel : channel + 1].to(dtype) for channel in range(3))
    gray = (green * green_weight).to(torch.float32).to(torch.float64)
    gray = (gray + red * red_weight).to(torch.float32).to(torch.float64)
    return (gray + blue * blue_weight).to(torch.float32)
