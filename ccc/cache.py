"""The user cache folder of ccc and downloads into it.

The folder is ``$CCC_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/ccc``, else ``~/.cache/ccc``. A
download goes to a temporary ``.part`` file in the destination folder, is checked (length, optional
validation callback) and only then renamed into place, so the cache never holds a partial file
under its final name. The writer holds an ``flock`` on its ``.part`` file; the next download of the
same URL deletes the ``.part`` files no live process holds (left by a killed download). A download
has a socket timeout per read and an overall time limit, so a slow server cannot stall it for ever.
"""

from __future__ import annotations

import glob
import hashlib
import http.client
import logging
import os
import re
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from tqdm.auto import tqdm

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows has no flock: abandoned .part files are then kept
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

CACHE_DIR_VARIABLE = "CCC_CACHE_DIR"
_CHUNK_BYTES = 1 << 16
_PROGRESS_INTERVAL_SECONDS = 2.0
_UNSAFE_FILENAME_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]+")
_PART_SUFFIX = ".part"
DEFAULT_TOTAL_TIMEOUT_SECONDS = 900.0
"""Overall time limit of one download (the published tables are a few MB)."""


class DownloadError(OSError):
    """A download failed (HTTP error, network error, truncated or oversized body)."""


def default_cache_dir() -> Path:
    """The ccc cache folder: ``$CCC_CACHE_DIR``, else ``$XDG_CACHE_HOME/ccc``, else ``~/.cache/ccc``."""
    configured = os.environ.get(CACHE_DIR_VARIABLE)
    if configured:
        return Path(configured).expanduser()
    xdg_cache = os.environ.get("XDG_CACHE_HOME")
    if xdg_cache:
        return Path(xdg_cache).expanduser() / "ccc"
    return Path.home() / ".cache" / "ccc"


def is_url(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` is an http(s) URL (anything else is treated as a local path)."""
    return isinstance(location, str) and urllib.parse.urlsplit(location).scheme in ("http", "https")


def cache_path_for_url(url: str, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where :func:`download_to_cache` keeps ``url``: ``<cache>/downloads/<sha256(url)[:16]>-<file name>``."""
    if not is_url(url):
        raise ValueError(f"url must be an http(s) URL, got {url!r}")
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    file_name = Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path)).name
    file_name = _UNSAFE_FILENAME_CHARACTERS.sub("_", file_name).strip("._") or "download"
    key = hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
    return folder / "downloads" / f"{key}-{file_name}"


def download_to_cache(
    url: str,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    validate: Callable[[Path], None] | None = None,
    max_bytes: int = 256 * 2**20,
    timeout_seconds: float = 60.0,
    total_timeout_seconds: float = DEFAULT_TOTAL_TIMEOUT_SECONDS,
    progress: bool = True,
) -> Path:
    """Return the cached copy of ``url``, downloading it once if it is not cached yet.

    Args:
        url: http(s) URL.
        cache_dir: cache folder; None for :func:`default_cache_dir`.
        validate: called with the downloaded temporary file before it enters the cache; whatever it
            raises aborts the download (the file is deleted) and propagates.
        max_bytes: refuse bodies larger than this (bytes, ≥ 1).
        timeout_seconds: socket timeout of the connection and of each read, > 0.
        total_timeout_seconds: the whole download must finish within this many seconds, > 0.
        progress: show a (throttled) tqdm progress bar on stderr.

    Raises:
        DownloadError: HTTP or network error, truncated body, body larger than ``max_bytes``, or
            slower than ``total_timeout_seconds``.
    """
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
    if timeout_seconds <= 0:
        raise ValueError(f"timeout_seconds must be > 0, got {timeout_seconds}")
    if not total_timeout_seconds > 0:
        raise ValueError(f"total_timeout_seconds must be > 0, got {total_timeout_seconds}")
    destination = cache_path_for_url(url, cache_dir)
    if destination.is_file():
        logger.info("using cached %s for %s", destination, url)
        return destination
    destination.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_parts(destination)
    descriptor, temporary_name = tempfile.mkstemp(
        prefix=f".{destination.name}.", suffix=_PART_SUFFIX, dir=destination.parent
    )
    temporary = Path(temporary_name)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            deadline = time.monotonic() + total_timeout_seconds
            _stream_url(url, handle, max_bytes, timeout_seconds, deadline, progress)
        if validate is not None:
            validate(temporary)
        os.replace(temporary, destination)
    finally:
        temporary.unlink(missing_ok=True)
    logger.info("downloaded %s to %s", url, destination)
    return destination


def _remove_abandoned_parts(destination: Path) -> None:
    """Delete the ``.part`` files of ``destination`` that no live download holds locked."""
    if fcntl is None:  # pragma: no cover - without flock a live download cannot be told apart
        return
    for part in destination.parent.glob(f".{glob.escape(destination.name)}.*{_PART_SUFFIX}"):
        try:
            with open(part, "rb") as handle:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                part.unlink(missing_ok=True)
                logger.info("removed %s, left by an interrupted download", part)
        except (BlockingIOError, FileNotFoundError):
            continue


def _stream_url(
    url: str, handle: BinaryIO, max_bytes: int, timeout_seconds: float, deadline: float, progress: bool
) -> None:
    logger.info("downloading %s", url)
    try:
        response = urllib.request.urlopen(url, timeout=timeout_seconds)
    except urllib.error.HTTPError as error:
        raise DownloadError(f"download of {url} failed: HTTP {error.code} {error.reason}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
        reason = getattr(error, "reason", error)
        raise DownloadError(f"download of {url} failed: {reason}") from None
    with response:
        length_header = response.headers.get("Content-Length")
        expected = int(length_header) if length_header and length_header.isdigit() else None
        if expected is not None and expected > max_bytes:
            raise DownloadError(f"download of {url} refused: {expected} bytes is more than max_bytes={max_bytes}")
        received = 0
        with tqdm(
            total=expected,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            mininterval=_PROGRESS_INTERVAL_SECONDS,
            desc=Path(urllib.parse.urlsplit(url).path).name or url,
            disable=not progress,
            leave=False,
        ) as bar:
            while True:
                if time.monotonic() > deadline:
                    raise DownloadError(
                        f"download of {url} was too slow: {received} bytes after the overall limit "
                        "(total_timeout_seconds) ran out; try again later"
                    )
                try:
                    # read1: returns what arrived, so a server trickling bytes cannot hold one call long.
                    chunk = response.read1(_CHUNK_BYTES)
                except (http.client.IncompleteRead, OSError) as error:
                    raise DownloadError(
                        f"download of {url} was interrupted after {received} bytes: {error!r}"
                    ) from None
                if not chunk:
                    break
                received += len(chunk)
                if received > max_bytes:
                    raise DownloadError(f"download of {url} refused: more than max_bytes={max_bytes} bytes")
                handle.write(chunk)
                bar.update(len(chunk))
    if expected is not None and received != expected:
        raise DownloadError(f"download of {url} was truncated: received {received} of {expected} bytes")
