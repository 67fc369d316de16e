"""Stream items as batches: validation, per-sample metadata, known lengths, skipping and limiting.

A stream is any iterable of ``(images, labels)`` or ``(images, labels, metadata)`` items: images a
float tensor N×C×H×W in [0, 1], labels an integer tensor (N,), metadata either a mapping from key to
a per-sample sequence (what torch's default collate makes of per-sample dicts) or a list of N
per-sample dicts. A torch DataLoader over a Dataset or IterableDataset is such a stream.

torch is imported where batches are handled, so that the stream sources' registry (named by
``tta-eval --help``) loads without it.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ccc.validation import MAX_SAMPLES, check_positive_int

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Batch:
    """One parsed stream item: images N×C×H×W (float), labels (N,) int64, metadata or None."""

    images: torch.Tensor
    labels: torch.Tensor
    metadata: Any = None

    @property
    def size(self) -> int:
        """Number of samples N."""
        return int(self.labels.shape[0])


def as_batch(item: Any, batch_index: int) -> Batch:
    """Validate one stream item and return it as a Batch; ValueError naming the batch otherwise."""
    import torch

    if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
        raise ValueError(
            f"stream batch {batch_index} must be (images, labels) or (images, labels, metadata), "
            f"got {type(item).__name__}{f' of length {len(item)}' if isinstance(item, (tuple, list)) else ''}"
        )
    images, labels = item[0], item[1]
    metadata = item[2] if len(item) == 3 else None
    if not isinstance(images, torch.Tensor) or images.dim() != 4 or not images.is_floating_point():
        description = (
            f"{tuple(images.shape)} {images.dtype}" if isinstance(images, torch.Tensor) else type(images).__name__
        )
        raise ValueError(f"stream batch {batch_index}: images must be a float tensor N×C×H×W, got {description}")
    if not isinstance(labels, torch.Tensor) or labels.dim() != 1 or labels.is_floating_point():
        description = (
            f"{tuple(labels.shape)} {labels.dtype}" if isinstance(labels, torch.Tensor) else type(labels).__name__
        )
        raise ValueError(f"stream batch {batch_index}: labels must be an integer tensor (N,), got {description}")
    if labels.shape[0] != images.shape[0]:
        raise ValueError(f"stream batch {batch_index}: {images.shape[0]} images but {labels.shape[0]} labels")
    if labels.shape[0] == 0:
        raise ValueError(f"stream batch {batch_index} is empty (0 samples)")
    return Batch(images, labels.long(), metadata)


def metadata_values(metadata: Any, key: str, batch_size: int, batch_index: int) -> list[str]:
    """Per-sample values of ``key`` in a batch's metadata, as strings (length ``batch_size``)."""
    import torch

    if metadata is None:
        raise ValueError(f"stream batch {batch_index} has no metadata, but domain key {key!r} was requested")
    if isinstance(metadata, Mapping):
        if key not in metadata:
            raise ValueError(
                f"domain key {key!r} not in the metadata of stream batch {batch_index}; "
                f"available keys: {', '.join(map(str, metadata))}"
            )
        values = metadata[key]
        if isinstance(values, torch.Tensor):
            values = values.tolist()
        elif isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            values = [values] * batch_size
    elif isinstance(metadata, Sequence) and all(isinstance(entry, Mapping) for entry in metadata):
        missing = [index for index, entry in enumerate(metadata) if key not in entry]
        if missing:
            raise ValueError(
                f"domain key {key!r} missing from sample {missing[0]} of stream batch {batch_index}; "
                f"available keys: {', '.join(map(str, metadata[missing[0]]))}"
            )
        values = [entry[key] for entry in metadata]
    else:
        raise ValueError(
            f"metadata of stream batch {batch_index} must be a mapping or a list of per-sample dicts, "
            f"got {type(metadata).__name__}"
        )
    if len(values) != batch_size:
        raise ValueError(
            f"metadata key {key!r} of stream batch {batch_index} has {len(values)} values for {batch_size} samples"
        )
    return [str(value) for value in values]


def majority_value(values: Sequence[str]) -> str:
    """The most frequent value; ties go to the value seen first."""
    counts = collections.Counter(values)
    best = max(counts.values())
    return next(value for value in values if counts[value] == best)


@dataclass(frozen=True)
class SizedStream:
    """A stream whose length in samples is known (None: unknown), e.g. from a manifest or --max-samples;
    progress bars show it as their total."""

    batches: Iterable[Any]
    num_samples: int | None

    def __iter__(self) -> Iterator[Any]:
        return iter(self.batches)


def stream_length(stream: Iterable[Any]) -> int | None:
    """Samples in ``stream`` if known (a :class:`SizedStream`), else None."""
    return stream.num_samples if isinstance(stream, SizedStream) else None


def check_resume_position(samples: int, length: int | None) -> None:
    """ValueError (one line) when a stream of ``length`` samples (None: unknown) ends before sample
    ``samples``, where a resumed run would continue: a checkpoint's position beyond the stream."""
    if length is not None and samples > length:
        raise ValueError(f"cannot resume the stream at sample {samples:,}: it ends at sample {length:,}")


def skip_samples(batches: Iterable[Any], samples: int) -> Iterable[Any]:
    """``batches`` without its first ``samples`` samples, which are read and dropped whole batch by
    batch (``samples`` must fall on a batch boundary, and not beyond the stream's end: ValueError
    otherwise, at once for a sized stream, when the stream ends for another); a sized stream's length
    shrinks by ``samples``. ``batches`` itself when ``samples`` is 0."""
    if not samples:
        return batches
    known = stream_length(batches)
    check_resume_position(samples, known)
    return SizedStream(_skipped(batches, samples), None if known is None else known - samples)


def _skipped(batches: Iterable[Any], samples: int) -> Iterator[Any]:
    iterator = iter(batches)
    dropped = 0
    while dropped < samples:
        item = next(iterator, None)
        if item is None:
            check_resume_position(samples, dropped)  # raises: the stream ended before sample ``samples``
        dropped += as_batch(item, 0).size
    if dropped != samples:
        raise ValueError(
            f"cannot resume the stream at sample {samples:,}: it is not the start of a batch "
            f"(batch boundary at {dropped:,})"
        )
    yield from iterator


def limit_samples(batches: Iterable[Any], max_samples: int) -> SizedStream:
    """Items of ``batches`` until ``max_samples`` samples were yielded, the last batch cut; its length
    is ``max_samples`` (or the stream's own, if known and shorter)."""
    check_positive_int("max_samples", max_samples, MAX_SAMPLES)
    known = stream_length(batches)
    return SizedStream(_limited(batches, max_samples), max_samples if known is None else min(known, max_samples))


def _limited(batches: Iterable[Any], max_samples: int) -> Iterator[Any]:
    seen = 0
    for index, item in enumerate(batches):
        batch = as_batch(item, index)
        remaining = max_samples - seen
        if batch.size > remaining:
            metadata = batch.metadata
            if isinstance(metadata, Mapping):
                metadata = {key: value[:remaining] for key, value in metadata.items()}
            elif isinstance(metadata, Sequence):
                metadata = metadata[:remaining]
            yield (batch.images[:remaining], batch.labels[:remaining], metadata)
            return
        yield item
        seen += batch.size
        if seen >= max_samples:
            return
