"""Shared fixtures: the golden input images and paths to the golden reference outputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture(scope="session")
def golden_images() -> np.ndarray:
    """Two natural 224×224×3 uint8 images (scikit-image's astronaut and coffee), read-only."""
    images = np.load(GOLDEN / "corruption_inputs.npz")["images"]
    images.setflags(write=False)
    return images


@pytest.fixture(scope="session")
def golden_random_stats() -> dict:
    """Reference statistics of the random corruptions (see tests/golden/README.md)."""
    return json.loads((GOLDEN / "corruption_random_stats.json").read_text())
