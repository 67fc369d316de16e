"""ImageMagick 6 motion blur: the project's implementation against Wand, the golden outputs and itself.

Numbers measured with these tests are in docs/motion_blur.md. The Wand comparisons skip when Wand or
libMagickWand is missing, except when CI=true, where they fail (CI installs ImageMagick).
"""

from __future__ import annotations

import json
import math
import os
import sys

import numpy as np
import pytest

from ccc.corruptions.motion import (
    WandUnavailableError,
    motion_blur_imagemagick,
    motion_blur_taps,
    motion_blur_wand,
)
from tests.builders import GOLDEN

MOTION_BLUR_TABLE = ((0.0, 0.0), (10, 3), (15, 5), (15, 8), (15, 12), (20, 15))
"""ImageNet-C's (radius, sigma) at severities 0..5."""

# Tolerances from the project brief; the implementation is in fact exact (see EXACT_FRACTION).
MAX_MEAN_ABSOLUTE_DIFFERENCE = 0.5
MIN_FRACTION_WITHIN_ONE = 0.99
EXACT_FRACTION = 0.999
"""Fraction of values that must be identical to ImageMagick's: catches off-by-one rounding bugs that
the two tolerances above let through (rounding where ImageMagick truncates puts half the values one level off)."""


def require_wand() -> None:
    """Skip the calling test without Wand/libMagickWand, except in CI (CI=true), where it must be there."""
    try:
        import wand.api  # noqa: F401
        import wand.image  # noqa: F401
    except ImportError as error:
        message = f"Wand with ImageMagick 6's libMagickWand is needed for this comparison ({error})"
        if os.environ.get("CI") == "true":
            pytest.fail(message + "; CI=true, so it must be installed")
        pytest.skip(message)


def assert_agrees(ours: np.ndarray, reference: np.ndarray) -> None:
    assert ours.shape == reference.shape and ours.dtype == reference.dtype == np.uint8
    difference = np.abs(ours.astype(np.int64) - reference.astype(np.int64))
    assert difference.mean() <= MAX_MEAN_ABSOLUTE_DIFFERENCE
    assert np.mean(difference <= 1) >= MIN_FRACTION_WITHIN_ONE
    differing = int(np.sum(difference > 0))
    assert np.mean(difference == 0) >= EXACT_FRACTION, f"max difference {difference.max()}, {differing} values differ"


def snow_layer(height: int, width: int, seed: int) -> np.ndarray:
    """A 2-D uint8 layer like snow's: sparse bright flakes on black, with smooth edges."""
    rng = np.random.default_rng(seed)
    layer = rng.normal(0.55, 0.3, size=(height, width))
    layer = 0.5 * layer + 0.25 * (np.roll(layer, 1, axis=0) + np.roll(layer, 1, axis=1))
    layer[layer < 0.7] = 0
    return (np.clip(layer, 0, 1) * 255).astype(np.uint8)


def naive_motion_blur(image: np.ndarray, radius: float, sigma: float, angle: float) -> np.ndarray:
    """The documented algorithm, written plainly: float64 sums in tap order, clamped sample indices."""
    taps = motion_blur_taps(radius, sigma, angle)
    quanta = image.astype(np.float64) * 257.0
    height, width = image.shape[:2]
    rows = np.arange(height)[:, None]
    columns = np.arange(width)[None, :]
    total = np.zeros(image.shape)
    for weight, column_offset, row_offset in zip(taps.weights, taps.column_offsets, taps.row_offsets):
        sample_rows = np.clip(rows + row_offset, 0, height - 1)
        sample_columns = np.clip(columns + column_offset, 0, width - 1)
        total = total + weight * quanta[sample_rows, sample_columns]
    quantum = np.floor(np.clip(total, 0, 65535) + 0.5)
    return (quantum // 257).astype(np.uint8)


# Natural images: every angle with every radius, sigma cycling through the list (125 cases).
ANGLES = (
    0.0,
    45.0,
    -45.0,
    90.0,
    -90.0,
    180.0,
    -180.0,
    30.0,
    60.0,
    -60.0,
    120.0,
    -150.0,
    4.393215353459226,
    -7.4680195767683415,
    12.3,
    -33.7,
    270.5,
    359.9,
    -135.0,
    -112.4,
    -67.25,
    1.0,
    -0.5,
    721.3,
    -44.99,
)
RADII = (10.0, 12.5, 15.0, 17.3, 20.0)
SIGMAS = (3.0, 4.5, 5.0, 7.25, 8.0, 9.6, 12.0, 15.0)
NATURAL_CASES = [
    (angle, radius, SIGMAS[(angle_index + radius_index) % len(SIGMAS)], (angle_index + radius_index) % 2)
    for angle_index, angle in enumerate(ANGLES)
    for radius_index, radius in enumerate(RADII)
]
# Greyscale snow layers: snow's angles (uniform in [-135, -45]) and its radii and sigmas.
SNOW_CASES = [
    (float(angle), radius, sigma)
    for angle, (radius, sigma) in zip(
        np.linspace(-135.0, -45.0, 16),
        [(10.0, 4.0), (12.0, 4.0), (12.0, 8.0), (12.0, 12.0), (10.5, 4.0), (11.2, 6.4), (12.0, 10.9), (10.0, 4.0)] * 2,
    )
]


@pytest.mark.parametrize("angle, radius, sigma, image_index", NATURAL_CASES)
def test_natural_images_match_wand(angle, radius, sigma, image_index, golden_images):
    require_wand()
    image = golden_images[image_index]
    assert_agrees(motion_blur_imagemagick(image, radius, sigma, angle), motion_blur_wand(image, radius, sigma, angle))


@pytest.mark.parametrize("angle, radius, sigma", SNOW_CASES)
def test_greyscale_layers_match_wand(angle, radius, sigma):
    require_wand()
    layer = snow_layer(224, 224, seed=round(angle * 10) % 1000)
    ours = motion_blur_imagemagick(layer, radius, sigma, angle)
    assert ours.ndim == 2
    assert_agrees(ours, motion_blur_wand(layer, radius, sigma, angle))


NON_SQUARE_CASES = [(0.0, 10.0, 3.0), (-37.5, 15.0, 8.0), (90.0, 20.0, 15.0), (-120.0, 12.5, 5.5), (150.0, 3.2, 1.1)]


@pytest.mark.parametrize("angle, radius, sigma", NON_SQUARE_CASES)
def test_non_square_images_match_wand(angle, radius, sigma, golden_images):
    require_wand()
    rgb = golden_images[1][20:117, 5:166]
    layer = snow_layer(61, 203, seed=3)
    assert_agrees(motion_blur_imagemagick(rgb, radius, sigma, angle), motion_blur_wand(rgb, radius, sigma, angle))
    assert_agrees(motion_blur_imagemagick(layer, radius, sigma, angle), motion_blur_wand(layer, radius, sigma, angle))


@pytest.mark.parametrize(
    "radius, sigma",
    [(1e-13, 2.0), (0.4, 0.2), (60.0, 20.0), (400.0, 50.0)],
    ids=["radius-from-sigma", "tiny", "larger-than-image", "much-larger-than-image"],
)
def test_unusual_radii_match_wand(radius, sigma, golden_images):
    require_wand()
    image = golden_images[0][:48, :40]
    for angle in (0.0, 30.0, -100.0):
        ours = motion_blur_imagemagick(image, radius, sigma, angle)
        assert_agrees(ours, motion_blur_wand(image, radius, sigma, angle))


def _golden_motion_blur_keys() -> list[str]:
    return list(np.load(GOLDEN / "corruption_motion_blur.npz").files)


@pytest.mark.parametrize("key", _golden_motion_blur_keys())
def test_golden_reference_outputs(key, golden_images):
    severity, image_index, _seed = key.split("@")
    angle = json.loads((GOLDEN / "corruption_random_stats.json").read_text())["motion_blur_angles"][key]
    table = np.asarray(MOTION_BLUR_TABLE)
    radius = np.interp(float(severity), np.arange(6), table[:, 0])
    sigma = np.interp(float(severity), np.arange(6), table[:, 1])
    reference = np.load(GOLDEN / "corruption_motion_blur.npz")[key]
    ours = motion_blur_imagemagick(golden_images[int(image_index)], radius, sigma, angle)
    assert_agrees(ours, reference)
    np.testing.assert_array_equal(ours, reference)


@pytest.mark.parametrize(
    "shape, radius, sigma, angle",
    [
        ((224, 224, 3), 20.0, 15.0, -37.3),
        ((224, 224, 3), 10.0, 3.0, 45.0),
        ((96, 130, 3), 15.0, 7.25, 4.393215353459226),
        ((224, 224), 12.0, 8.0, -101.7),
        ((50, 31, 1), 17.3, 9.6, 200.0),
        ((40, 40, 3), 100.0, 30.0, 10.0),
        ((1, 9, 3), 5.0, 2.0, 60.0),
        ((7, 1), 5.0, 2.0, -90.0),
        ((1, 1, 3), 3.0, 1.0, 33.0),
    ],
)
def test_fast_path_equals_plain_float64_algorithm(shape, radius, sigma, angle):
    # The fast path sums in float32 and recomputes the values near a rounding boundary; on random
    # data a plain float32 sum differs from ImageMagick's in about one value in 10^5.
    rng = np.random.default_rng([*shape, round(radius * 10)])
    image = rng.integers(0, 256, size=shape, dtype=np.uint8)
    ours = motion_blur_imagemagick(image, radius, sigma, angle)
    np.testing.assert_array_equal(ours, naive_motion_blur(image, radius, sigma, angle))


def test_input_untouched_and_result_new(golden_images):
    image = golden_images[0]  # read-only
    before = image.copy()
    result = motion_blur_imagemagick(image, 15.0, 5.0, 12.0)
    np.testing.assert_array_equal(image, before)
    assert not np.shares_memory(result, image)
    assert result.flags.writeable


@pytest.mark.parametrize("shape", [(224, 224, 3), (224, 224), (30, 50, 1), (1, 1), (1, 5, 3), (6, 1, 1)])
def test_shape_and_dtype_kept(shape):
    image = np.random.default_rng(0).integers(0, 256, size=shape, dtype=np.uint8)
    result = motion_blur_imagemagick(image, 10.0, 3.0, 20.0)
    assert result.shape == shape
    assert result.dtype == np.uint8


def test_strided_input_equals_contiguous(golden_images):
    view = golden_images[0][::-2, 10:200:3]
    contiguous = np.ascontiguousarray(view)
    np.testing.assert_array_equal(
        motion_blur_imagemagick(view, 12.5, 5.0, -70.0), motion_blur_imagemagick(contiguous, 12.5, 5.0, -70.0)
    )


def test_grey_rgb_gives_three_equal_channels_equal_to_greyscale():
    layer = snow_layer(224, 224, seed=7)
    greyscale = motion_blur_imagemagick(layer, 12.0, 8.0, -80.0)
    rgb = motion_blur_imagemagick(np.repeat(layer[..., None], 3, axis=2), 12.0, 8.0, -80.0)
    single_channel = motion_blur_imagemagick(layer[..., None], 12.0, 8.0, -80.0)
    for channel in range(3):
        np.testing.assert_array_equal(rgb[..., channel], greyscale)
    np.testing.assert_array_equal(single_channel[..., 0], greyscale)


def test_constant_image_unchanged():
    image = np.full((20, 30, 3), 173, dtype=np.uint8)
    np.testing.assert_array_equal(motion_blur_imagemagick(image, 20.0, 15.0, 33.0), image)


def test_point_trails_opposite_to_angle():
    image = np.zeros((21, 21), dtype=np.uint8)
    image[10, 10] = 255
    # 9 taps sampling (x + i, y) for angle 0 and (x, y + i) for 90 degrees, i = 0..8.
    to_the_right = motion_blur_imagemagick(image, 4.0, 100.0, 0.0)
    assert set(zip(*np.nonzero(to_the_right))) == {(10, column) for column in range(2, 11)}
    downwards = motion_blur_imagemagick(image, 4.0, 100.0, 90.0)
    assert set(zip(*np.nonzero(downwards))) == {(row, 10) for row in range(2, 11)}


def test_taps_follow_imagemagick_definition():
    taps = motion_blur_taps(12.5, 4.0, 0.0)
    assert len(taps.weights) == 2 * math.ceil(12.5) + 1
    assert math.isclose(sum(taps.weights), 1.0, abs_tol=1e-12)
    assert all(earlier > later > 0 for earlier, later in zip(taps.weights, taps.weights[1:]))
    expected_ratio = math.exp(-1.0 / (2.0 * 4.0**2))
    assert math.isclose(taps.weights[1] / taps.weights[0], expected_ratio, rel_tol=1e-12)
    assert taps.column_offsets == tuple(range(27)) and set(taps.row_offsets) == {0}
    down = motion_blur_taps(3.0, 1.0, 90.0)
    assert down.row_offsets == tuple(range(7)) and set(down.column_offsets) == {0}
    left = motion_blur_taps(3.0, 1.0, 180.0)
    assert left.column_offsets == tuple(range(0, -7, -1))
    diagonal = motion_blur_taps(3.0, 1.0, 45.0)
    # round(i / sqrt(2)) with halves rounded down: 0, 1, 1, 2, 3, 4, 4
    assert diagonal.column_offsets == diagonal.row_offsets == (0, 1, 1, 2, 3, 4, 4)


@pytest.mark.parametrize(
    "arguments, message",
    [
        ((np.zeros((8, 8, 3), np.float32), 10.0, 3.0, 0.0), "image must have dtype uint8"),
        ((np.zeros((8, 8, 3), np.uint16), 10.0, 3.0, 0.0), "image must have dtype uint8"),
        (([[0, 1], [2, 3]], 10.0, 3.0, 0.0), "image must be a numpy uint8 array"),
        ((np.zeros((8,), np.uint8), 10.0, 3.0, 0.0), r"image must have shape HxW, HxWx1 or HxWx3, got \(8,\)"),
        ((np.zeros((2, 8, 8, 3), np.uint8), 10.0, 3.0, 0.0), "image must have shape"),
        ((np.zeros((8, 8, 4), np.uint8), 10.0, 3.0, 0.0), r"got \(8, 8, 4\)"),
        ((np.zeros((0, 8, 3), np.uint8), 10.0, 3.0, 0.0), "image must be at least 1x1 pixels"),
        ((np.zeros((8, 8), np.uint8), 0.0, 3.0, 0.0), "radius must be a finite number > 0, got 0.0"),
        ((np.zeros((8, 8), np.uint8), -2.0, 3.0, 0.0), "radius must be a finite number > 0, got -2.0"),
        ((np.zeros((8, 8), np.uint8), float("nan"), 3.0, 0.0), "radius must be a finite number > 0, got nan"),
        ((np.zeros((8, 8), np.uint8), float("inf"), 3.0, 0.0), "radius must be a finite number > 0, got inf"),
        ((np.zeros((8, 8), np.uint8), True, 3.0, 0.0), "radius must be a finite number > 0, got True"),
        ((np.zeros((8, 8), np.uint8), "10", 3.0, 0.0), "radius must be a finite number > 0, got '10'"),
        ((np.zeros((8, 8), np.uint8), 10.0, 0.0, 0.0), "sigma must be a finite number > 0, got 0.0"),
        ((np.zeros((8, 8), np.uint8), 10.0, -1.0, 0.0), "sigma must be a finite number > 0, got -1.0"),
        ((np.zeros((8, 8), np.uint8), 10.0, 3.0, float("nan")), "angle must be a finite number, got nan"),
        ((np.zeros((8, 8), np.uint8), 10.0, 3.0, float("-inf")), "angle must be a finite number, got -inf"),
        ((np.zeros((8, 8), np.uint8), 10.0, 3.0, None), "angle must be a finite number, got None"),
    ],
)
def test_bad_input_errors(arguments, message):
    with pytest.raises(ValueError, match=message):
        motion_blur_imagemagick(*arguments)
    with pytest.raises(ValueError, match=message):
        motion_blur_wand(*arguments)


def test_numpy_scalars_accepted(golden_images):
    image = golden_images[1]
    np.testing.assert_array_equal(
        motion_blur_imagemagick(image, np.float64(15.0), np.float64(7.25), np.float64(-7.5)),
        motion_blur_imagemagick(image, 15, 7.25, -7.5),
    )


def test_missing_wand_raises_helpful_import_error(monkeypatch):
    # A None entry in sys.modules makes "import wand.api" raise ImportError.
    monkeypatch.setitem(sys.modules, "wand.api", None)
    expected = r"pip install ccc\[wand\].*apt-get install libmagickwand-6\.q16-6"
    with pytest.raises(WandUnavailableError, match=expected) as caught:
        motion_blur_wand(np.zeros((8, 8), np.uint8), 5.0, 2.0, 0.0)
    assert isinstance(caught.value, ImportError)
