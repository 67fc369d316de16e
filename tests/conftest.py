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


def make_image_folder(
    root: Path, classes: int = 3, images_per_class: int = 4, size: tuple[int, int] = (500, 375), seed: int = 0
) -> Path:
    """Write a small ImageNet-layout folder ``root/<wnid>/ILSVRC2012_val_<k>.JPEG`` and return ``root``.

    Images are smooth random colour fields (JPEG quality 90) of ``size`` = (width, height) pixels,
    ImageNet's typical 500×375 by default; class folders are fake WordNet ids n0000000<c>.
    """
    from PIL import Image

    generator = np.random.default_rng(seed)
    counter = 0
    for class_index in range(classes):
        folder = root / f"n{class_index:08d}"
        folder.mkdir(parents=True, exist_ok=True)
        for _ in range(images_per_class):
            counter += 1
            coarse = generator.integers(0, 256, (6, 8, 3), dtype=np.uint8)
            image = Image.fromarray(coarse).resize(size, Image.Resampling.BICUBIC)
            image.save(folder / f"ILSVRC2012_val_{counter:08d}.JPEG", quality=90)
    return root


@pytest.fixture()
def image_folder(tmp_path: Path) -> Path:
    """A fresh 3-class × 4-image ImageNet-layout folder of 500×375 JPEGs."""
    return make_image_folder(tmp_path / "val")
