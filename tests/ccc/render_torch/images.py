"""Test images for the torch backend (the demo world's images, centre-cropped) and the conversions between
numpy uint8 (B, H, W, 3) images and the backend's float32 (B, 3, H, W) tensors: the one owner for its tests
and ``scripts/fidelity_torch.py``."""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from ccc.demo.images import render_demo_image


def demo_images(count: int, size: int = 224, seed: int = 0) -> NDArray[np.uint8]:
    """``count`` demo images (classes in turn), centre ``size``×``size`` crops: uint8 (count, size, size, 3)."""
    generator = np.random.default_rng(seed)
    crops = []
    for index in range(count):
        image = render_demo_image(index % 16, generator)
        top, left = (image.shape[0] - size) // 2, (image.shape[1] - size) // 2
        crops.append(image[top : top + size, left : left + size])
    return np.stack(crops)


def to_tensor(images: NDArray[np.uint8]) -> Tensor:
    """uint8 (B, H, W, 3) → float32 (B, 3, H, W) in [0, 1]."""
    return torch.from_numpy(np.array(images)).permute(0, 3, 1, 2).to(torch.float32) / 255


def to_bytes(images: Tensor) -> NDArray[np.uint8]:
    """float32 (B, 3, H, W) in [0, 1], any device → uint8 (B, H, W, 3) on the host, truncated like the
    pipeline (``floor(clamp(x * 255, 0, 255))``, the reference's ``np.uint8``)."""
    return torch.clamp(images * 255, 0, 255).floor().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
