"""Reference-style ImageNet-C corruptions with continuous severity, for benchmarks and cross-checks.

This module re-states, in our own code, the algorithms of the public CCC generator
(``make_imagenet_c.py`` of Press et al., itself derived from Hendrycks & Dietterich's ImageNet-C code)
and of the four ImageNet-C hold-out corruptions, with the same library calls (numpy, scipy,
scikit-image, OpenCV, Pillow, ImageMagick through Wand). It is the baseline the project's fast
corruption library is timed against (``scripts/bench/corruptions.py``) and a second opinion for its
tests; it is not part of the ``ccc`` package.

Differences from the reference code, all forced by modern libraries or by reproducibility:

- ``np.float_`` → ``np.float64``; binary ``np.fromstring`` → ``np.frombuffer``;
  ``skimage.filters.gaussian(multichannel=True)`` → ``channel_axis=-1``.
- Frost textures come from the installed ``corrupt_tta`` package (``assets/frost/``) instead of
  ``./frost``; they are still decoded with ``cv2.imread`` on every call, as the reference does.
- Every random draw comes from the ``numpy.random.RandomState`` passed in, in the reference's order
  (``np.random.X(...)`` became ``rng.X(...)``), so ``RandomState(s)`` reproduces the reference run
  after ``np.random.seed(s)``. Two draws could not be kept as they were:

  * impulse noise: modern ``skimage.util.random_noise`` ignores the global numpy seed and draws from
    the ``Generator`` it is given (or one seeded from the OS). Here it is given a ``Generator`` that
    continues ``rng``'s MT19937 stream (state copied in, and copied back afterwards), so its two
    ``random(shape)`` draws (flip, then salt) are the numbers ``rng.random_sample(shape)`` would give.
  * glass blur: the reference's numba-jitted pixel-swap loop draws its offsets from numba's own RNG,
    which ``np.random.seed`` called from Python does not seed. Here all offsets are drawn up front
    from ``rng`` with ``randint(-max_delta, max_delta, size=(n, 2))`` (identical to ``n`` successive
    ``size=(2,)`` draws, i.e. the reference's order) and the loop, still jitted with numba,
    consumes them in order. Numba's ``randint`` produces the same sequence as ``RandomState.randint``
    for the same seed, so this equals the reference whenever numba's RNG was seeded like numpy's
    (the golden statistics in ``tests/golden`` match exactly). The loop keeps the reference's tuple
    assignment of two row views, which copies ``x[h', w']`` into ``x[h, w]`` rather than swapping.

- Severity tables are the ones of ImageNet-C's ``make_imagenet_c.py`` (with the severity-0
  anchors of the CCC generator), interpolated with ``scipy.interpolate.interp1d`` as the CCC code
  does. The hold-out corruptions (ImageNet-C had integer severities only) use the same scheme with
  identity anchors at severity 0; spatter's water/mud switch is not interpolated but taken from the
  upper bracketing integer severity (``ceil(severity)``), and its severity-0 anchor is the severity-1
  water row with intensity 0 (which leaves the image unchanged).

Value handling follows the CCC generator: the uint8 input is handed to the corruption as a PIL image
and the result is converted back with ``np.uint8(...)`` (truncation, not rounding). Severity 0 returns
the input unchanged, as the generator never calls a corruption there.
"""

from __future__ import annotations

import functools
import importlib.resources
import math
from collections.abc import Callable
from io import BytesIO
from typing import TypeVar

import cv2
import numba
import numpy as np
import numpy.typing as npt
import skimage.color
import skimage.util
from PIL import Image
from scipy import interpolate
from scipy.ndimage import map_coordinates
from scipy.ndimage import zoom as scipy_zoom
from skimage.filters import gaussian

from ccc.corruptions import CORRUPTIONS, HOLDOUT_CORRUPTIONS

IMAGE_SIZE = 224

MAIN_CORRUPTIONS: tuple[str, ...] = CORRUPTIONS
ALL_CORRUPTIONS: tuple[str, ...] = MAIN_CORRUPTIONS + HOLDOUT_CORRUPTIONS
WAND_CORRUPTIONS: tuple[str, ...] = ("motion_blur", "snow")

# Rows are severities 0, 1, 2, 3, 4, 5 (see imagenet_c.md for what each component means).
_ELASTIC_UNIT = 244  # the reference's unit (sic, for 224-pixel images)
PARAMETER_TABLES: dict[str, list] = {
    "gaussian_noise": [0.0, 0.08, 0.12, 0.18, 0.26, 0.38],
    "shot_noise": [0.0, 1 / 60, 1 / 25, 1 / 12, 1 / 5, 1 / 3],
    "impulse_noise": [0.0, 0.03, 0.06, 0.09, 0.17, 0.27],
    "defocus_blur": [(0.0, 0.0), (3, 0.1), (4, 0.5), (6, 0.5), (8, 0.5), (10, 0.5)],
    "glass_blur": [(0.0, 0.0, 0.0), (0.7, 1, 2), (0.9, 2, 1), (1, 2, 3), (1.1, 3, 2), (1.5, 4, 2)],
    "motion_blur": [(0.0, 0.0), (10, 3), (15, 5), (15, 8), (15, 12), (20, 15)],
    "zoom_blur": [
        (1.0, 1.0, 0.01),
        (1, 1.11, 0.01),
        (1, 1.16, 0.01),
        (1, 1.21, 0.02),
        (1, 1.26, 0.02),
        (1, 1.31, 0.03),
    ],
    "snow": [
        (0.1, 0.3, 3, 1.0, 10, 4, 1.0),
        (0.1, 0.3, 3, 0.5, 10, 4, 0.8),
        (0.2, 0.3, 2, 0.5, 12, 4, 0.7),
        (0.55, 0.3, 4, 0.9, 12, 8, 0.7),
        (0.55, 0.3, 4.5, 0.85, 12, 8, 0.65),
        (0.55, 0.3, 2.5, 0.85, 12, 12, 0.55),
    ],
    "frost": [(1.0, 0.0), (1, 0.4), (0.8, 0.6), (0.7, 0.7), (0.65, 0.7), (0.6, 0.75)],
    "fog": [(0.0, 2.0), (1.5, 2), (2, 2), (2.5, 1.7), (2.5, 1.5), (3, 1.4)],
    "brightness": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5],
    "contrast": [1.0, 0.4, 0.3, 0.2, 0.1, 0.05],
    "elastic": [
        (0, 999, 0),
        (_ELASTIC_UNIT * 2, _ELASTIC_UNIT * 0.7, _ELASTIC_UNIT * 0.1),
        (_ELASTIC_UNIT * 2, _ELASTIC_UNIT * 0.08, _ELASTIC_UNIT * 0.2),
        (_ELASTIC_UNIT * 0.05, _ELASTIC_UNIT * 0.01, _ELASTIC_UNIT * 0.02),
        (_ELASTIC_UNIT * 0.07, _ELASTIC_UNIT * 0.01, _ELASTIC_UNIT * 0.02),
        (_ELASTIC_UNIT * 0.12, _ELASTIC_UNIT * 0.01, _ELASTIC_UNIT * 0.02),
    ],
    "pixelate": [1.0, 0.6, 0.5, 0.4, 0.3, 0.25],
    "jpeg": [85, 25, 18, 15, 10, 7],
    "speckle_noise": [0.0, 0.15, 0.2, 0.35, 0.45, 0.6],
    "gaussian_blur": [0.0, 1, 2, 3, 4, 6],
    # (mean, std, sigma, threshold, intensity); the water/mud switch is SPATTER_IS_MUD.
    "spatter": [
        (0.65, 0.3, 4, 0.69, 0.0),
        (0.65, 0.3, 4, 0.69, 0.6),
        (0.65, 0.3, 3, 0.68, 0.6),
        (0.65, 0.3, 2, 0.68, 0.5),
        (0.65, 0.3, 1, 0.65, 1.5),
        (0.67, 0.4, 1, 0.65, 1.5),
    ],
    "saturate": [(1.0, 0.0), (0.3, 0), (0.1, 0), (2, 0), (5, 0.1), (20, 0.2)],
}
SPATTER_IS_MUD: tuple[bool, ...] = (False, False, False, False, True, True)

_FROST_FILES = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg", "frost6.jpg")

T = TypeVar("T")
RandomCorruption = Callable[[Image.Image, float, np.random.RandomState], "npt.ArrayLike | Image.Image"]


@functools.cache
def _interpolator(name: str) -> interpolate.interp1d:
    """The linear interpolant of ``name``'s parameter table over severities 0..5 (built once)."""
    return interpolate.interp1d([0, 1, 2, 3, 4, 5], PARAMETER_TABLES[name], axis=0, kind="linear")


def interpolated_parameters(name: str, severity: float) -> np.ndarray:
    """Parameters of corruption ``name`` at ``severity`` in [0, 5], as the reference interpolates them.

    Returns a 0-d array for single-parameter corruptions, else a 1-d array (one entry per component).
    """
    return _interpolator(name)(severity)


# ---------------------------------------------------------------------------------------------
# Helpers shared by several corruptions
# ---------------------------------------------------------------------------------------------


def antialiased_disk(radius: float, alias_blur: float) -> np.ndarray:
    """Normalised disk kernel of ``radius`` pixels, Gaussian-smoothed with sigma ``alias_blur`` pixels.

    The grid has half-width 8 for radius <= 8 (3x3 smoothing kernel), else half-width ``radius``
    (5x5 smoothing kernel), as in ImageNet-C.
    """
    if radius <= 8:
        offsets = np.arange(-8, 8 + 1)
        smoothing_size = (3, 3)
    else:
        offsets = np.arange(-radius, radius + 1)
        smoothing_size = (5, 5)
    column, row = np.meshgrid(offsets, offsets)
    disk_mask = np.array((column**2 + row**2) <= radius**2, dtype=np.float32)
    disk_mask /= np.sum(disk_mask)
    return cv2.GaussianBlur(disk_mask, ksize=smoothing_size, sigmaX=alias_blur)


def plasma_fractal(rng: np.random.RandomState, map_size: int = 256, wibble_decay: float = 3) -> np.ndarray:
    """Diamond-square height map of side ``map_size`` (a power of two), values in [0, 1].

    The random perturbation ("wibble") starts at 100 and is divided by ``wibble_decay`` after each
    halving of the step; draws come from ``rng`` in the reference's order (squares, then the two
    diamond sets, per step).
    """
    if map_size & (map_size - 1) != 0:
        raise ValueError(f"map_size must be a power of two, got {map_size}")
    height_map = np.empty((map_size, map_size), dtype=np.float64)
    height_map[0, 0] = 0
    step = map_size
    wibble = 100.0

    def perturbed_mean(corner_sums: np.ndarray) -> np.ndarray:
        return corner_sums / 4 + wibble * rng.uniform(-wibble, wibble, corner_sums.shape)

    while step >= 2:
        half = step // 2
        corners = height_map[0:map_size:step, 0:map_size:step]
        square_sums = corners + np.roll(corners, shift=-1, axis=0)
        square_sums += np.roll(square_sums, shift=-1, axis=1)
        height_map[half:map_size:step, half:map_size:step] = perturbed_mean(square_sums)

        centres = height_map[half:map_size:step, half:map_size:step]
        corners = height_map[0:map_size:step, 0:map_size:step]
        left_sums = (centres + np.roll(centres, 1, axis=0)) + (corners + np.roll(corners, -1, axis=1))
        height_map[0:map_size:step, half:map_size:step] = perturbed_mean(left_sums)
        top_sums = (centres + np.roll(centres, 1, axis=1)) + (corners + np.roll(corners, -1, axis=0))
        height_map[half:map_size:step, 0:map_size:step] = perturbed_mean(top_sums)

        step //= 2
        wibble /= wibble_decay

    height_map -= height_map.min()
    return height_map / height_map.max()


def clipped_zoom(image: np.ndarray, zoom_factor: float) -> np.ndarray:
    """Zoom the centre of an HxWxC array by ``zoom_factor`` >= 1 (bilinear) and crop back to HxW."""
    size = image.shape[0]
    crop_size = int(np.ceil(size / zoom_factor))
    top = (size - crop_size) // 2
    zoomed = scipy_zoom(image[top : top + crop_size, top : top + crop_size], (zoom_factor, zoom_factor, 1), order=1)
    trim = (zoomed.shape[0] - size) // 2
    return zoomed[trim : trim + size, trim : trim + size]


def imagemagick_motion_blur(png_bytes: bytes, radius: float, sigma: float, angle: float) -> np.ndarray:
    """Run ImageMagick's MotionBlurImage (through Wand) on a PNG; returns the decoded PNG result.

    radius, sigma in pixels; angle in degrees. The result is what ``cv2.imdecode(...,
    IMREAD_UNCHANGED)`` gives: HxW for images ImageMagick writes as greyscale, else HxWx3 BGR.
    Raises ImportError with an explanation when Wand or libMagickWand is not installed.
    """
    try:
        from wand.image import Image as WandImage
    except ImportError as error:
        raise ImportError(
            "motion_blur and snow need Wand and ImageMagick's libMagickWand "
            "(pip install Wand; apt-get install libmagickwand-dev)"
        ) from error
    with WandImage(blob=png_bytes) as wand_image:
        wand_image.motion_blur(radius=float(radius), sigma=float(sigma), angle=float(angle))
        blurred_png = wand_image.make_blob()
    return cv2.imdecode(np.frombuffer(blurred_png, np.uint8), cv2.IMREAD_UNCHANGED)


def _png_bytes(image: Image.Image) -> bytes:
    buffer = BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


@numba.jit(nopython=True, cache=False)
def _shuffle_pixels(image: np.ndarray, offsets: np.ndarray, max_delta: int, iterations: int) -> None:
    """Glass blur's sequential local pixel moves, in place, consuming ``offsets`` rows (dx, dy) in order."""
    draw = 0
    for _ in range(iterations):
        for h in range(IMAGE_SIZE - max_delta, max_delta, -1):
            for w in range(IMAGE_SIZE - max_delta, max_delta, -1):
                dx = offsets[draw, 0]
                dy = offsets[draw, 1]
                draw += 1
                h_prime, w_prime = h + dy, w + dx
                # Same tuple assignment of two views as the reference: a copy, not a swap.
                image[h, w], image[h_prime, w_prime] = image[h_prime, w_prime], image[h, w]


# ---------------------------------------------------------------------------------------------
# The corruptions: PIL image in, float array in [0, 255] (or a PIL image) out
# ---------------------------------------------------------------------------------------------


def _gaussian_noise(image: Image.Image, severity: float, rng: np.random.RandomState) -> np.ndarray:
    std = interpolated_parameters("gaussian_noise", severity)
    x = np.array(image) / 255.0
    return np.clip(x + rng.normal(size=x.shape, scale=std), 0, 1) * 255


def _shot_noise(image: Image.Image, severity: float, rng: np.random.RandomState) -> np.ndarray:
    inverse_photons = interpolated_parameters("shot_noise", severity)
    photons = 1.0 / inverse_photons if inverse_photons != 0 else 9999
    x = np.array(image) / 255.0
    return np.clip(rng.poisson(x * photons) / photons, 0, 1) * 255


def call_with_shared_generator(rng: np.random.RandomState, draw: Callable[[np.random.Generator], T]) -> T:
    """Call ``draw`` with a ``numpy.random.Generator`` that continues ``rng``'s MT19937 stream.

    Afterwards ``rng`` is advanced past everything ``draw`` consumed, so the draws are those ``rng``
    itself would have made (``Generator.random`` and ``RandomState.random_sample`` give the same
    doubles from the same MT19937 state). Uses only the public state API.
    """
    state = rng.get_state(legacy=False)
    bit_generator = np.random.MT19937()
    bit_generator.state = {"bit_generator": state["bit_generator"], "state": state["state"]}
    result = draw(np.random.Generator(bit_generator))
    rng.set_state(bit_generator.state | {"has_gauss": state["has_gauss"], "gauss": state["gauss"]})
    return result


def _impulse_noise(image: Image.Image, severity: float, rng: np.random.RandomState) -> np.ndarray:
    amount = interpolated_parameters("impulse_noise", severity)
    x = call_with_shared_generator(
        rng,
        lambda generator: skimage.util.random_noise(np.array(image) / 255.0, mode="s&p", amount=amount, rng=generator),
    )
    return np.clip(x, 0, 1) * 255


def _speckle_noise(image: Image.Image, severity: float, rng: np.random.RandomState) -> np.ndarray:
    std = interpolated_parameters("speckle_noise", severity)
    x = np.array(image) / 255.0
    return np.clip(x + x * rng.normal(size=x.shape, scale=std), 0, 1) * 255


def _gaussian_blur(image: Image.Image, severity: float, rng: np.random.RandomState) -> np.ndarray:
    sigma = float(interpolated_parameters("gaussian_blur", severity))
    x = gaussian(np.array(image) / 255.0, sigma=sigma, channel_axis=-1)
    return np.clip(x, 0, 1) * 255


def _glass_blur(image: Image.Image, severity: float, rng: np.random.RandomState) -> np.ndarray:
    sigma, max_delta, iterations = interpolated_parameters("glass_blur", severity)
    max_delta = round(float(max(max_delta, 1.0)))
    iterations = round(float(iterations))
    x = np.uint8(gaussian(np.array(image) / 255.0, sigma=sigma, channel_axis=-1) * 255)
    moves_per_iteration = (IMAGE_SIZE - 2 * max_delta) ** 2
    offsets = rng.randint(-max_delta, max_delta, size=(iterations * moves_per_iteration, 2))
    _shuffle_pixels(x, offsets, max_delta, iterations)
    return np.clip(gaussian(x / 255.0, sigma=sigma, channel_axis=-1), 0, 1) * 255


def _defocus_blur(image: Image.Image, severity: float, rng: np.random.RandomState) -> np.ndarray:
    radius, alias_blur = interpolated_parameters("defocus_blur", severity)
    x = np.array(image) / 255.0
    kernel = antialiased_disk(radius=radius, alias_blur=alias_blur)
    channels = np.array([cv2.filter2D(x[:, :, channel], -1, kernel) for channel in range(3)])
    return np.clip(channels.transpose((1, 2, 0)), 0, 1) * 255


def _motion_blur(image: Image.Image, severity: float, rng: np.random.RandomState) -> np.ndarray:
    radius, sigma = interpolated_parameters("motion_blur", severity)
    png_bytes = _png_bytes(image)
    blurred = imagemagick_motion_blur(png_bytes, radius, sigma, angle=rng.uniform(-45, 45))
    if blurred.shape != (IMAGE_SIZE, IMAGE_SIZE):
        return np.clip(blurred[..., [2, 1, 0]], 0, 255)
    return np.clip(np.array([blurred, blurred, blurred]).transpose((1, 2, 0)), 0, 255)


def _zoom_blur(image: Image.Image, severity: float, rng: np.random.RandomState) -> np.ndarray:
    start, stop, step = interpolated_parameters("zoom_blur", severity)
    zoom_factors = np.arange(start, stop, step)
    x = (np.array(image) / 255.0).astype(np.float32)
    zoomed_sum = np.zeros_like(x)
    for zoom_factor in zoom_factors:
        zoomed_sum += clipped_zoom(x, zoom_factor)
    x = (x + zoomed_sum) / (len(zoom_factors) + 1)
    return np.clip(x, 0, 1) * 255


def _snow(image: Image.Image, severity: float, rng: np.random.RandomState) -> np.ndarray:
    mean, std, zoom, threshold, blur_radius, blur_sigma, blend = interpolated_parameters("snow", severity)
    x = np.array(image, dtype=np.float32) / 255.0
    snow_layer = rng.normal(size=x.shape[:2], loc=mean, scale=std)
    snow_layer = clipped_zoom(snow_layer[..., np.newaxis], zoom)
    snow_layer[snow_layer < threshold] = 0
    snow_image = Image.fromarray((np.clip(snow_layer.squeeze(), 0, 1) * 255).astype(np.uint8), mode="L")
    blurred = imagemagick_motion_blur(_png_bytes(snow_image), blur_radius, blur_sigma, angle=rng.uniform(-135, -45))
    snow_layer = (blurred / 255.0)[..., np.newaxis]
    grey = cv2.cvtColor(x, cv2.COLOR_RGB2GRAY).reshape(IMAGE_SIZE, IMAGE_SIZE, 1)
    x = blend * x + (1 - blend) * np.maximum(x, grey * 1.5 + 0.5)
    return np.clip(x + snow_layer + np.rot90(snow_layer, k=2), 0, 1) * 255


def frost_texture_path(index: int) -> str:
    """File path of ImageNet-C frost texture ``index`` in 0..5 (from the ``corrupt_tta`` package)."""
    if not 0 <= index < len(_FROST_FILES):
        raise ValueError(f"frost texture index must be in [0, {len(_FROST_FILES) - 1}], got {index}")
    return str(importlib.resources.files("corrupt_tta") / "assets" / "frost" / _FROST_FILES[index])


def _frost(image: Image.Image, severity: float, rng: np.random.RandomState) -> np.ndarray:
    image_weight, frost_weight = interpolated_parameters("frost", severity)
    texture_index = rng.randint(5)
    texture = cv2.imread(frost_texture_path(texture_index))
    top, left = rng.randint(0, texture.shape[0] - IMAGE_SIZE), rng.randint(0, texture.shape[1] - IMAGE_SIZE)
    texture = texture[top : top + IMAGE_SIZE, left : left + IMAGE_SIZE][..., [2, 1, 0]]
    return np.clip(image_weight * np.array(image) + frost_weight * texture, 0, 255)


def _fog(image: Image.Image, severity: float, rng: np.random.RandomState) -> np.ndarray:
    strength, wibble_decay = interpolated_parameters("fog", severity)
    x = np.array(image) / 255.0
    max_value = x.max()
    fractal = plasma_fractal(rng, wibble_decay=wibble_decay)[:IMAGE_SIZE, :IMAGE_SIZE]
    x += strength * fractal[..., np.newaxis]
    return np.clip(x * max_value / (max_value + strength), 0, 1) * 255


def _brightness(image: Image.Image, severity: float, rng: np.random.RandomState) -> np.ndarray:
    value_shift = interpolated_parameters("brightness", severity)
    x = skimage.color.rgb2hsv(np.array(image) / 255.0)
    x[:, :, 2] = np.clip(x[:, :, 2] + value_shift, 0, 1)
    return np.clip(skimage.color.hsv2rgb(x), 0, 1) * 255


def _saturate(image: Image.Image, severity: float, rng: np.random.RandomState) -> np.ndarray:
    factor, offset = interpolated_parameters("saturate", severity)
    x = skimage.color.rgb2hsv(np.array(image) / 255.0)
    x[:, :, 1] = np.clip(x[:, :, 1] * factor + offset, 0, 1)
    return np.clip(skimage.color.hsv2rgb(x), 0, 1) * 255


def _contrast(image: Image.Image, severity: float, rng: np.random.RandomState) -> np.ndarray:
    factor = interpolated_parameters("contrast", severity)
    x = np.array(image) / 255.0
    means = np.mean(x, axis=(0, 1), keepdims=True)
    return np.clip((x - means) * factor + means, 0, 1) * 255


def _elastic(image: Image.Image, severity: float, rng: np.random.RandomState) -> np.ndarray:
    alpha, sigma, affine_jitter = interpolated_parameters("elastic", severity)
    x = np.array(image, dtype=np.float32) / 255.0
    shape = x.shape
    plane_shape = shape[:2]

    centre = np.float32(plane_shape) // 2
    half_side = min(plane_shape) // 3
    source_points = np.float32(
        [
            centre + half_side,
            [centre[0] + half_side, centre[1] - half_side],
            centre - half_side,
        ]
    )
    target_points = source_points + rng.uniform(-affine_jitter, affine_jitter, size=source_points.shape).astype(
        np.float32
    )
    affine = cv2.getAffineTransform(source_points, target_points)
    x = cv2.warpAffine(x, affine, plane_shape[::-1], borderMode=cv2.BORDER_REFLECT_101)

    displacement_x = (gaussian(rng.uniform(-1, 1, size=plane_shape), sigma, mode="reflect", truncate=3) * alpha).astype(
        np.float32
    )
    displacement_y = (gaussian(rng.uniform(-1, 1, size=plane_shape), sigma, mode="reflect", truncate=3) * alpha).astype(
        np.float32
    )
    displacement_x, displacement_y = displacement_x[..., np.newaxis], displacement_y[..., np.newaxis]

    columns, rows, channels = np.meshgrid(np.arange(shape[1]), np.arange(shape[0]), np.arange(shape[2]))
    coordinates = (
        np.reshape(rows + displacement_y, (-1, 1)),
        np.reshape(columns + displacement_x, (-1, 1)),
        np.reshape(channels, (-1, 1)),
    )
    warped = map_coordinates(x, coordinates, order=1, mode="reflect").reshape(shape)
    return np.clip(warped, 0, 1) * 255


def _pixelate(image: Image.Image, severity: float, rng: np.random.RandomState) -> Image.Image:
    factor = interpolated_parameters("pixelate", severity)
    small_size = int(IMAGE_SIZE * factor)
    return image.resize((small_size, small_size), Image.BOX).resize((IMAGE_SIZE, IMAGE_SIZE), Image.BOX)


def _jpeg(image: Image.Image, severity: float, rng: np.random.RandomState) -> Image.Image:
    quality = round(interpolated_parameters("jpeg", severity).item())
    buffer = BytesIO()
    image.save(buffer, "JPEG", quality=quality)
    return Image.open(buffer)


def _spatter(image: Image.Image, severity: float, rng: np.random.RandomState) -> np.ndarray:
    mean, std, sigma, threshold, intensity = interpolated_parameters("spatter", severity)
    is_mud = SPATTER_IS_MUD[math.ceil(severity)]
    x = np.array(image, dtype=np.float32) / 255.0
    liquid_layer = rng.normal(size=x.shape[:2], loc=mean, scale=std)
    liquid_layer = gaussian(liquid_layer, sigma=sigma)
    liquid_layer[liquid_layer < threshold] = 0
    if not is_mud:
        liquid_layer = (liquid_layer * 255).astype(np.uint8)
        distance = 255 - cv2.Canny(liquid_layer, 50, 150)
        distance = cv2.distanceTransform(distance, cv2.DIST_L2, 5)
        _, distance = cv2.threshold(distance, 20, 20, cv2.THRESH_TRUNC)
        distance = cv2.blur(distance, (3, 3)).astype(np.uint8)
        distance = cv2.equalizeHist(distance)
        emboss = np.array([[-2, -1, 0], [-1, 1, 1], [0, 1, 2]])
        distance = cv2.filter2D(distance, cv2.CV_8U, emboss)
        distance = cv2.blur(distance, (3, 3)).astype(np.float32)

        mask = cv2.cvtColor(liquid_layer * distance, cv2.COLOR_GRAY2BGRA)
        mask /= np.max(mask, axis=(0, 1))
        mask *= intensity
        # pale turquoise, in the channel order the reference uses
        colour = np.concatenate(
            (
                175 / 255.0 * np.ones_like(mask[..., :1]),
                238 / 255.0 * np.ones_like(mask[..., :1]),
                238 / 255.0 * np.ones_like(mask[..., :1]),
            ),
            axis=2,
        )
        colour = cv2.cvtColor(colour, cv2.COLOR_BGR2BGRA)
        x = cv2.cvtColor(x, cv2.COLOR_BGR2BGRA)
        return cv2.cvtColor(np.clip(x + mask * colour, 0, 1), cv2.COLOR_BGRA2BGR) * 255

    mask = np.where(liquid_layer > threshold, 1, 0)
    mask = gaussian(mask.astype(np.float32), sigma=intensity)
    mask[mask < 0.8] = 0
    # mud brown
    colour = np.concatenate(
        (
            63 / 255.0 * np.ones_like(x[..., :1]),
            42 / 255.0 * np.ones_like(x[..., :1]),
            20 / 255.0 * np.ones_like(x[..., :1]),
        ),
        axis=2,
    )
    colour *= mask[..., np.newaxis]
    x *= 1 - mask[..., np.newaxis]
    return np.clip(x + colour, 0, 1) * 255


_CORRUPTION_FUNCTIONS: dict[str, RandomCorruption] = {
    "gaussian_noise": _gaussian_noise,
    "shot_noise": _shot_noise,
    "impulse_noise": _impulse_noise,
    "defocus_blur": _defocus_blur,
    "glass_blur": _glass_blur,
    "motion_blur": _motion_blur,
    "zoom_blur": _zoom_blur,
    "snow": _snow,
    "frost": _frost,
    "fog": _fog,
    "brightness": _brightness,
    "contrast": _contrast,
    "elastic": _elastic,
    "pixelate": _pixelate,
    "jpeg": _jpeg,
    "speckle_noise": _speckle_noise,
    "gaussian_blur": _gaussian_blur,
    "spatter": _spatter,
    "saturate": _saturate,
}


def reference_corrupt(
    image: npt.NDArray[np.uint8], name: str, severity: float, rng: np.random.RandomState
) -> npt.NDArray[np.uint8]:
    """Corrupt one image the way the CCC reference generator does.

    image: uint8 array of shape (224, 224, 3), RGB; not modified.
    name: one of ``ALL_CORRUPTIONS`` (CCC names: ``elastic``, ``jpeg``, ...).
    severity: float in [0, 5]; 0 returns a copy of ``image`` without drawing from ``rng``.
    rng: legacy ``numpy.random.RandomState``; all randomness is drawn from it in the reference's
        order, so ``RandomState(s)`` reproduces the reference after ``np.random.seed(s)`` (except
        impulse noise, and glass blur unless numba's RNG is seeded too; see the module docstring).
    Returns a new uint8 array of shape (224, 224, 3): the corruption's float result truncated with
    ``np.uint8``, as the generator stores it.
    """
    if name not in _CORRUPTION_FUNCTIONS:
        raise ValueError(f"unknown corruption {name!r}; available: {', '.join(ALL_CORRUPTIONS)}")
    if not isinstance(severity, (int, float, np.floating, np.integer)) or not 0 <= severity <= 5:
        raise ValueError(f"severity must be a number in [0, 5], got {severity!r}")
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.shape != (IMAGE_SIZE, IMAGE_SIZE, 3):
        received = f"{image.dtype} {image.shape}" if isinstance(image, np.ndarray) else type(image).__name__
        raise ValueError(f"image must be a uint8 array of shape (224, 224, 3), got {received}")
    if not isinstance(rng, np.random.RandomState):
        raise ValueError(f"rng must be a numpy.random.RandomState, got {type(rng).__name__}")
    if severity == 0:
        return image.copy()
    corrupted = _CORRUPTION_FUNCTIONS[name](Image.fromarray(image), float(severity), rng)
    return np.uint8(np.asarray(corrupted))
