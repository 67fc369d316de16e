"""Test images for the torch backend: the demo world's images, centre-cropped to 224×224."""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from ccc.demo.images import render_demo_image


def demo_images(count: int, seed: int = 0) -> NDArray[np.uint8]:
    """``count`` demo images (classes in turn), centre 224×224 crops: uint8 (count, 224, 224, 3)."""
    generator = np.random.default_rng(seed)
    crops = []
    for index in range(count):
        image = render_demo_image(index % 16, generator)
        top, left = (image.shape[0] - 224) // 2, (image.shape[1] - 224) // 2
        crops.append(image[top : top + 224, left : left + 224])
    return np.stack(crops)


def to_tensor(images: NDArray[np.uint8]) -> Tensor:
    """uint8 (B, H, W, 3) → float32 (B, 3, H, W) in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).to(torch.float32) / 255


def to_bytes(images: Tensor) -> NDArray[np.uint8]:
    """float32 (B, 3, H, W) in [0, 1] → uint8 (B, H, W, 3), truncated like ``np.uint8``."""
    return torch.clamp(images * 255, 0, 255).floor().to(torch.uint8).permute(0, 2, 3, 1).numpy()
