"""Writing WebDataset tar shards (IO only, atomic).

The names and members are :mod:`ccc.shards.record`'s; this module writes them as a plain ustar tar
with every header fixed (mtime 0, mode 0444, uid/gid 0, user/group ``ccc``), so equal samples give
equal bytes (``docs/generator.md`` has the full description).

A shard is written to its temporary name (``.serial_<k>.tar.partial``) in the same folder, flushed
to disk and renamed; a reader never sees half a shard under the final name. The manifest
(:mod:`ccc.shards.manifest`) is replaced the same way after every finished shard.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from ccc.render import RenderedSample
from ccc.shards.record import encode_members, shard_name, temporary_shard_name

__all__ = ["TAR_MTIME", "ShardInfo", "ShardWriteError", "ShardWriter"]

TAR_MTIME = 0
"""Modification time (seconds since the epoch) written into every tar header."""

_TAR_MODE = 0o444
_TAR_OWNER = "ccc"


class ShardWriteError(OSError):
    """Writing a shard failed (e.g. the disk is full); no partial shard is left behind.

    Built as ``ShardWriteError(errno, message)``; ``str()`` is the message alone (no "[Errno N]").
    """

    def __str__(self) -> str:
        return self.strerror or super().__str__()


@dataclass(frozen=True)
class ShardInfo:
    """A finished shard as recorded in the manifest.

    Attributes:
        index: shard number, >= 0.
        name: file name in the run folder.
        first_sample: stream index of its first sample.
        sample_count: number of samples, >= 1.
        sha256: sha256 (hex) of the file.
        bytes: file size in bytes.
    """

    index: int
    name: str
    first_sample: int
    sample_count: int
    sha256: str
    bytes: int

    def to_json_dict(self) -> dict[str, Any]:
        """The entry as a JSON-serialisable dict."""
        return {
            "index": self.index,
            "name": self.name,
            "first_sample": self.first_sample,
            "sample_count": self.sample_count,
            "sha256": self.sha256,
            "bytes": self.bytes,
        }


class _HashingFile:
    """A write-only file object that hashes and counts what passes through it (for ``tarfile``)."""

    def __init__(self, handle: BinaryIO) -> None:
        self._handle = handle
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self._handle.write(data)
        self.digest.update(data)
        self.size += len(data)
        return len(data)

    def tell(self) -> int:
        return self.size


class ShardWriter:
    """Writes one shard: ``write`` samples in order, then ``commit``; leaving the ``with`` block early aborts.

    Args:
        directory: the run folder (must exist).
        shard_index: shard number, >= 0.
        first_sample: stream index the first written sample must have; samples must be consecutive.

    Raises:
        ShardWriteError: when the file system fails (full disk, permissions); the temporary file is removed.
    """

    def __init__(self, directory: Path, shard_index: int, first_sample: int) -> None:
        self.directory = Path(directory)
        self.shard_index = shard_index
        self.first_sample = first_sample
        self.path = self.directory / shard_name(shard_index)
        self.temporary_path = self.directory / temporary_shard_name(shard_index)
        self._count = 0
        self._finished = False
        self._handle: BinaryIO | None = None
        try:
            self._handle = open(self.temporary_path, "wb")
            self._hashing = _HashingFile(self._handle)
            self._tar = tarfile.open(fileobj=self._hashing, mode="w", format=tarfile.USTAR_FORMAT)  # type: ignore[call-overload]
        except OSError as error:
            self.abort()
            raise self._error(error) from error

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if not self._finished:
            self.abort()

    def _error(self, error: OSError) -> ShardWriteError:
        hint = (
            " (no space left on device: free space, then re-run the same command to resume)"
            if error.errno == errno.ENOSPC
            else ""
        )
        return ShardWriteError(error.errno or 0, f"could not write shard {self.path}: {error.strerror or error}{hint}")

    def write(self, sample: RenderedSample) -> None:
        """Append one sample; its index must be ``first_sample + samples written so far``."""
        expected = self.first_sample + self._count
        if sample.spec.index != expected:
            raise ValueError(f"sample index must be {expected} (samples in order), got {sample.spec.index}")
        try:
            for name, content in encode_members(sample.spec, sample.image, sample.encoding):
                header = tarfile.TarInfo(name)
                header.size = len(content)
                header.mtime = TAR_MTIME
                header.mode = _TAR_MODE
                header.uid = header.gid = 0
                header.uname = header.gname = _TAR_OWNER
                self._tar.addfile(header, io.BytesIO(content))
        except OSError as error:
            self.abort()
            raise self._error(error) from error
        self._count += 1

    def commit(self) -> ShardInfo:
        """Finish the tar, flush it to disk, rename it into place and return its manifest entry."""
        if self._count == 0:
            raise ValueError(f"shard {self.shard_index} must hold at least one sample, got none")
        assert self._handle is not None
        try:
            self._tar.close()
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()
            os.replace(self.temporary_path, self.path)
            _fsync_directory(self.directory)
        except OSError as error:
            self.abort()
            raise self._error(error) from error
        self._finished = True
        return ShardInfo(
            index=self.shard_index,
            name=self.path.name,
            first_sample=self.first_sample,
            sample_count=self._count,
            sha256=self._hashing.digest.hexdigest(),
            bytes=self._hashing.size,
        )

    def abort(self) -> None:
        """Discard the shard: close and delete the temporary file (the final name is never touched)."""
        self._finished = True
        if self._handle is not None:
            # Closing flushes the buffer, which fails again on a full disk: the file goes regardless.
            with contextlib.suppress(OSError):
                self._handle.close()
        self.temporary_path.unlink(missing_ok=True)


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
