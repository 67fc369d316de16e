"""Glass blur's copy chains (:func:`ccc.render_torch.blur.glass_sources`) resolved by one Triton kernel.

Each program takes a block of one pass's pixels. A pixel's target and link are those of the composition
(its source when it is visited and moves, itself otherwise; linked when that source was visited earlier in
the pass); a linked pixel then follows its chain, reading the next pixel's offsets, until it reaches a pixel
whose link is off, and takes that pixel's target: the fixed point of the composition's pointer jumping
(chains are acyclic, so the loop ends; a block runs as many steps as its longest chain, usually a few).
Integer arithmetic: the same sources on every device.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from . import launch

__all__ = ["glass_sources"]

_BLOCK = 256


@triton.jit
def _visited(rows, columns, margin, height, width):
    return (rows > margin) & (rows <= height - margin) & (columns > margin) & (columns <= width - margin)


@triton.jit
def _target_and_link(offsets, rows, columns, margin, moves, height, width, mask):
    pixel = rows * width + columns
    dx = tl.load(offsets + 2 * pixel, mask=mask, other=0)
    dy = tl.load(offsets + 2 * pixel + 1, mask=mask, other=0)
    moving = _visited(rows, columns, margin, height, width) & moves
    source_rows = rows + dy
    source_columns = columns + dx
    target = tl.where(moving, source_rows * width + source_columns, pixel)
    earlier = (dy > 0) | ((dy == 0) & (dx > 0))
    link = moving & earlier & _visited(source_rows, source_columns, margin, height, width)
    return target, link


@triton.jit
def _glass_sources_kernel(offsets, margins, active, sources, height, width, BLOCK: tl.constexpr):
    chain_pass = tl.program_id(0).to(tl.int64)
    pixels = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = pixels < height * width
    plane_offsets = offsets + chain_pass * height * width * 2
    margin = tl.load(margins + chain_pass)
    moves = tl.load(active + chain_pass) != 0
    target, link = _target_and_link(
        plane_offsets, pixels // width, pixels % width, margin, moves, height, width, inside
    )
    link = link & inside
    while tl.max(link.to(tl.int32), axis=0) > 0:
        next_target, next_link = _target_and_link(
            plane_offsets, target // width, target % width, margin, moves, height, width, link
        )
        target = tl.where(link, next_target, target)
        link = link & next_link
    tl.store(sources + chain_pass * height * width + pixels, target, mask=inside)


def glass_sources(offsets: Tensor, margins: Tensor, active: Tensor) -> Tensor:
    """The kernel's launch: int64 ``offsets`` (P, H, W, 2) (dx, dy), int64 ``margins`` (P,), bool ``active`` (P,)
    → int64 (P, H·W), each pixel's original source."""
    passes, height, width, _ = offsets.shape
    sources = torch.empty((passes, height * width), dtype=torch.int64, device=offsets.device)
    if sources.numel() == 0:
        return sources
    grid = (passes, triton.cdiv(height * width, _BLOCK))
    launch(
        _glass_sources_kernel,
        grid,
        offsets.device,
        offsets.contiguous(),
        margins.contiguous(),
        active.to(torch.uint8),
        sources,
        height,
        width,
        BLOCK=_BLOCK,
    )
    return sources
