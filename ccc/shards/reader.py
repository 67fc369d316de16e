"""Reading WebDataset tar shards sample by sample (IO only, no decoding of images).

A small tar reader rather than :mod:`tarfile`: it reads one member at a time from any byte stream
(local file, ``pipe:`` command, URL opened with :func:`webdataset.gopen`), skips the data of samples
the caller does not want without reading it when the stream can seek, verifies every header's
checksum, keeps no per-member state (``tarfile`` keeps every header of a 25,000-sample shard), and
reports a truncated or damaged file with the shard's name and the sample it stopped at.

Opening a location is :func:`ccc.shards.location.open_shard`'s job (the one place that knows how);
here, each step a function: :func:`read_members` parses tar headers into :class:`TarMember` s (:func:`parse_header` one
header), :func:`group_samples` groups consecutive members into :class:`TarSample` s;
:func:`read_samples` chains the last two.

Supported entries: regular files (ustar / GNU / PAX), PAX extended headers (``path``), GNU long
names, directories and global headers (ignored). Samples are groups of consecutive members sharing
a key, WebDataset's convention: the key is the member path up to the first dot of its file name
(``000000001234.input.jpg`` → key ``000000001234``, extension ``input.jpg``; :func:`split_member_name`).

What the members mean (ours and the published CCC shards' formats) is :mod:`ccc.shards.record`'s
business; this reader only groups members into samples.

Limits: every length read from the file (member sizes, PAX record lengths) is checked against the
bytes that remain before anything is allocated; a member held in memory is at most
:data:`MAX_MEMBER_BYTES` (``json`` members are bounded by :func:`ccc.shards.record.load_json_member`).
Any violation, a non-UTF-8 name included, is a :class:`ccc.shards.errors.ShardReadError` naming the
shard and the sample.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from ccc.shards.errors import ShardReadError

__all__ = [
    "BLOCK_BYTES",
    "MAX_MEMBER_BYTES",
    "MemberSource",
    "TarHeader",
    "TarMember",
    "TarSample",
    "group_samples",
    "parse_header",
    "read_members",
    "read_samples",
    "split_member_name",
]

BLOCK_BYTES = 512
"""Size of a tar block: headers and data are padded to multiples of it."""

MAX_MEMBER_BYTES = 64 * 2**20
"""Largest member (bytes) the reader holds in memory; a CCC JPEG is about 20 KB."""

_REGULAR_TYPES = (b"0", b"\0", b"7")
_SEEK_THRESHOLD_BYTES = 64 * 1024


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


def _padded(size: int) -> int:
    """``size`` bytes rounded up to a multiple of :data:`BLOCK_BYTES` (tar pads every data block)."""
    return -(-size // BLOCK_BYTES) * BLOCK_BYTES


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


def split_member_name(name: str) -> tuple[str, str]:
    """A member's sample key and extension: ``"a/000000001234.input.jpg"`` → ``("a/000000001234", "input.jpg")``.

    The key is the path up to the first dot of the file name (WebDataset's convention); a name
    without a dot has the extension ``""``.
    """
    directory, _, base = name.rpartition("/")
    stem, dot, extension = base.partition(".")
    key = f"{directory}/{stem}" if directory else stem
    return key, extension if dot else ""


@dataclass(frozen=True)
class TarHeader:
    """One 512-byte tar header, checksum and size checked, its name fields not yet decoded.

    Attributes:
        kind: the type flag (``b"0"``, ``b"\\0"``, ``b"7"`` regular file; ``b"x"`` PAX extended header;
            ``b"L"`` GNU long name; others are skipped).
        size: bytes of data that follow the header, >= 0 (padded to :data:`BLOCK_BYTES` in the file).
        name: the name field up to its first NUL.
        prefix: the ustar prefix field up to its first NUL (used only when ``ustar``).
        ustar: whether the header carries the ``ustar`` magic.
    """

    kind: bytes
    size: int
    name: bytes
    prefix: bytes
    ustar: bool

    @property
    def padded_size(self) -> int:
        """Bytes the data occupies in the file: ``size`` rounded up to a multiple of :data:`BLOCK_BYTES`."""
        return _padded(self.size)


def parse_header(block: bytes, location: str, where: str) -> TarHeader | None:
    """Parse one header block; None for a zero block (the end-of-archive marker).

    Args:
        block: the bytes read for the header, normally :data:`BLOCK_BYTES` of them.
        location: the shard's name or URL, for messages.
        where: the place in the shard (``at the start``, ``after sample <key>``), for messages.

    Raises:
        ShardReadError: a short block (the tar ends without its end-of-archive marker), a checksum
            mismatch or an unreadable size field.
    """
    if len(block) < BLOCK_BYTES:
        raise ShardReadError(
            f"shard {location}: truncated {where} (the tar ends without its end-of-archive marker"
            f"{'' if not block else f'; a {len(block)}-byte partial header'})"
        )
    if block == bytes(BLOCK_BYTES):
        return None
    if not _header_checksum_ok(block):
        raise ShardReadError(f"shard {location}: damaged tar header {where} (checksum mismatch)")
    try:
        size = _octal(block[124:136])
    except ValueError:
        size = -1
    if size < 0:
        raise ShardReadError(f"shard {location}: damaged tar header {where} (size field {block[124:136]!r})")
    return TarHeader(
        kind=block[156:157],
        size=size,
        name=block[:100].split(b"\0", 1)[0],
        prefix=block[345:500].split(b"\0", 1)[0],
        ustar=block[257:262] == b"ustar",
    )


def _header_path(header: TarHeader, location: str, where: str) -> str:
    """The member path a header names itself (ustar prefix joined), decoded as UTF-8."""
    prefix = _utf8(header.prefix, location, f"member name prefix {where}")
    base = _utf8(header.name, location, f"member name {where}")
    return f"{prefix}/{base}" if prefix and header.ustar else base


class _Reader:
    """The open shard as a :class:`MemberSource`: bounded reads, skips that seek when the file can."""

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
        padded = _padded(size)
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
        """Pass over ``size`` bytes: seek when the file can and the gap is large, else read and drop."""
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


class MemberSource(Protocol):
    """Where a member's data comes from: the open shard, positioned just after the member's header."""

    def read(self, size: int, what: str) -> bytes:
        """The next ``size`` bytes of data, their padding consumed; ``what`` names them in messages."""
        ...

    def skip(self, size: int, what: str) -> None:
        """Pass over the next ``size`` bytes (a padded size); ``what`` names them in messages."""
        ...


@dataclass(frozen=True)
class TarMember:
    """A regular file member whose header has been read; its data is next in the shard.

    The consumer calls exactly one of :meth:`read` and :meth:`skip` before asking for the next member.

    Attributes:
        name: the member path (from a PAX ``path``, a GNU long name or the header).
        size: its data in bytes, >= 0.
        source: the shard the data is read from.
    """

    name: str
    size: int
    source: MemberSource

    def read(self, what: str) -> bytes:
        """The member's data (at most :data:`MAX_MEMBER_BYTES`); ``what`` names it in messages."""
        return self.source.read(self.size, what)

    def skip(self, what: str) -> None:
        """Pass over the member's data without keeping it; ``what`` names it in messages."""
        self.source.skip(_padded(self.size), what)


def read_members(handle: BinaryIO, location: str) -> Iterator[TarMember]:
    """Yield the regular file members of one tar shard in file order, up to the end-of-archive marker.

    PAX extended headers and GNU long names name the member that follows them; directories, links,
    global headers and other entries are passed over. Each member's data must be read or skipped
    (:class:`TarMember`) before the next member is asked for.

    Args:
        handle: the open shard (see :func:`ccc.shards.location.open_shard`); read from its current position.
        location: the shard's name or URL, for messages.

    Raises:
        ShardReadError: on a truncated file, a damaged header (checksum mismatch, a size or PAX
            length beyond the bytes that remain, a non-UTF-8 name) or a missing end-of-archive
            marker; the message names the shard and the last sample key seen.
    """
    source = _Reader(handle, location)
    last_key: str | None = None
    long_name: str | None = None
    pax_name: str | None = None
    while True:
        where = f"after sample {last_key}" if last_key is not None else "at the start"
        header = parse_header(handle.read(BLOCK_BYTES), location, where)
        if header is None:
            return
        if header.kind in (b"x", b"L"):
            data = source.read(header.size, f"extended header {where}")
            if header.kind == b"x":
                pax_name = _pax_path(data, location, where)
            else:
                long_name = _utf8(data.rstrip(b"\0"), location, f"GNU long name {where}")
            continue
        name = pax_name or long_name
        pax_name = long_name = None
        if name is None:
            name = _header_path(header, location, where)
        if header.kind not in _REGULAR_TYPES:
            source.skip(header.padded_size, f"member {name}")
            continue
        yield TarMember(name, header.size, source)
        last_key = split_member_name(name)[0]


def group_samples(
    members: Iterable[TarMember], location: str, wanted: Callable[[int], bool] | None = None
) -> Iterator[TarSample]:
    """Group consecutive members sharing a key into samples, reading the data of wanted samples only.

    Args:
        members: the shard's members in file order (:func:`read_members`).
        location: the shard's name or URL, for messages.
        wanted: called with a sample's position in the shard (0-based) before its data is read;
            False skips the data (yielded with ``members=None``). None reads every sample.

    Raises:
        ShardReadError: members of one sample that are not consecutive, and whatever reading a
            member raises; the message names the shard and the sample.
    """
    position = -1
    key: str | None = None
    data: dict[str, bytes] | None = None
    seen_keys: set[str] = set()
    for member in members:
        member_key, extension = split_member_name(member.name)
        if member_key != key:
            if key is not None:
                yield TarSample(position, key, data)
                seen_keys.add(key)
            if member_key in seen_keys:
                raise ShardReadError(f"shard {location}: members of sample {member_key} are not consecutive")
            key = member_key
            position += 1
            data = {} if wanted is None or wanted(position) else None
        what = f"sample {member_key}, member {extension}"
        if data is None:
            member.skip(what)
        else:
            data[extension] = member.read(what)
    if key is not None:
        yield TarSample(position, key, data)


def read_samples(handle: BinaryIO, location: str, wanted: Callable[[int], bool] | None = None) -> Iterator[TarSample]:
    """Yield the samples of one tar shard in file order (:func:`read_members`, then :func:`group_samples`).

    Args:
        handle: the open shard (see :func:`ccc.shards.location.open_shard`); read from its current position.
        location: the shard's name or URL, for messages.
        wanted: called with a sample's position in the shard (0-based) before its data is read;
            False skips the data (yielded with ``members=None``). None reads every sample.

    Raises:
        ShardReadError: on a truncated file, a damaged header (checksum mismatch, a size or PAX
            length beyond the bytes that remain, a non-UTF-8 name), a member larger than
            :data:`MAX_MEMBER_BYTES`, a missing end-of-archive marker, or members of one sample that
            are not consecutive; the message names the shard and the sample.
    """
    return group_samples(read_members(handle, location), location, wanted)
