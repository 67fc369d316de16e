"""Digital corruptions in torch: brightness, contrast, saturate, pixelate, jpeg.

All five are deterministic and follow the CPU path (``ccc.corruptions.digital``) closely:

- brightness, saturate: scikit-image's RGB→HSV→RGB formulas (as ``ccc.corruptions._kernels.adjust_hsv``
  evaluates them) on whole tensors in the working dtype (float64: the CPU's bytes), from the inputs'
  exact byte levels ``round(x * 255) / 255``;
- contrast: the reference's float64 arithmetic around each image's per-channel mean (in the working dtype);
- pixelate: Pillow's BOX down- and up-resize as exact integer matrices (:mod:`._resample`): Pillow's bytes;
- jpeg: a JPEG round trip at ``round(quality)`` in libjpeg-turbo's integer arithmetic
  (:mod:`.jpeg`): Pillow's bytes, one call for the whole batch with per-sample qualities.

Every function takes images float32 (B, 3, H, W) whose values are byte levels ``k / 255`` (as the
pipeline passes them), severities float64 (B,) in (0, 5], a :class:`SampleRandom` (unused) and the
working float dtype (``torch.float64``, the default, or ``torch.float32``; pixelate and jpeg are
integer arithmetic and ignore it), and
returns float32 (B, 3, H, W) in [0, 1], the reference's value before its uint8 truncation over 255
(rounded to float32 so that ``floor(x * 255)`` gives the reference's byte).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch import Tensor

from ._levels import byte_levels, unit_float32, unit_values
from ._resample import resample_batch
from .jpeg import jpeg_round_trip
from .parameters import per_sample_parameters
from .random import SampleRandom

__all__ = ["TORCH_CORRUPTIONS", "brightness", "contrast", "jpeg", "pixelate", "saturate"]


def adjust_hsv(unit: Tensor, value_shift: Tensor, saturation_scale: Tensor, saturation_shift: Tensor) -> Tensor:
    """RGB → HSV → adjust → RGB with scikit-image's formulas, elementwise in ``unit``'s dtype.

    Args:
        unit: float64 (or float32) (B, 3, H, W) in [0, 1].
        value_shift, saturation_scale, saturation_shift: (B, 1, 1) each, of ``unit``'s dtype.

    Returns:
        (B, 3, H, W) of ``unit``'s dtype: V becomes ``clip(V + value_shift, 0, 1)``, S
        ``clip(S * scale + shift, 0, 1)``, hue kept; ``rgb2hsv``'s tie rule (blue over green over red) and
        ``hsv2rgb``'s sector table.
    """
    red, green, blue = unit.unbind(1)
    value = torch.maximum(torch.maximum(red, green), blue)
    delta = value - torch.minimum(torch.minimum(red, green), blue)
    grey = delta == 0
    safe_delta = torch.where(grey, 1.0, delta)
    saturation = torch.where(grey, 0.0, delta / torch.where(grey, 1.0, value))
    sector = torch.where(
        blue == value,
        4.0 + (red - green) / safe_delta,
        torch.where(green == value, 2.0 + (blue - red) / safe_delta, (green - blue) / safe_delta),
    )
    hue = torch.where(grey, 0.0, torch.remainder(sector / 6.0, 1.0))
    value = torch.clamp(value + value_shift, 0.0, 1.0)
    saturation = torch.clamp(saturation * saturation_scale + saturation_shift, 0.0, 1.0)
    hue_sector = torch.floor(hue * 6.0)
    fraction = hue * 6.0 - hue_sector
    p = value * (1.0 - saturation)
    q = value * (1.0 - fraction * saturation)
    t = value * (1.0 - (1.0 - fraction) * saturation)
    index = torch.remainder(hue_sector.to(torch.int64), 6)
    table = torch.stack(
        [
            torch.stack([value, t, p]),
            torch.stack([q, value, p]),
            torch.stack([p, value, t]),
            torch.stack([p, q, value]),
            torch.stack([t, p, value]),
            torch.stack([value, p, q]),
        ]
    )
    return torch.gather(table, 0, index.expand(1, 3, *index.shape)).squeeze(0).transpose(0, 1)


def _hsv_corruption(images: Tensor, value_shift: Tensor, scale: Tensor, shift: Tensor) -> Tensor:
    unit = unit_values(images, value_shift.dtype)
    adjusted = adjust_hsv(unit, value_shift.view(-1, 1, 1), scale.view(-1, 1, 1), shift.view(-1, 1, 1))
    return unit_float32(torch.clamp(adjusted, 0, 1) * 255)


def brightness(images: Tensor, severities: Tensor, random: SampleRandom, dtype: torch.dtype = torch.float64) -> Tensor:
    """Add the severity's shift (0.1..0.5) to the HSV value; float32 (B, 3, H, W) in [0, 1]."""
    shift = per_sample_parameters("brightness", severities).to(images.device, dtype)
    return _hsv_corruption(images, shift, torch.ones_like(shift), torch.zeros_like(shift))


def saturate(images: Tensor, severities: Tensor, random: SampleRandom, dtype: torch.dtype = torch.float64) -> Tensor:
    """Scale the HSV saturation by the severity's factor (0.3..20) and add its offset (0..0.2)."""
    parameters = per_sample_parameters("saturate", severities).to(images.device, dtype)
    return _hsv_corruption(images, torch.zeros_like(parameters[:, 0]), parameters[:, 0], parameters[:, 1])


def contrast(images: Tensor, severities: Tensor, random: SampleRandom, dtype: torch.dtype = torch.float64) -> Tensor:
    """``clip((x - mean) * factor + mean, 0, 1)`` with each image's per-channel mean, factor 0.4..0.05."""
    factor = per_sample_parameters("contrast", severities).to(images.device, dtype).view(-1, 1, 1, 1)
    unit = unit_values(images, dtype)
    means = unit.mean(dim=(2, 3), keepdim=True)
    return unit_float32(torch.clamp((unit - means) * factor + means, 0, 1) * 255)


def pixelate(images: Tensor, severities: Tensor, random: SampleRandom, dtype: torch.dtype = torch.float64) -> Tensor:
    """Pillow BOX resize to ``int(side * factor)`` (factor 0.6..0.25) and back, bytes equal to Pillow's.

    Each sample has its own reduced size; both resizes run on the whole batch at once
    (:func:`._resample.resample_batch`).
    """
    factors = per_sample_parameters("pixelate", severities).tolist()
    height, width = images.shape[-2:]
    batch = len(factors)
    reduced = np.array([(int(height * factor), int(width * factor)) for factor in factors], dtype=np.int64)
    whole = np.tile(np.array([0, 0, width, height], dtype=np.int64), (batch, 1))
    levels = byte_levels(images, torch.float32).to(torch.uint8).permute(0, 2, 3, 1)
    small = resample_batch(levels, whole, reduced, tuple(reduced.max(axis=0)), "box")
    reduced_boxes = np.concatenate([np.zeros_like(reduced), reduced[:, ::-1]], axis=1)
    full = np.tile(np.array([height, width], dtype=np.int64), (batch, 1))
    output = resample_batch(small, reduced_boxes, full, (height, width), "box")
    return output.permute(0, 3, 1, 2).to(torch.float32) / 255


def jpeg(images: Tensor, severities: Tensor, random: SampleRandom, dtype: torch.dtype = torch.float64) -> Tensor:
    """JPEG round trip at quality ``round(table(severity))`` (85..7, rounded half to even like Python's
    ``round``), all samples in one :func:`ccc.render_torch.jpeg.jpeg_round_trip` call."""
    qualities = torch.round(per_sample_parameters("jpeg", severities)).to(images.device, torch.int32, non_blocking=True)
    levels = byte_levels(images, torch.float32).to(torch.uint8)
    return jpeg_round_trip(levels, qualities).to(torch.float32) / 255


TORCH_CORRUPTIONS: dict[str, Callable[[Tensor, Tensor, SampleRandom, torch.dtype], Tensor]] = {
    "brightness": brightness,
    "contrast": contrast,
    "saturate": saturate,
    "pixelate": pixelate,
    "jpeg": jpeg,
}
"""The digital corruptions of this module by registered name (``elastic`` is in ``weather``'s branch)."""
