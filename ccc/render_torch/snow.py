"""Snow in torch, batched with per-sample severities (the CPU path: :func:`ccc.corruptions.weather.snow`).

A snow layer (normal noise per pixel), zoomed about the centre, thresholded, quantised to 8 bits and
motion-blurred by ImageMagick's MotionBlurImage at an angle uniform in [-135, -45) degrees, is added
twice (as is and rotated by 180 degrees) to the image whitened towards ``max(x, 1.5 gray + 0.5)``.

The arithmetic after the draws is the CPU path's (float64 where it computes in float64, the same
zoom tables and motion-blur taps; float32 throughout in the float32 mode); the draws come from
:class:`~ccc.render_torch.random.SampleRandom` (``normal(H, W)`` then ``uniform()``), so the result is
equivalent in distribution, not equal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np
import torch
from torch import Tensor

from ._levels import unit_float32
from ._upload import upload_tables
from .blur import motion_blur_tables, motion_blur_with_tables, zoom_tables, zoom_with_tables
from .parameters import per_sample_parameters

if TYPE_CHECKING:
    from .random import SampleRandom

_ANGLE_RANGE = (-135.0, -45.0)
"""The snow layer's motion-blur angle, uniform in degrees (the CPU path's ``rng.uniform(-135, -45)``)."""

_GRAY_WEIGHTS = tuple(float(np.float32(weight)) for weight in (0.299, 0.587, 0.114))
"""OpenCV's RGB → gray weights (``cv2.COLOR_RGB2GRAY``), rounded to float32 as OpenCV stores them (Python
floats: scalars of the device arithmetic, no upload)."""


def opencv_gray(unit: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
    """``cv2.cvtColor(x, cv2.COLOR_RGB2GRAY)`` of float32 images, with OpenCV's SIMD operation order.

    Args:
        unit: float32 (B, 3, H, W).
        dtype: ``torch.float64`` emulates the fused multiply-adds exactly; ``torch.float32`` (the float32
            mode) uses plain float32 multiply-adds (an ulp away at most).

    Returns:
        float32 (B, 1, H, W): ``fma(B, 0.114, fma(R, 0.299, G * 0.587))`` in float32 (OpenCV 5 on a CPU
        with FMA; measured equal bit for bit). The fused steps are computed as float64 sums of exact
        float64 products rounded once to float32.
    """
    red_weight, green_weight, blue_weight = _GRAY_WEIGHTS
    red, green, blue = (unit[:, channel : channel + 1].to(dtype) for channel in range(3))
    gray = (green * green_weight).to(torch.float32).to(torch.float64)
    gray = (gray + red * red_weight).to(torch.float32).to(torch.float64)
    return (gray + blue * blue_weight).to(torch.float32)


def snow(images: Tensor, severities: Tensor, random: SampleRandom, dtype: torch.dtype = torch.float64) -> Tensor:
    """Snow flakes over a whitened image, per-sample parameters from the CPU path's table.

    Args:
        images: float32 (B, 3, H, W) in [0, 1] (8-bit levels k / 255).
        severities: float64 (B,) in (0, 5], on the host.
        random: one ``normal(H, W)`` draw (the flake layer) and one ``uniform()`` draw (the angle, drawn on
            the host with ``random.on_host()``: it shapes the motion-blur taps). The parameters, zoom
            tables and motion-blur taps travel in one upload.
        dtype: the working float dtype, ``torch.float64`` (the CPU's arithmetic) or ``torch.float32``.

    Returns:
        float32 (B, 3, H, W) in [0, 1]: the CPU path's pre-truncation value divided by 255.
    """
    parameters = per_sample_parameters("snow", severities)
    host = parameters.tolist()
    batch, _, height, width = images.shape
    noise = random.normal(height, width).to(dtype)[:, None]
    low, high = _ANGLE_RANGE
    angles = (low + (high - low) * random.on_host().uniform().to(torch.float64)).tolist()
    zoom = zoom_tables(height, width, [row[2] for row in host])
    weights, starts, padding = motion_blur_tables(
        height, width, [row[4] for row in host], [row[5] for row in host], angles
    )
    uploaded, *tables = upload_tables(
        images.device, parameters[:, [0, 1, 3, 6]].numpy(), *zoom, weights, starts, float_dtype=dtype
    )
    mean, spread, threshold, blend = (uploaded[:, index, None, None, None] for index in range(4))
    layer = zoom_with_tables(mean + spread * noise, *tables[:4], dtype)
    layer = torch.where(layer < threshold, torch.zeros_like(layer), layer)
    layer_levels = (layer.clamp(0.0, 1.0) * 255.0).floor()
    blurred = motion_blur_with_tables(layer_levels, *tables[4:], padding)
    flakes = blurred / 255.0
    unit = torch.round(images * 255.0) / 255.0
    brightened = torch.maximum(unit, opencv_gray(unit, dtype) * 1.5 + 0.5).to(dtype)
    whitened = blend * unit.to(dtype) + (1.0 - blend) * brightened
    return unit_float32((whitened + flakes + flakes.flip(2, 3)) * 255.0)


TORCH_CORRUPTIONS: dict[str, Callable[[Tensor, Tensor, SampleRandom, torch.dtype], Tensor]] = {"snow": snow}
"""Snow by its registered name (merged by the pipeline)."""

__all__ = ["TORCH_CORRUPTIONS", "opencv_gray", "snow"]
