"""Reading WebDataset tar shards sample by sample (IO only, no decoding of images).

A small tar reader rather than :mod:`tarfile`: it reads one member at a time from any byte stream
(local file, ``pipe:`` command, URL opened with :func:`webdataset.gopen`), skips the data of samples
the caller does not want without reading it when the stream can seek, verifies every header's
checksum, keeps no per-member state (``tarfile`` keeps every header of a 25,000-sample shard), and
reports a truncated or damaged file with the shard's name and the sample it stopped at.

Supported entries: regular files (ustar / GNU / PAX), PAX extended headers (``path``), GNU long
names, directories and global headers (ignored). Samples are groups of consecutive members sharing
a key, WebDataset's convention: the key is the member path up to the first dot of its file name
(``000000001234.input.jpg`` → key ``000000001234``, extension ``input.jpg``).

What the members mean (ours and the published CCC shards' formats) is :mod:`ccc.shards.record`'s
business; this reader only groups members into samples.

Limits: every length read from the file (member sizes, PAX record lengths) is checked against the
bytes that remain before anything is allocated; a member held in memory is at most
:data:`MAX_MEMBER_BYTES`; ``json`` members (:func:`load_json_member`) at most
:data:`MAX_JSON_BYTES` and :data:`MAX_JSON_DEPTH` levels deep. Any violation, a non-UTF-8 name
included, is a :class:`ShardReadError` naming the shard and the sample.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from ccc.shards.remote import RemoteOptions

__all__ = [
    "BLOCK_BYTES",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_MEMBER_BYTES",
    "ShardReadError",
    "TarSample",
    "load_json_member",
    "open_shard",
    "read_all",
    "read_samples",
]

BLOCK_BYTES = 512
"""Size of a tar block: headers and data are padded to multiples of it."""

MAX_MEMBER_BYTES = 64 * 2**20
"""Largest member (bytes) the reader holds in memory; a CCC JPEG is about 20 KB."""

MAX_JSON_BYTES = 2**20
"""Largest ``json`` member (bytes) :func:`load_json_member` parses; a CCC record is about 400 bytes."""

MAX_JSON_DEPTH = 32
"""Deepest nesting of arrays and objects :func:`load_json_member` parses; a CCC record has depth 2."""

_REGULAR_TYPES = (b"0", b"\0", b"7")
_SKIPPED_TYPES = (b"5", b"g", b"1", b"2", b"3", b"4", b"6")
_SEEK_THRESHOLD_BYTES = 64 * 1024


class ShardReadError(ValueError):
    """A shard cannot be read: missing, truncated, damaged, or not a tar; the message names the shard and sample."""


@dataclass(frozen=True)
class TarSample:
    """One sample of a shard.

    Attributes:
        position: position of the sample in its shard, 0-based.
        key: the sample's key (``__key__``).
        members: extension → bytes (e.g. ``"input.jpg"``), or None when the caller skipped the sample.
    """

    position: int
    key: str
    members: dict[str, bytes] | None


def open_shard(location: str, remote: RemoteOptions | None = None) -> BinaryIO:
    """Open a shard for reading: a local path, an ``http(s)://`` URL (read with retries and resumption by
    :func:`ccc.shards.remote.open_remote` under ``remote``), or anything else :func:`webdataset.gopen` opens
    (``pipe:``, …).

    Raises:
        ShardReadError: if a local file does not exist or cannot be opened, or a URL cannot be read.
    """
    if location.startswith(("http://", "https://")):
        from ccc.shards.remote import open_remote

        return open_remote(location, remote)
    if "://" in location or location.startswith("pipe:"):
        from webdataset import gopen

        return gopen(location, "rb")
    path = location[len("file:") :] if location.startswith("file:") else location
    try:
        return open(path, "rb")
    except OSError as error:
        raise ShardReadError(f"shard {location}: cannot open ({error.strerror or error})") from None


def _octal(field: bytes) -> int:
    text = field.rstrip(b"\0 ").strip()
    if field[:1] and field[0] & 0x80:
        return int.from_bytes(field[1:], "big")
    return int(text, 8) if text else 0


def _header_checksum_ok(header: bytes) -> bool:
    try:
        stored = _octal(header[148:156])
    except ValueError:
        return False
    unsigned = sum(header[:148]) + 8 * 32 + sum(header[156:])
    return stored == unsigned


def _pax_path(data: bytes, location: str, where: str) -> str | None:
    """The ``path`` of a PAX extended header: records ``"<length> <keyword>=<value>\\n"``, each length checked."""
    path = None
    offset = 0
    while offset < len(data):
        length_text = data[offset : offset + 20].partition(b" ")[0]
        length = int(length_text) if length_text.isdigit() else -1
        if (
            not len(length_text) + 2 < length <= len(data) - offset
            or data[offset + length - 1 : offset + length] != b"\n"
        ):
            raise ShardReadError(
                f"shard {location}: damaged PAX extended header {where} (record length {length_text[:20]!r} "
                f"at byte {offset} of {len(data)})"
            )
        keyword, _, value = data[offset + len(length_text) + 1 : offset + length - 1].partition(b"=")
        if keyword == b"path":
            path = _utf8(value, location, f"PAX path {where}")
        offset += length
    return path


def _utf8(data: bytes, location: str, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ShardReadError(f"shard {location}: {what} is not UTF-8 ({data[:60]!r})") from None


def load_json_member(data: bytes, where: str) -> object:
    """Parse a ``json`` member of at most :data:`MAX_JSON_BYTES` bytes and :data:`MAX_JSON_DEPTH` levels.

    Args:
        data: the member's bytes (UTF-8 JSON).
        where: shard and sample, for the message.

    Raises:
        ShardReadError: too large, too deep, or not JSON; the message starts with ``where``.
    """
    if len(data) > MAX_JSON_BYTES:
        raise ShardReadError(
            f"{where}: json member of {len(data):,} bytes exceeds the reader's limit of {MAX_JSON_BYTES:,}"
        )
    if data.count(b"[") + data.count(b"{") > MAX_JSON_DEPTH and _json_depth(data) > MAX_JSON_DEPTH:
        raise ShardReadError(f"{where}: json member nested deeper than the reader's limit of {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError) as error:
        raise ShardReadError(f"{where}: json member is not JSON ({error})") from None


def _json_depth(data: bytes) -> int:
    """Deepest nesting of ``[``/``{`` outside strings (only called when the bracket count exceeds the limit)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _split_name(name: str) -> tuple[str, str]:
    directory, _, base = name.rpartition("/")
    stem, dot, extension = base.partition(".")
    key = f"{directory}/{stem}" if directory else stem
    return key, extension if dot else ""


class _Reader:
    def __init__(self, handle: BinaryIO, location: str) -> None:
        self.handle = handle
        self.location = location
        try:
            self.seekable = handle.seekable()
        except (AttributeError, OSError):
            self.seekable = False
        self.end: int | None = None
        if self.seekable:
            position = handle.tell()
            self.end = handle.seek(0, os.SEEK_END)
            handle.seek(position)

    def _check_remaining(self, size: int, what: str) -> None:
        """Refuse a length beyond the bytes that remain (known for seekable files) before allocating or seeking."""
        if self.end is not None:
            remaining = self.end - self.handle.tell()
            if size > remaining:
                raise ShardReadError(
                    f"shard {self.location}: truncated ({what}: expected {size} bytes, got {remaining})"
                )

    def read(self, size: int, what: str) -> bytes:
        """The ``size`` bytes of a member (at most :data:`MAX_MEMBER_BYTES`), its padding consumed."""
        padded = -(-size // BLOCK_BYTES) * BLOCK_BYTES
        self._check_remaining(padded, what)
        if size > MAX_MEMBER_BYTES:
            raise ShardReadError(
                f"shard {self.location}: {what} of {size:,} bytes exceeds the reader's limit of {MAX_MEMBER_BYTES:,}"
            )
        data = self.handle.read(padded)
        if len(data) != padded:
            raise ShardReadError(f"shard {self.location}: truncated ({what}: expected {padded} bytes, got {len(data)})")
        return data[:size]

    def skip(self, size: int, what: str) -> None:
        self._check_remaining(size, what)
        if self.seekable and size >= _SEEK_THRESHOLD_BYTES:
            self.handle.seek(size, os.SEEK_CUR)
            return
        remaining = size
        while remaining:
            chunk = self.handle.read(min(remaining, 1 << 20))
            if not chunk:
                raise ShardReadError(
                    f"shard {self.location}: truncated ({what}: expected {size} bytes, got {size - remaining})"
                )
            remaining -= len(chunk)


def read_samples(handle: BinaryIO, location: str, wanted: Callable[[int], bool] | None = None) -> Iterator[TarSample]:
    """Yield the samples of one tar shard in file order.

    Args:
        handle: the open shard (see :func:`open_shard`); read from its current position.
        location: the shard's name or URL, for messages.
        wanted: called with a sample's position in the shard (0-based) before its data is read;
            False skips the data (yielded with ``members=None``). None reads every sample.

    Raises:
        ShardReadError: on a truncated file, a damaged header (checksum mismatch, a size or PAX
            length beyond the bytes that remain, a non-UTF-8 name), a member larger than
            :data:`MAX_MEMBER_BYTES`, a missing end-of-archive marker, or members of one sample that
            are not consecutive; the message names the shard and the sample.
    """
    reader = _Reader(handle, location)
    position = -1
    key: str | None = None
    members: dict[str, bytes] | None = None
    seen_keys: set[str] = set()
    long_name: str | None = None
    pax_name: str | None = None
    while True:
        where = f"after sample {key}" if key is not None else "at the start"
        header = handle.read(BLOCK_BYTES)
        if len(header) < BLOCK_BYTES:
            raise ShardReadError(
                f"shard {location}: truncated {where} (the tar ends without its end-of-archive marker"
                f"{'' if not header else f'; a {len(header)}-byte partial header'})"
            )
        if header == bytes(BLOCK_BYTES):
            break
        if not _header_checksum_ok(header):
            raise ShardReadError(f"shard {location}: damaged tar header {where} (checksum mismatch)")
        try:
            size = _octal(header[124:136])
        except ValueError:
            size = -1
        if size < 0:
            raise ShardReadError(f"shard {location}: damaged tar header {where} (size field {header[124:136]!r})")
        kind = header[156:157]
        padded = -(-size // BLOCK_BYTES) * BLOCK_BYTES
        if kind in (b"x", b"L"):
            data = reader.read(size, f"extended header {where}")
            if kind == b"x":
                pax_name = _pax_path(data, location, where)
            else:
                long_name = _utf8(data.rstrip(b"\0"), location, f"GNU long name {where}")
            continue
        name = pax_name or long_name
        pax_name = long_name = None
        if name is None:
            prefix = _utf8(header[345:500].split(b"\0", 1)[0], location, f"member name prefix {where}")
            base = _utf8(header[:100].split(b"\0", 1)[0], location, f"member name {where}")
            name = f"{prefix}/{base}" if prefix and header[257:262] == b"ustar" else base
        if kind in _SKIPPED_TYPES or kind not in _REGULAR_TYPES:
            reader.skip(padded, f"member {name}")
            continue
        member_key, extension = _split_name(name)
        if member_key != key:
            if key is not None:
                yield TarSample(position, key, members)
                seen_keys.add(key)
            if member_key in seen_keys:
                raise ShardReadError(f"shard {location}: members of sample {member_key} are not consecutive")
            key = member_key
            position += 1
            members = {} if wanted is None or wanted(position) else None
        if members is None:
            reader.skip(padded, f"sample {member_key}, member {extension}")
        else:
            members[extension] = reader.read(size, f"sample {member_key}, member {extension}")
    if key is not None:
        yield TarSample(position, key, members)


def read_all(location: str) -> list[TarSample]:
    """Every sample of the shard at ``location`` with its members (small shards, tests and tools)."""
    with open_shard(location) as handle:
        return list(read_samples(handle, location))
