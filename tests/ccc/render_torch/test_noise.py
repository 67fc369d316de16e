"""Torch noise corruptions against the CPU path: equal in distribution (statistics over seeds)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ccc.corruptions import corrupt
from ccc.render_torch import torch_corruptions
from ccc.render_torch.random import SampleRandom
from tests.ccc.render_torch.image_statistics import histogram_distance, psnr
from tests.ccc.render_torch.images import demo_images, to_bytes, to_tensor

IMAGES = demo_images(6)
SEEDS = 4


@pytest.mark.parametrize("name", sorted(torch_corruptions("noise")))
@pytest.mark.parametrize("severity", [0.5, 2.0, 5.0])
def test_statistics_match_the_cpu_path(name: str, severity: float):
    """Over 6 images × 4 seeds (0.9 M values): mean and standard deviation within 0.2 levels, PSNR to the
    clean image within 0.05 dB, output-byte histograms within 0.01 total variation (the sampling noise of
    two such samples is about 0.003–0.005)."""
    function = torch_corruptions("noise")[name]
    severities = torch.full((len(IMAGES),), severity, dtype=torch.float64)
    ours = np.stack(
        [
            to_bytes(function(to_tensor(IMAGES), severities, SampleRandom(torch.arange(len(IMAGES)) + 100 * seed)))
            for seed in range(SEEDS)
        ]
    )
    theirs = np.stack(
        [
            np.stack([corrupt(image, name, severity, rng=1000 * seed + k) for k, image in enumerate(IMAGES)])
            for seed in range(SEEDS)
        ]
    )
    assert abs(ours.mean() - theirs.mean()) < 0.2
    assert abs(ours.std() - theirs.std()) < 0.2
    assert abs(psnr(ours, IMAGES[None]) - psnr(theirs, IMAGES[None])) < 0.05
    assert histogram_distance(ours, theirs) < 0.01
