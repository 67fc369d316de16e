"""The stream class both sources share: arguments, this consumer's selection, the error policy.

:class:`CCCStream` checks the arguments common to :func:`ccc.load.open_stream` and
:func:`ccc.load.render_stream`, works out which positions this rank and DataLoader worker read
(:mod:`ccc.load.selection`) and turns the :class:`Skipped` records of a source into one
:class:`ccc.load.sample.StreamWarning`; a source implements ``_samples(selection)``.
"""

from __future__ import annotations

import copy
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ccc.load.decode import check_image_format
from ccc.load.sample import StreamError, StreamSample, StreamWarning
from ccc.load.selection import RANK_SPLITS, Selection, consumer_selection, environment_rank
from ccc.stream.spec import StreamSpec
from ccc.validation import check_non_negative_int, check_positive_int

__all__ = ["ERROR_POLICIES", "CCCStream", "Skipped"]

logger = logging.getLogger(__name__)

ERROR_POLICIES = ("raise", "skip")


@dataclass(frozen=True)
class Skipped:
    """Samples a source could not deliver under ``on_error="skip"``.

    Attributes:
        reason: one line naming the shard and the sample.
        samples: how many positions of this consumer were lost (None when unknown).
    """

    reason: str
    samples: int | None


class CCCStream(torch.utils.data.IterableDataset):
    """An ordered CCC stream; iterate it, or wrap it with :func:`ccc.load.stream_loader`.

    Create with :func:`ccc.load.open_stream` or :func:`ccc.load.render_stream`.

    Attributes:
        start: first stream index read, >= 0.
        limit: samples read from ``start`` (None: to the end of the stream).
        image_format: one of :data:`ccc.load.decode.IMAGE_FORMATS`.
        chunk_size: consecutive samples a consumer reads at a time, >= 1 (:func:`ccc.load.stream_loader`
            sets it to the batch size).
        rank, world_size: this process's rank among ``world_size`` (default: ``RANK``/``WORLD_SIZE``
            from the environment, else 0 and 1).
        rank_split: ``interleaved`` or ``contiguous`` (see :mod:`ccc.load`).
        on_error: ``raise`` or ``skip``.
        spec: the stream's definition (:class:`ccc.stream.spec.StreamSpec`) when known — from the run
            folder's manifest or the rendered plan; None for shards read without a manifest.
    """

    spec: StreamSpec | None = None

    def __init__(
        self,
        *,
        total: int | None,
        start: int,
        limit: int | None,
        image_format: str,
        chunk_size: int,
        rank: int | None,
        world_size: int | None,
        rank_split: str,
        on_error: str,
    ) -> None:
        super().__init__()
        self.start = check_non_negative_int("start", start)
        self.limit = None if limit is None else check_positive_int("limit", limit)
        self.chunk_size = check_positive_int("chunk_size", chunk_size)
        check_image_format(image_format)
        if rank_split not in RANK_SPLITS:
            raise ValueError(f"rank_split must be one of {', '.join(RANK_SPLITS)}, got {rank_split!r}")
        if on_error not in ERROR_POLICIES:
            raise ValueError(f"on_error must be one of {', '.join(ERROR_POLICIES)}, got {on_error!r}")
        default_rank, default_world = environment_rank()
        self.rank = check_non_negative_int("rank", default_rank if rank is None else rank)
        self.world_size = check_positive_int("world_size", default_world if world_size is None else world_size)
        if self.rank >= self.world_size:
            raise ValueError(
                f"rank must be in [0, {self.world_size - 1}] for world_size {self.world_size}, got {self.rank}"
            )
        if total is not None and self.start >= total:
            raise ValueError(f"start must be below the stream's length {total}, got {self.start}")
        self.image_format = image_format
        self.rank_split = rank_split
        self.on_error = on_error
        self.total = total
        if rank_split == "contiguous" and self.length is None:
            raise ValueError(
                "rank_split 'contiguous' needs a stream of known length: pass limit=, or use rank_split='interleaved'"
            )

    @property
    def length(self) -> int | None:
        """Samples from ``start`` to the end (or ``limit``), over all ranks; None when unknown."""
        remaining = None if self.total is None else self.total - self.start
        if self.limit is None:
            return remaining
        return self.limit if remaining is None else min(self.limit, remaining)

    def with_chunk_size(self, chunk_size: int) -> CCCStream:
        """A copy reading ``chunk_size`` consecutive samples per consumer turn."""
        duplicate = copy.copy(self)
        duplicate.chunk_size = check_positive_int("chunk_size", chunk_size)
        return duplicate

    def for_workers(self) -> CCCStream:
        """The stream DataLoader worker processes iterate for :func:`ccc.load.stream_loader`: this one,
        unless the stream finishes its batches in the main process (rendering on a device), where it is
        a stream of what the workers prepare and :meth:`finish_batch` completes each collated batch."""
        return self

    def finish_batch(self, batch: tuple[Any, torch.Tensor, list[dict[str, Any]]]) -> tuple[Any, torch.Tensor, list]:
        """A collated batch of :meth:`for_workers`' samples completed in the main process (default: as is)."""
        return batch

    def finishing_batch_size(self, batch_size: int) -> int:
        """Samples :meth:`finish_batch` completes at once under a loader of ``batch_size`` (>= 1): a multiple of
        it, which :func:`ccc.load.stream_loader` hands out in slices of ``batch_size``, in order (default:
        ``batch_size`` itself)."""
        return batch_size

    def _selection(self) -> Selection:
        """The positions this rank and, inside a DataLoader worker process, this worker read."""
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return consumer_selection(
            length=self.length,
            chunk_size=self.chunk_size,
            rank=self.rank,
            world_size=self.world_size,
            rank_split=self.rank_split,
            worker=worker,
            workers=workers,
        )

    def __iter__(self) -> Iterator[StreamSample]:
        skipped: list[str] = []
        skipped_samples = 0
        for item in self._samples(self._selection()):
            if isinstance(item, Skipped):
                skipped.append(item.reason)
                skipped_samples += item.samples or 0
                logger.warning("skipped: %s", item.reason)
                continue
            yield item
        if skipped:
            known = f"{skipped_samples} samples" if skipped_samples else "samples"
            warnings.warn(
                f"CCC stream: skipped {known} in {len(skipped)} place(s) under on_error='skip'; first: {skipped[0]}",
                StreamWarning,
                stacklevel=2,
            )

    def _samples(self, selection: Selection) -> Iterator[StreamSample | Skipped]:
        """This consumer's samples in stream order, and a :class:`Skipped` for what could not be delivered."""
        raise NotImplementedError

    def _fail(self, reason: str, samples: int | None) -> Skipped:
        """Raise :class:`StreamError` under ``on_error="raise"``, else the :class:`Skipped` record to yield."""
        if self.on_error == "raise":
            raise StreamError(reason)
        return Skipped(reason, samples)
