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


def make_calibration_table(
    corruptions: tuple[str, ...] = ("brightness", "jpeg", "pixelate", "contrast"),
    presets: dict | None = None,
    seed: int = 0,
):
    """A synthetic :class:`ccc.calibration.CalibrationTable` holding every ordered pair of ``corruptions``.

    Accuracy falls smoothly with both severities, ``76 · exp(-a·i) · exp(-b·j)`` with a per-corruption
    rate in [0.05, 0.15] plus ±1 % noise (percent, clipped to [0, 100]), so severity paths for targets
    20–40 are 5–30 cells long. ``presets`` defaults to ``{"medium": (30.0, corruptions)}``.
    """
    from ccc.calibration import CalibrationMetadata, CalibrationTable

    generator = np.random.default_rng(seed)
    rates = dict(zip(corruptions, generator.uniform(0.05, 0.15, len(corruptions))))
    steps = np.arange(21)
    grids = {}
    for first in corruptions:
        for second in corruptions:
            if first != second:
                grid = 76.0 * np.exp(-rates[first] * steps)[:, None] * np.exp(-rates[second] * steps)[None, :]
                grids[(first, second)] = np.clip(grid + generator.uniform(-1, 1, grid.shape), 0, 100)
    metadata = CalibrationMetadata(
        model_name="synthetic test model",
        preprocessing="none (synthetic numbers)",
        image_set_description="none (synthetic numbers)",
        image_count=100,
        created="2024-01-01T00:00:00+00:00",
    )
    return CalibrationTable.from_grids(
        corruptions,
        grids,
        image_counts=100,
        metadata=metadata,
        difficulty_presets=presets if presets is not None else {"medium": (30.0, corruptions)},
    )
