"""Counter-based per-sample random numbers for the torch backend.

:class:`SampleRandom` gives every sample of a batch its own random stream, a pure function of
``(seed, stage, draw number, element index)``: a splitmix64 sequence whose key is the splitmix64 mix
of the sample's seed, the stage and the draw number. Each call (``uniform``, ``normal``,
``integers``, ``poisson``) consumes one draw number for every sample; the element index is the flat
position inside the per-sample shape. No generator state exists, so a sample's values never depend
on the batch size, its position in the batch, the other samples or the device.

The hash runs on int64 tensors (two's-complement wrap-around, logical right shifts by masking), so
the 64-bit words are bit-identical on every device. The conversions to floats:

- ``uniform``: the top 24 bits as ``k / 2**24`` (float32, exact on every device);
- ``normal``: Box–Muller on two 24-bit uniforms taken from the same word, in the streams' working
  dtype (float64 by default, then rounded to float32: ``log``/``cos`` may differ by an ulp between
  devices; after rounding to float32 the values agree except for rare last-bit differences; float32
  in the renderer's float32 mode, a few float32 ulps from the float64 values);
- ``integers``: multiply-shift of the top 32 bits, ``low + (h * (high - low)) >> 32`` (integer only,
  exact on every device; the bias is at most ``(high - low) / 2**32`` per value);
- ``poisson``: exact inversion of the Poisson CDF up to rate 1000, the normal approximation with continuity
  correction above, at rates looked up in a per-sample host table (40-bit integer CDF tables of its
  rates, laid out on the host and evaluated on the device; see :meth:`SampleRandom.poisson`).

The words stay 64-bit: splitmix64 needs 64-bit multiplications modulo 2**64, which int32 tensors
could only emulate with four half-width products and carries per multiplication (more device work
for the same bytes), and the words (so the drawn values, which the tests pin) would have to stay the
same. The uniforms' integer parts (24, 32 or 40 bits) are exact in the conversions above.

Each draw's words and their integer and exact float steps are one ``ccc::`` operator (:func:`hashed_uniforms`,
:func:`hashed_uniform_sequence`, :func:`box_muller_uniforms`, :func:`poisson_inversion`): the ATen composition
on every device but CUDA, where one Triton kernel (:mod:`._triton.random`) hashes the words in registers and
writes only the values (the same bits).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

import torch
from torch import Tensor

from ._splitmix import GOLDEN, MIX_1, MIX_2, POISSON_BITS, UNIFORM_BITS, UNIFORM_SCALE, signed
from ._triton import fuses
from ._upload import BatchUpload, Staged, to_device

__all__ = ["TABLED_DRAWS", "PoissonTables", "SampleRandom"]


_STAGE_KEY = signed(0xD1B54A32D192ED03)
_ANGLE_SCALE = 2.0 * math.pi * UNIFORM_SCALE
_POISSON_SCALE = float(1 << POISSON_BITS)


def _shift_right(words: Tensor, bits: int) -> Tensor:
    """Logical right shift of int64 words (torch's ``>>`` is arithmetic)."""
    return (words >> bits) & ((1 << (64 - bits)) - 1)


def _mix(words: Tensor, top_bits: int = 64) -> Tensor:
    """The splitmix64 finaliser on int64 words (bijective, wraps modulo 2**64).

    With ``top_bits`` <= 31 only the words' top ``top_bits`` bits are exact (the rest are not the hash's): the
    last xor-shift, ``w ^ (w >>> 31)``, leaves the top 31 bits of ``w`` as they are, so it is skipped.
    """
    words = (words ^ _shift_right(words, 30)) * MIX_1
    words = (words ^ _shift_right(words, 27)) * MIX_2
    return words if top_bits <= 31 else words ^ _shift_right(words, 31)


EXACT_POISSON_MAX_RATE = 1000.0
"""Largest Poisson rate sampled exactly. Above it the normal approximation ignores a skewness of
``1 / sqrt(rate)`` (below 0.032); shot noise reaches such rates only below severity 0.06 (60 / severity
photons at the brightest value), never at CCC's severities (multiples of 0.25)."""


def _table_rates(rates: Tensor) -> Tensor:
    """The rates whose CDF tables are built: rates above :data:`EXACT_POISSON_MAX_RATE` get the table of rate 0
    (the normal approximation replaces them); float64, same shape and device."""
    return torch.where(rates > EXACT_POISSON_MAX_RATE, 0.0, rates)


def _poisson_layout(rates: Tensor) -> tuple[Tensor, int]:
    """Host layout of the Poisson CDF tables of every rate of ``rates``, one table per rate.

    Args:
        rates: float64 (N,) on the host, values >= 0 and finite.

    Returns:
        int64 (N,) table lengths, ``ceil(r + 12 sqrt(r) + 12)`` for ``r`` of :func:`_table_rates` (the tail
        beyond, of probability below 1e-20, is cut off), and their sum: the layout is a function of the host
        rates alone, so the device evaluates the tables at fixed, host-known shapes.
    """
    table_rates = _table_rates(rates)
    lengths = torch.ceil(table_rates + 12.0 * torch.sqrt(table_rates) + 12.0).to(torch.int64)
    return lengths, int(lengths.sum())


_LONGEST_TABLE = _poisson_layout(torch.tensor([EXACT_POISSON_MAX_RATE], dtype=torch.float64))[1]
"""The most entries of a Poisson CDF table (the lengths grow with the rate, and larger rates get rate 0's)."""


def _poisson_keys(rates: Tensor, lengths: Tensor, total: int) -> tuple[Tensor, Tensor]:
    """The CDF tables of ``rates`` on their device, laid end to end as sorted integer keys.

    Args:
        rates: float64 (N,) on the render device; lengths: int64 (N,) there, from :func:`_poisson_layout`,
            whose sum is ``total``.

    Returns:
        int64 ``keys`` (total,), entry ``k`` of table ``n`` being ``n · 2**40 + floor(2**40 · P(X <= k))``
        with ``P(X <= k) = gammaincc(k + 1, rate)`` evaluated per entry (a value never depends on the other
        rates), made non-decreasing; and int64 ``starts`` (N,), each table's first position.
    """
    starts = torch.cumsum(lengths, 0) - lengths
    rows = torch.repeat_interleave(torch.arange(len(rates), device=rates.device), lengths, output_size=total)
    counts = (torch.arange(total, device=rates.device) - starts[rows]).to(torch.float64)
    cumulative = torch.floor(torch.special.gammaincc(counts + 1.0, _table_rates(rates)[rows]) * _POISSON_SCALE)
    return torch.cummax((rows << POISSON_BITS) + cumulative.to(torch.int64), 0).values, starts


TABLED_DRAWS = 32
"""Draws whose keys each stream computes up front, where its seeds are (the host in the render pipeline), and
copies to the device with the stream keys: a draw among them costs the device no key hash. Fog draws the
most (3 per level of its plasma map: 24 at 224×224, 27 for a 512-pixel map); later draws hash their keys
on the device, to the same words."""


def _key_table(seeds: Tensor, stage: int) -> Tensor:
    """Each sample's stream key and its first :data:`TABLED_DRAWS` draw keys (int64 (B, 1 + TABLED_DRAWS), on
    ``seeds.device``): column 0 is the splitmix64 mix of the seed and the stage, column ``d`` the mix of that
    key plus ``d`` golden-ratio steps (draw number ``d - 1``'s key)."""
    keys = _mix(_mix(seeds) ^ signed((stage + 1) * _STAGE_KEY))
    numbers = torch.arange(1, TABLED_DRAWS + 1, dtype=torch.int64, device=seeds.device) * GOLDEN
    return torch.cat([keys[:, None], _mix(keys[:, None] + numbers)], dim=1)


@lru_cache(maxsize=32)
def _sequence_tables(counts: tuple[int, ...], device: torch.device) -> tuple[Tensor, Tensor]:
    """For consecutive draws of ``counts[d]`` elements each, laid end to end: each element's draw (its
    position in ``counts``) and its hash offset ``(i + 1)·γ`` (``i`` its index within its draw), int64
    (sum(counts),) each on ``device``; made on the host and copied once per process and layout."""
    sizes = torch.tensor(counts, dtype=torch.int64)
    total = int(sizes.sum())
    draw = torch.repeat_interleave(torch.arange(len(counts)), sizes, output_size=total)
    element = torch.arange(total) - (torch.cumsum(sizes, 0) - sizes)[draw]
    return to_device(draw, device), to_device((element + 1) * GOLDEN, device)


@lru_cache(maxsize=32)
def _offsets(count: int, device: torch.device) -> Tensor:
    """The hash offsets ``(i + 1)·γ`` of a draw's ``count`` elements, int64 (count,) on ``device``; made once per
    process and count."""
    return torch.arange(1, count + 1, dtype=torch.int64, device=device) * GOLDEN


def _composed_words(keys: Tensor, count: int, top_bits: int = 64) -> Tensor:
    """The words of elements 0..``count - 1`` of the draws whose keys are ``keys`` (int64 (B, D)): int64
    (B, D, ``count``), word ``(b, d, i)`` the mix of ``keys[b, d] + (i + 1)·γ`` (splitmix64 is elementwise: a
    draw's words are those it gives alone). Only the top ``top_bits`` bits are exact when it is 31 or less
    (:func:`_mix`)."""
    return _mix(keys[:, :, None] + _offsets(count, keys.device), top_bits)


def _uniforms(words: Tensor, dtype: torch.dtype) -> Tensor:
    """``k / 2**24`` in ``dtype`` for ``k`` the top 24 bits of int64 ``words`` (exact in float32 and float64)."""
    return _shift_right(words, 64 - UNIFORM_BITS).to(dtype) * UNIFORM_SCALE


def _composed_uniforms(keys: Tensor, count: int, dtype: torch.dtype) -> Tensor:
    """:func:`hashed_uniforms` in ATen operations."""
    return _uniforms(_composed_words(keys, count, UNIFORM_BITS), dtype)


@torch.library.custom_op("ccc::hashed_uniforms", mutates_args=())
def hashed_uniforms(keys: Tensor, count: int, dtype: torch.dtype) -> Tensor:
    """Uniforms of D draws of ``count`` elements each.

    ``keys`` int64 (B, D) holds each sample's draw keys (any strides); returns ``dtype`` (float32 or float64)
    (B, D, ``count``), the value ``(b, d, i)`` being ``k / 2**24`` on [0, 1) for ``k`` the top 24 bits of the
    word of element ``i`` under key ``keys[b, d]``: in ATen operations (:func:`_composed_uniforms`), or on CUDA
    in one Triton kernel (:mod:`._triton.random`, where :func:`~._triton.fuses`). The same values either way.
    """
    return _composed_uniforms(keys, count, dtype)


@hashed_uniforms.register_kernel("cuda")
def _hashed_uniforms_cuda(keys: Tensor, count: int, dtype: torch.dtype) -> Tensor:
    if not fuses(keys.device):
        return _composed_uniforms(keys, count, dtype)
    from ._triton.random import hashed_uniforms as kernel

    return kernel(keys, count, dtype)


@hashed_uniforms.register_fake
def _hashed_uniforms_shape(keys: Tensor, count: int, dtype: torch.dtype) -> Tensor:
    return keys.new_empty((*keys.shape, count), dtype=dtype)


def _composed_uniform_sequence(keys: Tensor, draw: Tensor, offsets: Tensor, dtype: torch.dtype) -> Tensor:
    """:func:`hashed_uniform_sequence` in ATen operations."""
    return _uniforms(_mix(keys.index_select(1, draw) + offsets, UNIFORM_BITS), dtype)


@torch.library.custom_op("ccc::hashed_uniform_sequence", mutates_args=())
def hashed_uniform_sequence(keys: Tensor, draw: Tensor, offsets: Tensor, dtype: torch.dtype) -> Tensor:
    """Uniforms of D draws of different sizes laid end to end (:func:`_sequence_tables`).

    ``keys`` int64 (B, D) holds each sample's draw keys; ``draw`` int64 (N,) each element's draw (a column of
    ``keys``) and ``offsets`` int64 (N,) its hash offset ``(i + 1)·γ``. Returns ``dtype`` (float32 or float64)
    (B, N) uniforms ``k / 2**24``, as :func:`hashed_uniforms` (ATen, or the Triton kernel on CUDA).
    """
    return _composed_uniform_sequence(keys, draw, offsets, dtype)


@hashed_uniform_sequence.register_kernel("cuda")
def _hashed_uniform_sequence_cuda(keys: Tensor, draw: Tensor, offsets: Tensor, dtype: torch.dtype) -> Tensor:
    if not fuses(keys.device):
        return _composed_uniform_sequence(keys, draw, offsets, dtype)
    from ._triton.random import hashed_uniform_sequence as kernel

    return kernel(keys, draw, offsets, dtype)


@hashed_uniform_sequence.register_fake
def _hashed_uniform_sequence_shape(keys: Tensor, draw: Tensor, offsets: Tensor, dtype: torch.dtype) -> Tensor:
    return keys.new_empty((keys.shape[0], draw.shape[0]), dtype=dtype)


def _composed_box_muller_uniforms(keys: Tensor, count: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """:func:`box_muller_uniforms` in ATen operations."""
    words = _composed_words(keys[:, None], count)[:, 0]
    radius_uniform = (_shift_right(words, 64 - UNIFORM_BITS) + 1).to(dtype) * UNIFORM_SCALE
    angle_uniform = (_shift_right(words, 64 - 2 * UNIFORM_BITS) & ((1 << UNIFORM_BITS) - 1)).to(dtype)
    return radius_uniform, angle_uniform * _ANGLE_SCALE


@torch.library.custom_op("ccc::box_muller_uniforms", mutates_args=())
def box_muller_uniforms(keys: Tensor, count: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """The inputs of Box–Muller's transcendental functions for one draw of ``count`` elements.

    ``keys`` int64 (B,) holds each sample's draw key. Returns ``dtype`` (float32 or float64) (B, ``count``)
    twice: the radius uniforms ``(k + 1) / 2**24`` in (0, 1] for ``k`` the word's top 24 bits, and the angles
    ``j · (2π / 2**24)`` in radians for ``j`` its next 24 bits (the product rounded once, in ``dtype``). In ATen
    operations (:func:`_composed_box_muller_uniforms`), or on CUDA in one Triton kernel (:mod:`._triton.random`,
    where :func:`~._triton.fuses`); the same values either way. ``log``, ``sqrt`` and ``cos`` stay ATen's.
    """
    return _composed_box_muller_uniforms(keys, count, dtype)


@box_muller_uniforms.register_kernel("cuda")
def _box_muller_uniforms_cuda(keys: Tensor, count: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    if not fuses(keys.device):
        return _composed_box_muller_uniforms(keys, count, dtype)
    from ._triton.random import box_muller_uniforms as kernel

    return kernel(keys, count, dtype, _ANGLE_SCALE)


@box_muller_uniforms.register_fake
def _box_muller_uniforms_shape(keys: Tensor, count: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    return keys.new_empty((keys.shape[0], count), dtype=dtype), keys.new_empty((keys.shape[0], count), dtype=dtype)


def _poisson_uniforms_and_rows(keys: Tensor, index: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """The 40-bit uniforms of one draw (``keys`` int64 (B,)) and the table rows ``b · width + index`` of its
    values (``index`` (B, ...) into each sample's ``width`` rates), int64 shaped as ``index`` each."""
    words = _composed_words(keys[:, None], math.prod(index.shape[1:]))[:, 0].view(index.shape)
    row = (torch.arange(len(keys), device=keys.device) * width).view(-1, *[1] * (index.ndim - 1)) + index
    return _shift_right(words, 64 - POISSON_BITS), row


def _composed_poisson_inversion(
    keys: Tensor, index: Tensor, table_keys: Tensor, starts: Tensor, lengths: Tensor, width: int
) -> Tensor:
    """:func:`poisson_inversion` in ATen operations."""
    uniform, row = _poisson_uniforms_and_rows(keys, index, width)
    found = torch.searchsorted(table_keys, ((row << POISSON_BITS) + uniform).contiguous())
    # a uniform of 0 lands before its own table's first key when the table before ends in CDFs of 1 (keys equal
    # to row · 2**40): its count is 0. Counts below 2**24 are exact in float32
    return torch.minimum((found - starts[row]).clamp_(min=0), lengths[row] - 1).to(torch.float32)


@torch.library.custom_op("ccc::poisson_inversion", mutates_args=())
def poisson_inversion(
    keys: Tensor, index: Tensor, table_keys: Tensor, starts: Tensor, lengths: Tensor, width: int
) -> Tensor:
    """Poisson counts of one draw by inversion of 40-bit integer CDF tables (:meth:`SampleRandom.poisson`).

    Args:
        keys: int64 (B,), each sample's draw key.
        index: int64 (B, ...), values in [0, ``width``): the value ``(b, ...)`` searches table
            ``b · width + index[b, ...]``.
        table_keys, starts: :func:`_poisson_keys`' sorted keys (T,) and each table's first position (B·width,).
        lengths: int64 (B·width,), the tables' lengths (:func:`_poisson_layout`).
        width: the tables per sample.

    Returns:
        float32 shaped as ``index``: ``min(k, length - 1)`` for ``k`` the insertion point of ``row · 2**40 + u``
        (``u`` the word's top 40 bits) in the row's own table. In ATen operations
        (:func:`_composed_poisson_inversion`), or on CUDA in one Triton kernel that hashes, searches and
        converts in registers (:mod:`._triton.random`, where :func:`~._triton.fuses`); the same counts either way.
    """
    return _composed_poisson_inversion(keys, index, table_keys, starts, lengths, width)


@poisson_inversion.register_kernel("cuda")
def _poisson_inversion_cuda(
    keys: Tensor, index: Tensor, table_keys: Tensor, starts: Tensor, lengths: Tensor, width: int
) -> Tensor:
    if not fuses(keys.device):
        return _composed_poisson_inversion(keys, index, table_keys, starts, lengths, width)
    from ._triton.random import poisson_inversion as kernel

    return kernel(keys, index, table_keys, starts, lengths, width, _LONGEST_TABLE)


@poisson_inversion.register_fake
def _poisson_inversion_shape(
    keys: Tensor, index: Tensor, table_keys: Tensor, starts: Tensor, lengths: Tensor, width: int
) -> Tensor:
    return index.new_empty(index.shape, dtype=torch.float32)


class PoissonTables(NamedTuple):
    """:meth:`SampleRandom.poisson_tables`: the staged rates (float64) and table lengths (int64), R rates per
    sample (``width``), the tables' total length and whether any rate is above
    :data:`EXACT_POISSON_MAX_RATE`."""

    staged: Staged
    width: int
    total: int
    above_exact: bool


class SampleRandom:
    """Per-sample random streams of a batch, for one stage of a corruption pair.

    Args:
        seeds: int64 tensor (B,), one seed per sample in [0, 2**63) (``SampleSpec.seed``), best on the
            host (the render pipeline keeps them there).
        stage: 0 for the pair's first corruption, 1 for the second.
        device: where the values are drawn (default ``seeds.device``); the streams' keys are computed
            where the seeds are and copied there once.
        dtype: the working float dtype of ``normal``'s Box–Muller and ``poisson``'s normal
            approximation: ``torch.float64`` (default) or ``torch.float32`` (the renderer's float32 mode).

    Every draw returns a tensor with the batch dimension first, on :attr:`device`. :meth:`on_host` draws
    the same values on the CPU, for per-sample numbers that build host tables (angles, kernel sizes).
    """

    def __init__(
        self,
        seeds: Tensor,
        stage: int = 0,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float64,
    ):
        if seeds.dtype != torch.int64 or seeds.ndim != 1:
            raise ValueError(f"seeds must be an int64 tensor of shape (B,), got {seeds.dtype} {tuple(seeds.shape)}")
        if stage < 0:
            raise ValueError(f"stage must be >= 0, got {stage}")
        if dtype not in (torch.float64, torch.float32):
            raise ValueError(f"dtype must be torch.float64 or torch.float32, got {dtype}")
        self.seeds = seeds
        self.dtype = dtype
        self.stage = stage
        self.device = seeds.device if device is None else torch.device(device)
        keys = _key_table(seeds, stage)
        self._host_keys = keys if keys.device.type == "cpu" else None  # kept for on_host (none made twice)
        self._keys: Tensor | Staged = to_device(keys, self.device)
        self._draws = [0]

    @property
    def _device_keys(self) -> Tensor:
        """The keys on :attr:`device` (a staged table is read once its batch is sent)."""
        if isinstance(self._keys, Staged):
            self._keys = self._keys.tensor()
        return self._keys

    def on_host(self) -> SampleRandom:
        """These streams drawing on the CPU, sharing this object's draw counter (a draw on either consumes
        the draw number for both): the values equal the device's (the words are device-independent).
        Free when the seeds live on the host (their keys are this object's); device seeds are read back once."""
        host = SampleRandom.__new__(SampleRandom)
        host.seeds = self.seeds.cpu()
        host.stage = self.stage
        host.dtype = self.dtype
        host.device = torch.device("cpu")
        host._host_keys = self._host_keys if self._host_keys is not None else _key_table(host.seeds, self.stage)
        host._keys = host._host_keys
        host._draws = self._draws
        return host

    def reserve(self, draws: int) -> SampleRandom:
        """The next ``draws`` draw numbers as streams of their own, consumed here: the returned streams draw
        them (from the first) whenever they are used, so that a step may make later draws first (on the host)
        and these (on the device) afterwards, with the values of the original order."""
        reserved = SampleRandom.__new__(SampleRandom)
        reserved.__dict__.update(self.__dict__)
        reserved._draws = [self._draws[0]]
        self._draws[0] += draws
        return reserved

    def __len__(self) -> int:
        return len(self.seeds)

    def _draw_keys(self, draws: int) -> Tensor:
        """The keys of the next ``draws`` draws, int64 (B, draws), consuming their draw numbers: from the key
        table (a view) for the first :data:`TABLED_DRAWS` draws, hashed here for later ones."""
        table = self._device_keys  # first: a draw before its staged keys are sent consumes nothing
        first = self._draws[0]
        self._draws[0] += draws
        if first + draws <= TABLED_DRAWS:
            return table[:, first + 1 : first + draws + 1]
        # (d + 1)·golden wraps modulo 2**64 on the device as _signed does on the host
        numbers = torch.arange(first + 1, first + draws + 1, dtype=torch.int64, device=self.device)
        return _mix(table[:, :1] + numbers * GOLDEN)

    def uniform(self, *shape: int) -> Tensor:
        """float32 (B, *shape), uniform on [0, 1) in steps of 2**-24."""
        return self.uniform_draws(1, *shape)[:, 0]

    def uniform_draws(self, draws: int, *shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
        """``dtype`` (B, draws, *shape): ``draws`` consecutive :meth:`uniform` draws of ``shape`` in one computation
        (their values, and the draw counter afterwards, are those of ``draws`` calls; a GPU launches one set of
        kernels instead of one per draw). ``dtype=torch.float64`` gives the same values in float64 (``k / 2**24``
        is exact in both), without a conversion of its own."""
        values = hashed_uniforms(self._draw_keys(draws), math.prod(shape), dtype)
        return values.view(len(self), draws, *shape)

    def uniform_sequence(
        self, calls: Sequence[tuple[int, tuple[int, ...]]], dtype: torch.dtype = torch.float32
    ) -> list[Tensor]:
        """Consecutive :meth:`uniform_draws` calls of different shapes in one computation.

        Args:
            calls: ``(draws, shape)`` per call, in order.
            dtype: as in :meth:`uniform_draws`.

        Returns:
            ``dtype`` (B, draws, *shape) per call: the values of ``uniform_draws(draws, *shape)`` called in
            order, the draw counter moved on as they would (views into one buffer; a GPU launches one set of
            kernels for all of them, with the layout's tables made once per process).
        """
        counts = tuple(math.prod(shape) for draws, shape in calls for _ in range(draws))
        keys = self._draw_keys(len(counts))
        draw, offsets = _sequence_tables(counts, self.device)
        values = hashed_uniform_sequence(keys, draw, offsets, dtype)
        sizes = [draws * math.prod(shape) for draws, shape in calls]
        return [part.view(len(self), draws, *shape) for part, (draws, shape) in zip(values.split(sizes, dim=1), calls)]

    def normal(self, *shape: int) -> Tensor:
        """float32 (B, *shape), standard normal (Box–Muller)."""
        radius_uniform, angle = box_muller_uniforms(self._draw_keys(1)[:, 0], math.prod(shape), self.dtype)
        radius = torch.sqrt(-2.0 * torch.log(radius_uniform))
        return (radius * torch.cos(angle)).to(torch.float32).view(len(self), *shape)

    def integers(self, low: int, high: int, *shape: int) -> Tensor:
        """int64 (B, *shape), uniform in [low, high) (multiply-shift; ``high - low`` below 2**31)."""
        span = high - low
        if not 0 < span < 1 << 31:
            raise ValueError(f"integers needs 0 < high - low < 2**31, got low={low}, high={high}")
        top = _shift_right(_composed_words(self._draw_keys(1), math.prod(shape))[:, 0], 32)
        return (low + _shift_right(top * span, 32)).view(len(self), *shape)

    def poisson(self, rates: Tensor, index: Tensor) -> Tensor:
        """Poisson samples at rates looked up in a per-sample host table: float32 with the shape of ``index``.

        Args:
            rates: float64 (B, R) on the host, each sample's R possible rates (>= 0, finite).
            index: int64 (B, ...) on :attr:`device`, values in [0, R): the value ``(b, ...)`` is drawn at
                rate ``rates[b, index[b, ...]]``.

        One draw: a 40-bit uniform ``u`` per value. Rates up to :data:`EXACT_POISSON_MAX_RATE` are
        sampled exactly by inversion, ``min{k : P(X <= k) >= u}``, against 40-bit integer CDF tables of
        every rate of the table (up to ``rate + 12 sqrt(rate) + 12``; the tail beyond, of probability
        below 1e-20, is cut off); larger rates by inverting the normal approximation with continuity
        correction, ``max(0, floor(rate + sqrt(rate) * Phi^-1(u) + 0.5))``. The host lays the tables
        out from ``rates`` alone (their lengths) and uploads rates and lengths in one copy; the device
        evaluates the CDFs (``gammaincc``, float64), gathers and searches, at host-known shapes. The CDFs
        are evaluated where the draws are, so a CUDA device's ``gammaincc`` (which may differ from the
        CPU's in the last bits) changes a value only where ``u`` falls within that difference of a 40-bit
        table entry. A batch's render stages the tables with the rest of its host data
        (:meth:`poisson_tables`) and draws later (:meth:`poisson_with`); this is both at once.
        """
        upload = BatchUpload(self.device)
        tables = self.poisson_tables(rates, upload)
        upload.send()
        return self.poisson_with(tables, index)

    def poisson_tables(self, rates: Tensor, upload: BatchUpload) -> PoissonTables:
        """The host half of :meth:`poisson`: ``rates`` (float64 (B, R) on the host, >= 0 and finite) laid out
        and staged in ``upload`` (no draw is made).

        Raises:
            ValueError: ``rates`` of another shape, or not on the host.
        """
        if rates.ndim != 2 or rates.shape[0] != len(self) or rates.device.type != "cpu":
            raise ValueError(
                f"rates must be a host tensor of shape ({len(self)}, R), got {tuple(rates.shape)} on {rates.device}"
            )
        host_rates = rates.to(torch.float64).reshape(-1)
        host_lengths, total = _poisson_layout(host_rates)
        staged = upload.tables(host_rates.numpy(), host_lengths.numpy())
        # a host table: whether any rate needs the normal approximation is decided without a device read
        return PoissonTables(staged, rates.shape[1], total, bool((rates > EXACT_POISSON_MAX_RATE).any()))

    def poisson_with(self, tables: PoissonTables, index: Tensor) -> Tensor:
        """The device half of :meth:`poisson` (one draw), at the rates of :meth:`poisson_tables` once their
        upload is sent: float32 with the shape of ``index`` (int64 (B, ...) on :attr:`device`, values in
        [0, R))."""
        if index.shape[:1] != self.seeds.shape:
            raise ValueError(f"index must have the batch size {len(self)} first, got shape {tuple(index.shape)}")
        keys = self._draw_keys(1)[:, 0]
        rates, lengths = tables.staged.tensors()
        table_keys, starts = _poisson_keys(rates, lengths, tables.total)
        exact = poisson_inversion(keys, index, table_keys, starts, lengths, tables.width)
        if not tables.above_exact:
            return exact
        # rare (shot noise below severity 0.06): the uniforms again, in ATen operations
        uniform, row = _poisson_uniforms_and_rows(keys, index, tables.width)
        rate = rates.to(self.dtype)[row]
        standard = torch.special.ndtri((uniform.to(self.dtype) + 0.5) / _POISSON_SCALE)
        approximate = torch.floor(rate + torch.sqrt(rate) * standard + 0.5).clamp(min=0.0)
        return torch.where(rate > EXACT_POISSON_MAX_RATE, approximate.to(torch.float32), exact)

    def staged_group(self, members: Sequence[int], upload: BatchUpload) -> SampleRandom:
        """The streams of samples ``members`` on ``upload``'s device with a fresh draw counter, their keys
        staged in ``upload`` (read once it is sent): the values of ``SampleRandom(seeds[members], stage,
        upload.device)``. These streams must live on the host (the render pipeline's)."""
        if self.device.type != "cpu":
            raise ValueError(f"staged_group needs streams on the host, got {self.device}")
        chosen = SampleRandom.__new__(SampleRandom)
        chosen.seeds = self.seeds[list(members)]
        chosen.stage = self.stage
        chosen.dtype = self.dtype
        chosen.device = upload.device
        chosen._host_keys = self._device_keys[list(members)]
        chosen._keys = upload.tables(chosen._host_keys.numpy())
        chosen._draws = [0]
        return chosen
