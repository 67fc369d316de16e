"""Pillow's 8-bit separable resampling (``Image.resize`` with BOX or BILINEAR) as integer matrices.

Pillow computes, per output pixel, filter weights in double precision (``precompute_coeffs`` in
``libImaging/Resample.c``), normalises them to sum 1, rounds them to fixed point with 22 fraction
bits, and accumulates ``in * weight`` in integers starting from ``2**21`` (rounding), shifting right
by 22 and clipping to [0, 255]; the first pass's result is stored as uint8. Pillow 13 runs the
vertical pass first when the height shrinks by more than twice as many pixels as the width
(``ImagingResampleInner``), the horizontal pass first otherwise; the order changes the bytes.
Here the same integer weights form an (out, in) matrix and each pass is one float64 matrix product:
every term and every partial sum is an integer below 2**53, so the product is exact and the result
equals Pillow's bytes on every device.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor

_PRECISION_BITS = 22


def _box(x: float) -> float:
    return 1.0 if -0.5 < x <= 0.5 else 0.0


def _triangle(x: float) -> float:
    x = abs(x)
    return 1.0 - x if x < 1.0 else 0.0


_FILTERS = {"box": (_box, 0.5), "bilinear": (_triangle, 1.0)}


@lru_cache(maxsize=256)
def _weights(in_size: int, out_size: int, kind: str) -> tuple[tuple[int, ...], ...]:
    """Pillow's fixed-point weights, row ``j`` = output pixel ``j`` over the ``in_size`` inputs."""
    function, filter_support = _FILTERS[kind]
    scale = in_size / out_size
    filter_scale = max(scale, 1.0)
    support = filter_support * filter_scale
    inverse_scale = 1.0 / filter_scale
    rows = []
    for output in range(out_size):
        center = (output + 0.5) * scale
        first = max(int(center - support + 0.5), 0)
        last = min(int(center + support + 0.5), in_size)
        weights = [function((index - center + 0.5) * inverse_scale) for index in range(first, last)]
        total = sum(weights)
        row = [0] * in_size
        for offset, weight in enumerate(weights):
            normalised = weight / total if total != 0.0 else weight
            row[first + offset] = int(normalised * (1 << _PRECISION_BITS) + 0.5)
        rows.append(tuple(row))
    return tuple(rows)


def resample_matrix(in_size: int, out_size: int, kind: str, device: torch.device) -> Tensor:
    """float64 (out_size, in_size) integer weights of Pillow's ``kind`` filter ("box" or "bilinear")."""
    return torch.tensor(_weights(in_size, out_size, kind), dtype=torch.float64, device=device)


def _pass(levels: Tensor, matrix: Tensor) -> Tensor:
    accumulated = levels @ matrix.T + float(1 << (_PRECISION_BITS - 1))
    return torch.clamp(torch.floor(accumulated / float(1 << _PRECISION_BITS)), 0, 255)


def resize_levels(levels: Tensor, height: int, width: int, kind: str) -> Tensor:
    """Pillow's ``resize((width, height), kind)`` of byte levels.

    Args:
        levels: float64 (..., H, W) tensor of integers in [0, 255] (one plane per leading index).
        height, width: output size in pixels, >= 1.
        kind: "box" or "bilinear".

    Pillow's pass order (see the module docstring) is followed.

    Returns:
        float64 (..., height, width) of integers in [0, 255], Pillow's bytes. An axis whose size is
        unchanged is not resampled (as Pillow skips it).
    """
    in_height, in_width = levels.shape[-2:]
    vertical_first = 0 < in_height - height and in_height - height > 2 * (in_width - width)
    if vertical_first:
        levels = _vertical_pass(levels, height, kind)
    if in_width != width:
        levels = _pass(levels, resample_matrix(in_width, width, kind, levels.device))
    if not vertical_first:
        levels = _vertical_pass(levels, height, kind)
    return levels


def _vertical_pass(levels: Tensor, height: int, kind: str) -> Tensor:
    in_height = levels.shape[-2]
    if in_height == height:
        return levels
    return _pass(levels.transpose(-1, -2), resample_matrix(in_height, height, kind, levels.device)).transpose(-1, -2)
