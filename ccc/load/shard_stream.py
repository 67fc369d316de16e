"""Shard streams: :func:`open_stream` reads a run folder's shards, or shard files and URLs, in stream order.

A run folder's ``manifest.json`` gives each shard's sample range, byte size and sha256, so whole
shards before ``start`` (or wanted by other consumers) are never opened, and every shard read is
checked against the manifest (see :mod:`ccc.load`, *Checks*). Opening a shard location is
:func:`ccc.shards.location.open_shard`'s job, reading its samples :func:`ccc.shards.reader.read_samples`'.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccc.load.base import CCCStream, Skipped
from ccc.load.decode import decode_tar_sample
from ccc.load.sample import StreamError, StreamSample
from ccc.load.selection import DEFAULT_SAMPLES_PER_TURN, Selection
from ccc.shards.errors import ShardReadError
from ccc.shards.location import open_shard
from ccc.shards.manifest import MANIFEST_NAME, Manifest, ManifestError, file_sha256, load_manifest
from ccc.shards.mirror import MIRROR_NAME, MirrorError, mirrored_shards
from ccc.shards.published import resolve_published
from ccc.shards.reader import TarSample, read_samples
from ccc.shards.record import sample_key, shard_name, shard_pattern
from ccc.shards.remote import RemoteOptions
from ccc.stream.spec import StreamSpec

__all__ = ["VERIFY_MODES", "ShardLocation", "open_stream"]

VERIFY_MODES = (None, "sha256")
"""``verify=`` of :func:`open_stream`: None (size, key and count checks only) or ``"sha256"``."""


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
    """Shards read in order, whole shards outside this consumer's selection passed over."""

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
            return (
                f"shard {shard.location}: altered (sha256 differs from the manifest's; "
                "the file changed after it was written)"
            )
        return None

    def _samples(self, selection: Selection) -> Iterator[StreamSample | Skipped]:
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
                            _check_place(sample, name, count, None if shard.first_sample is None else index)
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


def _check_place(sample: TarSample, name: str, count: int | None, index: int | None) -> None:
    """Refuse a sample that is not where the manifest puts it.

    Args:
        sample: a sample of shard ``name``.
        count: the samples the manifest records for the shard (None: unknown).
        index: the stream index the manifest gives the sample (None: no manifest, keys unchecked).

    Raises:
        ShardReadError: the sample lies beyond ``count``, or its key is not :func:`sample_key` of ``index``.
    """
    if count is not None and sample.position >= count:
        raise ShardReadError(f"shard {name}: altered (holds more than the {count} samples the manifest records)")
    if index is not None and sample.key != sample_key(index):
        raise ShardReadError(
            f"shard {name}: altered (sample {sample.position} of the shard has key {sample.key}, "
            f"expected {sample_key(index)} for stream index {index}: "
            "the file is not this shard of the manifest)"
        )


def _stream_folder(source: object) -> Path | None:
    """The folder ``source`` names (a folder, or the ``manifest.json`` in one); None for anything else."""
    if not isinstance(source, (str, os.PathLike)):
        return None
    path = Path(source)
    if path.is_dir():
        return path
    return path.parent if path.name == MANIFEST_NAME and path.is_file() else None


def _folder_shards(folder: Path) -> tuple[Sequence[ShardLocation], StreamSpec | None, int]:
    """The shards, the stream definition and the sample count of a run folder, or of a ``ccc-mirror``
    folder without a manifest (no definition; its ``mirror.json`` gives the shards)."""
    if not (folder / MANIFEST_NAME).exists() and (folder / MIRROR_NAME).exists():
        shards = _mirror_shards(folder)
        return shards, None, sum(shard.sample_count or 0 for shard in shards)
    manifest_shards, spec = _manifest_shards(folder)
    return manifest_shards, spec, spec.num_images


def _mirror_shards(folder: Path) -> list[ShardLocation]:
    """The shards of a ``ccc-mirror`` folder without a manifest (a published stream), with the sizes,
    sha256 and sample counts its ``mirror.json`` records; StreamError for an unreadable one."""
    try:
        records = mirrored_shards(folder)
    except MirrorError as error:
        raise StreamError(str(error)) from None
    return [
        ShardLocation(str(folder / record.name), None, record.samples, True, record.sha256, record.bytes)
        for record in records
    ]


def _manifest_shards(folder: Path) -> tuple[_ManifestShards, StreamSpec]:
    """The shards and the stream of a run folder; StreamError without a manifest or with a malformed one."""
    try:
        manifest = load_manifest(folder)
    except FileNotFoundError:
        raise StreamError(
            f"folder {folder} has no {MANIFEST_NAME}; to read shards without a manifest "
            "(e.g. the published CCC shards) pass the shard files, "
            f"e.g. open_stream('{folder}/{shard_pattern(300)}') or a list of paths"
        ) from None
    except ManifestError as error:
        raise StreamError(str(error)) from None
    return _ManifestShards(folder, manifest), manifest.stream


def _expand(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The shard locations of a path, URL or brace pattern, or of a list of them, in order."""
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
            their sample ranges; ``start`` skips whole shards); a ``ccc-mirror`` folder (its
            ``mirror.json`` gives the shards, their sizes, sha256 and sample counts); a shard path or
            URL, a brace pattern (``/data/ccc/serial_{00000..00299}.tar``, ``pipe:curl -s https://…/serial_{00000..00009}.tar``);
            ``published:<name>`` (one of the 27 published streams, e.g.
            ``published:baseline_20_transition+speed_2000_seed_43``; :mod:`ccc.shards.published`);
            or a list of them. Our shards and the published CCC shards (keys ``input.jpg``,
            ``output.cls``, ``info``) are both read; without a manifest, stream indices count from 0
            at the first shard given.
        start: first stream index to read, >= 0.
        limit: number of samples to read from ``start`` (None: to the end).
        image_format: one of :data:`ccc.load.decode.IMAGE_FORMATS` (default ``uint8`` tensors, cheap between processes).
        chunk_size: consecutive samples per consumer turn (see :mod:`ccc.load`, *Order*).
        rank, world_size: split across processes (default: environment ``RANK``/``WORLD_SIZE``).
        rank_split: ``interleaved`` (default) or ``contiguous``.
        on_error: ``raise`` (default) or ``skip`` (skip and warn with counts at the end).
        verify: None (default: with a manifest, each shard's byte size, every sample's key and the
            sample count are checked) or ``"sha256"`` (also each shard's sha256 against the
            manifest's, computed over the whole file before its first sample is delivered; needs a
            run folder). Cost measured in ``BENCHMARKS.md``.
        remote: retries, backoff and timeouts of ``http(s)://`` shards
            (:class:`ccc.shards.remote.RemoteOptions`; default: 10 tries, 1 s doubling to 60 s, a
            read failing after 300 s of waiting without useful progress at 10,000 B/s).
        published_url: base URL (or folder) of ``published:`` names (default ``$CCC_PUBLISHED_URL``,
            else :data:`ccc.shards.published.DEFAULT_PUBLISHED_URL`).
        cache: a folder keeping each remote shard once read, so that re-reads are local (the shard is
            downloaded whole before its first sample; cap: ``RemoteOptions.cache_max_bytes``;
            :mod:`ccc.shards.shard_cache`). None (default): remote shards are streamed.

    Raises:
        StreamError: a folder without manifest or with a malformed one.
        ValueError: invalid arguments (``verify="sha256"`` without a run or mirror folder, an unknown
            published name included).
    """
    if verify not in VERIFY_MODES:
        raise ValueError(f"verify must be None or 'sha256', got {verify!r}")
    if cache is not None:
        remote = dataclasses.replace(remote or RemoteOptions(), cache=os.fspath(cache))
    folder = _stream_folder(source)
    if folder is not None:
        shards, spec, total = _folder_shards(folder)
    else:
        if verify is not None:
            raise ValueError(
                f"verify={verify!r} needs a run folder with a manifest (it records each shard's sha256), got {source!r}"
            )
        spec, total = None, None
        shards = [ShardLocation(location) for location in _expand(resolve_published(source, published_url))]
    return _ShardStream(
        shards,
        total,
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
