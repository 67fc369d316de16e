"""Crop, resize to 224×224 and flip source images on a torch device, with Pillow's bytes.

The CPU path (``ccc.render``) resizes with Pillow's 8-bit bilinear filter; here the same fixed-point
arithmetic runs as exact integer matrix products (:mod:`._resample`), so the result equals the CPU
path's pixels on every device (no ``F.interpolate``: its antialiased bilinear weights and float
rounding differ from Pillow's by up to a few levels).
"""

from __future__ import annotations

from typing import Sequence, Union

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from ccc.stream.spec import SampleSpec

from ._resample import resize_levels

__all__ = ["OUTPUT_SIZE", "SourceImage", "crop_resize_flip"]

OUTPUT_SIZE = 224
"""Side of the rendered square image in pixels (``ccc.render.OUTPUT_SIZE``)."""

SourceImage = Union[NDArray[np.uint8], Tensor]
"""A decoded RGB source image: numpy uint8 (H, W, 3) or torch uint8 (3, H, W) (``torchvision.io``'s layout)."""


def _planes(image: SourceImage, device: torch.device) -> Tensor:
    """float64 (3, H, W) byte levels on ``device``."""
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(f"a numpy source image must be uint8 (H, W, 3), got {image.dtype} {image.shape}")
        return torch.from_numpy(np.ascontiguousarray(image)).to(device).permute(2, 0, 1).to(torch.float64)
    if image.dtype != torch.uint8 or image.ndim != 3 or image.shape[0] != 3:
        raise ValueError(f"a tensor source image must be uint8 (3, H, W), got {image.dtype} {tuple(image.shape)}")
    return image.to(device).to(torch.float64)


def _crop_resize_flip_one(planes: Tensor, spec: SampleSpec) -> Tensor:
    height, width = planes.shape[-2:]
    if (width, height) != tuple(spec.source_size):
        raise ValueError(
            f"source image {spec.source_path} must be {spec.source_size[0]}x{spec.source_size[1]} pixels "
            f"as when the stream was planned, got {width}x{height}"
        )
    if spec.resize is not None:
        planes = resize_levels(planes, spec.resize[1], spec.resize[0], "bilinear")
    left, top, right, bottom = spec.crop_box
    if not (0 <= left < right <= planes.shape[-1] and 0 <= top < bottom <= planes.shape[-2]):
        raise ValueError(f"crop_box {spec.crop_box} must lie inside the {planes.shape[-1]}x{planes.shape[-2]} image")
    resized = resize_levels(planes[:, top:bottom, left:right], OUTPUT_SIZE, OUTPUT_SIZE, "bilinear")
    return torch.flip(resized, dims=(-1,)) if spec.flip else resized


def crop_resize_flip(specs: Sequence[SampleSpec], images: Sequence[SourceImage], device: torch.device | str) -> Tensor:
    """The 224×224 crops of ``specs`` from their decoded source images, as the CPU path cuts them.

    Per sample: with ``spec.resize``, the whole image is first resized to it (Pillow bilinear); then
    ``spec.crop_box`` (left, top, right, bottom; pixels, right and bottom exclusive) is cut, resized
    to 224×224 (Pillow bilinear; a 224×224 box is copied) and mirrored if ``spec.flip``.

    Args:
        specs: one :class:`SampleSpec` per image.
        images: decoded RGB images of any sizes (``spec.source_size`` each), see :data:`SourceImage`.
        device: where the work and the result live.

    Returns:
        float32 (B, 3, 224, 224) on ``device``, values ``k / 255`` for Pillow's bytes ``k``. Images of
        different sizes are resized one by one (a loop over the samples), then stacked.

    Raises:
        ValueError: a count, dtype, layout or size mismatch, or a crop box outside the image.
    """
    if len(specs) != len(images):
        raise ValueError(f"specs and images must have the same length, got {len(specs)} and {len(images)}")
    device = torch.device(device)
    crops = [_crop_resize_flip_one(_planes(image, device), spec) for spec, image in zip(specs, images)]
    if not crops:
        return torch.empty((0, 3, OUTPUT_SIZE, OUTPUT_SIZE), dtype=torch.float32, device=device)
    return (torch.stack(crops) / 255).to(torch.float32)
