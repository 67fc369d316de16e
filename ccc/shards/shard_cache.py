"""A local cache of remote shards (``open_stream(..., cache=DIR)``): each shard is downloaded once.

A remote shard is downloaded whole (with :mod:`ccc.shards.remote`'s retries and resumption) into a
fresh hidden temporary file (:func:`ccc.safe_files.create_temporary`: an existing path, a link planted
by another user of a shared folder included, is never followed or reused; deleted if the download
fails), fsynced and renamed to ``<name>`` (``<sha256 of the URL, 16 hex>-<file name>``), then read
from disk. A shard enters the cache only when it is whole: the server's announced size reached (the
remote reader retries a short body), read as a tar to its end-of-archive marker by
:func:`ccc.shards.reader.read_samples` (a body closed half-way without ``Content-Length``, or an HTML
error page served with ``200``, is not), and, when the caller knows it (``sha256=`` of
:func:`open_cached`: a manifest or ``mirror.json``), of that sha256; otherwise the read fails in one
line and nothing is kept. A shard already there is checked the same way (its tar headers, without
reading its images; the sha256 when given) before it is read: an unusable entry (one kept by an
earlier version, damaged since) is removed, logged as one warning line naming the cache file, and
downloaded again. An entry that is a symbolic link is refused in one line
(:class:`ccc.safe_files.UnsafePathError`) and entries are opened without following links.

Processes and DataLoader workers sharing the folder never download the same shard at the same time:
the download holds a lock (:class:`ccc.folder_lock.FolderLock` on ``.locks/<name>/``) and the others
wait for it, then read the finished file; the holder first deletes the temporary files of a holder
that was killed. The lock is held only while downloading, never while a consumer reads, so a reader
that stops half-way cannot block another. With :attr:`ccc.shards.remote.RemoteOptions.cache_max_bytes`,
the least recently read shards are deleted once the cache exceeds the cap (a reader holding one open
keeps reading it). The cost: a shard's first sample waits for the whole shard (at 50 MB/s, about 10 s
for a published 500 MB shard), and each open walks the shard's tar headers (one 512-byte read per
member, no image data).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import time
from pathlib import Path
from typing import BinaryIO

from ccc.folder_lock import FolderInUseError, FolderLock
from ccc.safe_files import create_temporary, open_for_reading
from ccc.shards.errors import ShardReadError
from ccc.shards.reader import read_samples
from ccc.shards.remote import RemoteOptions, open_remote

__all__ = ["cache_name", "open_cached"]

logger = logging.getLogger(__name__)

_LOCKS = ".locks"
_LOCK_NAME = "lock"
_CHUNK_BYTES = 1 << 20
_LOCK_POLL_SECONDS = 0.2
_ENTRY = "cache entry"


def cache_name(url: str) -> str:
    """The file name of ``url``'s shard in the cache: ``<sha256(url), 16 hex>-<last path component>``."""
    return f"{hashlib.sha256(url.encode()).hexdigest()[:16]}-{url.rstrip('/').rpartition('/')[2]}"


def _lock(folder: Path) -> FolderLock:
    """Wait for the lock of ``folder`` (a holder downloads; it ends however its process ends)."""
    folder.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            return FolderLock.acquire(folder, _LOCK_NAME)
        except FolderInUseError:
            time.sleep(_LOCK_POLL_SECONDS)


def _evict(folder: Path, keep: Path, max_bytes: int) -> None:
    """Delete the least recently read shards until the cache holds at most ``max_bytes`` (``keep`` stays)."""
    entries = []
    for path in folder.iterdir():
        if path.name.startswith(".") or path == keep or not path.is_file():
            continue
        try:
            status = path.stat()
        except FileNotFoundError:
            continue
        entries.append((status.st_mtime_ns, status.st_size, path))
    total = keep.stat().st_size + sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= max_bytes:
            break
        path.unlink(missing_ok=True)
        total -= size


def open_cached(url: str, options: RemoteOptions, sha256: str | None = None) -> BinaryIO:
    """Open ``url``'s shard from the cache folder ``options.cache``, downloading it first if needed.

    Args:
        url: the shard's ``http(s)://`` URL.
        options: the remote reader's options; ``options.cache`` is the folder.
        sha256: the shard's sha256 (hex) when the caller knows it (a manifest, ``mirror.json``): a
            download or an entry with another digest is not used.

    Returns:
        The cache file, opened for reading at its first byte.

    Raises:
        ccc.shards.reader.ShardReadError: the download failed (after its retries) or is not a whole
            shard (nothing is cached).
        ccc.safe_files.UnsafePathError: the cache entry is a symbolic link or not a regular file.
    """
    assert options.cache is not None
    folder = Path(options.cache)
    final = folder / cache_name(url)
    while True:
        handle = _open_entry(final)
        if handle is not None and _problem(handle, str(final), sha256) is None:
            now = time.time_ns()  # exact: the file system's own clock may tick only every few ms
            os.utime(final, ns=(now, now))  # the least recently read shards are evicted first
            return handle
        if handle is not None:
            handle.close()
        with _lock(folder / _LOCKS / final.name):
            for leftover in folder.iterdir():  # temporary files of a holder that was killed
                if leftover.name.startswith(f".{final.name}.") and leftover.name.endswith(".tmp"):
                    leftover.unlink(missing_ok=True)
            handle = _open_entry(final)
            if handle is not None:
                with handle:
                    problem = _problem(handle, str(final), sha256)
                if problem is None:  # downloaded by another process meanwhile
                    continue
                logger.warning("%s %s is unusable (%s); removed, downloading it again", _ENTRY, final, problem)
                final.unlink(missing_ok=True)
            _download(url, options, final, sha256)


def _open_entry(path: Path) -> BinaryIO | None:
    """The cache entry ``path`` opened for reading without following a link; None when it is missing.

    Raises:
        UnsafePathError: ``path`` is a symbolic link or not a regular file.
    """
    try:
        return open_for_reading(path, _ENTRY)
    except FileNotFoundError:
        return None


def _problem(handle: BinaryIO, location: str, sha256: str | None) -> str | None:
    """Why the open file ``handle`` is not a whole shard (of digest ``sha256`` when given), or None;
    ``location`` names it in the reason; ``handle`` is left at its first byte."""
    try:
        if sha256 is not None:
            digest = hashlib.sha256()
            while chunk := handle.read(_CHUNK_BYTES):
                digest.update(chunk)
            if digest.hexdigest() != sha256:
                return f"its sha256 {digest.hexdigest()[:12]}… differs from the expected {sha256[:12]}…"
            handle.seek(0)
        for _ in read_samples(handle, location, wanted=lambda _: False):
            pass
    except ShardReadError as error:
        return str(error)
    finally:
        handle.seek(0)
    return None


def _download(url: str, options: RemoteOptions, final: Path, sha256: str | None) -> None:
    """Download ``url`` whole into ``final`` through a fresh temporary file, check it is a whole
    shard, rename it into place, then evict over the cap.

    Raises:
        ShardReadError: the download failed, or it is not a whole shard (the temporary file is deleted).
    """
    # a partial file of an earlier process is not continued: the shard may have changed since
    target, temporary = create_temporary(final.parent, final.name)
    try:
        with open_remote(url, dataclasses.replace(options, cache=None)) as source, target:
            while chunk := source.read(_CHUNK_BYTES):
                target.write(chunk)
            target.flush()
            os.fsync(target.fileno())
        with open(temporary, "rb") as written:
            problem = _problem(written, url, sha256)
        if problem is not None:
            raise ShardReadError(f"shard {url}: not cached: the downloaded file is unusable ({problem})")
        os.replace(temporary, final)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    if options.cache_max_bytes is not None:
        _evict(final.parent, final, options.cache_max_bytes)
