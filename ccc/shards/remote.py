"""Resilient reading of ``http(s)://`` shards: retries with backoff, resuming at the byte where a read stopped.

One dropped connection must not end a run that streams 7.5M images from one server. :func:`open_remote`
returns a read-only, non-seekable binary file whose reads survive connection errors, timeouts,
bodies shorter than their ``Content-Length`` and ``408`` / ``429`` / ``5xx`` answers: it waits
(exponential backoff from :attr:`RemoteOptions.backoff` doubling up to :attr:`RemoteOptions.max_backoff`
seconds, at least the server's ``Retry-After``) and asks for the rest with ``Range: bytes=<next byte>-``.

- ``206 Partial Content`` must start at the byte asked for (``Content-Range``) and belong to the same
  file (total size and, when the server sends one, ``ETag``).
- ``200 OK`` (a server that ignores ``Range``) is read from the start and the bytes already
  delivered are skipped.
- A file replaced between two requests (its ``ETag``, ``Last-Modified`` or size changed; ``If-Range``
  asks the server itself when the ``ETag`` is strong; a server that sends neither validator leaves
  only the size to compare) is refused with :class:`ShardChangedError`: bytes of two
  versions are never spliced, so no sample is delivered twice or skipped.
- The body must be the file's bytes: ``Accept-Encoding: identity`` is asked for and an answer with
  another ``Content-Encoding`` (gzip) is refused.

**Budgets.** A read fails when it has waited :attr:`RemoteOptions.deadline` seconds on the server
without useful progress, or after :attr:`RemoteOptions.attempts` failed tries in a row, whichever
comes first. Useful progress is a try delivering at least :attr:`RemoteOptions.min_rate` bytes per
second (and at least one second's worth of them); a try slower than that over
:attr:`RemoteOptions.read_timeout` seconds is abandoned and retried, and only useful progress
restarts the deadline and the attempt count, so a server that trickles bytes cannot hold a read
forever. The clock counts the time spent waiting on the server (connecting, waiting for answers and
bytes, back-off waits), not the time the consumer takes between two reads: a slow model never
spends the budget. Every timeout is cut to what remains of the deadline, so under the defaults
(deadline 300 s, 10 tries, 1 s doubling to 60 s, 10 kB/s) a server that stalls, trickles or fails
makes a read end in at most 5 minutes of waiting (a server answering ``503`` at once: 10 tries,
1 + 2 + 4 + … + 60 = 243 s of backoff), and a long shard survives any number of separate
interruptions as long as it progresses between them.

Errors where retrying cannot help fail at once, without retries: a name that does not resolve, an
invalid URL or an unsupported scheme (also as a redirect's target, ``file://`` included), a redirect
loop, ``4xx`` answers other than ``408`` / ``429``, an unexpected ``Content-Encoding``. A refused
answer's connection is closed, never returned to the pool with its body unread.

Every retry is logged as one warning line (logger ``ccc.shards.remote``; on stderr unless the
application configures logging) naming the shard, the byte, the attempt and the cause. A failed read
ends in a one-line :class:`ccc.shards.reader.ShardReadError` naming the shard, the byte, the attempts
and the last cause. HTTP is spoken by ``urllib3`` (a dependency of ``requests``): streamed responses,
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
    "MAX_SECONDS",
    "RemoteOptions",
    "ShardChangedError",
    "is_remote",
    "open_remote",
]

logger = logging.getLogger(__name__)

_REMOTE_SCHEMES = ("http://", "https://")
_RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_SKIP_CHUNK_BYTES = 1 << 20
_IDENTITY_KEYS = ("ETag", "Last-Modified", "size")
_PERMANENT_ERRORS = (
    urllib3.exceptions.LocationValueError,  # an invalid URL, an unsupported scheme (a redirect to file:// too)
    urllib3.exceptions.NameResolutionError,
    urllib3.exceptions.ResponseError,  # too many redirects (urllib3 retries nothing else here)
)

MAX_SECONDS = 86_400.0
"""Longest duration any :class:`RemoteOptions` field accepts (one day): a mistyped value fails at once
rather than sleeping for years."""


class ShardChangedError(ShardReadError):
    """A remote shard was replaced while it was being read (its ETag or size changed); never spliced."""


@dataclass(frozen=True)
class RemoteOptions:
    """How remote shards are read (``remote=`` of :func:`ccc.load.open_stream`).

    Every duration is a number of seconds in (0, :data:`MAX_SECONDS`].

    Attributes:
        attempts: failed tries in a row before a read fails, >= 1 (the count restarts with useful progress).
        backoff: seconds before the first retry; doubled at each further retry.
        max_backoff: longest wait between two tries in seconds, >= ``backoff`` (also caps ``Retry-After``).
        connect_timeout: seconds to establish a connection.
        read_timeout: seconds without a byte before a try counts as stalled; also the window over
            which a try must reach ``min_rate``.
        deadline: seconds a read may wait on the server without useful progress, all tries, timeouts
            and back-off waits together (not the consumer's time between reads); the bound on how
            long a failing server can hold a read.
        min_rate: bytes per second a try must deliver to count as useful progress, >= 0 (0: any byte).
        cache: a folder keeping every remote shard once downloaded (:mod:`ccc.shards.shard_cache`),
            or None (default: shards are streamed, nothing is stored).
        cache_max_bytes: size cap of ``cache`` in bytes, >= 1; the least recently read shards are
            deleted beyond it (None: no cap).

    The defaults (10 tries, 1 s doubling to 60 s, a deadline of 300 s, 10 kB/s) survive a server
    restart of a few minutes and end any failing read within 5 minutes of waiting (module documentation).
    """

    attempts: int = 10
    backoff: float = 1.0
    max_backoff: float = 60.0
    connect_timeout: float = 30.0
    read_timeout: float = 60.0
    deadline: float = 300.0
    min_rate: float = 10_000.0
    cache: str | None = None
    cache_max_bytes: int | None = None

    def __post_init__(self) -> None:
        check_positive_int("attempts", self.attempts)
        for name in ("backoff", "max_backoff", "connect_timeout", "read_timeout", "deadline"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_SECONDS:
                raise ValueError(f"{name} must be a number of seconds in (0, {MAX_SECONDS:.0f}], got {value!r}")
        rate = self.min_rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < float("inf"):
            raise ValueError(f"min_rate must be a number of bytes per second >= 0, got {rate!r}")
        if self.cache_max_bytes is not None:
            check_positive_int("cache_max_bytes", self.cache_max_bytes)
        if self.max_backoff < self.backoff:
            raise ValueError(f"max_backoff must be >= backoff ({self.backoff}), got {self.max_backoff}")

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1-based): ``backoff · 2^(retry-1)``, capped."""
        return min(self.backoff * 2.0 ** min(retry - 1, 64), self.max_backoff)


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


def _is_permanent(error: BaseException) -> bool:
    """Whether retrying cannot help: an invalid location, a name that does not resolve, a redirect loop."""
    reason = getattr(error, "reason", None)
    return isinstance(error, _PERMANENT_ERRORS) or isinstance(reason, _PERMANENT_ERRORS)


def _checked_identity(url: str, start: int, identity: object) -> dict[str, str | int | None] | None:
    """``identity`` (untrusted: read from a file beside a partial download) if it is what
    :attr:`RemoteShard.identity` returns; :class:`ShardChangedError` otherwise, so that a caller starts over."""
    if identity is None:
        return None
    valid = (
        isinstance(identity, dict)
        and set(identity) <= set(_IDENTITY_KEYS)
        and all(isinstance(identity.get(name), (str, type(None))) for name in _IDENTITY_KEYS[:2])
        and (identity.get("size") is None or (type(identity["size"]) is int and identity["size"] >= 0))
    )
    if not valid:
        shown = repr(identity)
        shown = shown if len(shown) <= 80 else shown[:79] + "…"
        raise ShardChangedError(
            f"shard {url}: the identity recorded for its first {start:,} bytes is not an object of "
            f"{', '.join(_IDENTITY_KEYS)} ({shown}); refusing to continue them"
        )
    return identity  # type: ignore[return-value]


class RemoteShard(io.RawIOBase):
    """A remote shard as a read-only, non-seekable binary file (see the module documentation)."""

    def __init__(
        self,
        url: str,
        options: RemoteOptions,
        start: int = 0,
        identity: dict[str, str | int | None] | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        super().__init__()
        self.url = url
        self.options = options
        self._stop = stop
        self.position = start
        self.size: int | None = None
        self.etag: str | None = None
        self._response: urllib3.BaseHTTPResponse | None = None
        self._identity = _checked_identity(url, start, identity)
        if self._identity is not None:
            self.etag = self._identity.get("ETag")  # type: ignore[assignment]
        self._failures = 0
        self._waited = 0.0  # seconds waited on the server since the last useful progress
        self._window_seconds = 0.0  # seconds waited and bytes received since the try began or last progressed
        self._window_bytes = 0
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
                data = self._read(response, len(view))
                if not data and (self.size is None or self.position >= self.size):
                    return 0
                if not data:
                    raise _Retry(f"body ended at byte {self.position:,} of {self.size:,} (shorter than announced)")
                self._account(len(data))
            except _Retry as failure:
                self._failed(failure)
                continue
            except (urllib3.exceptions.HTTPError, OSError) as error:
                self._failed(_Retry(_cause(error)))
                continue
            view[: len(data)] = data
            self.position += len(data)
            return len(data)

    def close(self) -> None:
        """Release the connection."""
        self._drop()
        super().close()

    def _remaining(self) -> float:
        """Seconds left of the deadline (> 0 while a try may run)."""
        return self.options.deadline - self._waited

    def _read(self, response: urllib3.BaseHTTPResponse, count: int) -> bytes:
        """At most ``count`` bytes, as soon as some arrive (a trickle is seen byte by byte), waiting at
        most what remains of the deadline; the time waited is counted."""
        sock = getattr(response.connection, "sock", None)
        if sock is not None:
            sock.settimeout(max(min(self.options.read_timeout, self._remaining()), 0.001))
        began = time.monotonic()
        try:
            return response.read1(count)
        finally:
            seconds = time.monotonic() - began
            self._waited += seconds
            self._window_seconds += seconds

    def _account(self, count: int) -> None:
        """Count ``count`` bytes just received: useful progress restarts the deadline and the attempt
        count; a try slower than ``min_rate`` over ``read_timeout`` (or at the deadline) is a failure."""
        self._window_bytes += count
        rate = self.options.min_rate
        if self._window_bytes >= rate * max(self._window_seconds, 1.0):
            self._waited = self._window_seconds = 0.0
            self._window_bytes = self._failures = 0
        elif self._window_seconds >= self.options.read_timeout or self._remaining() <= 0:
            raise _Retry(f"slower than {rate:,.0f} B/s ({self._window_bytes:,} bytes in {self._window_seconds:.3g} s)")

    def _deadline_text(self) -> str:
        return (
            f" and {self._waited:.3g} s without useful progress (deadline {self.options.deadline:g} s"
            f" at {self.options.min_rate:,.0f} B/s)"
        )

    def _drop(self) -> None:
        """Let go of the open response: its connection returns to the pool only when its body was read
        to the end (a body left unread would be the next request's garbage), otherwise it is closed."""
        if self._response is not None:
            if self.size is None or self.position < self.size:
                self._response.close()
            self._response.release_conn()
            self._response = None

    def _failed(self, failure: _Retry) -> None:
        """Count a failed try; wait before the next one, or raise after the last (attempts or deadline)."""
        self._drop()
        self._failures += 1
        self._window_seconds = 0.0
        self._window_bytes = 0
        attempts = self.options.attempts
        wait = self.options.delay(self._failures)
        if failure.wait is not None:
            wait = min(max(wait, failure.wait), self.options.max_backoff)
        if self._failures >= attempts or self._waited + wait >= self.options.deadline:
            budget = "" if self._failures >= attempts else self._deadline_text()
            raise ShardReadError(
                f"shard {self.url}: read failed at byte {self.position:,} after {self._failures} attempts"
                f"{budget} (last cause: {failure})"
            )
        logger.warning(
            "shard %s: attempt %d/%d failed at byte %s (%s); retrying in %.3g s",
            self.url,
            self._failures,
            attempts,
            f"{self.position:,}",
            failure,
            wait,
        )
        if self._stop is None:
            time.sleep(wait)
        elif self._stop.wait(wait):
            raise ShardReadError(
                f"shard {self.url}: read stopped at byte {self.position:,} while waiting to retry "
                f"(last cause: {failure})"
            )
        self._waited += wait

    def _ensure_response(self) -> urllib3.BaseHTTPResponse:
        """The open response positioned at :attr:`position`, opening one (with retries) if needed."""
        while self._response is None:
            began = time.monotonic()
            try:
                self._response = self._request()
            except _Retry as failure:
                self._waited += time.monotonic() - began
                self._failed(failure)
            except (urllib3.exceptions.HTTPError, OSError) as error:
                self._waited += time.monotonic() - began
                if _is_permanent(error):
                    raise ShardReadError(f"shard {self.url}: cannot be read ({_cause(error)})") from None
                self._failed(_Retry(_cause(error)))
            else:
                self._waited += time.monotonic() - began
        return self._response

    def _request(self) -> urllib3.BaseHTTPResponse:
        headers = {"Accept-Encoding": "identity"}
        if self.position:
            headers["Range"] = f"bytes={self.position}-"
            if self.etag is not None and not self.etag.startswith("W/"):
                headers["If-Range"] = self.etag
        remaining = self._remaining()
        response = _pool(self.url).request(
            "GET",
            self.url,
            headers=headers,
            preload_content=False,
            decode_content=False,
            timeout=urllib3.Timeout(
                connect=min(self.options.connect_timeout, remaining), read=min(self.options.read_timeout, remaining)
            ),
            retries=urllib3.Retry(total=None, connect=0, read=0, status=0, other=0, redirect=5),
        )
        try:
            self._accept(response)
        except BaseException:
            response.close()  # before release: a connection with its body unread never returns to the pool
            response.release_conn()
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
        encoding = response.headers.get("Content-Encoding", "identity").strip()
        if encoding.lower() != "identity":
            raise ShardReadError(
                f"shard {self.url}: the server answered with Content-Encoding {encoding[:40]} though only "
                "identity was accepted; refusing a body that is not the file's bytes"
            )
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
    stop: threading.Event | None = None,
) -> io.BufferedReader:
    """Open an ``http(s)://`` shard for reading with retries and byte-exact resumption.

    Args:
        url: the shard's URL.
        options: retry and timeout settings (default :data:`DEFAULT_REMOTE_OPTIONS`).
        start: first byte to read, >= 0 (a partial download continued); the file then starts there.
            ``options.cache`` is not used here: :func:`ccc.shards.location.open_shard` chooses the cache.
        identity: :attr:`RemoteShard.identity` of the file when its first ``start`` bytes were read
            (an earlier process); an answer of another file is then a :class:`ShardChangedError`.
        stop: when set during a back-off wait, the read ends at once in a :class:`ShardReadError`
            (``ccc-mirror`` stops every download at the first fatal error); None: waits run to their end.

    Returns:
        A buffered, non-seekable binary file; its reads retry and resume as the module documentation says.

    Raises:
        ShardReadError: the server answered a non-retryable status (e.g. 404), or every attempt failed;
            :class:`ShardChangedError` when the file changed between two requests.
    """
    options = options or DEFAULT_REMOTE_OPTIONS
    raw = RemoteShard(url, options, check_non_negative_int("start", start), identity, stop)
    return io.BufferedReader(raw, buffer_size=1 << 16)
