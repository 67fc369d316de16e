"""Blur corruptions: defocus_blur, glass_blur, motion_blur, zoom_blur and the hold-out gaussian_blur.

Fidelity (details in ``docs/fidelity.md``):

- defocus_blur: the reference's antialiased disk kernel (same grid, including half-integer grids for
  non-integer radii > 8, same OpenCV Gaussian antialiasing and float64 ``filter2D`` with reflect-101
  borders), applied to the three channels in one call: bit-identical from severity 1/3. Below it the
  kernel is a single tap of 1.0 and the exact result is the image itself, which is returned: the
  reference's DFT leaves ±1e-15 there, whose sign alone decides its truncation, differently on
  different CPUs.
- glass_blur: the reference's Gaussian blurs (scipy's kernel, replicated borders) and its pixel loop
  compiled with numba; offsets for all pixels are drawn up front in the reference's order.
- motion_blur: the project's own re-implementation of ImageMagick's MotionBlurImage
  (:mod:`ccc.corruptions.motion`); the angle is drawn uniformly in [-45, 45) degrees.
- zoom_blur: the average of the image and its centre zooms, with scipy's bilinear zoom coordinates,
  computed by a compiled separable loop instead of one ``scipy.ndimage.zoom`` call per zoom factor.
- gaussian_blur: scikit-image's Gaussian (scipy kernel truncated at 4 sigma, replicated borders).
"""

from __future__ import annotations

from functools import lru_cache

import cv2
import numpy as np
from numpy.typing import NDArray

from ._kernels import copy_displaced_pixels
from ._random import RandomSource, draw_integers
from .filters import gaussian_blur_nearest, zoom_bilinear_accumulate
from .motion import motion_blur_imagemagick
from .registry import Corruption, register_corruption

DEFOCUS_BLUR_TABLE = ((0.0, 0.0), (3, 0.1), (4, 0.5), (6, 0.5), (8, 0.5), (10, 0.5))
"""(disk radius in pixels, antialiasing Gaussian sigma), severities 0..5."""

GLASS_BLUR_TABLE = ((0.0, 0.0, 0.0), (0.7, 1, 2), (0.9, 2, 1), (1, 2, 3), (1.1, 3, 2), (1.5, 4, 2))
"""(Gaussian sigma in pixels, maximum displacement in pixels, iterations), severities 0..5.
The displacement (at least 1) and the iteration count are rounded half to even."""

MOTION_BLUR_TABLE = ((0.0, 0.0), (10, 3), (15, 5), (15, 8), (15, 12), (20, 15))
"""(ImageMagick radius, sigma) in pixels, severities 0..5; angle uniform in [-45, 45) degrees."""

ZOOM_BLUR_TABLE = (
    (1.0, 1.0, 0.01),
    (1, 1.11, 0.01),
    (1, 1.16, 0.01),
    (1, 1.21, 0.02),
    (1, 1.26, 0.02),
    (1, 1.31, 0.03),
)
"""(start, stop, step) of the zoom factors ``numpy.arange(start, stop, step)``, severities 0..5."""

GAUSSIAN_BLUR_TABLE = (0.0, 1, 2, 3, 4, 6)
"""Gaussian sigma in pixels, severities 0..5."""


@lru_cache(maxsize=128)
def antialiased_disk(radius: float, alias_blur: float) -> NDArray[np.float32]:
    """Defocus blur's kernel: a normalised disk of ``radius`` pixels smoothed by a Gaussian of ``alias_blur``.

    Args:
        radius: disk radius in pixels, > 0 (the grid is 17×17 up to radius 8, else ``2·radius + 1`` wide).
        alias_blur: the antialiasing Gaussian's sigma in pixels (OpenCV ``GaussianBlur``, 3×3 or 5×5).

    Returns:
        float32 square kernel (17×17 or wider), summing to about 1; read-only and cached (shared by the
        CPU path and ``ccc.render_torch.blur``).
    """
    if radius <= 8:
        grid = np.arange(-8, 8 + 1)
        kernel_size = (3, 3)
    else:
        grid = np.arange(-radius, radius + 1)
        kernel_size = (5, 5)
    column, row = np.meshgrid(grid, grid)
    disk = np.array((column**2 + row**2) <= radius**2, dtype=np.float32)
    disk /= np.sum(disk)
    kernel = cv2.GaussianBlur(disk, ksize=kernel_size, sigmaX=alias_blur)
    kernel.setflags(write=False)
    return kernel


def defocus_blur(image: NDArray[np.uint8], parameters: tuple[float, float], rng: RandomSource) -> NDArray[np.float64]:
    """Convolve each channel with an antialiased disk of ``parameters = (radius, alias_sigma)``.

    A kernel that is a single tap of 1.0 (radius below 1 pixel with a vanishing antialiasing blur:
    severities below 1/3) returns the image unchanged, the exact result, whatever the CPU.
    """
    radius, alias_blur = parameters
    kernel = antialiased_disk(radius, alias_blur)
    if kernel.max() == 1.0:
        return image.astype(np.float64)
    blurred = cv2.filter2D(image / 255.0, -1, kernel)
    return np.clip(blurred, 0, 1) * 255


def glass_blur(
    image: NDArray[np.uint8], parameters: tuple[float, float, float], rng: RandomSource
) -> NDArray[np.float64]:
    """Gaussian blur, ``iterations`` passes of local pixel displacement, Gaussian blur again.

    ``parameters = (sigma, max_delta, iterations)``; offsets (dx, dy) are uniform integers in
    [-max_delta, max_delta), one pair per visited pixel, drawn for all passes before the loop.
    """
    sigma, max_delta_value, iterations_value = parameters
    max_delta = round(max(max_delta_value, 1.0))
    iterations = round(iterations_value)
    blurred = np.uint8(gaussian_blur_nearest(image / 255.0, sigma) * 255)
    height, width = image.shape[:2]
    rows = max(height - 2 * max_delta, 0)
    columns = max(width - 2 * max_delta, 0)
    offsets = draw_integers(rng, -max_delta, max_delta, size=(iterations, rows, columns, 2)).astype(np.int64)
    copy_displaced_pixels(blurred, offsets, max_delta)
    return np.clip(gaussian_blur_nearest(blurred / 255.0, sigma), 0, 1) * 255


def motion_blur(image: NDArray[np.uint8], parameters: tuple[float, float], rng: RandomSource) -> NDArray[np.uint8]:
    """ImageMagick motion blur with ``parameters = (radius, sigma)`` at an angle uniform in [-45, 45)."""
    radius, sigma = parameters
    angle = rng.uniform(-45, 45)
    return motion_blur_imagemagick(image, radius, sigma, angle)


def zoom_blur(
    image: NDArray[np.uint8], parameters: tuple[float, float, float], rng: RandomSource
) -> NDArray[np.float32]:
    """Average of the image and its centre zooms by ``numpy.arange(start, stop, step)``."""
    start, stop, step = parameters
    zoom_factors = np.arange(start, stop, step)
    unit = (image / 255.0).astype(np.float32)
    accumulated = zoom_bilinear_accumulate(unit, zoom_factors)
    averaged = (unit + accumulated) / (len(zoom_factors) + 1)
    return np.clip(averaged, 0, 1) * 255


def gaussian_blur(image: NDArray[np.uint8], sigma: float, rng: RandomSource) -> NDArray[np.float64]:
    """Gaussian blur of standard deviation ``sigma`` pixels (hold-out corruption)."""
    return np.clip(gaussian_blur_nearest(image / 255.0, sigma), 0, 1) * 255


register_corruption(Corruption("defocus_blur", "blur", defocus_blur, DEFOCUS_BLUR_TABLE, random=False, order=3))
register_corruption(Corruption("glass_blur", "blur", glass_blur, GLASS_BLUR_TABLE, random=True, order=4))
register_corruption(Corruption("motion_blur", "blur", motion_blur, MOTION_BLUR_TABLE, random=True, order=5))
register_corruption(Corruption("zoom_blur", "blur", zoom_blur, ZOOM_BLUR_TABLE, random=False, order=6))
register_corruption(
    Corruption("gaussian_blur", "blur", gaussian_blur, GAUSSIAN_BLUR_TABLE, random=False, order=16, holdout=True)
)
