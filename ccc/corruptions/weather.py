"""Weather corruptions: snow, frost, fog and the hold-out spatter.

All follow the reference draw for draw (same distributions, shapes and order). Differences:

- snow: the snow layer is zoomed by the compiled bilinear zoom and motion-blurred by the project's
  ImageMagick re-implementation instead of a PNG round trip through ImageMagick.
- frost: textures are decoded (and, for the 32×32 and 64×64 sets, resized) once per process (the
  reference re-reads the file every call).
- fog: for images larger than the map (256 pixels for ImageNet) the plasma map grows to the next
  power of two (the reference is defined for 224×224 only and always uses 256).
- spatter: severity 0 is anchored at intensity 0 (no liquid), and its water/mud switch is not
  interpolated: it is taken from the upper bracketing integer severity (``ceil(severity)``).

Fog's map size and frost's texture scale are the keyword settings a corruption set changes
(:mod:`ccc.corruptions.sets`).
"""

from __future__ import annotations

import math

import cv2
import numpy as np
from numpy.typing import NDArray

from ._random import RandomSource, draw_integers
from .assets import frost_textures
from .filters import gaussian_blur_nearest, zoom_bilinear_accumulate
from .motion import motion_blur_imagemagick
from .registry import Corruption, register_corruption

SNOW_TABLE = (
    (0.1, 0.3, 3, 1.0, 10, 4, 1.0),
    (0.1, 0.3, 3, 0.5, 10, 4, 0.8),
    (0.2, 0.3, 2, 0.5, 12, 4, 0.7),
    (0.55, 0.3, 4, 0.9, 12, 8, 0.7),
    (0.55, 0.3, 4.5, 0.85, 12, 8, 0.65),
    (0.55, 0.3, 2.5, 0.85, 12, 12, 0.55),
)
"""(flake mean, flake std, zoom, threshold, blur radius, blur sigma, image blend), severities 0..5."""

FROST_TABLE = ((1.0, 0.0), (1, 0.4), (0.8, 0.6), (0.7, 0.7), (0.65, 0.7), (0.6, 0.75))
"""(image weight, frost weight), severities 0..5."""

FOG_TABLE = ((0.0, 2.0), (1.5, 2), (2, 2), (2.5, 1.7), (2.5, 1.5), (3, 1.4))
"""(fog strength, fractal wibble decay), severities 0..5."""

SPATTER_TABLE = (
    (0.65, 0.3, 4, 0.69, 0.0, 0),
    (0.65, 0.3, 4, 0.69, 0.6, 0),
    (0.65, 0.3, 3, 0.68, 0.6, 0),
    (0.65, 0.3, 2, 0.68, 0.5, 0),
    (0.65, 0.3, 1, 0.65, 1.5, 1),
    (0.67, 0.4, 1, 0.65, 1.5, 1),
)
"""(liquid mean, liquid std, liquid sigma, threshold, intensity, mud flag), severities 0..5.
Severity 0 is the identity anchor (intensity 0). The mud flag (0 water, 1 mud) is not interpolated."""

FROST_CHOICES = 5
"""How many frost textures are drawn from (the first five of the six, as the reference); shared with
``ccc.render_torch.weather``."""


def snow(image: NDArray[np.uint8], parameters: tuple[float, ...], rng: RandomSource) -> NDArray[np.float64]:
    """Snow flakes (a zoomed, thresholded, motion-blurred noise layer) over a whitened image."""
    mean, spread, zoom, threshold, blur_radius, blur_sigma, blend = parameters
    height, width = image.shape[:2]
    unit = np.array(image, dtype=np.float32) / 255.0
    layer = rng.normal(size=(height, width), loc=mean, scale=spread)
    layer = zoom_bilinear_accumulate(layer[..., np.newaxis], np.array([zoom]), dtype=np.float64)
    layer[layer < threshold] = 0
    layer_bytes = (np.clip(layer[..., 0], 0, 1) * 255).astype(np.uint8)
    blurred = motion_blur_imagemagick(layer_bytes, blur_radius, blur_sigma, rng.uniform(-135, -45))
    flakes = (blurred / 255.0)[..., np.newaxis]
    gray = cv2.cvtColor(unit, cv2.COLOR_RGB2GRAY).reshape(height, width, 1)
    whitened = blend * unit + (1 - blend) * np.maximum(unit, gray * 1.5 + 0.5)
    return np.clip(whitened + flakes + np.rot90(flakes, k=2), 0, 1) * 255


def frost(
    image: NDArray[np.uint8], parameters: tuple[float, float], rng: RandomSource, texture_scale: float = 1.0
) -> NDArray[np.float64]:
    """``clip(a * x + b * frost_window, 0, 255)`` with a random window of a random frost texture.

    ``texture_scale`` (> 0) resizes the textures first (:func:`ccc.corruptions.assets.frost_textures`).
    """
    image_weight, frost_weight = parameters
    height, width = image.shape[:2]
    candidates = frost_textures(texture_scale)[:FROST_CHOICES]
    max_height = min(texture.shape[0] for texture in candidates) - 1
    max_width = min(texture.shape[1] for texture in candidates) - 1
    if height > max_height or width > max_width:
        raise ValueError(
            f"frost needs images smaller than its textures (at most {max_height}x{max_width} pixels), "
            f"got {height}x{width}"
        )
    texture = candidates[int(draw_integers(rng, 0, FROST_CHOICES))]
    top = int(draw_integers(rng, 0, texture.shape[0] - height))
    left = int(draw_integers(rng, 0, texture.shape[1] - width))
    window = texture[top : top + height, left : left + width][..., [2, 1, 0]]
    return np.clip(image_weight * np.asarray(image) + frost_weight * window, 0, 255)


def plasma_fractal(size: int, wibble_decay: float, rng: RandomSource) -> NDArray[np.float64]:
    """Diamond-square height map of ``size`` x ``size`` (a power of two), values in [0, 1].

    The random perturbations (uniform in [-wibble, wibble), scaled by wibble, wibble starting at
    100 and divided by ``wibble_decay`` per level) are drawn in the reference's order: per level,
    the square centres, then the diamond points on the rows of the corners, then those between them.
    """
    height_map = np.empty((size, size), dtype=np.float64)
    height_map[0, 0] = 0
    step = size
    wibble = 100.0

    def perturbed_mean(total: NDArray[np.float64]) -> NDArray[np.float64]:
        return total / 4 + wibble * rng.uniform(-wibble, wibble, total.shape)

    while step >= 2:
        half = step // 2
        corners = height_map[0:size:step, 0:size:step]
        square_total = corners + np.roll(corners, shift=-1, axis=0)
        square_total += np.roll(square_total, shift=-1, axis=1)
        height_map[half:size:step, half:size:step] = perturbed_mean(square_total)

        centres = height_map[half:size:step, half:size:step]
        corners = height_map[0:size:step, 0:size:step]
        row_total = (centres + np.roll(centres, 1, axis=0)) + (corners + np.roll(corners, -1, axis=1))
        height_map[0:size:step, half:size:step] = perturbed_mean(row_total)
        column_total = (centres + np.roll(centres, 1, axis=1)) + (corners + np.roll(corners, -1, axis=0))
        height_map[half:size:step, 0:size:step] = perturbed_mean(column_total)
        step //= 2
        wibble /= wibble_decay

    height_map -= height_map.min()
    return height_map / height_map.max()


def fog(
    image: NDArray[np.uint8], parameters: tuple[float, float], rng: RandomSource, map_size: int = 256
) -> NDArray[np.float64]:
    """Add ``strength`` times a plasma fractal, then rescale by ``max / (max + strength)``.

    ``map_size``: side of the plasma map in pixels, a power of two (the generators' 256 for ImageNet,
    32 for CIFAR, 64 for 64×64 images); an image larger than that gets the next power of two above
    its larger side. The map's top-left corner covers the image.
    """
    strength, wibble_decay = parameters
    height, width = image.shape[:2]
    map_size = max(map_size, 1 << math.ceil(math.log2(max(height, width))))
    unit = image / 255.0
    maximum = unit.max()
    unit = unit + strength * plasma_fractal(map_size, wibble_decay, rng)[:height, :width][..., np.newaxis]
    return np.clip(unit * maximum / (maximum + strength), 0, 1) * 255


def spatter(image: NDArray[np.uint8], parameters: tuple[float, ...], rng: RandomSource) -> NDArray[np.float32]:
    """Water drops (a smoothed thresholded noise layer shaped by edge distances) or mud blotches."""
    mean, spread, liquid_sigma, threshold, intensity, mud = parameters
    height, width = image.shape[:2]
    unit = np.array(image, dtype=np.float32) / 255.0
    liquid = gaussian_blur_nearest(rng.normal(size=(height, width), loc=mean, scale=spread), liquid_sigma)
    liquid[liquid < threshold] = 0
    if mud < 0.5:
        liquid_bytes = (liquid * 255).astype(np.uint8)
        distance = 255 - cv2.Canny(liquid_bytes, 50, 150)
        distance = cv2.distanceTransform(distance, cv2.DIST_L2, 5)
        _, distance = cv2.threshold(distance, 20, 20, cv2.THRESH_TRUNC)
        distance = cv2.blur(distance, (3, 3)).astype(np.uint8)
        distance = cv2.equalizeHist(distance)
        emboss = np.array([[-2, -1, 0], [-1, 1, 1], [0, 1, 2]])
        distance = cv2.filter2D(distance, cv2.CV_8U, emboss)
        distance = cv2.blur(distance, (3, 3)).astype(np.float32)
        wetness = liquid_bytes * distance
        peak = wetness.max()
        wetness = wetness / peak if peak > 0 else wetness
        wetness *= intensity
        water = np.array([175 / 255.0, 238 / 255.0, 238 / 255.0], dtype=np.float32)
        return np.clip(unit + wetness[..., np.newaxis] * water, 0, 1) * 255
    mud_mask = gaussian_blur_nearest((liquid > threshold).astype(np.float32), intensity).astype(np.float32)
    mud_mask[mud_mask < 0.8] = 0
    mud_colour = np.array([63 / 255.0, 42 / 255.0, 20 / 255.0], dtype=np.float32) * mud_mask[..., np.newaxis]
    return np.clip(unit * (1 - mud_mask[..., np.newaxis]) + mud_colour, 0, 1) * 255


register_corruption(Corruption("snow", "weather", snow, SNOW_TABLE, random=True, order=7))
register_corruption(Corruption("frost", "weather", frost, FROST_TABLE, random=True, order=8))
register_corruption(Corruption("fog", "weather", fog, FOG_TABLE, random=True, order=9))
register_corruption(Corruption("spatter", "weather", spatter, SPATTER_TABLE, random=True, order=17, holdout=True))
