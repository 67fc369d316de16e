"""The corruption-function contract, for every torch corruption the pipeline dispatches (all 19)."""

from __future__ import annotations

import pytest
import torch

from ccc.corruptions import get_corruption, list_corruptions
from ccc.render_torch import torch_corruption, torch_corruptions
from ccc.render_torch.numerics import truncate_to_levels
from ccc.render_torch.random import SampleRandom
from ccc.render_torch.registry import REGISTRY, register_torch_corruption
from tests.ccc.render_torch.images import demo_images, to_tensor

IMAGES = to_tensor(demo_images(3, size=64))


def test_every_registered_corruption_has_a_torch_implementation():
    assert list(torch_corruptions()) == list_corruptions()  # ImageNet-C's order


def test_each_torch_corruption_lives_in_the_module_of_its_cpu_family():
    """The layout of ccc.corruptions: a corruption's torch halves are in ccc.render_torch.<its family>."""
    for entry in REGISTRY:
        assert entry.prepare.__module__ == f"ccc.render_torch.{get_corruption(entry.name).family}", entry.name
    assert {entry.family for entry in REGISTRY} == {"noise", "blur", "weather", "digital"}


def test_a_torch_corruption_is_registered_once_under_its_canonical_name():
    trial = REGISTRY.copy()
    with pytest.raises(ValueError, match="torch corruption 'contrast' is already registered"):
        trial.register(REGISTRY.get("contrast"))
    with pytest.raises(
        ValueError, match="register torch corruption 'elastic_transform' under its canonical name 'elastic'"
    ):
        register_torch_corruption("elastic_transform", torch_corruption("elastic").prepare)
    with pytest.raises(ValueError, match="unknown corruption 'sparkle'"):
        register_torch_corruption("sparkle", torch_corruption("contrast").prepare)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", sorted(torch_corruptions()))
def test_a_sample_depends_only_on_its_image_severity_and_seed(name: str, dtype: torch.dtype):
    """``f(images, severities, random, dtype)``: float32 (B, 3, H, W) in [0, 1] out at either working dtype,
    the input untouched, each sample of a mixed-severity batch equal to itself alone, and the same seeds
    giving the same values twice."""
    function = torch_corruptions()[name]
    images = IMAGES.clone()
    severities = torch.tensor([0.7, 3.3, 5.0], dtype=torch.float64)
    seeds = torch.tensor([5, 6, 7])
    batch = function(images, severities, SampleRandom(seeds, dtype=dtype), dtype)
    assert torch.equal(images, IMAGES)
    assert batch.dtype == torch.float32 and batch.shape == images.shape
    assert 0.0 <= float(batch.min()) and float(batch.max()) <= 1.0
    assert torch.equal(batch, function(images, severities, SampleRandom(seeds, dtype=dtype), dtype))
    for index in range(3):
        window = slice(index, index + 1)
        alone = function(images[window], severities[window], SampleRandom(seeds[window], dtype=dtype), dtype)
        assert torch.equal(batch[window], alone), f"{name}: sample {index} changes with its batch"


@pytest.mark.parametrize("name", sorted(torch_corruptions()))
def test_the_float32_mode_stays_within_a_level_of_float64(name: str):
    """The same draws in float32 give bytes (after the pipeline's truncation) at most 1 level from float64's
    at all but a few outliers (a flipped edge in spatter), and rarely different (saturate, the most: ≈ 5 %):
    a float32 step that lost the corruption, or used another parameter, would move far more (measured per
    corruption in docs/fidelity.md)."""
    function = torch_corruptions()[name]
    severities = torch.tensor([0.7, 3.3, 5.0], dtype=torch.float64)
    seeds = torch.tensor([5, 6, 7])
    exact = truncate_to_levels(function(IMAGES, severities, SampleRandom(seeds), torch.float64)) * 255
    single = function(IMAGES, severities, SampleRandom(seeds, dtype=torch.float32), torch.float32)
    difference = (truncate_to_levels(single) * 255 - exact).abs()
    assert float((difference > 1.5).float().mean()) < 1e-3, f"{name}: bytes more than a level apart"
    assert float((difference > 0.5).float().mean()) < 0.1, f"{name}: over 10 % of the bytes differ"
