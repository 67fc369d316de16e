"""The random streams' draws (:mod:`ccc.render_torch.random`) as Triton kernels: each hashes its words in
registers and writes only the values drawn from them.

A word is splitmix64's mix of ``key + (i + 1)·γ`` (``key`` the draw's key of a sample, ``i`` the element's
index within the draw). The kernels compute it in ``tl.uint64``, whose additions and multiplications wrap
modulo 2**64 and whose right shifts are logical: the bits of the ATen composition, which emulates them on
int64 (two's-complement wrap-around, arithmetic shifts masked). The conversions to floats are exact
(integers below 2**24 or exactly 2**24, scaled by powers of two) except the Box–Muller angle's one product,
rounded once as the composition rounds it. Every program handles a block of one sample's elements, its
draws' keys read from the (small, cached) key table.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .._splitmix import GOLDEN, MIX_1, MIX_2, POISSON_BITS, UNIFORM_BITS, UNIFORM_SCALE
from . import launch
from ._types import float_type

__all__ = ["box_muller_uniforms", "hashed_uniform_sequence", "hashed_uniforms", "poisson_inversion"]

_BLOCK = 1024

_WORD_BITS = 64
_GOLDEN = tl.constexpr(GOLDEN % (1 << _WORD_BITS))
_MIX_1 = tl.constexpr(MIX_1 % (1 << _WORD_BITS))
_MIX_2 = tl.constexpr(MIX_2 % (1 << _WORD_BITS))
_UNIFORM_SHIFT = tl.constexpr(_WORD_BITS - UNIFORM_BITS)
_UNIFORM_MASK = tl.constexpr((1 << UNIFORM_BITS) - 1)
_UNIFORM_SCALE = tl.constexpr(UNIFORM_SCALE)
_ANGLE_SHIFT = tl.constexpr(_WORD_BITS - 2 * UNIFORM_BITS)
_POISSON_BITS = tl.constexpr(POISSON_BITS)
_POISSON_SHIFT = tl.constexpr(_WORD_BITS - POISSON_BITS)


@triton.jit
def _mix(words, FINAL: tl.constexpr):
    """splitmix64's finaliser of uint64 ``words`` (wrapping); without ``FINAL`` its last xor-shift is skipped,
    which leaves the top 31 bits as they are (what the uniforms' 24 bits need)."""
    words = (words ^ (words >> 30)) * _MIX_1
    words = (words ^ (words >> 27)) * _MIX_2
    if FINAL:
        words = words ^ (words >> 31)
    return words


@triton.jit
def _words(key, elements, FINAL: tl.constexpr):
    """The uint64 words of ``elements`` (int32 indices within their draw, >= 0) of the draws of int64 ``key``s."""
    return _mix(key.to(tl.uint64, bitcast=True) + (elements.to(tl.uint64) + 1) * _GOLDEN, FINAL)


@triton.jit
def _uniform_values(words, DTYPE: tl.constexpr):
    """``k / 2**24`` in ``DTYPE`` for ``k`` the words' top 24 bits (exact: ``k`` and the scale are exact)."""
    return (words >> _UNIFORM_SHIFT).to(tl.int32).to(DTYPE) * _UNIFORM_SCALE


@triton.jit
def _block_of_sample(blocks, BLOCK: tl.constexpr):
    """The program's sample (int64 scalar) and its block of element indices (int32), ``blocks`` per sample."""
    program = tl.program_id(0)
    return (program // blocks).to(tl.int64), (program % blocks) * BLOCK + tl.arange(0, BLOCK)


@triton.jit
def _uniform_draws_kernel(
    keys,
    output,
    count,
    elements_per_sample,
    blocks,
    stride_sample,
    stride_draw,
    DTYPE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    sample, elements = _block_of_sample(blocks, BLOCK)
    inside = elements < elements_per_sample
    draw = elements // count
    key = tl.load(keys + sample * stride_sample + draw * stride_draw, mask=inside, other=0)
    values = _uniform_values(_words(key, elements - draw * count, False), DTYPE)
    tl.store(output + sample * elements_per_sample + elements, values, mask=inside)


@triton.jit
def _uniform_sequence_kernel(
    keys,
    draw_table,
    offset_table,
    output,
    elements_per_sample,
    blocks,
    stride_sample,
    stride_draw,
    DTYPE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    sample, elements = _block_of_sample(blocks, BLOCK)
    inside = elements < elements_per_sample
    draw = tl.load(draw_table + elements, mask=inside, other=0)
    offsets = tl.load(offset_table + elements, mask=inside, other=0).to(tl.uint64, bitcast=True)
    key = tl.load(keys + sample * stride_sample + draw * stride_draw, mask=inside, other=0)
    values = _uniform_values(_mix(key.to(tl.uint64, bitcast=True) + offsets, False), DTYPE)
    tl.store(output + sample * elements_per_sample + elements, values, mask=inside)


@triton.jit
def _box_muller_kernel(
    keys,
    radius_output,
    angle_output,
    count,
    blocks,
    stride_sample,
    ANGLE_SCALE: tl.constexpr,
    DTYPE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    sample, elements = _block_of_sample(blocks, BLOCK)
    inside = elements < count
    words = _words(tl.load(keys + sample * stride_sample), elements, True)
    # (k + 1) / 2**24 in (0, 1]: k + 1 <= 2**24 and the scale are exact
    radius = ((words >> _UNIFORM_SHIFT) + 1).to(tl.int32).to(DTYPE) * _UNIFORM_SCALE
    # the angle's 24 bits, below the radius's, times 2π / 2**24 rounded to DTYPE: one rounding, the composition's
    angle = ((words >> _ANGLE_SHIFT) & _UNIFORM_MASK).to(tl.int32).to(DTYPE) * tl.full((), ANGLE_SCALE, DTYPE)
    tl.store(radius_output + sample * count + elements, radius, mask=inside)
    tl.store(angle_output + sample * count + elements, angle, mask=inside)


@triton.jit
def _poisson_kernel(
    keys,
    index,
    table_keys,
    starts,
    lengths,
    output,
    count,
    blocks,
    stride_sample,
    width,
    STEPS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    sample, elements = _block_of_sample(blocks, BLOCK)
    inside = elements < count
    words = _words(tl.load(keys + sample * stride_sample), elements, True)
    row = sample * width + tl.load(index + sample * count + elements, mask=inside, other=0).to(tl.int64)
    value = (row << _POISSON_BITS) + (words >> _POISSON_SHIFT).to(tl.int64)
    start = tl.load(starts + row, mask=inside, other=0)
    length = tl.load(lengths + row, mask=inside, other=1)
    # the left insertion point in the row's own table: the keys after it are at or above (row + 1) · 2**40 >
    # value, those before it at most row · 2**40 <= value (a uniform of 0 then counts 0, as the composition's
    # clamp gives)
    low = start
    size = length
    for _ in range(STEPS):  # lower bound, the range at least halved per step
        half = size >> 1
        below = (size > 0) & (tl.load(table_keys + low + half, mask=inside & (size > 0), other=0) < value)
        low = tl.where(below, low + half + 1, low)
        size = tl.where(below, size - half - 1, half)
    # counts below 2**24 are exact in float32
    tl.store(output + sample * count + elements, tl.minimum(low - start, length - 1).to(tl.float32), mask=inside)


def _grid(samples: int, elements_per_sample: int) -> tuple[tuple[int], int]:
    """The launch grid (one program per block of one sample's elements) and the blocks per sample.

    Raises:
        ValueError: ``elements_per_sample`` past the int32 element indices, one line.
    """
    if elements_per_sample >= 1 << 31:
        raise ValueError(f"{elements_per_sample} elements per sample exceed the kernels' int32 element indices")
    blocks = triton.cdiv(elements_per_sample, _BLOCK)
    return (samples * blocks,), blocks


def hashed_uniforms(keys: Tensor, count: int, dtype: torch.dtype) -> Tensor:
    """The kernel's launch for :func:`ccc.render_torch.random.hashed_uniforms`: int64 ``keys`` (B, D) (any
    strides) → ``dtype`` (float32 or float64) (B, D, ``count``) uniforms ``k / 2**24``."""
    batch, draws = keys.shape
    output = torch.empty((batch, draws, count), dtype=dtype, device=keys.device)
    if output.numel() == 0:
        return output
    grid, blocks = _grid(batch, draws * count)
    launch(
        _uniform_draws_kernel,
        grid,
        keys.device,
        keys,
        output,
        count,
        draws * count,
        blocks,
        *keys.stride(),
        DTYPE=float_type(dtype),
        BLOCK=_BLOCK,
    )
    return output


def hashed_uniform_sequence(keys: Tensor, draw: Tensor, offsets: Tensor, dtype: torch.dtype) -> Tensor:
    """The kernel's launch for :func:`ccc.render_torch.random.hashed_uniform_sequence`: int64 ``keys`` (B, D),
    int64 ``draw`` (N,) (each element's column of ``keys``) and ``offsets`` (N,) (its hash offset) → ``dtype``
    (B, N) uniforms."""
    batch, elements = len(keys), len(draw)
    output = torch.empty((batch, elements), dtype=dtype, device=keys.device)
    if output.numel() == 0:
        return output
    grid, blocks = _grid(batch, elements)
    launch(
        _uniform_sequence_kernel,
        grid,
        keys.device,
        keys,
        draw.contiguous(),
        offsets.contiguous(),
        output,
        elements,
        blocks,
        *keys.stride(),
        DTYPE=float_type(dtype),
        BLOCK=_BLOCK,
    )
    return output


def box_muller_uniforms(keys: Tensor, count: int, dtype: torch.dtype, angle_scale: float) -> tuple[Tensor, Tensor]:
    """The kernel's launch for :func:`ccc.render_torch.random.box_muller_uniforms`: int64 ``keys`` (B,) →
    ``dtype`` (B, ``count``) radius uniforms in (0, 1] and angles ``k · angle_scale`` (radians)."""
    batch = len(keys)
    radius = torch.empty((batch, count), dtype=dtype, device=keys.device)
    angle = torch.empty_like(radius)
    if radius.numel() == 0:
        return radius, angle
    grid, blocks = _grid(batch, count)
    launch(
        _box_muller_kernel,
        grid,
        keys.device,
        keys,
        radius,
        angle,
        count,
        blocks,
        keys.stride(0),
        ANGLE_SCALE=angle_scale,
        DTYPE=float_type(dtype),
        BLOCK=_BLOCK,
    )
    return radius, angle


def poisson_inversion(
    keys: Tensor, index: Tensor, table_keys: Tensor, starts: Tensor, lengths: Tensor, width: int, longest: int
) -> Tensor:
    """The kernel's launch for :func:`ccc.render_torch.random.poisson_inversion`: int64 ``keys`` (B,), integer
    ``index`` (B, ...) into each sample's ``width`` tables, the tables' sorted int64 keys (T,), int64 ``starts``
    and ``lengths`` (B·width,), none longer than ``longest`` entries → float32 counts shaped as ``index``."""
    batch = len(keys)
    output = torch.empty(index.shape, dtype=torch.float32, device=keys.device)
    if output.numel() == 0:
        return output
    count = output[0].numel()
    grid, blocks = _grid(batch, count)
    launch(
        _poisson_kernel,
        grid,
        keys.device,
        keys,
        index.contiguous(),
        table_keys,
        starts,
        lengths,
        output,
        count,
        blocks,
        keys.stride(0),
        width,
        # a search range is one table: fewer than 2**STEPS entries
        STEPS=longest.bit_length(),
        BLOCK=_BLOCK,
    )
    return output
