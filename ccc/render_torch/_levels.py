"""Byte levels in and out of a torch corruption: the one owner of the conversions every family needs.

The pipeline hands a corruption float32 images holding byte levels ``k / 255`` and truncates what it
returns with :func:`truncate_to_levels` (``floor(clamp(x · 255, 0, 255))``, the reference's
``np.uint8``). The CPU path computes on the exact bytes and truncates its float64 result, so:

- :func:`byte_levels` / :func:`unit_values` recover the CPU's exact inputs (``x · 255`` alone is off
  by a few 1e-6 and would flip truncations);
- :func:`unit_float32` hands a pre-truncation result (float64, or float32 in the float32 mode) back as
  float32 such that the pipeline's float32 truncation gives the same byte as the result's own truncation.
"""

from __future__ import annotations

import torch
from torch import Tensor


def byte_levels(images: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
    """The byte levels 0..255 of ``images`` (float32, any shape, values ``k / 255``) as integers of ``dtype``.

    Rounded in float32: ``float32(k / 255) · 255`` is within 1e-4 of ``k``, so the rounding is exact and
    no float64 temporary is needed; the integers are then exact in any float dtype.
    """
    return torch.round(images * 255.0).to(dtype)


def unit_values(images: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
    """``images`` (float32, any shape, values ``k / 255``) as the CPU path's ``uint8 / 255.0`` in ``dtype``
    (values in [0, 1]): in float64 bit-equal to numpy's ``k / 255.0``; in float32 the correctly rounded
    ``k / 255``, bit-equal to ``float32(k / 255.0)`` (one IEEE division either way)."""
    return byte_levels(images, dtype) / 255.0


def unit_float32(levels: Tensor) -> Tensor:
    """Pre-truncation values in grey levels (float64 or float32, any shape, any range) → float32 values / 255
    in [0, 1].

    The result ``y`` is ``float32(clamp(levels, 0, 255) / 255)``, except where the pipeline's float32
    ``floor(y · 255)`` would land on the other side of an integer than ``floor(clamp(levels, 0, 255))``
    in ``levels``' dtype (values within a float32 rounding of an integer, e.g. 204.99999999999997 or an
    exact 205 whose ``/ 255`` rounds down): there ``y`` is the middle of that level,
    ``(floor(levels) + 0.5) / 255``. So the pipeline's truncation equals the truncation of ``levels``
    everywhere (the CPU's float64 truncation when ``levels`` is the CPU's float64 value).
    """
    clamped = levels.clamp(0.0, 255.0)
    target = clamped.floor()
    unit = (clamped / 255.0).to(torch.float32)
    middle = ((target + 0.5) / 255.0).to(torch.float32)
    return torch.where((unit * 255.0).floor() == target.to(torch.float32), unit, middle)


def truncate_to_levels(images: Tensor) -> Tensor:
    """``floor(clip(x · 255, 0, 255)) / 255``: the reference's ``np.uint8`` truncation, float32 (B, 3, H, W)."""
    return torch.floor(torch.clamp(images * 255, 0, 255)) / 255
