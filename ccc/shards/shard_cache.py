"""A local cache of remote shards (``open_stream(..., cache=DIR)``): each shard is downloaded once.

A remote shard is downloaded whole (with :mod:`ccc.shards.remote`'s retries and resumption) into a
hidden ``.<name>.part`` file (deleted if the download fails), fsynced and renamed to ``<name>``
(``<sha256 of the URL, 16 hex>-<file name>``), then read from disk; a shard already there is read
from disk at once. Processes and DataLoader workers sharing the folder never download the same
shard at the same time: the download holds a lock (:class:`ccc.folder_lock.FolderLock` on
``.locks/<name>/``) and the others wait for it, then read the finished file. The lock is held only
while downloading, never while a consumer reads, so a reader that stops half-way cannot block
another. With :attr:`ccc.shards.remote.RemoteOptions.cache_max_bytes`, the least recently read
shards are deleted once the cache exceeds the cap (a reader holding one open keeps reading it).
The cost: a shard's first sample waits for the whole shard (at 50 MB/s, about 10 s for a
published 500 MB shard).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from pathlib import Path
from typing import BinaryIO

from ccc.folder_lock import FolderInUseError, FolderLock
from ccc.shards.remote import RemoteOptions, open_remote

__all__ = ["cache_name", "open_cached"]

_LOCKS = ".locks"
_LOCK_NAME = "lock"
_PART_SUFFIX = ".part"
_CHUNK_BYTES = 1 << 20
_LOCK_POLL_SECONDS = 0.2


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


def open_cached(url: str, options: RemoteOptions) -> BinaryIO:
    """Open ``url``'s shard from the cache folder ``options.cache``, downloading it first if needed.

    Raises:
        ccc.shards.reader.ShardReadError: the download failed (after its retries; nothing is cached).
    """
    assert options.cache is not None
    folder = Path(options.cache)
    final = folder / cache_name(url)
    while True:
        if not final.exists():
            with _lock(folder / _LOCKS / final.name):
                if not final.exists():
                    _download(url, options, final)
        try:
            handle = open(final, "rb")
        except FileNotFoundError:  # evicted by another process in between: fetch it again
            continue
        now = time.time_ns()  # exact: the file system's own clock may tick only every few ms
        os.utime(final, ns=(now, now))  # the least recently read shards are evicted first
        return handle


def _download(url: str, options: RemoteOptions, final: Path) -> None:
    """Download ``url`` whole into ``final`` (through a ``.part`` file), then evict over the cap."""
    # a partial file of an earlier process is not continued: the shard may have changed since
    part = final.with_name(f".{final.name}{_PART_SUFFIX}")
    try:
        with open_remote(url, dataclasses.replace(options, cache=None)) as source, open(part, "wb") as target:
            while chunk := source.read(_CHUNK_BYTES):
                target.write(chunk)
            target.flush()
            os.fsync(target.fileno())
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, final)
    if options.cache_max_bytes is not None:
        _evict(final.parent, final, options.cache_max_bytes)
