"""Behaviour of every registered corruption: contract, determinism, identity, monotonicity, errors."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from ccc.corruptions import (
    CORRUPTIONS,
    HOLDOUT_CORRUPTIONS,
    Corruption,
    corrupt,
    corrupt_batch,
    corrupt_pair,
    get_corruption,
    list_corruptions,
)
from ccc.corruptions import registry as corruption_registry
from ccc.registry import Registry

ALL = list_corruptions()
RANDOM = [name for name in ALL if get_corruption(name).random]
CHECK_SEVERITIES = (0.25, 1.0, 2.5, 3.75, 5.0)


def psnr(corrupted: np.ndarray, clean: np.ndarray) -> float:
    mse = np.mean((corrupted.astype(np.float64) - clean) ** 2)
    return float(10 * np.log10(255.0**2 / max(mse, 1e-10)))


def test_registry_names_and_order():
    assert CORRUPTIONS == (
        "gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur", "motion_blur",
        "zoom_blur", "snow", "frost", "fog", "brightness", "contrast", "elastic", "pixelate", "jpeg",
    )  # fmt: skip
    assert HOLDOUT_CORRUPTIONS[:4] == ("speckle_noise", "gaussian_blur", "spatter", "saturate")
    assert list_corruptions("*noise") == ["gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise"]
    assert list_corruptions(include_holdout=False) == list(CORRUPTIONS)


def test_the_order_field_is_the_index_in_imagenet_c_order():
    assert [get_corruption(name).order for name in ALL] == list(range(len(ALL)))
    assert ALL == list(CORRUPTIONS + HOLDOUT_CORRUPTIONS)


def _invert(image, parameters, rng):
    return 255 - image


def test_a_corruption_registered_elsewhere_is_listed_by_its_order_and_applied(monkeypatch, golden_images):
    registry = Registry("corruption", ordered=True)
    for entry in reversed(corruption_registry.REGISTRY.entries()):
        registry.register(entry)
    registry.register(Corruption("invert", "digital", _invert, (0.0,) * 6, random=False, order=10.5))
    monkeypatch.setattr(corruption_registry, "REGISTRY", registry)
    assert list_corruptions(include_holdout=False)[10:13] == ["brightness", "invert", "contrast"]
    np.testing.assert_array_equal(corrupt(golden_images[0], "invert", 2.0), 255 - golden_images[0])
    with pytest.raises(ValueError, match="order 10 of 'brightness'"):
        registry.register(Corruption("dim", "digital", _invert, (0.0,) * 6, random=False, order=10))


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("severity", CHECK_SEVERITIES)
def test_shape_dtype_kept_and_input_untouched(name, severity, golden_images):
    image = golden_images[0].copy()
    before = image.copy()
    output = corrupt(image, name, severity, rng=3)
    assert output.shape == image.shape and output.dtype == np.uint8
    assert output is not image and not np.shares_memory(output, image)
    np.testing.assert_array_equal(image, before)


@pytest.mark.parametrize("name", ALL)
def test_same_seed_same_bytes(name, golden_images):
    image = golden_images[1]
    first = corrupt(image, name, 2.75, rng=np.random.default_rng(11))
    second = corrupt(image, name, 2.75, rng=np.random.default_rng(11))
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first, corrupt(image, name, 2.75, rng=11))


@pytest.mark.parametrize("name", RANDOM)
def test_different_seeds_differ(name, golden_images):
    image = golden_images[0]
    assert not np.array_equal(corrupt(image, name, 3.0, rng=1), corrupt(image, name, 3.0, rng=2))


@pytest.mark.parametrize("name", ALL)
def test_severity_zero_is_identity(name, golden_images):
    image = golden_images[0]
    output = corrupt(image, name, 0.0, rng=5)
    np.testing.assert_array_equal(output, image)
    assert not np.shares_memory(output, image)
    assert corrupt(image, name, 0, rng=5).tobytes() == image.tobytes()


@pytest.mark.parametrize("name", ALL)
def test_no_global_random_state_read_or_written(name, golden_images):
    image = golden_images[1]
    np.random.seed(123)
    random.seed(123)
    numpy_state = np.random.get_state()[1].copy()
    python_state = random.getstate()
    first = corrupt(image, name, 3.5, rng=7)
    assert np.array_equal(np.random.get_state()[1], numpy_state)
    assert random.getstate() == python_state
    np.random.seed(999)
    random.seed(999)
    np.testing.assert_array_equal(corrupt(image, name, 3.5, rng=7), first)


def _digest_all(image: np.ndarray) -> str:
    digest = hashlib.sha256()
    for name in list_corruptions():
        for severity in (0.5, 3.25):
            digest.update(corrupt(image, name, severity, rng=2024).tobytes())
    return digest.hexdigest()


def test_same_bytes_in_another_process(golden_images, tmp_path):
    path = tmp_path / "image.npy"
    np.save(path, golden_images[0])
    script = (
        "import sys, numpy as np; sys.path.insert(0, sys.argv[2]); from test_corruptions import _digest_all; "
        "print(_digest_all(np.load(sys.argv[1])))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(path), os.path.dirname(__file__)],
        capture_output=True, text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.stdout.strip() == _digest_all(golden_images[0])


@pytest.mark.parametrize("alias, name", [("elastic_transform", "elastic"), ("jpeg_compression", "jpeg")])
def test_aliases(alias, name, golden_images):
    image = golden_images[0]
    np.testing.assert_array_equal(corrupt(image, alias, 2.0, rng=4), corrupt(image, name, 2.0, rng=4))
    assert get_corruption(alias).name == name


# Documented shapes of the PSNR-versus-severity curve (docs/fidelity.md). Outside the listed
# exceptions, mean PSNR over 2 images x 3 seeds must not rise by more than 0.3 dB from one grid
# severity to the next (allowance for the sampling noise of random corruptions).
NON_MONOTONE_SEGMENTS = {
    "elastic": [(0.25, 2.0), (3.0, 5.0)],  # alpha drops from 488 to 12.2 px between 2 and 3
    "saturate": [(0.25, 2.0), (2.5, 5.0)],  # factor goes 0.1 -> 2, crossing 1 (identity) near 2.47
    "spatter": [(0.25, 3.0), (4.0, 5.0)],  # water up to 3, mud above; (3, 4) blends the two tables
}
RISE_TOLERANCE_DB = {
    "glass_blur": 3.0,  # displacement and iteration counts are rounded (half to even)
    "pixelate": 2.0,  # int(224 * factor) sizes: BOX resizes that divide 224 evenly look better
}


@pytest.mark.parametrize("name", ALL)
def test_psnr_falls_with_severity(name, golden_images):
    grid = np.arange(1, 21) / 4
    curve = np.array(
        [
            np.mean([psnr(corrupt(image, name, s, rng=seed), image) for image in golden_images for seed in range(3)])
            for s in grid
        ]
    )
    segments = NON_MONOTONE_SEGMENTS.get(name, [(0.25, 5.0)])
    tolerance = RISE_TOLERANCE_DB.get(name, 0.3)
    for low, high in segments:
        inside = curve[(grid >= low) & (grid <= high)]
        rises = np.diff(inside)
        assert rises.max() <= tolerance, (
            f"{name}: PSNR rises by {rises.max():.2f} dB within [{low}, {high}]: {curve.round(1)}"
        )
        assert inside[-1] < inside[0] - 0.5, f"{name}: PSNR does not fall over [{low}, {high}]: {curve.round(1)}"
    if name in NON_MONOTONE_SEGMENTS:
        assert np.diff(curve).max() > 1.0, f"{name}: the documented non-monotone step disappeared: {curve.round(1)}"


@pytest.mark.parametrize(
    "n1, n2", [("snow", "jpeg"), ("gaussian_noise", "fog"), ("elastic", "motion_blur"), ("contrast", "contrast")]
)
def test_pair_is_sequential_composition(n1, n2, golden_images):
    image = golden_images[0]
    expected = corrupt(corrupt(image, n1, 1.25, rng=(generator := np.random.default_rng(8))), n2, 3.5, rng=generator)
    np.testing.assert_array_equal(corrupt_pair(image, n1, 1.25, n2, 3.5, rng=np.random.default_rng(8)), expected)


def test_pair_skips_zero_stages(golden_images):
    image = golden_images[1]
    np.testing.assert_array_equal(corrupt_pair(image, "fog", 0, "snow", 0, rng=1), image)
    np.testing.assert_array_equal(corrupt_pair(image, "fog", 0, "snow", 2.0, rng=1), corrupt(image, "snow", 2.0, rng=1))
    np.testing.assert_array_equal(corrupt_pair(image, "fog", 2.0, "snow", 0, rng=1), corrupt(image, "fog", 2.0, rng=1))


def test_pair_truncates_between_stages(golden_images):
    # contrast then brightness, both deterministic: the second stage must see the truncated uint8
    # result of the first (np.uint8), not a rounded or float one.
    image = golden_images[0]
    first = corrupt(image, "contrast", 2.3)
    unit = image / 255.0
    means = unit.mean(axis=(0, 1), keepdims=True)
    float_first = np.clip((unit - means) * get_corruption("contrast").parameters(2.3) + means, 0, 1) * 255
    np.testing.assert_array_equal(first, float_first.astype(np.uint8))
    assert not np.array_equal(first, np.round(float_first).astype(np.uint8))
    np.testing.assert_array_equal(
        corrupt_pair(image, "contrast", 2.3, "brightness", 1.0), corrupt(first, "brightness", 1.0)
    )


@pytest.mark.parametrize("name", ALL)
def test_batch_equals_single(name, golden_images):
    images = np.stack([golden_images[0], golden_images[1], golden_images[0]])
    seeds = [3, 4, 5]
    batch = corrupt_batch(images, name, 1.75, [np.random.default_rng(seed) for seed in seeds])
    for image, seed, output in zip(images, seeds, batch):
        np.testing.assert_array_equal(output, corrupt(image, name, 1.75, rng=np.random.default_rng(seed)))


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("shape", [(32, 32), (160, 200), (300, 257)])
def test_other_sizes_work(name, shape):
    image = np.random.default_rng(0).integers(0, 256, (*shape, 3), dtype=np.uint8)
    output = corrupt(image, name, 3.0, rng=1)
    assert output.shape == image.shape and output.dtype == np.uint8


def test_frost_refuses_images_larger_than_its_textures():
    image = np.zeros((400, 400, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="frost needs images smaller than its textures"):
        corrupt(image, "frost", 2.0, rng=0)


@pytest.mark.parametrize(
    "image, message",
    [
        (np.zeros((224, 224, 3), dtype=np.float32), "image must have dtype uint8.*float32"),
        (np.zeros((224, 224), dtype=np.uint8), r"image must have shape HxWx3.*\(224, 224\)"),
        (np.zeros((224, 224, 4), dtype=np.uint8), r"shape HxWx3.*\(224, 224, 4\)"),
        (np.zeros((16, 224, 3), dtype=np.uint8), "at least 32x32"),
        ([[1, 2, 3]], "numpy uint8 array.*list"),
    ],
)
def test_bad_images(image, message):
    with pytest.raises(ValueError, match=message):
        corrupt(image, "fog", 1.0)


@pytest.mark.parametrize(
    "severity, message",
    [(float("nan"), "severity must be in \\[0, 5\\], got nan"), (-0.1, "got -0.1"), (5.01, "got 5.01"),
     (7.2, "severity must be in \\[0, 5\\], got 7.2"), ("3", "real number.*'3'"), (True, "real number.*True")],
)  # fmt: skip
def test_bad_severities_are_never_clipped(severity, message):
    with pytest.raises(ValueError, match=message):
        corrupt(np.zeros((32, 32, 3), dtype=np.uint8), "fog", severity)


def test_unknown_names_list_valid_ones():
    with pytest.raises(
        ValueError, match="unknown corruption 'fogg'.*available: gaussian_noise.*saturate.*jpeg_compression"
    ):
        corrupt(np.zeros((32, 32, 3), dtype=np.uint8), "fogg", 1.0)
    with pytest.raises(ValueError, match="unknown corruption 'blurr' for n2"):
        corrupt_pair(np.zeros((32, 32, 3), dtype=np.uint8), "fog", 1.0, "blurr", 1.0)
    with pytest.raises(ValueError, match="s2 must be in"):
        corrupt_pair(np.zeros((32, 32, 3), dtype=np.uint8), "fog", 1.0, "snow", 6.0)


def test_bad_generators_and_batches():
    image = np.zeros((32, 32, 3), dtype=np.uint8)
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator.*got str"):
        corrupt(image, "fog", 1.0, rng="seed")
    with pytest.raises(ValueError, match="non-negative"):
        corrupt(image, "fog", 1.0, rng=-1)
    with pytest.raises(ValueError, match="NxHxWx3"):
        corrupt_batch(image, "fog", 1.0, [1])
    with pytest.raises(ValueError, match="one generator per image \\(2\\), got 1"):
        corrupt_batch(np.stack([image, image]), "fog", 1.0, [1])


@pytest.mark.parametrize("content, problem", [("bomb", "exceeds limit"), ("text", "cannot identify image file")])
def test_corruption_grid_names_an_unreadable_image(tmp_path, capsys, content, problem):
    from ccc.cli.corruption_grid import main
    from tests.image_fixtures import bomb_png

    image = tmp_path / "input.png"
    image.write_bytes(bomb_png() if content == "bomb" else b"not an image")
    assert main(["--image", str(image), "--out", str(tmp_path / "grid.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ccc-corruption-grid: error: cannot read --image {image}: ") and problem in err
    assert len(err.strip().splitlines()) == 1
