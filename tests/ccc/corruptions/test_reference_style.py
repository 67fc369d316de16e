"""Checks of the benchmark's reference-style corruptions (tests/reference_style.py) against
the golden outputs of the public reference code in tests/golden/ (tests/golden/README.md).

Deterministic corruptions and motion blur are compared pixel by pixel. Random corruptions are compared
through the summary statistics of corruption_random_stats.json, computed exactly as the golden run
did (RandomState(seed) for seeds 0..15 on both input images); they match to float precision for
every random corruption (glass blur included: its offsets, drawn from the RandomState, equal numba's
seeded stream) except impulse noise, checked within statistical tolerances (the golden run's modern
scikit-image drew from an OS-seeded Generator; here it continues the RandomState's stream).
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from tests import reference_style
from tests.builders import REPOSITORY

GOLDEN = REPOSITORY / "tests" / "golden"
GOLDEN_NAMES = {"elastic_transform": "elastic", "jpeg_compression": "jpeg"}
SEEDS = range(16)


reference_corrupt = reference_style.reference_corrupt

INPUTS = np.load(GOLDEN / "corruption_inputs.npz")["images"]
DETERMINISTIC = np.load(GOLDEN / "corruption_deterministic.npz")
MOTION_BLUR = np.load(GOLDEN / "corruption_motion_blur.npz")
RANDOM_STATS = json.loads((GOLDEN / "corruption_random_stats.json").read_text())

# Pixel-exact except (1) saturate at severity 1: interp1d evaluates 1.0 + (0.3 - 1.0) * 1 =
# 0.30000000000000004 where the original hold-out code used 0.3, so a few values move by one grey level.
# (2) defocus below severity 1/3: the kernel is a single tap, OpenCV's DFT leaves ±1e-15 on the exact
# levels and its sign decides the truncation, which differs between CPUs (37-38 % of the values between
# the golden run and an AMD EPYC with AVX2; 0 on the machine that wrote the golden outputs).
# Key prefix -> (max abs diff, mean abs diff).
DETERMINISTIC_TOLERANCE = {"saturate@1": (1, 0.02), "defocus_blur@0.25": (1, 0.5)}

# Random corruptions whose golden run cannot be replayed draw for draw, with tolerances on the
# summary statistics (32 samples each): absolute for residual_mean, psnr_mean (dB); relative otherwise.
STATISTICAL_CASES = {"impulse_noise"}
STATISTICAL_TOLERANCE = {
    "residual_mean": ("absolute", 0.5),
    "residual_std": ("relative", 0.03),
    "psnr_mean": ("absolute", 0.3),
    "psnr_std": ("relative", 0.5),
    "frac_changed": ("relative", 0.05),
}
# Cases above ~15 s on this machine (elastic's severity-0.5 sigma of ~600 px makes it ~1 s a call;
# snow's ImageMagick motion blur ~0.13 s). Snow's two middle severities are left out to keep the
# suite near two minutes: they exercise the same code as 0.5 and 5.0 (all four matched when written).
SLOW_CASES = {"elastic_transform@0.5", "snow@0.5", "snow@5.0"}
RANDOM_CASES = sorted(set(RANDOM_STATS["cases"]) - {"snow@1.75", "snow@3.0"})


def _wand_available() -> bool:
    try:
        import wand.image  # noqa: F401
    except ImportError:
        return False
    return True


def require_wand() -> None:
    """Skip the calling test without Wand/ImageMagick, except in CI (CI=true), where it must be there."""
    if _wand_available():
        return
    if os.environ.get("CI") == "true":
        pytest.fail("Wand with libMagickWand is required in CI for motion_blur and snow")
    pytest.skip("Wand/libMagickWand not installed")


def _summary_statistics(name: str, severity: float) -> dict[str, float]:
    """The golden run's statistics: per (image, seed) residual mean/std, PSNR, fraction changed."""
    residual_means, residual_stds, psnrs, fractions_changed = [], [], [], []
    for image in INPUTS:
        for seed in SEEDS:
            corrupted = reference_corrupt(image, name, severity, np.random.RandomState(seed))
            residual = corrupted.astype(np.float64) - image.astype(np.float64)
            residual_means.append(residual.mean())
            residual_stds.append(residual.std())
            psnrs.append(10 * np.log10(255.0**2 / np.mean(residual**2)))
            fractions_changed.append(np.mean(corrupted != image))
    return {
        "residual_mean": float(np.mean(residual_means)),
        "residual_std": float(np.mean(residual_stds)),
        "psnr_mean": float(np.mean(psnrs)),
        "psnr_std": float(np.std(psnrs)),
        "frac_changed": float(np.mean(fractions_changed)),
    }


def _case_parameters(keys, slow_keys=frozenset()):
    return [
        pytest.param(key, marks=pytest.mark.slow, id=key) if key in slow_keys else pytest.param(key, id=key)
        for key in sorted(keys)
    ]


@pytest.mark.parametrize("key", _case_parameters(DETERMINISTIC.keys()))
def test_deterministic_corruptions_match_golden_outputs(key: str) -> None:
    golden_name, severity, image_index = key.split("@")
    corrupted = reference_corrupt(
        INPUTS[int(image_index)], GOLDEN_NAMES.get(golden_name, golden_name), float(severity), np.random.RandomState(0)
    )
    difference = np.abs(corrupted.astype(np.int16) - DETERMINISTIC[key].astype(np.int16))
    max_allowed, mean_allowed = next(
        (tolerance for prefix, tolerance in DETERMINISTIC_TOLERANCE.items() if key.startswith(prefix + "@")),
        (0, 0.0),
    )
    assert corrupted.dtype == np.uint8 and corrupted.shape == (224, 224, 3)
    assert difference.max() <= max_allowed, f"max abs diff {difference.max()}"
    assert difference.mean() <= mean_allowed, f"mean abs diff {difference.mean():.4f}"


def test_golden_motion_blur_angles_are_the_first_uniform_draw_of_the_seed() -> None:
    angles = RANDOM_STATS["motion_blur_angles"]
    assert angles
    for key, angle in angles.items():
        seed = int(key.split("@")[2])
        assert np.random.RandomState(seed).uniform(-45, 45) == angle


@pytest.mark.parametrize("key", _case_parameters(MOTION_BLUR.keys()))
def test_motion_blur_matches_golden_outputs(key: str) -> None:
    require_wand()
    severity, image_index, seed = key.split("@")
    rng = np.random.RandomState(int(seed))
    corrupted = reference_corrupt(INPUTS[int(image_index)], "motion_blur", float(severity), rng)
    np.testing.assert_array_equal(corrupted, MOTION_BLUR[key])
    # exactly one draw, the angle: the generator is where a lone uniform() leaves it
    expected_state = np.random.RandomState(int(seed))
    expected_state.uniform(-45, 45)
    assert rng.random_sample() == expected_state.random_sample()


@pytest.mark.parametrize("key", _case_parameters(RANDOM_CASES, SLOW_CASES))
def test_random_corruption_statistics_match_golden_run(key: str) -> None:
    golden_name, severity = key.split("@")
    if golden_name == "snow":
        require_wand()
    ours = _summary_statistics(GOLDEN_NAMES.get(golden_name, golden_name), float(severity))
    golden = RANDOM_STATS["cases"][key]
    for statistic, golden_value in golden.items():
        if golden_name in STATISTICAL_CASES:
            kind, tolerance = STATISTICAL_TOLERANCE[statistic]
            allowed = tolerance if kind == "absolute" else tolerance * abs(golden_value)
        else:
            allowed = 1e-9 * max(1.0, abs(golden_value))
        assert abs(ours[statistic] - golden_value) <= allowed, f"{statistic}: {ours[statistic]} vs {golden_value}"


def test_glass_blur_offsets_drawn_at_once_equal_the_reference_one_pair_at_a_time() -> None:
    for max_delta in (1, 2, 4):
        one_at_a_time = np.random.RandomState(5)
        pairs = np.array([one_at_a_time.randint(-max_delta, max_delta, size=(2,)) for _ in range(3000)])
        all_at_once = np.random.RandomState(5).randint(-max_delta, max_delta, size=(3000, 2))
        np.testing.assert_array_equal(pairs, all_at_once)


def test_impulse_noise_draws_flip_then_salt_uniforms_from_the_random_state() -> None:
    image = INPUTS[0]
    amount = float(reference_style.interpolated_parameters("impulse_noise", 2.5))
    rng = np.random.RandomState(9)
    corrupted = reference_corrupt(image, "impulse_noise", 2.5, rng)
    expected_draws = np.random.RandomState(9)
    flipped = expected_draws.random_sample(image.shape) <= amount
    salted = expected_draws.random_sample(image.shape) <= 0.5
    expected = image.copy()
    expected[flipped & salted] = 255
    expected[flipped & ~salted] = 0
    np.testing.assert_array_equal(corrupted, expected)
    assert rng.random_sample() == expected_draws.random_sample()


@pytest.mark.parametrize("name", reference_style.ALL_CORRUPTIONS)
def test_severity_zero_returns_the_input_and_draws_nothing(name: str) -> None:
    rng = np.random.RandomState(3)
    result = reference_corrupt(INPUTS[0], name, 0.0, rng)
    np.testing.assert_array_equal(result, INPUTS[0])
    assert result is not INPUTS[0]
    assert rng.random_sample() == np.random.RandomState(3).random_sample()


@pytest.mark.parametrize("name", reference_style.ALL_CORRUPTIONS)
def test_fractional_severity_gives_uint8_image_and_keeps_the_input(name: str) -> None:
    if name in reference_style.WAND_CORRUPTIONS:
        require_wand()
    image = INPUTS[1].copy()
    corrupted = reference_corrupt(image, name, 2.6, np.random.RandomState(0))
    np.testing.assert_array_equal(image, INPUTS[1])
    assert corrupted.dtype == np.uint8 and corrupted.shape == (224, 224, 3)
    assert not np.array_equal(corrupted, image)


def test_same_seed_reproduces_the_output() -> None:
    for name in ("gaussian_noise", "fog", "frost", "elastic", "spatter", "glass_blur", "impulse_noise"):
        first = reference_corrupt(INPUTS[0], name, 3.3, np.random.RandomState(11))
        second = reference_corrupt(INPUTS[0], name, 3.3, np.random.RandomState(11))
        np.testing.assert_array_equal(first, second)


def test_spatter_switches_to_mud_above_severity_three() -> None:
    # water brightens the image (positive mean residual), mud darkens it: the switch comes from
    # the upper bracketing severity, so 2.5 is water and 3.5 is mud.
    image = INPUTS[0]
    water = reference_corrupt(image, "spatter", 2.5, np.random.RandomState(0)).astype(np.float64) - image
    mud = reference_corrupt(image, "spatter", 3.5, np.random.RandomState(0)).astype(np.float64) - image
    assert water.mean() > 0
    assert mud.mean() < 0


def test_spatter_anchor_is_identity_near_severity_zero() -> None:
    corrupted = reference_corrupt(INPUTS[0], "spatter", 1e-6, np.random.RandomState(0))
    assert np.abs(corrupted.astype(np.int16) - INPUTS[0]).max() <= 1


def test_interpolated_parameters_follow_the_tables() -> None:
    assert math.isclose(float(reference_style.interpolated_parameters("jpeg", 2.5)), 16.5)
    np.testing.assert_allclose(reference_style.interpolated_parameters("glass_blur", 0.5), [0.35, 0.5, 1.0])
    np.testing.assert_allclose(reference_style.interpolated_parameters("saturate", 3.5), [3.5, 0.05])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((INPUTS[0], "fogg", 1.0), r"unknown corruption 'fogg'; available: gaussian_noise"),
        ((INPUTS[0], "fog", 7.2), r"severity must be a number in \[0, 5\], got 7.2"),
        ((INPUTS[0], "fog", -0.5), r"severity must be a number in \[0, 5\], got -0.5"),
        ((INPUTS[0], "fog", float("nan")), r"severity must be a number in \[0, 5\], got nan"),
        ((INPUTS[0].astype(np.float32), "fog", 1.0), r"image must be a uint8 array .* got float32 \(224, 224, 3\)"),
        ((INPUTS[0][:100], "fog", 1.0), r"image must be a uint8 array .* got uint8 \(100, 224, 3\)"),
    ],
)
def test_bad_arguments_raise_value_error_naming_the_parameter(arguments: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        reference_corrupt(*arguments, np.random.RandomState(0))


def test_rng_must_be_a_random_state() -> None:
    with pytest.raises(ValueError, match=r"rng must be a numpy.random.RandomState, got Generator"):
        reference_corrupt(INPUTS[0], "fog", 1.0, np.random.default_rng(0))
