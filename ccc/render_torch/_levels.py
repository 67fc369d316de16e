"""Byte levels in and out of a torch corruption: the one owner of the conversions every family needs.

The pipeline hands a corruption float32 images holding byte levels ``k / 255`` and truncates what it
returns with :func:`truncate_to_levels` (``floor(clamp(x · 255, 0, 255))``, the reference's
``np.uint8``). The CPU path computes on the exact bytes and truncates its float64 result, so:

- :func:`byte_levels` / :func:`unit_float64` recover the CPU's exact inputs (``x · 255`` alone is off
  by a few 1e-6 and would flip truncations);
- :func:`unit_float32` hands a float64 result back as float32 such that the pipeline's float32
  truncation gives the CPU's byte.
"""

from __future__ import annotations

import torch
from torch import Tensor


def byte_levels(images: Tensor) -> Tensor:
    """The byte levels 0..255 of ``images`` (float, any shape, values ``k / 255``) as float64 integers."""
    return torch.round(images.to(torch.float64) * 255.0)


def unit_float64(images: Tensor) -> Tensor:
    """``images`` (float, any shape, values ``k / 255``) as the CPU path's ``uint8 / 255.0``: float64 in [0, 1],
    bit-equal to numpy's ``k / 255.0``."""
    return byte_levels(images) / 255.0


def unit_float32(levels: Tensor) -> Tensor:
    """float64 pre-truncation values in grey levels (any shape, any range) → float32 values / 255 in [0, 1].

    The result ``y`` is ``float32(clamp(levels, 0, 255) / 255)``, except where the pipeline's float32
    ``floor(y · 255)`` would land on the other side of an integer than the float64
    ``floor(clamp(levels, 0, 255))`` (values within a float32 rounding of an integer, e.g.
    204.99999999999997 or an exact 205 whose ``/ 255`` rounds down): there ``y`` is the middle of the
    CPU's level, ``(floor(levels) + 0.5) / 255``. So the pipeline's truncation equals the CPU's float64
    truncation everywhere.
    """
    clamped = levels.clamp(0.0, 255.0)
    target = clamped.floor()
    unit = (clamped / 255.0).to(torch.float32)
    middle = ((target + 0.5) / 255.0).to(torch.float32)
    return torch.where((unit * 255.0).floor() == target.to(torch.float32), unit, middle)


def truncate_to_levels(images: Tensor) -> Tensor:
    """``floor(clip(x · 255, 0, 255)) / 255``: the reference's ``np.uint8`` truncation, float32 (B, 3, H, W)."""
    return torch.floor(torch.clamp(images * 255, 0, 255)) / 255
