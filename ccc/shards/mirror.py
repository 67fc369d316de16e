"""Local copies of remote streams (``ccc-mirror``): parallel, resumable, every shard checked before it counts.

A mirror folder holds the shards under their names (``serial_00000.tar`` …) and ``mirror.json``
(:data:`MIRROR_NAME`): per shard its source URL, size, sha256 and sample count. A shard is
downloaded to a hidden ``.<name>.part`` file (continued where it stopped by the next run, with a
``Range`` request), read to its end with every sample's members and JPEG decoded and its samples
counted, and only then renamed to its name; so a shard under its own name is always complete, and a
re-run skips it. ``.<name>.part.json`` records the remote file's ETag, Last-Modified and size: a
partial file is continued only if the server still has the same file, else downloaded again whole.
When the source is a run folder served over HTTP (``<url>/manifest.json``), every shard's size,
sha256 and sample count must equal its manifest's, and the manifest (listing the mirrored shards)
is written into the mirror, which then is a run folder like a generated one: ``ccc-verify``,
``open_stream(folder, verify="sha256")`` and ``tta-eval --stream ccc:folder`` read it.
A mirror folder may be shared (a lab's scratch space): its files are created through
:mod:`ccc.safe_files` (partial downloads and the lock never through a link, whole files under a fresh
name renamed into place), a shard listed under its name or ``mirror.json`` that is a symbolic link is
refused, and ``mirror.json`` may list only plain file names inside the folder.
The published streams have no manifest; their mirror is read with ``published_url=<parent folder>``
(or ``$CCC_PUBLISHED_URL``) or as a shard pattern.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from ccc.folder_lock import FolderLock
from ccc.safe_files import open_owned, refuse_symlink, write_atomically
from ccc.shards.errors import ShardReadError
from ccc.shards.manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    MAX_MANIFEST_SHARDS,
    Manifest,
    ManifestError,
    file_sha256,
    load_manifest,
    save_manifest,
)
from ccc.shards.published import PUBLISHED_PREFIX, published_locations
from ccc.shards.reader import read_samples
from ccc.shards.record import SampleRecordError, check_shard_file_name, decode_members, sample_place
from ccc.shards.remote import RemoteOptions, ShardChangedError, is_remote, open_remote

__all__ = [
    "MIRROR_FORMAT",
    "MIRROR_NAME",
    "MirrorError",
    "MirrorShard",
    "MirroredShard",
    "check_mirror",
    "mirror_stream",
    "plan_mirror",
]

MIRROR_NAME = "mirror.json"
MIRROR_FORMAT = "ccc-mirror"
_MIRROR_FORMAT_VERSION = 1
_LOCK_NAME = ".ccc-mirror.lock"
_PART_SUFFIX = ".part"
_CHUNK_BYTES = 1 << 20

logger = logging.getLogger(__name__)


class MirrorError(ValueError):
    """A mirror cannot be made: a bad source, or a shard that differs from its manifest or does not decode."""


class _Stopped(Exception):
    """A download ended because another one failed or the call was interrupted (``stop`` was set)."""


@dataclass(frozen=True)
class MirrorShard:
    """A shard to mirror: its place in the stream, URL, file name and, from a manifest, what it must be.

    Attributes:
        index: position in the stream's shard list, 0-based.
        url: where it is read from.
        name: its file name in the mirror.
        sha256, bytes, sample_count: the source manifest's values (None without a manifest).
    """

    index: int
    url: str
    name: str
    sha256: str | None = None
    bytes: int | None = None
    sample_count: int | None = None


@dataclass(frozen=True)
class MirroredShard:
    """A shard of the mirror, checked: source URL, file name, size in bytes, sha256 (hex), samples."""

    url: str
    name: str
    bytes: int
    sha256: str
    samples: int


def plan_mirror(
    source: str, remote: RemoteOptions | None = None, published_url: str | None = None
) -> tuple[list[MirrorShard], Manifest | None]:
    """The shards of ``source`` and its manifest (None when it has none).

    Args:
        source: ``published:<name>``; the URL of a run folder served over HTTP (it holds
            ``manifest.json``); or shard URLs as a brace pattern (``https://host/ccc/serial_{00000..00009}.tar``).
        remote, published_url: as :func:`ccc.load.open_stream`.

    Raises:
        MirrorError: a source that is none of these, or a manifest that cannot be read.
        ValueError: an unknown published name.
    """
    from braceexpand import braceexpand

    if source.startswith(PUBLISHED_PREFIX):
        locations = published_locations(source[len(PUBLISHED_PREFIX) :], published_url)
        return [MirrorShard(index, url, url.rpartition("/")[2]) for index, url in enumerate(locations)], None
    if not is_remote(source):
        raise MirrorError(f"source must be published:<name> or an http(s):// URL, got {source!r}")
    if source.endswith(".tar") or "{" in source:
        locations = list(braceexpand(source))
        names = [_check_name(url.rpartition("/")[2], f"source {source!r}") for url in locations]
        if len(set(names)) != len(names):
            raise MirrorError(f"source {source!r} names two shards with the same file name")
        return [MirrorShard(index, url, name) for index, (url, name) in enumerate(zip(locations, names))], None
    base = source.rstrip("/").removesuffix("/" + MANIFEST_NAME)
    manifest = _remote_manifest(f"{base}/{MANIFEST_NAME}", remote)
    shards = [
        MirrorShard(info.index, f"{base}/{info.name}", info.name, info.sha256, info.bytes, info.sample_count)
        for info in manifest.shards
    ]
    return shards, manifest


def _check_name(name: object, where: str) -> str:
    """``name`` when it can be a shard of a mirror folder: a plain file name
    (:func:`ccc.shards.record.check_shard_file_name`) that is none of the mirror's own files."""
    check_shard_file_name(name, where, error=MirrorError)
    if name in (MIRROR_NAME, MANIFEST_NAME):
        raise MirrorError(f"{where}: shard name {name!r} is the mirror's own {name}; rename the shard")
    return name  # type: ignore[return-value]


def _remote_manifest(url: str, remote: RemoteOptions | None) -> Manifest:
    """Read a manifest over HTTP (through :func:`ccc.load`'s manifest checks, from a temporary folder);
    at most :data:`ccc.shards.manifest.MAX_MANIFEST_BYTES` are read, a longer body is refused."""
    with open_remote(url, remote) as handle:
        text = handle.read(MAX_MANIFEST_BYTES + 1)
    if len(text) > MAX_MANIFEST_BYTES:
        raise MirrorError(
            f"{url}: larger than {MAX_MANIFEST_BYTES:,} bytes, the most a manifest of "
            f"{MAX_MANIFEST_SHARDS:,} shards takes; not a manifest of ccc-generate"
        )
    with tempfile.TemporaryDirectory(prefix="ccc-mirror-") as folder:
        (Path(folder) / MANIFEST_NAME).write_bytes(text)
        try:
            return load_manifest(Path(folder))
        except ManifestError as error:
            raise MirrorError(f"{url}: {str(error).partition(': ')[2]}") from None


def _check_shard(path: Path, shard: MirrorShard, against: str = "the source manifest") -> MirroredShard:
    """Read a downloaded shard to its end, decode every sample (members and JPEG), hash and count it;
    compare with ``shard``'s expected values (``against`` names where they come from)."""
    digest = hashlib.sha256()
    size = 0

    class _Hashing(io.RawIOBase):
        def __init__(self, handle: io.BufferedReader) -> None:
            self.handle = handle

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> int:
            nonlocal size
            count = self.handle.readinto(buffer)
            digest.update(memoryview(buffer)[:count])
            size += count
            return count

    samples = 0
    with open(path, "rb") as raw, io.BufferedReader(_Hashing(raw)) as handle:
        for sample in read_samples(handle, shard.url):
            where = sample_place(shard.url, sample.key, sample.position)
            assert sample.members is not None
            try:
                record = decode_members(sample.members, sample.position, where)
                with Image.open(io.BytesIO(record.image)) as image:
                    image.load()
            except (SampleRecordError, OSError, ValueError) as error:
                raise MirrorError(f"{where}: does not decode ({error})") from None
            samples += 1
        while handle.read(_CHUNK_BYTES):  # the padding after the end-of-archive marker, hashed too
            pass
    checked = MirroredShard(shard.url, shard.name, size, digest.hexdigest(), samples)
    expected = (shard.bytes, shard.sha256, shard.sample_count)
    if shard.sha256 is not None and (checked.bytes, checked.sha256, checked.samples) != expected:
        raise MirrorError(
            f"shard {shard.url}: differs from {against} ({checked.bytes:,} bytes, {samples} samples, "
            f"sha256 {checked.sha256[:12]}…; it records {shard.bytes:,} bytes, {shard.sample_count} "
            f"samples, sha256 {shard.sha256[:12]}…)"
        )
    return checked


def _download(
    url: str,
    part: Path,
    start: int,
    remote: RemoteOptions | None,
    on_bytes: Callable[[int], None],
    stop: threading.Event,
) -> None:
    """Append ``url`` from byte ``start`` to ``part`` (never through a link: :func:`ccc.safe_files.open_owned`);
    ``<part>.json`` keeps the file's identity (ETag, Last-Modified, size) so that a later run continues
    only the same file. An OSError while writing (a full disk) names ``part``."""
    sidecar = part.with_name(part.name + ".json")
    identity = _read_identity(sidecar, url) if start else None
    try:
        with (
            open_remote(url, remote, start, identity, stop=stop) as source,
            open_owned(part, "partial download", append=True) as target,
        ):
            write_atomically(sidecar, json.dumps(source.raw.identity).encode("utf-8"))
            try:
                while chunk := source.read(_CHUNK_BYTES):
                    if stop.is_set():
                        raise _Stopped
                    target.write(chunk)
                    on_bytes(len(chunk))
                target.flush()
                os.fsync(target.fileno())
            except OSError as error:
                raise OSError(error.errno, f"cannot write {part}: {error.strerror or error}") from None
    except ShardReadError:
        if stop.is_set():  # stopped in a back-off wait: the failure that set it is another download's
            raise _Stopped from None
        raise
    sidecar.unlink()


def _read_identity(sidecar: Path, url: str) -> object:
    """The remote file's identity recorded beside a partial download (validated by :func:`open_remote`).

    Raises:
        ShardChangedError: the record is missing or not JSON: the partial file cannot be tied to the
            remote file, so it is downloaded again from its first byte.
    """
    refuse_symlink(sidecar, "partial download record")
    try:
        return json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ShardChangedError(f"shard {url}: the record of its partial download is unreadable ({error})") from None


def _mirror_shard(
    shard: MirrorShard,
    folder: Path,
    remote: RemoteOptions | None,
    on_bytes: Callable[[int], None],
    stop: threading.Event,
) -> MirroredShard:
    """Download (or continue) one shard into ``.<name>.part``, check it, rename it into place."""
    final = folder / shard.name
    part = folder / f".{shard.name}{_PART_SUFFIX}"
    refuse_symlink(part, "partial download")
    # a shard renamed into place by a process that ended before mirror.json recorded it is only checked
    path = final if final.exists() else part
    start = path.stat().st_size if path.exists() else 0
    on_bytes(start)
    if path == part and (shard.bytes is None or start < shard.bytes):
        try:
            _download(shard.url, part, start, remote, on_bytes, stop)
        except ShardChangedError as error:
            logger.warning("%s; downloading it again from its first byte", error)
            part.unlink()
            on_bytes(-start)
            _download(shard.url, part, 0, remote, on_bytes, stop)
    try:
        checked = _check_shard(path, shard)
    except (MirrorError, ShardReadError):
        path.unlink(missing_ok=True)
        raise
    if path == part:
        os.replace(part, final)
    return checked


def _mirror_or_stop(
    shard: MirrorShard,
    folder: Path,
    remote: RemoteOptions | None,
    on_bytes: Callable[[int], None],
    stop: threading.Event,
) -> MirroredShard:
    """:func:`_mirror_shard` in a download thread, not started once ``stop`` is set; its failure sets
    ``stop`` at once, so that the other downloads stop at their next chunk and the thread does not go
    on to the next queued shard before the calling thread has seen the failure."""
    if stop.is_set():
        raise _Stopped
    try:
        return _mirror_shard(shard, folder, remote, on_bytes, stop)
    except BaseException:
        stop.set()
        raise


def _load_records(folder: Path) -> dict[str, MirroredShard]:
    """The shards ``mirror.json`` of ``folder`` lists, by name ({} without one); MirrorError for a
    malformed file or a name that is not a plain file name of the folder, UnsafePathError for a link."""
    path = folder / MIRROR_NAME
    refuse_symlink(path, MIRROR_NAME)
    if not path.exists():
        return {}
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        records = [MirroredShard(**entry) for entry in document["shards"]]
    except (ValueError, KeyError, TypeError) as error:
        raise MirrorError(f"{path}: not a {MIRROR_FORMAT} file ({error}); move it away to start afresh") from None
    return {_check_name(record.name, str(path)): record for record in records}


def mirrored_shards(folder: str | os.PathLike[str]) -> list[MirroredShard]:
    """The checked shards ``mirror.json`` of a ``ccc-mirror`` folder lists, in stream order (by file name).

    Raises:
        MirrorError: ``folder`` holds no ``mirror.json``, or an unreadable one.
        ccc.safe_files.UnsafePathError: ``mirror.json`` or a listed shard is a symbolic link.
    """
    folder = Path(folder)
    if not (folder / MIRROR_NAME).is_file():
        raise MirrorError(f"{folder} has no {MIRROR_NAME}; it is not a ccc-mirror folder")
    records = [record for _, record in sorted(_load_records(folder).items())]
    for record in records:
        refuse_symlink(folder / record.name, "mirrored shard")
    return records


def _save_records(folder: Path, source: str, records: dict[str, MirroredShard]) -> None:
    document = {
        "format": MIRROR_FORMAT,
        "format_version": _MIRROR_FORMAT_VERSION,
        "source": source,
        "shards": [dataclasses.asdict(record) for _, record in sorted(records.items())],
    }
    write_atomically(folder / MIRROR_NAME, (json.dumps(document, indent=1) + "\n").encode("utf-8"))


def mirror_stream(
    source: str,
    folder: str | os.PathLike[str],
    *,
    connections: int = 4,
    shards: range | None = None,
    remote: RemoteOptions | None = None,
    published_url: str | None = None,
    progress: Callable[[int, int | None], None] | None = None,
) -> list[MirroredShard]:
    """Mirror ``source`` into ``folder`` (see the module documentation); return the mirror's shards.

    Args:
        source: as :func:`plan_mirror`.
        folder: the mirror folder (created); a second process mirroring into it is refused.
        connections: shards downloaded at once, >= 1 (one thread and one connection each).
        shards: the shard indices to mirror (default all); a later call can add more.
        remote, published_url: as :func:`ccc.load.open_stream`.
        progress: called with (bytes just received, estimated total bytes or None) from worker threads.

    Raises:
        MirrorError, ShardReadError: a bad source, or a shard that could not be read, differs from its
            manifest or does not decode (its partial file is deleted; the shards finished so far stay).
            The first such failure stops the other downloads at their next chunk (their partial files
            are kept) and no further shard is started.
        ccc.folder_lock.FolderInUseError: another process mirrors into ``folder``.
        KeyboardInterrupt: the downloads stop at once; partial files are kept and continued by the next call.
    """
    if isinstance(connections, bool) or not isinstance(connections, int) or connections < 1:
        raise ValueError(f"connections must be an integer >= 1, got {connections!r}")
    planned, manifest = plan_mirror(source, remote, published_url)
    if shards is not None:
        count = len(planned) if manifest is None else manifest.stream.num_shards
        if shards and shards[-1] >= count:
            raise MirrorError(
                f"shards {shards[0]}-{shards[-1]} reach past the end of the stream ({count} shards: 0-{count - 1})"
            )
        planned = [shard for shard in planned if shard.index in shards]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with FolderLock.acquire(folder, _LOCK_NAME):
        records = _load_records(folder)
        for shard in planned:
            refuse_symlink(folder / shard.name, "mirrored shard")
        todo = [shard for shard in planned if not ((folder / shard.name).exists() and shard.name in records)]
        known = [shard.bytes for shard in planned]
        # without a manifest the total is estimated from the shards finished so far
        total: list[int | None] = [sum(known) if None not in known else None]  # type: ignore[arg-type]
        lock = threading.Lock()

        def on_bytes(count: int) -> None:
            with lock:
                if progress is not None:
                    progress(count, total[0])

        def estimate() -> None:
            if shards_known := [records[shard.name].bytes for shard in planned if shard.name in records]:
                if None in known:
                    total[0] = sum(shards_known) * len(planned) // len(shards_known)

        estimate()
        on_bytes(sum(records[shard.name].bytes for shard in planned if shard not in todo))
        stop = threading.Event()
        pool = ThreadPoolExecutor(max_workers=connections, thread_name_prefix="ccc-mirror")
        try:
            running: set[Future[MirroredShard]] = {
                pool.submit(_mirror_or_stop, shard, folder, remote, on_bytes, stop) for shard in todo
            }
            while running:
                finished, running = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
                for future in finished:
                    if isinstance(future.exception(), _Stopped):
                        continue  # the failure that stopped it is another future's, raised when it is seen
                    record = future.result()
                    records[record.name] = record
                    _save_records(folder, source, records)
                    estimate()
        except BaseException:
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        if manifest is not None:
            mirrored = {record.name for record in records.values()}
            kept = tuple(info for info in manifest.shards if info.name in mirrored and (folder / info.name).exists())
            save_manifest(dataclasses.replace(manifest, shards=kept), folder)
        return [records[shard.name] for shard in planned]


def check_mirror(
    folder: str | os.PathLike[str], decode: bool = True, on_shard: Callable[[str], None] | None = None
) -> tuple[int, list[str], int]:
    """Check every shard ``mirror.json`` lists (size and sha256; with ``decode`` also every sample and the count).

    For a mirror without a manifest (a published stream): shard integrity only, there is no stream
    definition to check against.

    Args:
        folder: a ``ccc-mirror`` folder.
        decode: also read every sample (members and JPEG) and compare the sample count.
        on_shard: called with each shard's name once it is checked.

    Returns:
        (shards listed, one line per shard that is not intact, samples decoded).

    Raises:
        MirrorError: no readable ``mirror.json``, or one that lists a name outside the folder.
        ccc.safe_files.UnsafePathError: ``mirror.json`` or a listed shard is a symbolic link.
    """
    folder = Path(folder)
    records = mirrored_shards(folder)
    problems = []
    decoded = 0
    for record in records:
        name = record.name
        path = folder / name
        expected = MirrorShard(0, str(path), name, record.sha256, record.bytes, record.samples)
        try:
            size = path.stat().st_size
            if size != record.bytes:
                problems.append(f"{name}: altered ({size:,} bytes, {MIRROR_NAME} records {record.bytes:,})")
            elif not decode and file_sha256(path) != record.sha256:
                problems.append(f"{name}: altered (sha256 differs from {MIRROR_NAME}'s)")
            elif decode:
                decoded += _check_shard(path, expected, MIRROR_NAME).samples
        except FileNotFoundError:
            problems.append(f"{name}: missing (listed in {MIRROR_NAME})")
        except (MirrorError, ShardReadError) as error:
            problems.append(f"{name}: {'altered' if 'differs' in str(error) else 'undecodable'} ({error})")
        if on_shard is not None:
            on_shard(name)
    return len(records), problems, decoded
