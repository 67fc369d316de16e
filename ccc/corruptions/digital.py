"""Digital corruptions: brightness, contrast, elastic, pixelate, jpeg and the hold-out saturate.

Fidelity (details in ``docs/fidelity.md``):

- brightness, saturate: scikit-image's RGB→HSV→RGB formulas evaluated per pixel by a compiled loop
  (bit-identical arithmetic, about 20× faster than the two array conversions).
- contrast: identical numpy arithmetic, evaluated per (channel, byte) into a lookup table.
- pixelate, jpeg: identical Pillow calls (BOX resizes; JPEG encode/decode at the rounded quality).
- elastic: identical affine jitter (OpenCV), identical displacement fields — the Gaussian smoothing of
  the noise uses scipy directly for narrow kernels and, for the very wide kernels of low severities,
  an exact folding of the reflect-extended kernel into a matrix — and a compiled bilinear sampler
  with scipy's ``map_coordinates(order=1, mode="reflect")`` arithmetic instead of scipy's
  interpolation over a 3-D coordinate grid.
"""

from __future__ import annotations

import io

import cv2
import numpy as np
from numpy.typing import NDArray
from PIL import Image

from ._kernels import adjust_hsv, sample_bilinear_reflect
from ._random import RandomSource
from .filters import gaussian_smooth_reflect
from .registry import Corruption, register_corruption

BRIGHTNESS_TABLE = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
"""Shift of the HSV value channel (values in [0, 1]), severities 0..5."""

CONTRAST_TABLE = (1.0, 0.4, 0.3, 0.2, 0.1, 0.05)
"""Contrast factor around the per-channel mean, severities 0..5."""

ELASTIC_TABLE = (
    (0, 999, 0),
    (244 * 2, 244 * 0.7, 244 * 0.1),
    (244 * 2, 244 * 0.08, 244 * 0.2),
    (244 * 0.05, 244 * 0.01, 244 * 0.02),
    (244 * 0.07, 244 * 0.01, 244 * 0.02),
    (244 * 0.12, 244 * 0.01, 244 * 0.02),
)
"""(displacement scale alpha, displacement smoothing sigma, affine jitter), all in pixels,
severities 0..5. ImageNet-C wrote 244 where 224 was meant; the values are kept as published."""

PIXELATE_TABLE = (1.0, 0.6, 0.5, 0.4, 0.3, 0.25)
"""Down-scaling factor of the BOX resize, severities 0..5 (size ``int(side * factor)``)."""

JPEG_TABLE = (85, 25, 18, 15, 10, 7)
"""Pillow JPEG quality, severities 0..5 (rounded half to even)."""

SATURATE_TABLE = ((1.0, 0.0), (0.3, 0), (0.1, 0), (2, 0), (5, 0.1), (20, 0.2))
"""(HSV saturation factor, saturation offset), severities 0..5."""


def brightness(image: NDArray[np.uint8], value_shift: float, rng: RandomSource) -> NDArray[np.float64]:
    """Add ``value_shift`` to the HSV value (clipped to [0, 1])."""
    return np.clip(adjust_hsv(image / 255.0, value_shift, 1.0, 0.0), 0, 1) * 255


def saturate(image: NDArray[np.uint8], parameters: tuple[float, float], rng: RandomSource) -> NDArray[np.float64]:
    """Scale the HSV saturation by ``factor`` and add ``offset`` (clipped to [0, 1])."""
    factor, offset = parameters
    return np.clip(adjust_hsv(image / 255.0, 0.0, factor, offset), 0, 1) * 255


def contrast(image: NDArray[np.uint8], factor: float, rng: RandomSource) -> NDArray[np.uint8]:
    """``(x - mean) * factor + mean`` with the mean per channel over the image.

    The reference's per-value arithmetic is evaluated once per (channel, byte) into a lookup table
    (bit-identical, the output byte depends only on the input byte and the channel mean).
    """
    means = np.mean(image / 255.0, axis=(0, 1))
    levels = np.arange(256)[:, np.newaxis] / 255.0
    table = (np.clip((levels - means) * factor + means, 0, 1) * 255).astype(np.uint8)
    return table[image, np.arange(image.shape[2])]


def elastic(image: NDArray[np.uint8], parameters: tuple[float, float, float], rng: RandomSource) -> NDArray[np.float32]:
    """Random affine jitter of three control points, then a smooth random displacement field.

    ``parameters = (alpha, sigma, jitter)``: control points move uniformly in [-jitter, jitter);
    the displacement is uniform(-1, 1) noise per pixel smoothed by a Gaussian of ``sigma`` (reflect
    borders, truncated at 3 sigma) and scaled by ``alpha``; sampling is bilinear with reflect borders.
    """
    alpha, sigma, jitter = parameters
    unit = np.array(image, dtype=np.float32) / 255.0
    height, width = unit.shape[:2]
    centre = np.float32((height, width)) // 2
    square = min(height, width) // 3
    source_points = np.float32([centre + square, [centre[0] + square, centre[1] - square], centre - square])
    target_points = source_points + rng.uniform(-jitter, jitter, size=source_points.shape).astype(np.float32)
    affine = cv2.getAffineTransform(source_points, target_points)
    unit = cv2.warpAffine(unit, affine, (width, height), borderMode=cv2.BORDER_REFLECT_101)
    shift_columns = (gaussian_smooth_reflect(rng.uniform(-1, 1, size=(height, width)), sigma) * alpha).astype(
        np.float32
    )
    shift_rows = (gaussian_smooth_reflect(rng.uniform(-1, 1, size=(height, width)), sigma) * alpha).astype(np.float32)
    rows, columns = np.meshgrid(np.arange(height, dtype=np.float64), np.arange(width, dtype=np.float64), indexing="ij")
    warped = sample_bilinear_reflect(unit, rows + shift_rows, columns + shift_columns)
    return np.clip(warped, 0, 1) * 255


def pixelate(image: NDArray[np.uint8], factor: float, rng: RandomSource) -> NDArray[np.uint8]:
    """BOX-resize to ``int(side * factor)`` and back (Pillow)."""
    height, width = image.shape[:2]
    small = Image.fromarray(image).resize((int(width * factor), int(height * factor)), Image.Resampling.BOX)
    return np.asarray(small.resize((width, height), Image.Resampling.BOX))


def jpeg(image: NDArray[np.uint8], quality: float, rng: RandomSource) -> NDArray[np.uint8]:
    """Encode as JPEG at quality ``round(quality)`` and decode (Pillow)."""
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, "JPEG", quality=round(float(quality)))
    buffer.seek(0)
    return np.asarray(Image.open(buffer).convert("RGB"))


register_corruption(Corruption("brightness", "digital", brightness, BRIGHTNESS_TABLE, random=False, order=10))
register_corruption(Corruption("contrast", "digital", contrast, CONTRAST_TABLE, random=False, order=11))
register_corruption(
    Corruption("elastic", "digital", elastic, ELASTIC_TABLE, random=True, order=12, aliases=("elastic_transform",))
)
register_corruption(Corruption("pixelate", "digital", pixelate, PIXELATE_TABLE, random=False, order=13))
register_corruption(
    Corruption("jpeg", "digital", jpeg, JPEG_TABLE, random=False, order=14, aliases=("jpeg_compression",))
)
register_corruption(Corruption("saturate", "digital", saturate, SATURATE_TABLE, random=False, order=18, holdout=True))
