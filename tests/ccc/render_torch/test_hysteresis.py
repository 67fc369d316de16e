"""Canny's fixed-trip hysteresis (spatter), against the flood fill it replaced.

Canny's hysteresis is a fixed number of hooking and pointer-jumping rounds
(:func:`~ccc.render_torch._spatter_filters.connected_to_strong`); it must equal the flood fill it replaced
(3x3 dilations restricted to the candidates until nothing changes) on spatter-like images and on
adversarial edge sets whose flood fill takes thousands of dilations.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import scipy.ndimage
import torch
import torch.nn.functional as F

from ccc.render_torch._spatter_filters import connected_to_strong


def _dilate_until_stable(candidates: torch.Tensor, strong: torch.Tensor) -> torch.Tensor:
    """The replaced hysteresis: grow the strong pixels by 3x3 dilations within the candidates until stable."""
    edges = strong
    while True:
        grown = candidates & (F.max_pool2d(edges[:, None].float(), 3, stride=1, padding=1)[:, 0] > 0)
        if torch.equal(grown, edges):
            return edges
        edges = grown


def _labelled_reference(candidates: np.ndarray, strong: np.ndarray) -> np.ndarray:
    """The candidates whose 8-connected component (scipy's labelling) holds a strong pixel, per image."""
    result = np.zeros_like(candidates)
    for index, (mask, seeds) in enumerate(zip(candidates, strong)):
        labels, _ = scipy.ndimage.label(mask, structure=np.ones((3, 3)))
        reached = np.unique(labels[seeds & mask])
        result[index] = np.isin(labels, reached[reached > 0])
    return result


def _liquid_bytes(sigma: float, shape: tuple[int, int]) -> np.ndarray:
    """A spatter-like liquid layer in bytes (as in ``test_weather.test_water_filters_match_opencv``)."""
    generator = np.random.default_rng(int(sigma * 10))
    liquid = cv2.GaussianBlur(generator.normal(0.65, 0.3, shape), (0, 0), sigma)
    liquid[liquid < 0.68] = 0
    return (liquid * 255).astype(np.uint8)


@pytest.mark.parametrize("sigma", [2.0, 3.0, 4.0])
@pytest.mark.parametrize("shape", [(96, 128), (224, 224)])
def test_hysteresis_equals_the_flood_fill_on_spatter_images(sigma, shape):
    """Candidates are OpenCV's non-maximum-suppressed pixels above 50 (``Canny(·, 50, 50)``), strong ones
    those above 150 (``Canny(·, 150, 150)``); the hysteresis gives ``Canny(·, 50, 150)``."""
    liquid = _liquid_bytes(sigma, shape)
    candidates = torch.from_numpy(cv2.Canny(liquid, 50, 50) > 0)[None]
    strong = torch.from_numpy(cv2.Canny(liquid, 150, 150) > 0)[None]
    edges = connected_to_strong(candidates, strong)
    assert torch.equal(edges, _dilate_until_stable(candidates, strong))
    np.testing.assert_array_equal(edges[0].numpy(), cv2.Canny(liquid, 50, 150) > 0)


def _serpentine(size: int) -> np.ndarray:
    """One 8-connected path through every other row, joined at alternating ends: about size**2 / 2 pixels."""
    mask = np.zeros((size, size), dtype=bool)
    mask[::2] = True
    for row in range(1, size - 1, 2):
        mask[row, -1 if row % 4 == 1 else 0] = True
    return mask


def _spiral(size: int) -> np.ndarray:
    """A square spiral from the border inwards, its turns 2 pixels apart: one 8-connected path of about
    size**2 / 2 pixels. It goes straight while the next pixel touches no earlier pixel but the last three,
    else turns clockwise, and ends where it can do neither."""
    mask = np.zeros((size + 2, size + 2), dtype=bool)  # a frame of unused pixels for the neighbourhoods
    path = [(1, 1)]
    mask[1, 1] = True
    steps = ((0, 1), (1, 0), (0, -1), (-1, 0))
    direction = 0
    while True:
        for turn in (0, 1):
            row, column = (a + b for a, b in zip(path[-1], steps[(direction + turn) % 4]))
            if not (1 <= row <= size and 1 <= column <= size) or mask[row, column]:
                continue
            touched = {(row + dr, column + dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1) if mask[row + dr, column + dc]}
            if touched <= set(path[-3:]):
                direction = (direction + turn) % 4
                path.append((row, column))
                mask[row, column] = True
                break
        else:
            return mask[1:-1, 1:-1]


def _adversarial_cases(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Candidate and strong masks (N, size, size): long paths seeded at either end or in the middle, a full
    mask seeded in a corner, random masks near the 8-connected percolation threshold, and no strong pixel."""
    generator = np.random.default_rng(5)
    candidates, strong = [], []
    for path in (_spiral(size), _serpentine(size)):
        rows, columns = np.nonzero(path)
        for pick in (0, len(rows) // 2, len(rows) - 1):
            seed = np.zeros_like(path)
            seed[rows[pick], columns[pick]] = True
            candidates.append(path)
            strong.append(seed)
    full, corner = np.ones((size, size), dtype=bool), np.zeros((size, size), dtype=bool)
    corner[-1, -1] = True
    candidates += [full, full]
    strong += [corner, np.zeros_like(full)]
    for density in (0.35, 0.41, 0.45, 0.6):
        mask = generator.random((size, size)) < density
        candidates.append(mask)
        strong.append(mask & (generator.random((size, size)) < 0.001))
    return np.stack(candidates), np.stack(strong)


def test_hysteresis_on_adversarial_edges_equals_component_labelling():
    """224x224: the spiral's and serpentine's single paths hold ~25,000 pixels (the flood fill needs that
    many dilations); compared with scipy's 8-connected labelling."""
    candidates, strong = _adversarial_cases(224)
    edges = connected_to_strong(torch.from_numpy(candidates), torch.from_numpy(strong)).numpy()
    np.testing.assert_array_equal(edges, _labelled_reference(candidates, strong))


def test_hysteresis_on_adversarial_edges_equals_the_flood_fill():
    """47x39 (odd sides, blocks cut at the border; the flood fill stays fast): the same cases against the
    replaced loop."""
    candidates, strong = _adversarial_cases(47)
    candidates, strong = torch.from_numpy(candidates[:, :, :39]), torch.from_numpy(strong[:, :, :39])
    assert torch.equal(connected_to_strong(candidates, strong), _dilate_until_stable(candidates, strong))
