"""ImageMagick 6's motion blur (``MotionBlurImage``), re-implemented with numpy and OpenCV.

ImageNet-C's motion_blur and snow call ``MagickMotionBlurImage(wand, radius, sigma, angle)`` on an
8-bit PNG and decode the 8-bit PNG that ImageMagick writes back. :func:`motion_blur_imagemagick`
reproduces that round trip without ImageMagick; :func:`motion_blur_wand` runs the real thing and is
only used to check the former (tests, benchmarks); the torch backend applies the taps of
:func:`motion_blur_taps` (this module is their one owner). ``docs/motion_blur.md`` has the details and the
measured agreement.

The operation, as ImageMagick 6 (Q16, no HDRI) defines it:

- ``width = 2 * ceil(radius) + 1`` taps (ImageMagick derives the width from sigma only when
  ``radius <= 1e-12``);
- tap ``i`` (0 .. width - 1) has the one-sided Gaussian weight ``exp(-i² / (2 sigma²))``, the
  weights normalised to sum to one;
- tap ``i`` samples the pixel ``(x + round(i cos θ), y + round(i sin θ))``, ``θ = angle`` in degrees,
  x to the right and y down, "round" being ``ceil(t - 0.5)`` (halves go down) applied to
  ``i * (w cos θ) / hypot(w sin θ, w cos θ)``; samples outside the image repeat the nearest edge
  pixel;
- the sum over taps of weight × (8-bit value × 257), accumulated in float64 in tap order, is
  rounded to a 16-bit quantum (``floor(sum + 0.5)`` clamped to [0, 65535]); writing the 8-bit PNG
  truncates: ``quantum // 257``.

Channels are blurred independently; a greyscale image stays greyscale.
"""

from __future__ import annotations

import ctypes
import io
import math
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray
from PIL import Image

__all__ = [
    "MotionBlurTaps",
    "WandUnavailableError",
    "motion_blur_imagemagick",
    "motion_blur_taps",
    "motion_blur_wand",
]

_MAGICK_EPSILON = 1.0e-12
"""ImageMagick's ``MagickEpsilon``."""

_MAGICK_SQRT_2PI = 2.50662827463100024161235523934010416269302368164062
"""ImageMagick's ``MagickSQ2PI`` (sqrt(2 pi) as a double)."""

_QUANTUM_RANGE = 65535.0
"""Largest 16-bit quantum (ImageMagick Q16)."""

_QUANTUM_PER_LEVEL = 257
"""16-bit quanta per 8-bit level: reading an 8-bit PNG multiplies by 257."""

_HALF_QUANTUM_IN_LEVELS = 0.5 / _QUANTUM_PER_LEVEL
"""Half a quantum in 8-bit units: the 8-bit output is ``floor(levels + 1/514)``."""

_FLOAT32_UNIT_ROUNDOFF = 2.0**-24


class WandUnavailableError(ImportError):
    """Wand (the Python binding) or ImageMagick 6's libMagickWand is not installed."""


@dataclass(frozen=True)
class MotionBlurTaps:
    """The taps ImageMagick's MotionBlurImage uses for one (radius, sigma, angle).

    Attributes:
        weights: one float64 weight per tap, tap 0 first; non-negative, summing to one (to rounding).
        column_offsets: per tap, the column offset in pixels (positive = to the right) of the sample.
        row_offsets: per tap, the row offset in pixels (positive = down) of the sample.
    """

    weights: tuple[float, ...]
    column_offsets: tuple[int, ...]
    row_offsets: tuple[int, ...]


def motion_blur_taps(radius: float, sigma: float, angle: float) -> MotionBlurTaps:
    """The taps (weights and pixel offsets) of ImageMagick's MotionBlurImage.

    Args:
        radius: blur radius in pixels, finite and > 0 (not counting the centre pixel).
        sigma: standard deviation of the one-sided Gaussian in pixels, finite and > 0.
        angle: direction of the samples in degrees, finite (0 = to the right, 90 = down).

    Returns:
        ``2 * ceil(radius) + 1`` taps (for ``radius <= 1e-12`` a width derived from sigma, as
        ImageMagick does), computed with ImageMagick's floating-point formulas.

    Raises:
        ValueError: for a radius or sigma that is not a finite number > 0, or a non-finite angle.
    """
    radius = _finite_float(radius, "radius", positive=True)
    sigma = _finite_float(sigma, "sigma", positive=True)
    angle = _finite_float(angle, "angle", positive=False)
    width = _kernel_width(radius, sigma)
    column_offsets, row_offsets = _tap_offsets(width, angle)
    return MotionBlurTaps(_tap_weights(width, sigma), column_offsets, row_offsets)


def motion_blur_imagemagick(image: NDArray[np.uint8], radius: float, sigma: float, angle: float) -> NDArray[np.uint8]:
    """ImageMagick 6's ``MagickMotionBlurImage`` through an 8-bit PNG round trip, without ImageMagick.

    Equal, value for value, to :func:`motion_blur_wand` (see ``docs/motion_blur.md``). Pure and
    deterministic: the same arguments give the same bytes on every machine.

    Args:
        image: uint8 array HxW (greyscale), HxWx1 or HxWx3, H, W >= 1; not modified.
        radius: blur radius in pixels, finite and > 0; the blur has ``2 * ceil(radius) + 1`` taps.
        sigma: standard deviation of the one-sided Gaussian weights in pixels, finite and > 0.
        angle: direction of the samples in degrees, finite (0 = to the right, 90 = down); the blur
            trails a bright point in the opposite direction.

    Returns:
        A new uint8 array of the same shape.

    Raises:
        ValueError: for a wrong image type, dtype or shape, or an invalid radius, sigma or angle.
    """
    planes = _image_as_planes(image)
    taps = motion_blur_taps(radius, sigma, angle)
    return _blur_planes(planes, taps).reshape(image.shape)


def motion_blur_wand(image: NDArray[np.uint8], radius: float, sigma: float, angle: float) -> NDArray[np.uint8]:
    """The reference path: PNG → ImageMagick ``MagickMotionBlurImage`` (through Wand) → PNG → array.

    Does what ImageNet-C's code does (Pillow writes the PNG, OpenCV decodes ImageMagick's PNG; a
    greyscale result of a 3-channel image is broadcast to three channels). Only for comparisons:
    the library uses :func:`motion_blur_imagemagick`.

    Args:
        image, radius, sigma, angle: as in :func:`motion_blur_imagemagick`.

    Returns:
        A new uint8 array of the same shape as ``image``.

    Raises:
        ValueError: for invalid arguments, as :func:`motion_blur_imagemagick`.
        WandUnavailableError: when Wand or libMagickWand is missing.
        RuntimeError: when ImageMagick fails or returns an unexpected image.
    """
    planes = _image_as_planes(image)
    radius = _finite_float(radius, "radius", positive=True)
    sigma = _finite_float(sigma, "sigma", positive=True)
    angle = _finite_float(angle, "angle", positive=False)
    library, wand_image_class = _load_wand()
    channels = planes.shape[2]
    source = Image.fromarray(np.ascontiguousarray(planes[..., 0] if channels == 1 else planes))
    png = io.BytesIO()
    source.save(png, format="PNG")
    with wand_image_class(blob=png.getvalue()) as wand_image:
        if not library.MagickMotionBlurImage(wand_image.wand, radius, sigma, angle):
            raise RuntimeError(
                f"ImageMagick's MagickMotionBlurImage failed for radius={radius}, sigma={sigma}, angle={angle}"
            )
        blurred_png = wand_image.make_blob()
    decoded = cv2.imdecode(np.frombuffer(blurred_png, np.uint8), cv2.IMREAD_UNCHANGED)
    if decoded is None or decoded.dtype != np.uint8 or decoded.shape[:2] != planes.shape[:2]:
        description = "nothing" if decoded is None else f"{decoded.dtype} {decoded.shape}"
        raise RuntimeError(
            f"ImageMagick returned an unexpected PNG: expected uint8 {planes.shape[:2]}, decoded {description}"
        )
    if decoded.ndim == 2:
        result = np.repeat(decoded[..., np.newaxis], channels, axis=2)
    elif decoded.shape[2] == 3 and channels == 3:
        result = decoded[..., ::-1]
    elif decoded.shape[2] == 3 and channels == 1 and (decoded == decoded[..., :1]).all():
        result = decoded[..., :1]
    else:
        raise RuntimeError(f"ImageMagick returned a PNG with {decoded.shape[2]} channels for an image with {channels}")
    return np.ascontiguousarray(result).reshape(image.shape)


def _finite_float(value: object, parameter: str, positive: bool) -> float:
    expectation = "a finite number > 0" if positive else "a finite number"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{parameter} must be {expectation}, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or (positive and number <= 0.0):
        raise ValueError(f"{parameter} must be {expectation}, got {value!r}")
    return number


def _image_as_planes(image: object) -> NDArray[np.uint8]:
    """``image`` as an HxWxC view (C = 1 or 3) after checking type, dtype and shape."""
    if not isinstance(image, np.ndarray):
        raise ValueError(f"image must be a numpy uint8 array of shape HxW, HxWx1 or HxWx3, got {type(image).__name__}")
    if image.dtype != np.uint8:
        raise ValueError(f"image must have dtype uint8 (values 0..255), got {image.dtype}")
    if image.ndim == 2:
        planes = image[..., np.newaxis]
    elif image.ndim == 3 and image.shape[2] in (1, 3):
        planes = image
    else:
        raise ValueError(f"image must have shape HxW, HxWx1 or HxWx3, got {image.shape}")
    if planes.shape[0] < 1 or planes.shape[1] < 1:
        raise ValueError(f"image must be at least 1x1 pixels, got {image.shape}")
    return planes


def _kernel_width(radius: float, sigma: float) -> int:
    """ImageMagick's ``GetOptimalKernelWidth1D``: the number of taps."""
    if radius > _MAGICK_EPSILON:
        return int(2.0 * math.ceil(radius) + 1.0)
    # Only for 0 < radius <= 1e-12: ImageMagick grows the width until the outermost tap of a
    # two-sided Gaussian falls below one 16-bit quantum.
    if sigma <= _MAGICK_EPSILON:
        return 3
    alpha = 1.0 / (2.0 * sigma * sigma)
    beta = 1.0 / (_MAGICK_SQRT_2PI * sigma)
    width = 5
    while True:
        half = (width - 1) // 2
        normalize = 0.0
        for offset in range(-half, half + 1):
            normalize += math.exp(-float(offset * offset) * alpha) * beta
        outermost = math.exp(-float(half * half) * alpha) * beta / normalize
        if outermost < 1.0 / _QUANTUM_RANGE or outermost < _MAGICK_EPSILON:
            return width - 2
        width += 2


def _tap_weights(width: int, sigma: float) -> tuple[float, ...]:
    """The normalised one-sided Gaussian of ``GetMotionBlurKernel``, with ImageMagick's operation order.

    Python's ``math`` functions are used (not numpy's vectorised ones) so that the doubles are
    those of the C library, as in ImageMagick, and do not depend on numpy's SIMD code paths.
    """
    sigma = max(sigma, _MAGICK_EPSILON)
    raw = [
        math.exp(-float(index * index) / (2.0 * sigma * sigma)) / (_MAGICK_SQRT_2PI * sigma) for index in range(width)
    ]
    normalize = 0.0
    for weight in raw:
        normalize += weight
    return tuple(weight / normalize for weight in raw)


def _tap_offsets(width: int, angle: float) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Column and row offsets of the taps, with ImageMagick's formulas and rounding (``ceil(t - 0.5)``)."""
    radians = math.pi * angle / 180.0
    point_x = float(width) * math.sin(radians)
    point_y = float(width) * math.cos(radians)
    length = math.hypot(point_x, point_y)
    columns = tuple(math.ceil(index * point_y / length - 0.5) for index in range(width))
    rows = tuple(math.ceil(index * point_x / length - 0.5) for index in range(width))
    return columns, rows


_MAX_CHUNK_AREA = 49
"""Largest kernel (rows × columns) handed to ``cv2.filter2D``: below 50 OpenCV sums directly on
every CPU (larger float32 kernels may go through its DFT, whose rounding the error bound below
does not cover)."""


@dataclass(frozen=True)
class _TapChunk:
    """Consecutive taps whose offsets fit in a small box, as one dense float32 correlation kernel."""

    column: int
    row: int
    kernel: NDArray[np.float32]


def _chunk_taps(column_offsets: list[int], row_offsets: list[int], weights: tuple[float, ...]) -> list[_TapChunk]:
    """Group consecutive taps (they lie along a line) into boxes of at most ``_MAX_CHUNK_AREA`` pixels."""
    # Each group: [first tap, last tap, min column, max column, min row, max row].
    groups = [[0, 0, column_offsets[0], column_offsets[0], row_offsets[0], row_offsets[0]]]
    for tap in range(1, len(weights)):
        column, row = column_offsets[tap], row_offsets[tap]
        group = groups[-1]
        low_column, high_column = min(group[2], column), max(group[3], column)
        low_row, high_row = min(group[4], row), max(group[5], row)
        if (high_column - low_column + 1) * (high_row - low_row + 1) <= _MAX_CHUNK_AREA:
            groups[-1] = [group[0], tap, low_column, high_column, low_row, high_row]
        else:
            groups.append([tap, tap, column, column, row, row])
    chunks = []
    for first_tap, last_tap, low_column, high_column, low_row, high_row in groups:
        kernel = [[0.0] * (high_column - low_column + 1) for _ in range(high_row - low_row + 1)]
        for tap in range(first_tap, last_tap + 1):
            # Taps may coincide (e.g. at 45 degrees): their weights add (in float64).
            kernel[row_offsets[tap] - low_row][column_offsets[tap] - low_column] += weights[tap]
        chunks.append(_TapChunk(low_column, low_row, np.array(kernel, dtype=np.float32)))
    return chunks


def _blur_planes(planes: NDArray[np.uint8], taps: MotionBlurTaps) -> NDArray[np.uint8]:
    """Blur an HxWxC uint8 array; returns a new HxWxC uint8 array.

    A fast float32 pass (OpenCV correlations with small sparse kernels) gives every value to within
    a proven error bound; the few values whose float32 sum lies within that bound of an 8-bit
    rounding boundary are recomputed exactly as ImageMagick does (float64, tap order). The result is
    therefore ImageMagick's, and it does not depend on how OpenCV rounds in float32 on a given CPU.
    """
    height, width, channels = planes.shape
    # Under edge replication an offset beyond the image size samples the same edge pixel as an
    # offset equal to the size, so offsets are clamped to bound the padding.
    column_offsets = [min(max(offset, 1 - width), width - 1) for offset in taps.column_offsets]
    row_offsets = [min(max(offset, 1 - height), height - 1) for offset in taps.row_offsets]
    left, right = max(0, -min(column_offsets)), max(0, max(column_offsets))
    top, bottom = max(0, -min(row_offsets)), max(0, max(row_offsets))
    # OpenCV returns single-channel images as HxW arrays: work in that layout for C = 1.
    source = planes[..., 0] if channels == 1 else planes
    padded = cv2.copyMakeBorder(source, top, bottom, left, right, cv2.BORDER_REPLICATE)
    padded_float = padded.astype(np.float32)
    chunks = _chunk_taps(column_offsets, row_offsets, taps.weights)
    accumulated = np.ascontiguousarray(_correlate_chunk(padded_float, chunks[0], top, left, height, width))
    for chunk in chunks[1:]:
        cv2.add(accumulated, _correlate_chunk(padded_float, chunk, top, left, height, width), dst=accumulated)
    # In 8-bit units ImageMagick's output is floor(sum + 1/514) (see the module docstring).
    accumulated += np.float32(_HALF_QUANTUM_IN_LEVELS)
    # Values lie in [0, 255.01): the cast truncates, which is floor.
    result = accumulated.astype(np.uint8)
    distance = np.rint(accumulated)
    distance -= accumulated
    np.abs(distance, out=distance)
    uncertain = np.flatnonzero(distance <= _float32_error_bound(len(taps.weights)))
    if uncertain.size:
        pixels, planes_index = np.divmod(uncertain, channels)
        rows, columns = np.divmod(pixels, width)
        padded_width = width + left + right
        positions = ((rows + top) * padded_width + columns + left) * channels + planes_index
        tap_starts = (np.asarray(row_offsets) * padded_width + np.asarray(column_offsets)) * channels
        result.reshape(-1)[uncertain] = _exact_levels(padded.reshape(-1), positions, tap_starts, taps.weights)
    return result.reshape(height, width, channels)


def _correlate_chunk(
    padded: NDArray[np.float32], chunk: _TapChunk, top: int, left: int, height: int, width: int
) -> NDArray[np.float32]:
    """Σ weight × sample over the chunk's taps for every output pixel: an HxW(xC) float32 view."""
    kernel_rows, kernel_columns = chunk.kernel.shape
    window = padded[
        top + chunk.row : top + chunk.row + height + kernel_rows - 1,
        left + chunk.column : left + chunk.column + width + kernel_columns - 1,
    ]
    # Anchor (0, 0) on a window that holds every sample of the HxW output corner: the border value
    # (zero) only reaches outputs outside that corner, which are discarded.
    filtered = cv2.filter2D(window, cv2.CV_32F, chunk.kernel, anchor=(0, 0), borderType=cv2.BORDER_CONSTANT)
    return filtered[:height, :width]


def _float32_error_bound(tap_count: int) -> float:
    """Bound on |float32 pass − exact value| in 8-bit units, with a safety factor of two.

    The exact value is a sum of ``tap_count`` products weight × level (levels <= 255, weights
    summing to one). Rounding the weights to float32 and rounding each product costs at most one
    unit roundoff of 255 each in total; each of the ``tap_count - 1`` additions, in whatever order
    or fused form, at most one roundoff of its result (<= 255); adding 1/514 one roundoff of 256.
    """
    return 2.0 * ((tap_count + 1) * 255.0 + 256.0) * _FLOAT32_UNIT_ROUNDOFF


def _exact_levels(
    flat_levels: NDArray[np.uint8], positions: NDArray[np.intp], starts: NDArray[np.intp], weights: tuple[float, ...]
) -> NDArray[np.uint8]:
    """ImageMagick's 8-bit output at ``positions``: float64 products summed in tap order, Q16 rounding."""
    samples = flat_levels[positions[:, np.newaxis] + starts[np.newaxis, :]]
    quanta = samples.astype(np.float64) * float(_QUANTUM_PER_LEVEL)
    products = quanta * np.asarray(weights, dtype=np.float64)
    # cumsum (add.accumulate) adds strictly left to right, as ImageMagick's loop over the taps.
    sums = np.cumsum(products, axis=1)[:, -1]
    quantum = np.floor(np.clip(sums, 0.0, _QUANTUM_RANGE) + 0.5)
    return (quantum // _QUANTUM_PER_LEVEL).astype(np.uint8)


def _load_wand() -> tuple[Any, Any]:
    """Wand's ctypes library (with MagickMotionBlurImage's signature declared) and its Image class."""
    try:
        from wand.api import library
        from wand.image import Image as WandImage
    except ImportError as error:
        raise WandUnavailableError(
            "motion_blur_wand needs Wand and ImageMagick 6's libMagickWand: "
            "pip install ccc[wand] and apt-get install libmagickwand-6.q16-6 "
            f"(import failed: {error})"
        ) from error
    library.MagickMotionBlurImage.argtypes = (ctypes.c_void_p, ctypes.c_double, ctypes.c_double, ctypes.c_double)
    return library, WandImage
