"""The loader recipe: a ``torch.utils.data.DataLoader`` that keeps a stream's order (:func:`stream_loader`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

from ccc.load.base import CCCStream
from ccc.load.sample import StreamSample
from ccc.validation import check_loader_workers, check_positive_int

__all__ = ["collate_samples", "stream_loader"]


def collate_samples(samples: Sequence[StreamSample]) -> tuple[Any, torch.Tensor, list[dict[str, Any]]]:
    """Batch samples: images stacked (tensors) or listed (PIL, bytes), labels int64 (N,), metadata a list of dicts."""
    images = [sample.image for sample in samples]
    stacked = torch.stack(images) if images and isinstance(images[0], torch.Tensor) else images
    return (
        stacked,
        torch.tensor([sample.label for sample in samples], dtype=torch.int64),
        [sample.metadata for sample in samples],
    )


def stream_loader(
    stream: CCCStream, batch_size: int, num_workers: int = 0, **dataloader_options: Any
) -> Iterable[tuple[Any, torch.Tensor, list[dict[str, Any]]]]:
    """A DataLoader yielding ``(images, labels, metadata)`` batches of ``stream`` in stream order.

    ``images``: a tensor N×3×H×W (uint8 or float, as the stream's ``image_format``) or, for PIL
    images and bytes, a list; ``labels``: int64 (N,); ``metadata``: a list of N dicts, one per sample
    (``index``, ``n1``, ``s1``, ``n2``, ``s2``, ``path_step``, ``source_path``, … as the stream yields).

    The recipe that keeps order: the stream's ``chunk_size`` is set to ``batch_size``, so worker
    ``w`` of ``W`` renders or reads batches ``w, w + W, …`` and the DataLoader, which collects
    batches from its workers round-robin, returns them in order. Only the last batch may be short.

    A stream rendered on a device (``render_stream(..., device="cuda")``) has its workers decode the
    source images and renders each collated batch in this process on the device; its batches are then
    tensors on that device, and the loader is a thin iterable over the DataLoader. On a GPU the
    workers collate, and the device renders, the stream's
    :meth:`~ccc.load.CCCStream.finishing_batch_size` samples at once (at least 512), handed out in
    batches of ``batch_size``: the same batches, in the same order.

    Args:
        stream: from :func:`ccc.load.open_stream` or :func:`ccc.load.render_stream`.
        batch_size: samples per batch, >= 1.
        num_workers: DataLoader worker processes, in [0, :func:`ccc.validation.max_loader_workers`] (4 per
            CPU of this machine, or 16 where that is more).
        dataloader_options: further ``torch.utils.data.DataLoader`` arguments (not ``batch_size``,
            ``collate_fn``, ``shuffle`` or ``sampler``).
    """
    check_positive_int("batch_size", batch_size)
    check_loader_workers("num_workers", num_workers)
    reserved = sorted(
        {"batch_size", "collate_fn", "shuffle", "sampler", "batch_sampler", "in_order"} & set(dataloader_options)
    )
    if reserved:
        raise ValueError(f"stream_loader sets {', '.join(reserved)} itself to keep stream order")
    workers_stream = stream.for_workers()
    collated = batch_size if workers_stream is stream else stream.finishing_batch_size(batch_size)
    loader = torch.utils.data.DataLoader(
        workers_stream.with_chunk_size(collated),
        batch_size=collated,
        num_workers=num_workers,
        collate_fn=collate_samples,
        in_order=True,
        **dataloader_options,
    )
    return loader if workers_stream is stream else _FinishingLoader(loader, stream, batch_size)


class _FinishingLoader:
    """A DataLoader over a stream's :meth:`~ccc.load.CCCStream.for_workers`, each batch completed by the
    stream's :meth:`~ccc.load.CCCStream.finish_batch` in the main process (e.g. rendered on a device) and
    handed out in slices of ``batch_size``."""

    def __init__(self, loader: torch.utils.data.DataLoader, stream: CCCStream, batch_size: int) -> None:
        self.loader = loader
        self.stream = stream
        self.batch_size = batch_size

    def __iter__(self) -> Iterator[tuple[Any, torch.Tensor, list[dict[str, Any]]]]:
        for batch in self.loader:
            images, labels, metadata = self.stream.finish_batch(batch)
            for start in range(0, len(labels), self.batch_size):
                end = start + self.batch_size
                yield images[start:end], labels[start:end], metadata[start:end]
