"""Opening a shard's location: the one place that turns a local path, a URL or a ``pipe:`` command into
bytes, choosing between the local file, the shard cache (:mod:`ccc.shards.shard_cache`) and the remote
reader (:mod:`ccc.shards.remote`); reading the samples is :mod:`ccc.shards.reader`'s.
"""

from __future__ import annotations

from typing import BinaryIO

from ccc.shards.errors import ShardReadError
from ccc.shards.reader import TarSample, read_samples
from ccc.shards.remote import RemoteOptions, open_remote
from ccc.shards.shard_cache import open_cached

__all__ = ["open_shard", "read_all"]


def open_shard(location: str, remote: RemoteOptions | None = None) -> BinaryIO:
    """Open the shard at ``location`` for reading: the one place that turns a location into bytes.

    A local path (optionally ``file:``-prefixed) is opened directly; an ``http(s)://`` URL is read with
    retries and resumption at the byte by :func:`ccc.shards.remote.open_remote` under ``remote``;
    anything else :func:`webdataset.gopen` opens (``pipe:``, …) goes through it. Callers read the
    returned binary file object from its start and close it (it is a context manager).

    Args:
        location: a local path, ``file:`` path, URL or ``pipe:`` command.
        remote: retries, backoff, timeouts and cache of ``http(s)://`` shards (None: the defaults).

    Raises:
        ShardReadError: if a local file does not exist or cannot be opened, or a URL cannot be read.
    """
    if location.startswith(("http://", "https://")):
        if remote is not None and remote.cache is not None:
            return open_cached(location, remote)
        return open_remote(location, remote)
    if "://" in location or location.startswith("pipe:"):
        from webdataset import gopen

        return gopen(location, "rb")
    path = location[len("file:") :] if location.startswith("file:") else location
    try:
        return open(path, "rb")
    except OSError as error:
        raise ShardReadError(f"shard {location}: cannot open ({error.strerror or error})") from None


def read_all(location: str) -> list[TarSample]:
    """Every sample of the shard at ``location`` with its members (small shards, tests and tools)."""
    with open_shard(location) as handle:
        return list(read_samples(handle, location))
