"""Pillow's 8-bit separable resampling (``Image.resize`` with BOX or BILINEAR), batched, in exact integers.

Pillow computes, per output pixel, filter weights in double precision (``precompute_coeffs`` in
``libImaging/Resample.c``), normalises them to sum 1, rounds them to fixed point with 22 fraction
bits, and accumulates ``in * weight`` in integers starting from ``2**21`` (rounding), shifting right
by 22 and clipping to [0, 255]; the first pass's result is stored as uint8. Pillow 13 runs the
vertical pass first when the height shrinks by more than twice as many pixels as the width
(``ImagingResampleInner``), the horizontal pass first otherwise; the order changes the bytes.

Here every sample of a batch has its own input box and output size. The host builds, per axis and
distinct (input length, output length), tap tables with numpy in Pillow's own double-precision
operations (the weights' sum accumulated tap by tap, as the C loop does): for each output pixel the
index of each tap and its integer weight (a few taps, zero-weighted past a pixel's own count). The
tables of a pair of lengths are cached (ImageNet's sizes and crop sizes repeat), and a batch's tables
are gathered from them, so the host work per batch is a few vectorised gathers. The device then
gathers and accumulates in int32: every weight is >= 0 and the weights of a pixel sum to about
``2**22``, so no sum exceeds ``255 · 2**22 + 2**21 < 2**31`` and the result is Pillow's bytes on every
device, whatever the order of the additions. The launches per pass grow with the widest filter
(taps), never with the batch.
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from ._triton import fuses
from ._upload import BatchUpload

__all__ = ["prepare_resample", "resample_batch"]

_PRECISION_BITS = 22
_FILTER_SUPPORT = {"box": 0.5, "bilinear": 1.0}


def _filter(kind: str, offsets: NDArray[np.float64]) -> NDArray[np.float64]:
    """Pillow's filter function at ``offsets`` (input pixels from the output pixel's centre)."""
    if kind == "box":
        return np.where((offsets > -0.5) & (offsets <= 0.5), 1.0, 0.0)
    distance = np.abs(offsets)
    return np.where(distance < 1.0, 1.0 - distance, 0.0)


def _axis_taps(
    in_sizes: NDArray[np.int64], out_sizes: NDArray[np.int64], out_length: int, kind: str
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Pillow's taps along one axis for N samples.

    Args:
        in_sizes: (N,) input lengths in pixels, >= 1.
        out_sizes: (N,) output lengths in pixels, 1..``out_length``.
        out_length: the padded output length; positions past a sample's own size get zero weights.
        kind: "box" or "bilinear".

    Returns:
        ``index`` (N, out_length, T) int64 in [0, in_size) and ``weight`` (N, out_length, T) int64, the
        fixed-point weights (22 fraction bits), T the most taps of any output pixel (>= 1).
    """
    scale = in_sizes.astype(np.float64) / out_sizes.astype(np.float64)
    filter_scale = np.maximum(scale, 1.0)
    support = (_FILTER_SUPPORT[kind] * filter_scale)[:, None]
    inverse_scale = (1.0 / filter_scale)[:, None, None]
    center = (np.arange(out_length) + 0.5)[None, :] * scale[:, None]
    first = np.maximum(np.trunc(center - support + 0.5), 0).astype(np.int64)
    last = np.minimum(np.trunc(center + support + 0.5), in_sizes[:, None]).astype(np.int64)
    inside = np.arange(out_length)[None, :] < out_sizes[:, None]
    count = np.where(inside, last - first, 0)
    taps = np.arange(max(int(count.max()), 1))
    index = first[..., None] + taps
    values = _filter(kind, (index - center[..., None] + 0.5) * inverse_scale)
    values = np.where(taps < count[..., None], values, 0.0)
    total = np.zeros(count.shape)
    for tap in taps:  # Pillow's order of additions, tap by tap
        total = total + values[..., tap]
    normalised = values / np.where(total != 0.0, total, 1.0)[..., None]
    weight = np.trunc(normalised * float(1 << _PRECISION_BITS) + 0.5).astype(np.int64)
    return np.minimum(index, in_sizes[:, None, None] - 1), weight


@functools.lru_cache(maxsize=8192)
def _length_taps(in_size: int, out_size: int, out_length: int, kind: str, flip: bool, taps: int) -> NDArray[np.int32]:
    """One sample's :func:`_axis_taps` tables, cached: ``index`` and ``weight`` stacked, int32
    (2, out_length, ``taps``) (read-only; every index and weight fits), padded with zero-weighted taps
    whose index continues the pixel's first tap (clipped to the input) as :func:`_axis_taps` pads, the
    output pixels mirrored where ``flip``. ``taps`` 0: the sample's own most taps."""
    if taps == 0:
        index, weight = _axis_taps(np.array([in_size]), np.array([out_size]), out_length, kind)
        tables = np.stack([index[0], weight[0]]).astype(np.int32)
    else:
        own = _length_taps(in_size, out_size, out_length, kind, False, 0)
        tables = np.zeros((2, out_length, taps), dtype=np.int32)
        tables[0] = np.minimum(own[0, :, :1] + np.arange(taps), in_size - 1)
        tables[1, :, : own.shape[2]] = own[1]
        if flip:
            tables[:, :out_size] = tables[:, out_size - 1 :: -1].copy()
    tables.flags.writeable = False
    return tables


def _batch_taps(
    in_sizes: NDArray[np.int64],
    out_sizes: NDArray[np.int64],
    out_length: int,
    kind: str,
    flips: NDArray[np.bool_],
    offsets: NDArray[np.int64],
) -> tuple[NDArray[np.int32], NDArray[np.int32]]:
    """:func:`_axis_taps`'s tables of N samples, equal value for value (int32), mirrored where ``flips`` and
    the indices shifted by ``offsets`` (N,; the shifted indices below 2**31), copied from the cached tables
    of the distinct (input length, output length, flip): one cache look-up per distinct triple and one copy
    of a table per sample (int32: half the fresh memory that int64 tables first touch per batch)."""
    keys, inverse = np.unique((in_sizes * (1 << 32) + out_sizes) * 2 + flips, return_inverse=True)
    triples = [(key >> 33, (key >> 1) & 0xFFFFFFFF, bool(key & 1)) for key in keys.tolist()]
    taps = max(_length_taps(size, out, out_length, kind, False, 0).shape[2] for size, out, _ in triples)
    tables = [_length_taps(size, out, out_length, kind, flip, taps) for size, out, flip in triples]
    both = np.empty((2, len(in_sizes), out_length, taps), dtype=np.int32)
    for sample, distinct in enumerate(inverse.tolist()):  # one copy each, cheaper than stacking then indexing
        both[:, sample] = tables[distinct]
    index, weight = both
    index += offsets.astype(np.int32)[:, None, None]
    return index, weight


def _vertical_first(in_sizes: NDArray[np.int64], out_sizes: NDArray[np.int64]) -> NDArray[np.bool_]:
    """Pillow 13's pass order per sample: sizes (N, 2) as (height, width) in pixels."""
    shrink = in_sizes - out_sizes
    return (shrink[:, 0] > 0) & (shrink[:, 0] > 2 * shrink[:, 1])


def multiplies_while_casting(device: torch.device) -> bool:
    """Whether :func:`_composed_pass` multiplies the gathered uint8 levels by the int32 weights in one mixed-dtype
    operation on ``device`` (a GPU: each value is cast as it is read, no int32 copy is written), rather than
    casting them to int32 first and multiplying in place (the CPU, whose mixed-dtype loops are not
    vectorised: 1.7 times slower there). The products are the same integers either way."""
    return device.type != "cpu"


def _composed_pass(levels: Tensor, index: Tensor, weight: Tensor) -> Tensor:
    """:func:`resample_pass` in ATen operations: one gather of whole rows for every tap, column and channel,
    the products (:func:`multiplies_while_casting` says how they are made) summed in int32."""
    batch, _, *rest = levels.shape
    rows = levels.reshape(-1, levels[0, 0].numel()).index_select(0, index.view(-1)).view(*index.shape, -1)
    if multiplies_while_casting(levels.device):
        products = rows * weight[..., None]
    else:
        products = rows.to(torch.int32).mul_(weight[..., None])
    total = products.sum(dim=2, dtype=torch.int32).add_(1 << (_PRECISION_BITS - 1))
    total.bitwise_right_shift_(_PRECISION_BITS).clamp_(0, 255)
    return total.to(torch.uint8).view(batch, index.shape[1], *rest)


@torch.library.custom_op("ccc::resample_pass", mutates_args=())
def resample_pass(levels: Tensor, index: Tensor, weight: Tensor) -> Tensor:
    """One resampling pass of uint8 ``levels`` (B, L, M, C) along its axis 1.

    ``index`` (B, O, T) int64 holds row numbers of ``levels`` viewed as (B·L, M·C) and ``weight``
    (B, O, T) int32 their weights. Returns uint8 (B, O, M, C), each value
    ``clip((sum(level · weight) + 2**21) >> 22, 0, 255)`` accumulated in int32: in ATen operations
    (:func:`_composed_pass`), or on CUDA in one Triton kernel that reads ``levels`` in place
    (:mod:`._triton.resample`, where :func:`~._triton.fuses`). The same integers either way.
    """
    return _composed_pass(levels, index, weight)


@resample_pass.register_kernel("cuda")
def _resample_pass_cuda(levels: Tensor, index: Tensor, weight: Tensor) -> Tensor:
    if not fuses(levels.device):
        return _composed_pass(levels, index, weight)
    from ._triton.resample import resample_pass as kernel

    return kernel(levels, index, weight, _PRECISION_BITS)


@resample_pass.register_fake
def _resample_pass_shape(levels: Tensor, index: Tensor, weight: Tensor) -> Tensor:
    return levels.new_empty((levels.shape[0], index.shape[1], *levels.shape[2:]))


def _tables(
    boxes: NDArray[np.int64],
    out_sizes: NDArray[np.int64],
    out_shape: tuple[int, int],
    kind: str,
    flips: NDArray[np.bool_],
    plane: tuple[int, int],
) -> tuple[NDArray[np.int32], NDArray[np.int32], NDArray[np.int32], NDArray[np.int32]]:
    """Host tap tables of both axes (rows' index and weight, columns' index and weight, each (N, O, T)
    int32), the columns mirrored where ``flips``; sample k's indices are offset by its box and by
    ``k · plane`` (``plane``: the input planes' (height, width) in pixels), row numbers in the (N·L, M·C)
    view that :func:`resample_pass` gathers from.

    Raises:
        ValueError: N planes of more than 2**31 - 1 rows or columns in all (indices past int32).
    """
    if len(boxes) * max(plane) >= 1 << 31:
        raise ValueError(f"{len(boxes)} planes of {plane[0]}x{plane[1]} pixels exceed the int32 tap indices")
    firsts = np.arange(len(boxes))
    no_flips = np.zeros(len(boxes), dtype=bool)
    row_offsets, column_offsets = boxes[:, 1] + firsts * plane[0], boxes[:, 0] + firsts * plane[1]
    rows = _batch_taps(boxes[:, 3] - boxes[:, 1], out_sizes[:, 0], out_shape[0], kind, no_flips, row_offsets)
    columns = _batch_taps(boxes[:, 2] - boxes[:, 0], out_sizes[:, 1], out_shape[1], kind, flips, column_offsets)
    return (*rows, *columns)


def prepare_resample(
    boxes: NDArray[np.int64],
    out_sizes: NDArray[np.int64],
    out_shape: tuple[int, int],
    kind: str,
    flips: NDArray[np.bool_] | None,
    plane: tuple[int, int],
    upload: BatchUpload,
) -> Callable[[Tensor], Tensor]:
    """The host half of :func:`resample_batch`: the tap tables of both pass orders staged in ``upload``.

    Args:
        boxes, out_sizes, out_shape, kind, flips: as in :func:`resample_batch`.
        plane: (height, width) in pixels of the planes the step will get.
        upload: the batch's upload; the step reads its tables once it is sent.

    Returns:
        The device half: uint8 (B, *plane, C) levels → :func:`resample_batch`'s result.
    """
    boxes = np.asarray(boxes, dtype=np.int64).reshape(-1, 4)
    out_sizes = np.asarray(out_sizes, dtype=np.int64).reshape(-1, 2)
    flips = np.zeros(len(boxes), dtype=bool) if flips is None else np.asarray(flips, dtype=bool)
    in_sizes = np.stack([boxes[:, 3] - boxes[:, 1], boxes[:, 2] - boxes[:, 0]], axis=1)
    vertical_first = _vertical_first(in_sizes, out_sizes)
    orders = []
    for order in (False, True):
        members = np.flatnonzero(vertical_first == order)
        if len(members) > 0:
            # L is the height for the rows pass and the width for the columns pass (run on the transposed
            # planes), in either order
            tables = _tables(boxes[members], out_sizes[members], out_shape, kind, flips[members], plane)
            orders.append((order, len(members) == len(boxes), upload.tables(*tables, members)))

    def step(levels: Tensor) -> Tensor:
        output = None
        for order, whole, staged in orders:
            rows_index, rows_weight, columns_index, columns_weight, positions = staged.tensors()
            rows, columns = (rows_index, rows_weight.to(torch.int32)), (columns_index, columns_weight.to(torch.int32))
            group = levels if whole else levels.index_select(0, positions)
            if order:
                group = resample_pass(resample_pass(group, *rows).transpose(1, 2), *columns).transpose(1, 2)
            else:
                group = resample_pass(resample_pass(group.transpose(1, 2), *columns).transpose(1, 2), *rows)
            if whole:
                return group.contiguous()
            if output is None:
                output = torch.zeros((len(boxes), *out_shape, levels.shape[3]), dtype=torch.uint8, device=levels.device)
            output.index_copy_(0, positions, group)
        return output

    return step


def resample_batch(
    levels: Tensor,
    boxes: NDArray[np.int64],
    out_sizes: NDArray[np.int64],
    out_shape: tuple[int, int],
    kind: str,
    flips: NDArray[np.bool_] | None = None,
) -> Tensor:
    """Pillow's ``image.crop(box).resize((width, height), kind)`` of every sample, optionally mirrored.

    Args:
        levels: uint8 (B, H, W, C) byte levels, channels last, on any device; a sample may use only
            part of its plane (padding).
        boxes: (B, 4) int (left, top, right, bottom) in pixels, right and bottom exclusive, inside H×W.
        out_sizes: (B, 2) int (height, width) of each sample's result, >= 1 and within ``out_shape``.
        out_shape: (height, width) of the returned planes; a sample's pixels past its own size are 0.
        kind: "box" or "bilinear".
        flips: (B,) bool, mirror the sample's result left to right (None: no sample).

    Returns:
        uint8 (B, out_shape[0], out_shape[1], C) on ``levels.device``: Pillow's bytes. An axis whose
        size is unchanged gives single taps of weight ``2**22`` (a copy, as Pillow skips that pass).
        The tables of both pass orders travel in one copy (:func:`prepare_resample`, then its step); each
        order present in the batch (at most two) runs a fixed number of operations, whatever the batch
        size and the filters' widths.
    """
    upload = BatchUpload(levels.device)
    step = prepare_resample(boxes, out_sizes, out_shape, kind, flips, tuple(levels.shape[1:3]), upload)
    upload.send()
    return step(levels)
