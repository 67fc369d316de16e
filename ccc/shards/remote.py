"""Resilient reading of ``http(s)://`` shards: retries with backoff, resuming at the byte where a read stopped.

One dropped connection must not end a run that streams 7.5M images from one server. :func:`open_remote`
returns a read-only, non-seekable binary file whose reads survive connection errors, timeouts,
bodies shorter than their ``Content-Length`` and ``5xx`` / ``429`` answers: it waits (exponential
backoff from :attr:`RemoteOptions.backoff` doubling up to :attr:`RemoteOptions.max_backoff` seconds,
at least the server's ``Retry-After``) and asks for the rest with ``Range: bytes=<next byte>-``.

- ``206 Partial Content`` must start at the byte asked for (``Content-Range``) and belong to the same
  file (total size and, when the server sends one, ``ETag``).
- ``200 OK`` (a server that ignores ``Range``) is read from the start and the bytes already
  delivered are skipped.
- A file replaced between two requests (its ``ETag``, ``Last-Modified`` or size changed; ``If-Range``
  asks the server itself when the ``ETag`` is strong; a server that sends neither validator leaves
  only the size to compare) is refused with :class:`ShardChangedError`: bytes of two
  versions are never spliced, so no sample is delivered twice or skipped.

Every retry is logged as one warning line (logger ``ccc.shards.remote``; on stderr unless the
application configures logging) naming the shard, the byte, the attempt and the cause. After
:attr:`RemoteOptions.attempts` failed tries in a row (the count restarts whenever bytes arrive) the
read ends in a one-line :class:`ccc.shards.reader.ShardReadError` naming the shard, the attempts and
the last cause. HTTP is spoken by ``urllib3`` (a dependency of ``requests``): streamed responses,
per-read timeouts, connection pools, and no retry logic of its own in the way (it is switched off);
``https_proxy`` / ``http_proxy`` / ``no_proxy`` are honoured as curl does.
"""

from __future__ import annotations

import email.utils
import io
import logging
import os
import re
import threading
import time
import urllib.request
from dataclasses import dataclass

import urllib3

from ccc.shards.errors import ShardReadError
from ccc.validation import check_non_negative_int, check_positive_int

__all__ = [
    "DEFAULT_REMOTE_OPTIONS",
    "RemoteOptions",
    "ShardChangedError",
    "is_remote",
    "open_remote",
]

logger = logging.getLogger(__name__)

_REMOTE_SCHEMES = ("http://", "https://")
_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_SKIP_CHUNK_BYTES = 1 << 20


class ShardChangedError(ShardReadError):
    """A remote shard was replaced while it was being read (its ETag or size changed); never spliced."""


@dataclass(frozen=True)
class RemoteOptions:
    """How remote shards are read (``remote=`` of :func:`ccc.load.open_stream`).

    Attributes:
        attempts: tries per interruption, >= 1 (the count restarts whenever bytes arrive).
        backoff: seconds before the first retry, > 0; doubled at each further retry.
        max_backoff: longest wait between two tries in seconds, >= ``backoff`` (also caps ``Retry-After``).
        connect_timeout: seconds to establish a connection, > 0.
        read_timeout: seconds without a byte before a read counts as stalled, > 0.
        cache: a folder keeping every remote shard once downloaded (:mod:`ccc.shards.shard_cache`),
            or None (default: shards are streamed, nothing is stored).
        cache_max_bytes: size cap of ``cache`` in bytes, >= 1; the least recently read shards are
            deleted beyond it (None: no cap).

    The defaults (10 tries, 1 s doubling to 60 s: about 4 minutes of waiting) survive a server
    restart of a few minutes.
    """

    attempts: int = 10
    backoff: float = 1.0
    max_backoff: float = 60.0
    connect_timeout: float = 30.0
    read_timeout: float = 60.0
    cache: str | None = None
    cache_max_bytes: int | None = None

    def __post_init__(self) -> None:
        check_positive_int("attempts", self.attempts)
        for name in ("backoff", "max_backoff", "connect_timeout", "read_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")
        if self.cache_max_bytes is not None:
            check_positive_int("cache_max_bytes", self.cache_max_bytes)
        if self.max_backoff < self.backoff:
            raise ValueError(f"max_backoff must be >= backoff ({self.backoff}), got {self.max_backoff}")

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1-based): ``backoff · 2^(retry-1)``, capped."""
        return min(self.backoff * 2 ** (retry - 1), self.max_backoff)


DEFAULT_REMOTE_OPTIONS = RemoteOptions()
"""The options used when none are given."""


def is_remote(location: str) -> bool:
    """Whether ``location`` is an ``http://`` or ``https://`` URL (read by :func:`open_remote`)."""
    return location.startswith(_REMOTE_SCHEMES)


_pools: dict[tuple[int, str | None], urllib3.PoolManager] = {}
_pools_lock = threading.Lock()


def _pool(url: str) -> urllib3.PoolManager:
    """This process's connection pool for ``url``: through the proxy of ``https_proxy`` / ``http_proxy``
    unless ``no_proxy`` exempts the host (as curl does); a forked DataLoader worker never shares its
    parent's sockets."""
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0].rpartition("@")[2].split(":", 1)[0]
    proxy = urllib.request.getproxies().get(scheme)
    if proxy is not None and urllib.request.proxy_bypass(host):
        proxy = None
    with _pools_lock:
        key = (os.getpid(), proxy)
        pool = _pools.get(key)
        if pool is None:
            if any(process != os.getpid() for process, _ in _pools):
                _pools.clear()
            if proxy is None:
                pool = urllib3.PoolManager(num_pools=16, maxsize=16)
            else:
                pool = urllib3.ProxyManager(proxy, num_pools=16, maxsize=16)
            _pools[key] = pool
        return pool


class _Retry(Exception):
    """A failure worth another try; ``wait`` is the server's Retry-After in seconds, if any."""

    def __init__(self, cause: str, wait: float | None = None) -> None:
        super().__init__(cause)
        self.wait = wait


def _retry_after(value: str | None) -> float | None:
    """Seconds of a ``Retry-After`` header (delta seconds or an HTTP date), None when absent or unreadable."""
    if not value:
        return None
    if value.strip().isdigit():
        return float(value.strip())
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(moment.timestamp() - time.time(), 0.0)


def _cause(error: BaseException) -> str:
    reason = getattr(error, "reason", None)
    error = reason if isinstance(reason, BaseException) else error
    return f"{type(error).__name__}: {error}"


class RemoteShard(io.RawIOBase):
    """A remote shard as a read-only, non-seekable binary file (see the module documentation)."""

    def __init__(
        self, url: str, options: RemoteOptions, start: int = 0, identity: dict[str, str | int | None] | None = None
    ) -> None:
        super().__init__()
        self.url = url
        self.options = options
        self.position = start
        self.size: int | None = None
        self.etag: str | None = None
        self._response: urllib3.BaseHTTPResponse | None = None
        self._identity = identity
        if identity is not None:
            self.etag = identity.get("ETag")  # type: ignore[assignment]
        self._failures = 0
        self._ensure_response()

    def readable(self) -> bool:
        """Always True."""
        return True

    @property
    def identity(self) -> dict[str, str | int | None] | None:
        """What identifies the file read: its ``ETag``, ``Last-Modified`` and size in bytes (each None
        when the server sent none); None before the first answer. Pass it to :func:`open_remote` to
        continue a partial download in another process: a changed file is then refused."""
        return self._identity

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        """Read up to ``len(buffer)`` bytes at the current position, retrying and resuming as needed; 0 at the end."""
        view = memoryview(buffer).cast("B")
        while True:
            if self.size is not None and self.position >= self.size:
                return 0
            response = self._ensure_response()
            try:
                data = response.read(len(view))
                if not data and (self.size is None or self.position >= self.size):
                    return 0
                if not data:
                    raise _Retry(f"body ended at byte {self.position:,} of {self.size:,} (shorter than announced)")
            except _Retry as failure:
                self._failed(failure)
                continue
            except (urllib3.exceptions.HTTPError, OSError) as error:
                self._failed(_Retry(_cause(error)))
                continue
            view[: len(data)] = data
            self.position += len(data)
            self._failures = 0
            return len(data)

    def close(self) -> None:
        """Release the connection."""
        self._drop()
        super().close()

    def _drop(self) -> None:
        if self._response is not None:
            self._response.release_conn()
            self._response.close()
            self._response = None

    def _failed(self, failure: _Retry) -> None:
        """Count a failed try; wait before the next one, or raise after the last."""
        self._drop()
        self._failures += 1
        attempts = self.options.attempts
        if self._failures >= attempts:
            raise ShardReadError(
                f"shard {self.url}: read failed at byte {self.position:,} after {attempts} attempts "
                f"(last cause: {failure})"
            )
        wait = self.options.delay(self._failures)
        if failure.wait is not None:
            wait = min(max(wait, failure.wait), self.options.max_backoff)
        logger.warning(
            "shard %s: attempt %d/%d failed at byte %s (%s); retrying in %.3g s",
            self.url,
            self._failures,
            attempts,
            f"{self.position:,}",
            failure,
            wait,
        )
        time.sleep(wait)

    def _ensure_response(self) -> urllib3.BaseHTTPResponse:
        """The open response positioned at :attr:`position`, opening one (with retries) if needed."""
        while self._response is None:
            try:
                self._response = self._request()
            except _Retry as failure:
                self._failed(failure)
            except (urllib3.exceptions.HTTPError, OSError) as error:
                self._failed(_Retry(_cause(error)))
        return self._response

    def _request(self) -> urllib3.BaseHTTPResponse:
        headers = {"Accept-Encoding": "identity"}
        if self.position:
            headers["Range"] = f"bytes={self.position}-"
            if self.etag is not None and not self.etag.startswith("W/"):
                headers["If-Range"] = self.etag
        response = _pool(self.url).request(
            "GET",
            self.url,
            headers=headers,
            preload_content=False,
            decode_content=False,
            timeout=urllib3.Timeout(connect=self.options.connect_timeout, read=self.options.read_timeout),
            retries=urllib3.Retry(total=None, connect=0, read=0, status=0, other=0, redirect=5),
        )
        try:
            self._accept(response)
        except BaseException:
            response.release_conn()
            response.close()
            raise
        return response

    def _accept(self, response: urllib3.BaseHTTPResponse) -> None:
        """Check an answer against what was asked and what is known of the file; position it."""
        status = response.status
        if status in _RETRY_STATUSES:
            raise _Retry(f"HTTP {status}", _retry_after(response.headers.get("Retry-After")))
        if status == 416 and response.headers.get("Content-Range", "").strip() == f"bytes */{self.position}":
            self.size = self.position  # asked from the end of the file: nothing is left to read
            return
        if status not in (200, 206):
            raise ShardReadError(f"shard {self.url}: HTTP {status} {response.reason or ''}".rstrip())
        etag = response.headers.get("ETag")
        if status == 206:
            match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
            if match is None or int(match[1]) != self.position:
                raise _Retry(
                    f"206 answer with Content-Range {response.headers.get('Content-Range')!r}, "
                    f"asked from byte {self.position:,}"
                )
            size = None if match[3] == "*" else int(match[3])
        else:
            length = response.headers.get("Content-Length")
            size = int(length) if length is not None and length.isdigit() else None
        identity = {"ETag": etag, "Last-Modified": response.headers.get("Last-Modified"), "size": size}
        if self._identity is not None:
            changed = [
                f"{name} {before} → {identity[name]}"
                for name, before in self._identity.items()
                if before is not None and identity[name] is not None and identity[name] != before
            ]
            if changed:
                raise ShardChangedError(
                    f"shard {self.url}: changed on the server while it was read (at byte {self.position:,}: "
                    f"{', '.join(changed)}); refusing to splice two versions"
                )
        self._identity = identity
        self.size = size
        self.etag = etag
        if status == 200 and self.position:
            self._skip(response, self.position)

    def _skip(self, response: urllib3.BaseHTTPResponse, count: int) -> None:
        """Discard the first ``count`` bytes of a full answer (a server that ignored ``Range``)."""
        logger.warning("shard %s: the server ignored Range; skipping %s bytes already read", self.url, f"{count:,}")
        remaining = count
        while remaining:
            chunk = response.read(min(remaining, _SKIP_CHUNK_BYTES))
            if not chunk:
                raise _Retry(f"body ended at byte {count - remaining:,} while skipping to byte {count:,}")
            remaining -= len(chunk)


def open_remote(
    url: str,
    options: RemoteOptions | None = None,
    start: int = 0,
    identity: dict[str, str | int | None] | None = None,
) -> io.BufferedReader:
    """Open an ``http(s)://`` shard for reading with retries and byte-exact resumption.

    Args:
        url: the shard's URL.
        options: retry and timeout settings (default :data:`DEFAULT_REMOTE_OPTIONS`).
        start: first byte to read, >= 0 (a partial download continued); the file then starts there.
            With ``options.cache`` (and ``start`` 0) the shard is read from the cache, downloaded first if needed.
        identity: :attr:`RemoteShard.identity` of the file when its first ``start`` bytes were read
            (an earlier process); an answer of another file is then a :class:`ShardChangedError`.

    Returns:
        A buffered, non-seekable binary file; its reads retry and resume as the module documentation says.

    Raises:
        ShardReadError: the server answered a non-retryable status (e.g. 404), or every attempt failed;
            :class:`ShardChangedError` when the file changed between two requests.
    """
    options = options or DEFAULT_REMOTE_OPTIONS
    if options.cache is not None and not start:
        from ccc.shards.shard_cache import open_cached

        return open_cached(url, options)  # type: ignore[return-value]
    raw = RemoteShard(url, options, check_non_negative_int("start", start), identity)
    return io.BufferedReader(raw, buffer_size=1 << 16)
