"""Shared fixtures: the golden input images, the golden reference statistics and a small image folder
(built by :mod:`tests.builders`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.builders import GOLDEN, make_image_folder


@pytest.fixture(autouse=True)
def single_thread(monkeypatch: pytest.MonkeyPatch):
    """One torch thread per test, and per program a test starts (``OMP_NUM_THREADS``): the models are
    tiny, and the test workers (pytest-xdist) already use every core, so intra-op threads would only
    wait for each other."""
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


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


@pytest.fixture()
def image_folder(tmp_path: Path) -> Path:
    """A fresh 3-class × 4-image ImageNet-layout folder of 500×375 JPEGs."""
    return make_image_folder(tmp_path / "val")
