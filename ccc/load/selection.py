"""Which stream positions one consumer reads: a rank of ``world_size``, and a DataLoader worker of that rank.

Positions ``0, 1, …`` (relative to the stream's ``start``) are cut into chunks of ``chunk_size``
consecutive samples. With ``rank_split="interleaved"`` chunk ``c`` goes to rank ``c % world_size``;
with ``"contiguous"`` rank ``r`` gets the ``r``-th of ``world_size`` contiguous, equal (±1) ranges.
Inside a rank, the rank's chunks go round-robin to its workers. Every position is read by exactly
one consumer. Pure arithmetic: no torch, no IO.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["DEFAULT_SAMPLES_PER_TURN", "RANK_SPLITS", "Selection", "consumer_selection", "environment_rank"]

RANK_SPLITS = ("interleaved", "contiguous")

DEFAULT_SAMPLES_PER_TURN = 64
"""Consecutive samples a reading consumer (rank × DataLoader worker) takes per turn (``chunk_size`` of
:func:`ccc.load.open_stream` and :func:`ccc.load.render_stream`; :func:`ccc.load.stream_loader` sets it
to the batch size)."""


@dataclass(frozen=True)
class Selection:
    """The relative positions one consumer reads.

    A position ``r`` is wanted when ``lo <= r < hi`` and ``(r - lo) % period`` lies in
    ``[offset, offset + chunk)``.

    Attributes:
        lo: first position of the consumer's range, >= 0.
        hi: end of the range (exclusive), or None for an unbounded stream.
        period: positions per round of all consumers sharing the range, >= ``chunk``.
        offset: where this consumer's chunk starts inside a round, in ``[0, period - chunk]``.
        chunk: consecutive positions per turn, >= 1.
    """

    lo: int
    hi: int | None
    period: int
    offset: int
    chunk: int

    def wanted(self, relative: int) -> bool:
        """Whether this consumer reads position ``relative``."""
        if relative < self.lo or (self.hi is not None and relative >= self.hi):
            return False
        return self.offset <= (relative - self.lo) % self.period < self.offset + self.chunk

    def count(self, begin: int, end: int) -> int:
        """How many wanted positions lie in ``[begin, end)`` (closed form, no iteration)."""
        return max(self._below(end) - self._below(begin), 0)

    def _below(self, relative: int) -> int:
        """Wanted positions in ``[lo, relative)``."""
        if self.hi is not None:
            relative = min(relative, self.hi)
        if relative <= self.lo:
            return 0
        periods, phase = divmod(relative - self.lo, self.period)
        return periods * self.chunk + min(max(phase - self.offset, 0), self.chunk)

    def next_wanted(self, relative: int) -> int | None:
        """The smallest wanted position >= ``relative``, or None."""
        relative = max(relative, self.lo)
        phase = (relative - self.lo) % self.period
        base = relative - phase
        if phase < self.offset:
            candidate = base + self.offset
        elif phase < self.offset + self.chunk:
            candidate = relative
        else:
            candidate = base + self.period + self.offset
        return candidate if self.hi is None or candidate < self.hi else None


def consumer_selection(
    *,
    length: int | None,
    chunk_size: int,
    rank: int,
    world_size: int,
    rank_split: str,
    worker: int = 0,
    workers: int = 1,
) -> Selection:
    """The positions read by DataLoader worker ``worker`` of ``workers`` on rank ``rank`` of ``world_size``.

    Args:
        length: positions in the stream from its start, over all ranks (None: unbounded; only
            with ``rank_split="interleaved"``).
        chunk_size: consecutive positions per turn, >= 1.
        rank: in ``[0, world_size - 1]``. world_size: >= 1.
        rank_split: one of :data:`RANK_SPLITS`.
        worker: in ``[0, workers - 1]``. workers: DataLoader workers of the rank, >= 1.
    """
    if rank_split == "contiguous":
        assert length is not None
        lo = rank * length // world_size
        hi = (rank + 1) * length // world_size
        return Selection(lo, hi, chunk_size * workers, worker * chunk_size, chunk_size)
    return Selection(
        0, length, chunk_size * world_size * workers, (rank + worker * world_size) * chunk_size, chunk_size
    )


def environment_rank() -> tuple[int, int]:
    """``(rank, world_size)`` from the environment's ``RANK`` and ``WORLD_SIZE`` (default 0 and 1).

    Raises:
        ValueError: either is set but not an integer.
    """
    try:
        rank = int(os.environ.get("RANK", "0"))
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise ValueError(
            "environment RANK and WORLD_SIZE must be integers, "
            f"got {os.environ.get('RANK')!r} and {os.environ.get('WORLD_SIZE')!r}"
        ) from None
    return rank, world_size
