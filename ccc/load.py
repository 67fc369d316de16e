"""CCC streams for other projects: read shards (ours or the published ones) or render on the fly.

    from ccc import open_stream, render_stream, stream_loader

    stream = open_stream("shards/baseline_20_transition+speed_2000_seed_43")     # folder with a manifest
    for image, label, metadata in stream:                                        # stream order
        ...
    for images, labels, metadata in stream_loader(stream, batch_size=64, num_workers=4):
        ...                                                                      # still stream order

Both :func:`open_stream` and :func:`render_stream` return a :class:`CCCStream`, a
``torch.utils.data.IterableDataset`` yielding :class:`StreamSample` ``(image, label, metadata)``.

**Order.** Positions ``start, start + 1, …`` (up to ``start + limit``) are cut into chunks of
``chunk_size`` consecutive samples. Consumers are the ``world_size`` ranks × the DataLoader workers
of each rank. With ``rank_split="interleaved"`` (default) chunk ``c`` goes to rank ``c % world_size``;
with ``"contiguous"`` (finite streams) rank ``r`` gets the ``r``-th of ``world_size`` contiguous,
equal (±1) ranges. Inside a rank, the rank's chunks go round-robin to its DataLoader workers, which
is exactly the order in which a ``DataLoader`` with ``batch_size == chunk_size`` collects batches —
so :func:`stream_loader` (which sets ``chunk_size`` to the batch size) yields each rank's samples in
stream order. Every position is read by exactly one consumer: no loss, no duplicate; a stream with
fewer shards (or samples) than workers works, idle workers end at once. Details: ``docs/loading.md``.

**Checks.** With a manifest, every shard's byte size is compared with the manifest's before it is
read, every sample's key must be its stream index (``sample_key``) and a shard must hold exactly
the manifest's sample count; ``verify="sha256"`` also compares each shard's sha256 with the
manifest's before any of its samples is delivered (catches any changed byte, e.g. in a JPEG, which
decoding alone may not notice).

**Errors.** ``on_error="raise"`` (default): a missing, unfinished, truncated, damaged or altered
shard, or a sample without image or label, stops the stream with a :class:`StreamError` naming the
shard and the sample. ``on_error="skip"``: such samples (or the rest of such a shard) are skipped,
and a :class:`StreamWarning` with the counts is issued when the iteration ends. Every index is
delivered at most once, every skipped index this consumer would have read is counted once, and the
shards after a skipped one are read. The stream is never shortened silently.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from PIL import Image

from ccc.render import decode_jpeg, encode_jpeg, render_pixels
from ccc.shards.manifest import MANIFEST_NAME, Manifest, ManifestError, file_sha256, load_manifest
from ccc.shards.published import resolve_published
from ccc.shards.reader import ShardReadError, open_shard, read_samples
from ccc.shards.remote import RemoteOptions
from ccc.shards.record import (
    IMAGE_MEMBER,
    SampleRecordError,
    decode_members,
    record_metadata,
    sample_key,
    sample_place,
    shard_name,
    shard_pattern,
)
from ccc.stream.plan import StreamPlan, plan_sample, plan_stream
from ccc.stream.spec import CCC_KIND, UNBOUNDED_IMAGES, PlanError, StreamSpec
from ccc.validation import check_non_negative_int, check_positive_int

__all__ = [
    "ERROR_POLICIES",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "IMAGE_FORMATS",
    "RANK_SPLITS",
    "UNBOUNDED_IMAGES",
    "VERIFY_MODES",
    "CCCStream",
    "ShardLocation",
    "StreamError",
    "StreamSample",
    "StreamWarning",
    "collate_samples",
    "decode_image",
    "decode_tar_sample",
    "open_stream",
    "render_stream",
    "stream_loader",
]

logger = logging.getLogger(__name__)

IMAGE_FORMATS = ("uint8", "float", "normalized", "pil", "jpeg")
"""Image forms: ``uint8`` tensor 3×224×224 (default), ``float`` tensor in [0, 1], ``normalized``
float tensor ``(x - IMAGENET_MEAN) / IMAGENET_STD``, ``pil`` RGB image, ``jpeg`` encoded bytes."""

ERROR_POLICIES = ("raise", "skip")
VERIFY_MODES = (None, "sha256")
"""``verify=`` of :func:`open_stream`: None (size, key and count checks only) or ``"sha256"``."""
RANK_SPLITS = ("interleaved", "contiguous")

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

DEFAULT_SAMPLES_PER_TURN = 64
"""Consecutive samples a reading consumer (rank × DataLoader worker) takes per turn (``chunk_size`` of
:func:`open_stream` and :func:`render_stream`; :func:`stream_loader` sets it to the batch size)."""


class StreamError(ValueError):
    """A stream cannot be opened or read; the message names the shard and the sample where known.

    Raised in a DataLoader worker, it reaches the main process with the same message: torch
    re-raises a worker's exception as ``StreamError("Caught StreamError in DataLoader worker …
    Original Traceback … ccc.load.StreamError: MESSAGE")``, which keeps MESSAGE only.
    """

    def __init__(self, message: str) -> None:
        worker_marker = f"{__name__}.{type(self).__qualname__}: "
        if message.startswith(f"Caught {type(self).__name__} in DataLoader worker") and worker_marker in message:
            message = message.rpartition(worker_marker)[2].strip()
        super().__init__(message)


class StreamWarning(UserWarning):
    """Samples were skipped under ``on_error="skip"``; the message gives the counts."""


class StreamSample(NamedTuple):
    """One sample of a stream.

    Attributes:
        image: in the stream's ``image_format`` (see :data:`IMAGE_FORMATS`).
        label: class index (ImageNet: 0–999 in sorted WordNet-id order).
        metadata: ``index`` (stream position), ``n1``, ``s1``, ``n2``, ``s2`` (severities in
            [0, 5]), ``path_step`` (None in published shards), ``source_path`` (``<wnid>/<file>``),
            ``calibrated_accuracy`` (percent; None in published shards and the ``cin-c`` and
            ``gradual`` kinds), ``key`` and ``shard`` (None when rendered on the fly); samples of
            the ``cin-c`` and ``gradual`` kinds add ``domain`` (their corruption) and ``severity`` (1–5).
    """

    image: Any
    label: int
    metadata: dict[str, Any]


@dataclass(frozen=True)
class ShardLocation:
    """A shard of a stream.

    Attributes:
        location: local path or URL.
        first_sample: stream index of its first sample (None when unknown: no manifest).
        sample_count: samples it holds (None when unknown).
        finished: False for a shard the manifest lists as not yet written.
        sha256: the manifest's sha256 (hex) of the file (None when unknown).
        bytes: the manifest's file size in bytes (None when unknown).
    """

    location: str
    first_sample: int | None = None
    sample_count: int | None = None
    finished: bool = True
    sha256: str | None = None
    bytes: int | None = None


_MEAN = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
_STD = torch.tensor(IMAGENET_STD).view(3, 1, 1)


def _pixels_to_format(pixels: np.ndarray, image_format: str) -> Any:
    if image_format == "pil":
        return Image.fromarray(pixels)
    tensor = torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1)))
    if image_format == "uint8":
        return tensor
    scaled = tensor.float().div_(255.0)
    return scaled if image_format == "float" else scaled.sub_(_MEAN).div_(_STD)


def decode_image(jpeg: bytes, image_format: str = "uint8") -> Any:
    """Decode stream JPEG bytes into ``image_format`` (one of :data:`IMAGE_FORMATS`).

    Tensors are C×H×W (3×224×224 for CCC); ``pil`` gives an RGB image; ``jpeg`` returns the bytes.

    Raises:
        ValueError: unknown ``image_format``. PIL.UnidentifiedImageError, OSError: undecodable bytes.
    """
    if image_format not in IMAGE_FORMATS:
        raise ValueError(f"image_format must be one of {', '.join(IMAGE_FORMATS)}, got {image_format!r}")
    if image_format == "jpeg":
        return jpeg
    image = decode_jpeg(jpeg)
    return image if image_format == "pil" else _pixels_to_format(np.asarray(image), image_format)


@dataclass(frozen=True)
class _Selection:
    """The relative positions one consumer reads: ``lo <= r < hi`` with ``(r - lo) % period`` in ``[offset, offset + chunk)``."""

    lo: int
    hi: int | None
    period: int
    offset: int
    chunk: int

    def wanted(self, relative: int) -> bool:
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


def _environment_rank() -> tuple[int, int]:
    try:
        rank = int(os.environ.get("RANK", "0"))
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise ValueError(
            f"environment RANK and WORLD_SIZE must be integers, got {os.environ.get('RANK')!r} and {os.environ.get('WORLD_SIZE')!r}"
        ) from None
    return rank, world_size


class CCCStream(torch.utils.data.IterableDataset):
    """An ordered CCC stream; iterate it, or wrap it with :func:`stream_loader`. Create with :func:`open_stream` or :func:`render_stream`.

    Attributes:
        start: first stream index read, >= 0.
        limit: samples read from ``start`` (None: to the end of the stream).
        image_format: one of :data:`IMAGE_FORMATS`.
        chunk_size: consecutive samples a consumer reads at a time, >= 1 (:func:`stream_loader` sets it to the batch size).
        rank, world_size: this process's rank among ``world_size`` (default: ``RANK``/``WORLD_SIZE`` from the environment, else 0 and 1).
        rank_split: ``interleaved`` or ``contiguous`` (see the module documentation).
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
        if image_format not in IMAGE_FORMATS:
            raise ValueError(f"image_format must be one of {', '.join(IMAGE_FORMATS)}, got {image_format!r}")
        if rank_split not in RANK_SPLITS:
            raise ValueError(f"rank_split must be one of {', '.join(RANK_SPLITS)}, got {rank_split!r}")
        if on_error not in ERROR_POLICIES:
            raise ValueError(f"on_error must be one of {', '.join(ERROR_POLICIES)}, got {on_error!r}")
        environment_rank, environment_world = _environment_rank()
        self.rank = check_non_negative_int("rank", environment_rank if rank is None else rank)
        self.world_size = check_positive_int("world_size", environment_world if world_size is None else world_size)
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

    def _selection(self) -> _Selection:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        chunk = self.chunk_size
        if self.rank_split == "contiguous":
            length = self.length
            assert length is not None
            lo = self.rank * length // self.world_size
            hi = (self.rank + 1) * length // self.world_size
            return _Selection(lo, hi, chunk * workers, worker * chunk, chunk)
        return _Selection(
            0, self.length, chunk * self.world_size * workers, (self.rank + worker * self.world_size) * chunk, chunk
        )

    def __iter__(self) -> Iterator[StreamSample]:
        skipped: list[str] = []
        skipped_samples = 0
        for item in self._samples(self._selection()):
            if isinstance(item, _Skipped):
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

    def _samples(self, selection: _Selection) -> Iterator[StreamSample | _Skipped]:
        raise NotImplementedError

    def _fail(self, reason: str, samples: int | None) -> _Skipped:
        if self.on_error == "raise":
            raise StreamError(reason)
        return _Skipped(reason, samples)


@dataclass(frozen=True)
class _Skipped:
    reason: str
    samples: int | None


def decode_tar_sample(
    members: Mapping[str, bytes], index: int, key: str, shard: str, image_format: str
) -> StreamSample:
    """Decode the members of one tar sample (extension → bytes) into a :class:`StreamSample`.

    Args:
        members: extension → bytes, ours or the published shards' (:func:`ccc.shards.record.decode_members`).
        index: the sample's stream index. key, shard: its key and shard, for messages and metadata.
        image_format: one of :data:`IMAGE_FORMATS`.

    Raises:
        StreamError: naming shard and sample, for a missing image, label or metadata, or undecodable content.
    """
    where = sample_place(shard, key, index)
    try:
        record = decode_members(members, index, where)
    except (SampleRecordError, ShardReadError) as error:
        raise StreamError(str(error)) from None
    metadata = {**record.metadata, "key": key, "shard": shard}
    try:
        image = decode_image(record.jpeg, image_format)
    except (OSError, ValueError) as error:
        raise StreamError(f"{where}: {IMAGE_MEMBER} cannot be decoded ({error})") from None
    return StreamSample(image, record.label, metadata)


class _ManifestShards(Sequence[ShardLocation]):
    """The shards of a manifest's stream, built on demand: cost per shard read, not per shard of the stream."""

    def __init__(self, folder: Path, manifest: Manifest) -> None:
        self.folder = folder
        self.stream = manifest.stream
        self.finished = {entry.index: entry for entry in manifest.shards}

    def __len__(self) -> int:
        return self.stream.num_shards

    def __getitem__(self, index: int) -> ShardLocation:  # type: ignore[override]
        if not 0 <= index < len(self):
            raise IndexError(index)
        sample_range = self.stream.shard_range(index)
        entry = self.finished.get(index)
        return ShardLocation(
            str(self.folder / shard_name(index)),
            sample_range.start,
            len(sample_range),
            entry is not None,
            None if entry is None else entry.sha256,
            None if entry is None else entry.bytes,
        )

    def shard_of(self, sample_index: int) -> int:
        """The shard holding stream index ``sample_index`` (>= 0)."""
        return sample_index // self.stream.shard_size


class _ShardStream(CCCStream):
    def __init__(
        self,
        shards: Sequence[ShardLocation],
        total: int | None,
        spec: StreamSpec | None,
        verify: str | None,
        remote: RemoteOptions | None,
        **options: Any,
    ) -> None:
        self.shards = shards if isinstance(shards, _ManifestShards) else tuple(shards)
        self.spec = spec
        self.verify = verify
        self.remote = remote
        super().__init__(total=total, **options)

    def _altered(self, shard: ShardLocation) -> str | None:
        """Why a local shard's file is not the manifest's (size; sha256 under ``verify="sha256"``), or None."""
        if shard.bytes is None or "://" in shard.location or shard.location.startswith("pipe:"):
            return None
        path = Path(shard.location)
        try:
            size = path.stat().st_size
        except OSError:
            return None
        if size != shard.bytes:
            kind = "truncated" if size < shard.bytes else "altered"
            return f"shard {shard.location}: {kind} ({size:,} bytes, the manifest records {shard.bytes:,})"
        if self.verify == "sha256" and shard.sha256 is not None and file_sha256(path) != shard.sha256:
            return f"shard {shard.location}: altered (sha256 differs from the manifest's; the file changed after it was written)"
        return None

    def _samples(self, selection: _Selection) -> Iterator[StreamSample | _Skipped]:
        next_index = 0
        position = 0
        while position < len(self.shards):
            shard = self.shards[position]
            position += 1
            name = shard.location
            first = shard.first_sample if shard.first_sample is not None else next_index
            upcoming = selection.next_wanted(max(first - self.start, 0))
            if upcoming is None:
                return
            count = shard.sample_count
            end = None if count is None else first + count
            if end is not None:
                next_index = end
                if self.start + upcoming >= end:
                    if isinstance(self.shards, _ManifestShards):
                        position = self.shards.shard_of(self.start + upcoming)
                    continue

            def lost(begin: int, end: int | None = end) -> int | None:
                return None if end is None else selection.count(begin - self.start, end - self.start)

            if not shard.finished:
                yield self._fail(
                    f"shard {name} (samples {first}–{first + (count or 1) - 1}) is not finished according to the "
                    "manifest; run the same ccc-generate command again to finish it",
                    lost(first),
                )
                continue
            accounted = first
            failure = self._altered(shard)
            if failure is None:
                try:
                    with open_shard(name, self.remote) as handle:
                        for sample in read_samples(
                            handle, name, lambda place, first=first: selection.wanted(first + place - self.start)
                        ):
                            index = first + sample.position
                            if count is not None and sample.position >= count:
                                raise ShardReadError(
                                    f"shard {name}: altered (holds more than the {count} samples the manifest records)"
                                )
                            if shard.first_sample is not None and sample.key != sample_key(index):
                                raise ShardReadError(
                                    f"shard {name}: altered (sample {sample.position} of the shard has key {sample.key}, "
                                    f"expected {sample_key(index)} for stream index {index}: the file is not this shard of the manifest)"
                                )
                            accounted = index + 1
                            if sample.members is None:
                                if index >= self.start and selection.next_wanted(index - self.start) is None:
                                    return
                                continue
                            try:
                                yield decode_tar_sample(sample.members, index, sample.key, name, self.image_format)
                            except StreamError as error:
                                yield self._fail(str(error), 1)
                            if selection.next_wanted(index - self.start + 1) is None:
                                return
                except ShardReadError as error:
                    failure = str(error)
            if failure is None and end is not None and accounted != end:
                failure = f"shard {name}: altered (holds {accounted - first} samples, the manifest records {count})"
            if failure is not None:
                yield self._fail(failure, lost(accounted))
            if end is None:
                next_index = accounted


class _RenderedStream(CCCStream):
    def __init__(self, plan: StreamPlan, compress: bool, **options: Any) -> None:
        self.plan = plan
        self.spec = plan.spec
        self.compress = compress
        super().__init__(total=plan.spec.num_images, **options)

    def _samples(self, selection: _Selection) -> Iterator[StreamSample | _Skipped]:
        root = Path(self.plan.sources.root)
        relative = selection.next_wanted(0)
        while relative is not None:
            index = self.start + relative
            spec = plan_sample(self.plan, index)
            pixels = render_pixels(spec, (root / spec.source_path).read_bytes())
            if self.compress:
                image = decode_image(encode_jpeg(pixels), self.image_format)
            else:
                image = _pixels_to_format(pixels, self.image_format)
            metadata = {**record_metadata(spec.to_json_dict(), index), "key": None, "shard": None}
            yield StreamSample(image, spec.class_index, metadata)
            relative = selection.next_wanted(relative + 1)


def _manifest_shards(folder: Path) -> tuple[_ManifestShards, StreamSpec]:
    try:
        manifest = load_manifest(folder)
    except FileNotFoundError:
        raise StreamError(
            f"folder {folder} has no {MANIFEST_NAME}; to read shards without a manifest (e.g. the published CCC shards) "
            f"pass the shard files, e.g. open_stream('{folder}/{shard_pattern(300)}') or a list of paths"
        ) from None
    except ManifestError as error:
        raise StreamError(str(error)) from None
    return _ManifestShards(folder, manifest), manifest.stream


def _expand(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    from braceexpand import braceexpand

    if isinstance(source, (str, os.PathLike)):
        return list(braceexpand(os.fspath(source)))
    if not isinstance(source, Sequence) or not source:
        raise ValueError(
            f"source must be a run folder, a shard path or URL pattern, or a non-empty list of them, got {source!r}"
        )
    return [location for item in source for location in _expand(item)]


def open_stream(
    source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    start: int = 0,
    limit: int | None = None,
    image_format: str = "uint8",
    chunk_size: int = DEFAULT_SAMPLES_PER_TURN,
    rank: int | None = None,
    world_size: int | None = None,
    rank_split: str = "interleaved",
    on_error: str = "raise",
    verify: str | None = None,
    remote: RemoteOptions | None = None,
    published_url: str | None = None,
    cache: str | os.PathLike[str] | None = None,
) -> CCCStream:
    """Open a stream of CCC shards for reading in stream order.

    Args:
        source: a run folder written by ``ccc-generate`` (its ``manifest.json`` gives the shards and
            their sample ranges; ``start`` skips whole shards); a shard path or URL, a brace pattern
            (``/data/ccc/serial_{00000..00299}.tar``, ``pipe:curl -s https://…/serial_{00000..00009}.tar``);
            ``published:<name>`` (one of the 27 published streams, e.g.
            ``published:baseline_20_transition+speed_2000_seed_43``; :mod:`ccc.shards.published`);
            or a list of them. Our shards and the published CCC shards (keys ``input.jpg``,
            ``output.cls``, ``info``) are both read; without a manifest, stream indices count from 0
            at the first shard given.
        start: first stream index to read, >= 0.
        limit: number of samples to read from ``start`` (None: to the end).
        image_format: one of :data:`IMAGE_FORMATS` (default ``uint8`` tensors, cheap between processes).
        chunk_size: consecutive samples per consumer turn (see the module documentation).
        rank, world_size: split across processes (default: environment ``RANK``/``WORLD_SIZE``).
        rank_split: ``interleaved`` (default) or ``contiguous``.
        on_error: ``raise`` (default) or ``skip`` (skip and warn with counts at the end).
        verify: None (default: with a manifest, each shard's byte size, every sample's key and the
            sample count are checked) or ``"sha256"`` (also each shard's sha256 against the
            manifest's, computed over the whole file before its first sample is delivered; needs a
            run folder). Cost measured in ``BENCHMARKS.md``.
        remote: retries, backoff and timeouts of ``http(s)://`` shards
            (:class:`ccc.shards.remote.RemoteOptions`; default: 10 tries, 1 s doubling to 60 s).
        published_url: base URL (or folder) of ``published:`` names (default ``$CCC_PUBLISHED_URL``,
            else :data:`ccc.shards.published.DEFAULT_PUBLISHED_URL`).
        cache: a folder keeping each remote shard once read, so that re-reads are local (the shard is
            downloaded whole before its first sample; cap: ``RemoteOptions.cache_max_bytes``;
            :mod:`ccc.shards.shard_cache`). None (default): remote shards are streamed.

    Raises:
        StreamError: a folder without manifest or with a malformed one.
        ValueError: invalid arguments (``verify="sha256"`` without a manifest, an unknown published name included).
    """
    if verify not in VERIFY_MODES:
        raise ValueError(f"verify must be None or 'sha256', got {verify!r}")
    if cache is not None:
        remote = dataclasses.replace(remote or RemoteOptions(), cache=os.fspath(cache))
    spec: StreamSpec | None = None
    if isinstance(source, (str, os.PathLike)) and Path(source).is_dir():
        shards, spec = _manifest_shards(Path(source))
    elif isinstance(source, (str, os.PathLike)) and Path(source).name == MANIFEST_NAME and Path(source).is_file():
        shards, spec = _manifest_shards(Path(source).parent)
    else:
        if verify is not None:
            raise ValueError(
                f"verify={verify!r} needs a run folder with a manifest (it records each shard's sha256), got {source!r}"
            )
        shards = [ShardLocation(location) for location in _expand(resolve_published(source, published_url))]
    return _ShardStream(
        shards,
        None if spec is None else spec.num_images,
        spec,
        verify,
        remote,
        start=start,
        limit=limit,
        image_format=image_format,
        chunk_size=chunk_size,
        rank=rank,
        world_size=world_size,
        rank_split=rank_split,
        on_error=on_error,
    )


def _manifest_stream(definition: str | os.PathLike[str]) -> StreamSpec:
    """The stream of a run folder (or of its ``manifest.json``)."""
    folder = Path(definition)
    folder = folder.parent if folder.name == MANIFEST_NAME else folder
    try:
        return load_manifest(folder).stream
    except FileNotFoundError:
        raise StreamError(
            f"{folder} has no {MANIFEST_NAME}: pass a run folder written by ccc-generate, a StreamSpec or a mapping"
        ) from None
    except ManifestError as error:
        raise StreamError(str(error)) from None


def render_stream(
    definition: Any,
    *,
    imagenet: str | os.PathLike[str] | None = None,
    calibration: Any = None,
    start: int = 0,
    limit: int | None = None,
    image_format: str = "uint8",
    compress: bool = True,
    chunk_size: int = DEFAULT_SAMPLES_PER_TURN,
    rank: int | None = None,
    world_size: int | None = None,
    rank_split: str = "interleaved",
    skip_bad_images: bool = False,
) -> CCCStream:
    """Render a stream on the fly: the samples its shards would hold, without storing them.

    Args:
        definition: a :class:`ccc.stream.spec.StreamSpec`, a run folder (its manifest's stream), or a
            mapping ``{"difficulty": "medium", "speed": 2000, "seed": 43}`` (optional keys
            ``kind``, ``baseline_accuracy``, ``corruptions``, ``num_images`` (default: unbounded),
            ``schedule``, ``path_objective``, and for the other kinds ``severity``, ``crop``;
            see :func:`ccc.stream.spec.resolve_stream_spec`).
        imagenet: the source image folder (default ``$CCC_IMAGENET``).
        calibration: a :class:`ccc.calibration.CalibrationTable` or the path of one; None for the
            ``cin-c`` and ``gradual`` kinds (``{"kind": "cin-c", "severity": 5, "speed": 5000}``),
            which need no table.
        start, limit, image_format, chunk_size, rank, world_size, rank_split: as :func:`open_stream`.
        compress: True (default) encodes and decodes each image with the shards' JPEG settings, so
            images are byte-identical to the shards'; False skips the JPEG step (uncompressed
            pixels, not those of the shards; ``image_format="jpeg"`` then is refused).
        skip_bad_images: exclude unreadable source images, as ``ccc-generate --skip-bad-images``.

    Rendering runs where the stream is iterated: wrap it in :func:`stream_loader` with
    ``num_workers`` to render in worker processes.

    Raises:
        StreamError, ValueError, ccc.stream.sources.ImageFolderError, ccc.calibration.CalibrationError:
            bad definitions, folders or tables (messages say what to provide).
    """
    from ccc.calibration import CalibrationTable

    if not compress and image_format == "jpeg":
        raise ValueError("image_format 'jpeg' needs compress=True (uncompressed streams have no JPEG bytes)")
    if isinstance(definition, (str, os.PathLike)):
        definition = _manifest_stream(definition)
    elif not isinstance(definition, (StreamSpec, Mapping)):
        raise ValueError(
            f"stream definition must be a StreamSpec, a run folder or a mapping, got {type(definition).__name__}"
        )
    kind = definition.kind if isinstance(definition, StreamSpec) else definition.get("kind") or CCC_KIND
    if calibration is None and kind == CCC_KIND:
        raise ValueError("calibration must be a CalibrationTable or the path of one (.npz), got None")
    if calibration is None:
        table = None
    else:
        table = calibration if isinstance(calibration, CalibrationTable) else CalibrationTable.load(calibration)
    try:
        plan = plan_stream(
            definition, table, None if imagenet is None else os.fspath(imagenet), skip_bad_images=skip_bad_images
        )
    except PlanError as error:
        raise StreamError(f"stream definition does not fit the calibration table and images: {error}") from None
    return _RenderedStream(
        plan,
        compress,
        start=start,
        limit=limit,
        image_format=image_format,
        chunk_size=chunk_size,
        rank=rank,
        world_size=world_size,
        rank_split=rank_split,
        on_error="raise",
    )


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
) -> torch.utils.data.DataLoader:
    """A DataLoader yielding ``(images, labels, metadata)`` batches of ``stream`` in stream order.

    ``images``: a tensor N×3×H×W (uint8 or float, as the stream's ``image_format``) or, for PIL
    images and bytes, a list; ``labels``: int64 (N,); ``metadata``: a list of N dicts, one per sample
    (``index``, ``n1``, ``s1``, ``n2``, ``s2``, ``path_step``, ``source_path``, … as the stream yields).

    The recipe that keeps order: the stream's ``chunk_size`` is set to ``batch_size``, so worker
    ``w`` of ``W`` renders or reads batches ``w, w + W, …`` and the DataLoader, which collects
    batches from its workers round-robin, returns them in order. Only the last batch may be short.

    Args:
        stream: from :func:`open_stream` or :func:`render_stream`.
        batch_size: samples per batch, >= 1.
        num_workers: DataLoader worker processes, >= 0.
        dataloader_options: further ``torch.utils.data.DataLoader`` arguments (not ``batch_size``,
            ``collate_fn``, ``shuffle`` or ``sampler``).
    """
    check_positive_int("batch_size", batch_size)
    check_non_negative_int("num_workers", num_workers)
    reserved = sorted(
        {"batch_size", "collate_fn", "shuffle", "sampler", "batch_sampler", "in_order"} & set(dataloader_options)
    )
    if reserved:
        raise ValueError(f"stream_loader sets {', '.join(reserved)} itself to keep stream order")
    return torch.utils.data.DataLoader(
        stream.with_chunk_size(batch_size),
        batch_size=batch_size,
        num_workers=num_workers,
        collate_fn=collate_samples,
        in_order=True,
        **dataloader_options,
    )
