"""The demo world's images: procedural painted objects in 16 classes (4 patterns × 4 colours).

Two worlds share this code and differ only in their :class:`DemoGeometry`: :data:`IMAGENET_GEOMETRY`
(320×240 or 240×320 pixels, described below) and :data:`CIFAR_GEOMETRY` (32×32, the main object
filling most of the frame, stripe periods of 3–7 pixels, painted at 4× and box-averaged).

Every image (320×240 or 240×320 pixels in the original world) has a smooth, nearly grey background and one main object,
a rotated ellipse or rounded rectangle covering roughly a tenth to a quarter of the frame near
its centre. The object is painted with its class's **pattern** — ``horizontal`` stripes, ``vertical``
stripes, ``checks`` or ``plain`` — in its class's **colour** (``red``, ``yellow``, ``green``,
``blue``). Seven images in ten also hold a smaller *distractor* object of another class beside
the main one, partly hidden by it. Per image the stripe period (5–14 pixels), a small tilt, the phases,
the hue (jittered), saturation, brightness and pattern contrast, the objects' shapes, sizes and
positions, the background and the shading are random; mild pixel noise is added.

Why this design: the classes are told apart by colour and by oriented texture, which a small CNN
learns in minutes and which survives flips and the anisotropic resize of a random-resized crop.
Fine stripes vanish under blur, pixelation, noise and JPEG before coarse ones, and colours fade
under contrast, fog and brightness, so accuracy falls gradually with severity. Random crops cost
accuracy as on ImageNet: a small crop may miss the main object or centre on the distractor, while
the calibration's centre crop always shows the main object whole.

Reproducibility: parameters are drawn from a ``numpy.random.Generator`` (PCG64, the same on every
platform; a few scalar ``math`` functions turn them into angles and periods); pixels are computed
with exactly rounded IEEE operations only (+, −, ×, ÷, square root,
floor, in float32; the periodic profile is a polynomial, not a library ``cos``) and Pillow's
integer bicubic resize and box reduction, so the same generator state gives the same pixels on every CPU. The JPEG
bytes also depend on Pillow's libjpeg version.
"""

from __future__ import annotations

import functools
import io
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from PIL import Image

from ccc.validation import check_integer

PATTERNS: tuple[str, ...] = ("horizontal", "vertical", "checks", "plain")
"""Pattern names: horizontal stripes, vertical stripes, an axis-aligned checkerboard, no pattern."""

COLOURS: dict[str, float] = {"red": 0.0, "yellow": 0.14, "green": 0.34, "blue": 0.62}
"""Colour names → mean hue in [0, 1) (HSV hue, in turns)."""

CLASS_NAMES: tuple[str, ...] = tuple(sorted(f"{colour}_{pattern}" for colour in COLOURS for pattern in PATTERNS))
"""The 16 class folder names ``<colour>_<pattern>``, sorted: class index = position (ImageFolder order)."""

HUE_JITTER = 0.03
"""Standard deviation of an object's hue around its colour's mean hue (turns)."""

JPEG_QUALITY = 90
"""Quality of the stored JPEG files (Pillow)."""


@dataclass(frozen=True)
class DemoGeometry:
    """The sizes of one demo world: image size, pattern periods, object sizes, edges and noise.

    Lengths are in output pixels; fractions are of the output's width, height or shorter side.

    Attributes:
        sizes: (width, height) of a landscape and of a portrait image, ≥ 1 each.
        landscape_probability: share in [0, 1] of landscape images (drawn even where both sizes agree,
            so that every world draws its parameters in the same order).
        supersample: ≥ 1; the image is painted at this multiple of its size and reduced by Pillow's
            integer box average (``Image.reduce``) before the pixel noise; 1 paints at the output size.
        period_range: (smallest, largest) stripe and check period in pixels, drawn log-uniformly.
        tilt_degrees: largest deviation of a pattern from the axes in degrees (uniform in ±this).
        centre_jitter: the main object's centre lies within ±this fraction of the width and height
            around the frame's centre.
        main_half_axes: (smallest, largest) half-axis of the main object, fraction of the shorter side.
        distractor_probability: share in [0, 1] of images with a distractor object of another class.
        distractor_half_axes: (smallest, largest) half-axis of the distractor, fraction of the shorter side.
        distractor_distance: (smallest, largest) distance of the distractor's centre from the main
            object's, fraction of the shorter side.
        edge_pixels: width in pixels (> 0) of an object's anti-aliased edge (linear ramp).
        saturation_range, value_range: (smallest, largest) HSV saturation and value of an object's
            colour, in [0, 1], drawn uniformly.
        contrast_range: (smallest, largest) amplitude of the pattern in value, in [0, 1], drawn uniformly.
        noise_bits: the pixel noise is the sum of two uniform ``noise_bits``-bit integers minus
            ``2**noise_bits - 1``: triangular, standard deviation 3.2 grey levels for 3 bits; in [1, 4].
    """

    sizes: tuple[tuple[int, int], tuple[int, int]]
    landscape_probability: float
    supersample: int
    period_range: tuple[float, float]
    tilt_degrees: float
    centre_jitter: float
    main_half_axes: tuple[float, float]
    distractor_probability: float
    distractor_half_axes: tuple[float, float]
    distractor_distance: tuple[float, float]
    edge_pixels: float
    saturation_range: tuple[float, float]
    value_range: tuple[float, float]
    contrast_range: tuple[float, float]
    noise_bits: int


IMAGENET_GEOMETRY = DemoGeometry(
    sizes=((320, 240), (240, 320)),
    landscape_probability=0.75,
    supersample=1,
    period_range=(5.0, 14.0),
    tilt_degrees=10.0,
    centre_jitter=0.1,
    main_half_axes=(0.2, 0.32),
    distractor_probability=0.7,
    distractor_half_axes=(0.13, 0.2),
    distractor_distance=(0.3, 0.45),
    edge_pixels=3.0,
    saturation_range=(0.4, 0.85),
    value_range=(0.45, 0.7),
    contrast_range=(0.18, 0.3),
    noise_bits=3,
)
"""The original demo world: 320×240 or 240×320 images, ImageNet-like framing (its bytes are pinned)."""

CIFAR_GEOMETRY = DemoGeometry(
    sizes=((32, 32), (32, 32)),
    landscape_probability=0.75,
    supersample=4,
    period_range=(2.5, 6.0),
    tilt_degrees=10.0,
    centre_jitter=0.08,
    main_half_axes=(0.3, 0.42),
    distractor_probability=0.5,
    distractor_half_axes=(0.15, 0.22),
    distractor_distance=(0.45, 0.6),
    edge_pixels=0.75,
    saturation_range=(0.2, 0.6),
    value_range=(0.45, 0.7),
    contrast_range=(0.06, 0.22),
    noise_bits=3,
)
"""The 32×32 world: CIFAR-like framing (the main object fills most of the frame), periods of 2.5–6
pixels, painted at 128×128 and box-averaged to 32×32."""


@dataclass(frozen=True)
class DemoClass:
    """One class of the demo world: folder name ``<colour>_<pattern>``, pattern and colour."""

    name: str
    pattern: str
    colour: str


DEMO_CLASSES: tuple[DemoClass, ...] = tuple(
    DemoClass(name, name.split("_")[1], name.split("_")[0]) for name in CLASS_NAMES
)
"""The 16 classes in class-index order."""


@dataclass(frozen=True)
class ObjectParameters:
    """One painted object (lengths in pixels, angles in radians, colours in [0, 1], hue in turns).

    Attributes:
        class_index: 0–15, position in :data:`CLASS_NAMES`; decides the pattern and colour.
        period, tilt, phase_u, phase_v: the pattern's period, its rotation away from the axes and
            its phases (turns).
        hue, saturation, value: the object's colour; contrast: the pattern's amplitude in value.
        centre: (x, y); semi_axes: the two half-axes; exponent: 2 (ellipse) or 4 (rounded
            rectangle); rotation: the shape's orientation.
        edge: width of the anti-aliased edge (linear ramp), > 0.

    Lengths are in painted pixels (the output's times :attr:`DemoGeometry.supersample`).
    """

    class_index: int
    period: float
    tilt: float
    phase_u: float
    phase_v: float
    hue: float
    saturation: float
    value: float
    contrast: float
    centre: tuple[float, float]
    semi_axes: tuple[float, float]
    exponent: int
    rotation: float
    edge: float


@dataclass(frozen=True)
class DemoImageParameters:
    """Everything random about one demo image except the background, shading and pixel noise fields.

    Attributes:
        size: (width, height) of the painted image in pixels (the output's times the supersampling).
        background_hue (turns), background_saturation: the background's faint tint.
        main: the object whose class is the image's label.
        distractor: a smaller object of another class, or None.
    """

    size: tuple[int, int]
    background_hue: float
    background_saturation: float
    main: ObjectParameters
    distractor: ObjectParameters | None


def _draw_object(
    class_index: int,
    generator: np.random.Generator,
    centre: tuple[float, float],
    semi_axes: tuple[float, float],
    geometry: DemoGeometry,
) -> ObjectParameters:
    colour = DEMO_CLASSES[class_index].colour
    shortest, longest = geometry.period_range
    return ObjectParameters(
        class_index=class_index,
        period=geometry.supersample * math.exp(generator.uniform(math.log(shortest), math.log(longest))),
        tilt=math.radians(generator.uniform(-geometry.tilt_degrees, geometry.tilt_degrees)),
        phase_u=generator.uniform(),
        phase_v=generator.uniform(),
        hue=(COLOURS[colour] + generator.normal(0.0, HUE_JITTER)) % 1.0,
        saturation=generator.uniform(*geometry.saturation_range),
        value=generator.uniform(*geometry.value_range),
        contrast=generator.uniform(*geometry.contrast_range),
        centre=centre,
        semi_axes=semi_axes,
        exponent=2 if generator.uniform() < 0.5 else 4,
        rotation=generator.uniform(0.0, math.pi),
        edge=geometry.supersample * geometry.edge_pixels,
    )


def draw_parameters(
    class_index: int, generator: np.random.Generator, geometry: DemoGeometry = IMAGENET_GEOMETRY
) -> DemoImageParameters:
    """Draw the :class:`DemoImageParameters` of one image of class ``class_index`` (0–15) of the world
    ``geometry`` from ``generator`` (lengths in painted pixels)."""
    check_integer("class_index", class_index, 0, len(CLASS_NAMES) - 1)
    landscape = generator.uniform() < geometry.landscape_probability
    output_width, output_height = geometry.sizes[0] if landscape else geometry.sizes[1]
    width, height = output_width * geometry.supersample, output_height * geometry.supersample
    side = min(width, height)
    jitter = geometry.centre_jitter
    background_hue, background_saturation = generator.uniform(), generator.uniform(0.0, 0.12)
    centre = (width * (0.5 + generator.uniform(-jitter, jitter)), height * (0.5 + generator.uniform(-jitter, jitter)))
    main_axes = geometry.main_half_axes
    main = _draw_object(
        int(class_index),
        generator,
        centre,
        (side * generator.uniform(*main_axes), side * generator.uniform(*main_axes)),
        geometry,
    )
    distractor = None
    if generator.uniform() < geometry.distractor_probability:
        other = int(generator.integers(0, len(CLASS_NAMES) - 1))  # any class but the main one
        if other >= class_index:
            other += 1
        direction = generator.uniform(0.0, 2.0 * math.pi)
        distance = side * generator.uniform(*geometry.distractor_distance)
        place = (centre[0] + distance * math.cos(direction), centre[1] + distance * math.sin(direction))
        axes = geometry.distractor_half_axes
        distractor = _draw_object(
            other, generator, place, (side * generator.uniform(*axes), side * generator.uniform(*axes)), geometry
        )
    return DemoImageParameters((width, height), background_hue, background_saturation, main, distractor)


@functools.lru_cache(maxsize=4)
def _pixel_coordinates(width: int, height: int) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """Row and column index of every pixel (float32, H×W each, read-only)."""
    rows, columns = np.mgrid[0:height, 0:width].astype(np.float32)
    rows.flags.writeable = False
    columns.flags.writeable = False
    return rows, columns


def periodic_profile(turns: NDArray[np.float32]) -> NDArray[np.float32]:
    """A smooth wave with period 1 in ``turns``, within 0.001 of ``cos(2π · turns)``, in [-1, 1].

    Two parabolas per period refined once (Bhaskara-style), arithmetic only: the same bits on
    every CPU, unlike library cosines, whose SIMD versions differ in the last bit.
    """
    shifted = turns + np.float32(0.75)
    position = np.float32(2.0) * (shifted - np.floor(shifted)) - np.float32(1.0)
    parabola = np.float32(4.0) * position * (np.float32(1.0) - np.abs(position))
    return parabola + np.float32(0.225) * (parabola * np.abs(parabola) - parabola)


def _soft_sign(values: NDArray[np.float32]) -> NDArray[np.float32]:
    """x / sqrt(1 + x²): a smooth saturation to (-1, 1) (exactly rounded operations only)."""
    return values / np.sqrt(np.float32(1.0) + values * values)


def pattern_profile(
    parameters: ObjectParameters, columns: NDArray[np.float32], rows: NDArray[np.float32]
) -> NDArray[np.float32]:
    """The object's pattern profile in [-1, 1] at pixel coordinates ``columns``, ``rows`` (same shape)."""
    pattern = DEMO_CLASSES[parameters.class_index].pattern
    if pattern == "plain":
        return np.zeros_like(columns)
    scale = 1.0 / parameters.period
    cos_tilt = np.float32(math.cos(parameters.tilt) * scale)
    sin_tilt = np.float32(math.sin(parameters.tilt) * scale)
    across_columns = columns * cos_tilt + rows * sin_tilt  # in periods, growing to the right
    across_rows = rows * cos_tilt - columns * sin_tilt  # in periods, growing downwards
    if pattern == "vertical":
        return periodic_profile(across_columns + np.float32(parameters.phase_u))
    if pattern == "horizontal":
        return periodic_profile(across_rows + np.float32(parameters.phase_u))
    product = periodic_profile(across_columns + np.float32(parameters.phase_u)) * periodic_profile(
        across_rows + np.float32(parameters.phase_v)
    )
    return _soft_sign(np.float32(3.0) * product) / np.float32(3.0 / math.sqrt(10.0))


def _object_box(parameters: ObjectParameters, width: int, height: int) -> tuple[slice, slice]:
    """Rows and columns of a width × height frame containing the object and its edge (possibly empty)."""
    semi_a, semi_b = parameters.semi_axes
    cos_rotation, sin_rotation = abs(math.cos(parameters.rotation)), abs(math.sin(parameters.rotation))
    margin = parameters.edge + 2.0
    half_width = cos_rotation * semi_a + sin_rotation * semi_b + margin
    half_height = sin_rotation * semi_a + cos_rotation * semi_b + margin
    centre_x, centre_y = parameters.centre
    columns = slice(
        min(width, max(0, math.floor(centre_x - half_width))), max(0, min(width, math.ceil(centre_x + half_width)))
    )
    rows = slice(
        min(height, max(0, math.floor(centre_y - half_height))), max(0, min(height, math.ceil(centre_y + half_height)))
    )
    return rows, columns


def object_mask(
    parameters: ObjectParameters, columns: NDArray[np.float32], rows: NDArray[np.float32]
) -> NDArray[np.float32]:
    """Coverage in [0, 1] of the object's superellipse at pixel coordinates (edge ramp ``parameters.edge`` wide)."""
    centre_x, centre_y = parameters.centre
    semi_a, semi_b = parameters.semi_axes
    cos_rotation, sin_rotation = math.cos(parameters.rotation), math.sin(parameters.rotation)
    x = columns - np.float32(centre_x)
    y = rows - np.float32(centre_y)
    along = x * np.float32(cos_rotation / semi_a) + y * np.float32(sin_rotation / semi_a)
    across = y * np.float32(cos_rotation / semi_b) - x * np.float32(sin_rotation / semi_b)
    a = along * along
    b = across * across
    radius = np.sqrt(a + b) if parameters.exponent == 2 else np.sqrt(np.sqrt(a * a + b * b))
    steepness = np.float32(min(semi_a, semi_b) / parameters.edge)
    return np.clip(np.float32(0.5) - (radius - np.float32(1.0)) * steepness, 0.0, 1.0)


def _tint(hue: float, saturation: float) -> NDArray[np.float32]:
    """RGB multipliers (3,) of an HSV colour of value 1: pixel = value × tint (hue in turns, saturation in [0, 1])."""
    sector = (hue % 1.0) * 6.0
    pure = np.clip(np.array([abs(sector - 3.0) - 1.0, 2.0 - abs(sector - 2.0), 2.0 - abs(sector - 4.0)]), 0.0, 1.0)
    return (1.0 - saturation * (1.0 - pure)).astype(np.float32)


def _smooth_field(generator: np.random.Generator, width: int, height: int, cells: int) -> NDArray[np.float32]:
    """Smooth random field in [0, 1]: a coarse uniform grid upsampled bicubically (Pillow, integer arithmetic)."""
    coarse_width = cells if width >= height else max(2, round(cells * width / height))
    coarse_height = cells if height >= width else max(2, round(cells * height / width))
    coarse = generator.integers(0, 256, (coarse_height, coarse_width), dtype=np.uint8)
    field = Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC)
    return np.asarray(field, dtype=np.float32) / np.float32(255.0)


@functools.lru_cache(maxsize=4)
def _noise_table(bits: int) -> NDArray[np.float32]:
    """Pixel noise of each random byte: two ``bits``-bit numbers whose sum minus ``2**bits - 1`` is
    triangular (3 bits: on [-7, 7], standard deviation 3.2 grey levels); integer draws, cheap and exact."""
    mask = (1 << bits) - 1
    table = np.array([(byte & mask) + ((byte >> bits) & mask) - mask for byte in range(256)], dtype=np.float32)
    table.flags.writeable = False
    return table


def _paint_object(image: NDArray[np.float32], shading: NDArray[np.float32], parameters: ObjectParameters) -> None:
    """Blend one object into the planar (3, H, W) float32 ``image`` in place."""
    height, width = shading.shape
    box = _object_box(parameters, width, height)
    all_rows, all_columns = _pixel_coordinates(width, height)
    rows, columns = all_rows[box], all_columns[box]
    if rows.size == 0:
        return
    value = np.clip(
        np.float32(parameters.value) + np.float32(parameters.contrast) * pattern_profile(parameters, columns, rows),
        0.0,
        1.0,
    )
    texture = _tint(parameters.hue, parameters.saturation)[:, None, None] * (shading[box] * value)[None]
    region = image[:, box[0], box[1]]
    region += object_mask(parameters, columns, rows)[None] * (texture - region)


def _quantise(image: NDArray[np.float32]) -> NDArray[np.uint8]:
    """A planar (3, H, W) float image as a uint8 H×W×3 one (rounded to nearest, clipped to [0, 255])."""
    return np.ascontiguousarray(np.clip(np.rint(image), 0, 255).astype(np.uint8).transpose(1, 2, 0))


def render_demo_image(
    class_index: int, generator: np.random.Generator, geometry: DemoGeometry = IMAGENET_GEOMETRY
) -> NDArray[np.uint8]:
    """One image of class ``class_index`` (0–15) of the world ``geometry``: uint8 H×W×3 RGB of one of
    ``geometry.sizes``, all randomness from ``generator``.

    Draws :func:`draw_parameters`, then the background, the shading and the pixel noise, in that
    order; paints the background, the distractor (if any), then the main object over it; reduces a
    supersampled painting to the output size (rounded to uint8, then Pillow's integer box average)
    before adding the noise.
    """
    parameters = draw_parameters(class_index, generator, geometry)
    width, height = parameters.size
    background = np.float32(0.35) + np.float32(0.4) * _smooth_field(generator, width, height, 5)
    shading = np.float32(255.0 * 0.85) + np.float32(255.0 * 0.3) * _smooth_field(generator, width, height, 3)
    # Planar (3, H, W) layout: per-channel products run over whole rows.
    image = (
        _tint(parameters.background_hue, parameters.background_saturation)[:, None, None] * (shading * background)[None]
    )
    if parameters.distractor is not None:
        _paint_object(image, shading, parameters.distractor)
    _paint_object(image, shading, parameters.main)
    if geometry.supersample > 1:
        reduced = Image.fromarray(_quantise(image)).reduce(geometry.supersample)
        image = np.asarray(reduced, dtype=np.float32).transpose(2, 0, 1)
    noise = _noise_table(geometry.noise_bits)[np.frombuffer(generator.bytes(image.size), dtype=np.uint8)]
    return _quantise(image + noise.reshape(image.shape))


def encode_jpeg(image: NDArray[np.uint8], quality: int = JPEG_QUALITY) -> bytes:
    """JPEG bytes of a uint8 H×W×3 RGB image (Pillow, ``quality`` in [1, 95], no metadata)."""
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()
