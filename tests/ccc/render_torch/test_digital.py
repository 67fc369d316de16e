"""Torch digital corruptions against the CPU path: equal bytes after the same truncation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from ccc.corruptions import corrupt, get_corruption
from ccc.render_torch import torch_corruptions
from ccc.render_torch._resample import resample_batch
from ccc.render_torch.random import SampleRandom
from tests.ccc.render_torch.images import demo_images, to_bytes, to_tensor

IMAGES = demo_images(6)
SEVERITIES = [0.5 * k for k in range(1, 11)]
DETERMINISTIC = sorted(name for name in torch_corruptions("digital") if not get_corruption(name).random)
"""The digital family but elastic (random: tested given the CPU's draws in test_weather.py)."""


@pytest.mark.parametrize("name", DETERMINISTIC)
def test_bytes_equal_the_cpu_path_at_every_half_severity(name: str):
    """One batch holds every (image, severity) pair, so that mixed severities are exercised too."""
    function = torch_corruptions("digital")[name]
    images = np.repeat(IMAGES, len(SEVERITIES), axis=0)
    severities = torch.tensor(SEVERITIES * len(IMAGES), dtype=torch.float64)
    ours = to_bytes(function(to_tensor(images), severities, SampleRandom(torch.arange(len(images)))))
    theirs = np.stack([corrupt(image, name, float(s)) for image, s in zip(images, severities)])
    np.testing.assert_array_equal(ours, theirs)


def _resize(image: np.ndarray, height: int, width: int, kind: str) -> np.ndarray:
    """``resample_batch`` of one uint8 (H, W, 3) image to (height, width), as uint8 (height, width, 3)."""
    box = [[0, 0, image.shape[1], image.shape[0]]]
    resized = resample_batch(
        torch.from_numpy(image)[None], np.array(box), np.array([[height, width]]), (height, width), kind
    )
    return resized[0].numpy()


@pytest.mark.parametrize("kind, resample", [("box", Image.Resampling.BOX), ("bilinear", Image.Resampling.BILINEAR)])
@pytest.mark.parametrize("size", [(224, 224), (67, 56), (300, 250), (224, 100), (111, 331)])
def test_resize_levels_equals_pillow(kind: str, resample: Image.Resampling, size: tuple[int, int]):
    image = IMAGES[0][:200, :150]
    expected = np.asarray(Image.fromarray(image).resize(size, resample))
    np.testing.assert_array_equal(_resize(image, size[1], size[0], kind), expected)


def test_resize_levels_equals_pillow_on_random_sizes():
    """Random input and output sizes, both pass orders of Pillow 13 and both filters."""
    generator = np.random.default_rng(5)
    noise = generator.integers(0, 256, (300, 300, 3), dtype=np.uint8)
    for _ in range(40):
        (in_width, in_height), (width, height) = generator.integers(8, 300, 2), generator.integers(2, 350, 2)
        image = noise[:in_height, :in_width]
        for kind, resample in (("box", Image.Resampling.BOX), ("bilinear", Image.Resampling.BILINEAR)):
            expected = np.asarray(Image.fromarray(image).resize((int(width), int(height)), resample))
            np.testing.assert_array_equal(_resize(image, int(height), int(width), kind), expected)


@pytest.mark.parametrize("length", [224, 37, 5])
def test_elastic_smoothing_matrices_assembled_on_the_device_are_the_cpu_paths_bit_for_bit(length: int) -> None:
    from ccc.corruptions.filters import reflect_folded_kernel, reflect_smoothing_matrix
    from ccc.render_torch.digital import _smoothing_matrices

    sigmas = [2.44, 15.7, 0.3, 60.0, 7.123]  # 60 px: the kernel wraps the period several times at length 5
    folded = torch.from_numpy(np.stack([reflect_folded_kernel(length, sigma, 3.0) for sigma in sigmas]))
    expected = np.stack([reflect_smoothing_matrix(length, sigma, 3.0) for sigma in sigmas])
    assert np.array_equal(_smoothing_matrices(length, folded).numpy(), expected)
