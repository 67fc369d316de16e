"""Writing WebDataset tar shards and the run manifest (IO only, atomic).

Shard layout (``docs/generator.md`` has the full description):

- file ``serial_<k:05d>.tar`` for shard ``k`` (the public name), plain ustar tar;
- per sample, members ``<key>.info``, ``<key>.input.jpg``, ``<key>.json``, ``<key>.output.cls``
  in that order, ``<key>`` the sample's stream index zero-padded to 12 digits;
- every header fixed: mtime 0, mode 0444, uid/gid 0, user/group ``ccc``, so equal samples give
  equal bytes.

A shard is written to ``.serial_<k>.tar.partial`` in the same folder, flushed to disk and renamed;
a reader never sees half a shard under the final name. The manifest (``manifest.json``) is
replaced the same way after every finished shard.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from ccc.render import JPEG_OPTIMIZE, JPEG_QUALITY, OUTPUT_SIZE, RenderedSample, format_info
from ccc.stream.plan import CROP_ATTEMPTS, CROP_RATIO, CROP_SCALE, FLIP_PROBABILITY
from ccc.stream.spec import PlanError, StreamSpec

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_FORMAT_VERSION",
    "MANIFEST_NAME",
    "SAMPLE_KEY_DIGITS",
    "TAR_MTIME",
    "TEMPORARY_SUFFIX",
    "Manifest",
    "ManifestError",
    "ShardInfo",
    "ShardWriteError",
    "ShardWriter",
    "file_sha256",
    "load_manifest",
    "rendering_settings",
    "sample_key",
    "sample_members",
    "save_manifest",
    "shard_name",
    "temporary_shard_path",
]

SAMPLE_KEY_DIGITS = 12
"""Digits of the zero-padded sample index used as ``__key__`` (fixed, so keys do not depend on the length)."""

TAR_MTIME = 0
"""Modification time (seconds since the epoch) written into every tar header."""

TEMPORARY_SUFFIX = ".partial"
"""Suffix of a shard being written (the name also starts with a dot)."""

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "ccc-stream-manifest"
MANIFEST_FORMAT_VERSION = 1

_TAR_MODE = 0o444
_TAR_OWNER = "ccc"
_HASH_CHUNK_BYTES = 1 << 20


class ShardWriteError(OSError):
    """Writing a shard failed (e.g. the disk is full); no partial shard is left behind.

    Built as ``ShardWriteError(errno, message)``; ``str()`` is the message alone (no "[Errno N]").
    """

    def __str__(self) -> str:
        return self.strerror or super().__str__()


class ManifestError(ValueError):
    """A manifest file is unreadable or inconsistent; the message names the file and the problem."""


def shard_name(shard_index: int) -> str:
    """File name of shard ``shard_index`` (>= 0): ``serial_00000.tar``, ``serial_00001.tar``, …"""
    return f"serial_{shard_index:05d}.tar"


def temporary_shard_path(directory: Path, shard_index: int) -> Path:
    """Where shard ``shard_index`` is written before it is renamed into place."""
    return directory / f".{shard_name(shard_index)}{TEMPORARY_SUFFIX}"


def sample_key(index: int) -> str:
    """The ``__key__`` of sample ``index``: the index zero-padded to :data:`SAMPLE_KEY_DIGITS` digits."""
    return f"{index:0{SAMPLE_KEY_DIGITS}d}"


def sample_members(sample: RenderedSample) -> list[tuple[str, bytes]]:
    """Tar members ``(name, content)`` of one sample, in the order they are written.

    ``info``: the public text layout (UTF-8); ``input.jpg``: the JPEG; ``json``: the full plan entry
    (sorted keys, compact); ``output.cls``: the class index as ASCII digits.
    """
    key = sample_key(sample.spec.index)
    record = json.dumps(sample.spec.to_json_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return [
        (f"{key}.info", format_info(sample.spec).encode("utf-8")),
        (f"{key}.input.jpg", sample.jpeg),
        (f"{key}.json", record.encode("utf-8")),
        (f"{key}.output.cls", str(sample.spec.class_index).encode("ascii")),
    ]


def file_sha256(path: Path) -> str:
    """sha256 (hex) of a file's content."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


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
        self.temporary_path = temporary_shard_path(self.directory, shard_index)
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

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None) -> None:
        if not self._finished:
            self.abort()

    def _error(self, error: OSError) -> ShardWriteError:
        hint = " (no space left on device: free space, then re-run the same command to resume)" if error.errno == errno.ENOSPC else ""
        return ShardWriteError(error.errno or 0, f"could not write shard {self.path}: {error.strerror or error}{hint}")

    def write(self, sample: RenderedSample) -> None:
        """Append one sample; its index must be ``first_sample + samples written so far``."""
        expected = self.first_sample + self._count
        if sample.spec.index != expected:
            raise ValueError(f"sample index must be {expected} (samples in order), got {sample.spec.index}")
        try:
            for name, content in sample_members(sample):
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


def rendering_settings() -> dict[str, Any]:
    """The fixed rendering constants, recorded in the manifest for readers."""
    return {
        "output_size": OUTPUT_SIZE,
        "jpeg_quality": JPEG_QUALITY,
        "jpeg_optimize": JPEG_OPTIMIZE,
        "crop_scale": list(CROP_SCALE),
        "crop_ratio": list(CROP_RATIO),
        "crop_attempts": CROP_ATTEMPTS,
        "flip_probability": FLIP_PROBABILITY,
        "resize": "PIL bilinear",
    }


@dataclass(frozen=True)
class Manifest:
    """The record of a run folder: what stream it holds and which shards are finished.

    Attributes:
        stream: the stream definition.
        plan_hash: :func:`ccc.stream.plan.plan_hash` of the plan.
        library_versions: versions of the libraries that shape the bytes (see ``docs/generator.md``).
        shards: finished shards, sorted by index.
        previous_library_versions: versions of earlier runs that wrote shards into this folder,
            when they differ from :attr:`library_versions`.
    """

    stream: StreamSpec
    plan_hash: str
    library_versions: Mapping[str, str]
    shards: tuple[ShardInfo, ...] = ()
    previous_library_versions: tuple[Mapping[str, str], ...] = field(default=())

    @property
    def complete(self) -> bool:
        """Whether every shard of the stream is finished."""
        return len(self.shards) == self.stream.num_shards

    def with_shard(self, info: ShardInfo) -> Manifest:
        """A copy with ``info`` added (replacing an entry with the same index)."""
        kept = [entry for entry in self.shards if entry.index != info.index]
        return replace(self, shards=tuple(sorted([*kept, info], key=lambda entry: entry.index)))

    def to_json_dict(self) -> dict[str, Any]:
        """The manifest document (see ``docs/generator.md``)."""
        return {
            "format": MANIFEST_FORMAT,
            "format_version": MANIFEST_FORMAT_VERSION,
            "stream": self.stream.to_json_dict(),
            "plan_hash": self.plan_hash,
            "calibration_checksum": self.stream.calibration_checksum,
            "rendering": rendering_settings(),
            "library_versions": dict(self.library_versions),
            "previous_library_versions": [dict(versions) for versions in self.previous_library_versions],
            "num_images": self.stream.num_images,
            "num_shards": self.stream.num_shards,
            "complete": self.complete,
            "shards": [entry.to_json_dict() for entry in self.shards],
        }


def save_manifest(manifest: Manifest, directory: Path) -> Path:
    """Write ``manifest.json`` into ``directory`` atomically (temporary file, fsync, rename); return its path."""
    path = Path(directory) / MANIFEST_NAME
    temporary = path.with_name(f".{MANIFEST_NAME}{TEMPORARY_SUFFIX}")
    text = json.dumps(manifest.to_json_dict(), indent=1, sort_keys=True, allow_nan=False) + "\n"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        hint = " (no space left on device)" if error.errno == errno.ENOSPC else ""
        raise ShardWriteError(error.errno or 0, f"could not write manifest {path}: {error.strerror or error}{hint}") from error
    return path


def _manifest_field(path: Path, document: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = document.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ManifestError(f"{path}: field {name!r} must be {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def load_manifest(directory: Path) -> Manifest:
    """Read and check ``manifest.json`` of ``directory``.

    Raises:
        ManifestError: if the file is not a valid manifest (bad JSON, other format, bad fields,
            shard entries that do not fit the stream's layout).
        FileNotFoundError: if there is no manifest.
    """
    path = Path(directory) / MANIFEST_NAME
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ManifestError(f"{path}: not a JSON manifest ({error})") from None
    if not isinstance(document, dict):
        raise ManifestError(f"{path}: must hold a JSON object, got {type(document).__name__}")
    if document.get("format") != MANIFEST_FORMAT or document.get("format_version") != MANIFEST_FORMAT_VERSION:
        raise ManifestError(
            f"{path}: format must be {MANIFEST_FORMAT!r} version {MANIFEST_FORMAT_VERSION}, "
            f"got {document.get('format')!r} version {document.get('format_version')!r}"
        )
    try:
        stream = StreamSpec.from_json_dict(document.get("stream"))
    except PlanError as error:
        raise ManifestError(f"{path}: {error}") from None
    plan_hash_value = _manifest_field(path, document, "plan_hash", str)
    versions = _manifest_field(path, document, "library_versions", dict)
    previous = _manifest_field(path, document, "previous_library_versions", list)
    entries = _manifest_field(path, document, "shards", list)
    shards = []
    for entry in entries:
        if not isinstance(entry, dict) or set(entry) != {"index", "name", "first_sample", "sample_count", "sha256", "bytes"}:
            raise ManifestError(f"{path}: malformed shard entry {entry!r}")
        info = ShardInfo(**entry)
        if not (isinstance(info.sha256, str) and len(info.sha256) == 64 and isinstance(info.bytes, int) and info.bytes > 0):
            raise ManifestError(f"{path}: shard entry needs a sha256 hex digest and a positive byte size, got {entry!r}")
        if not isinstance(info.index, int) or not 0 <= info.index < stream.num_shards:
            raise ManifestError(f"{path}: shard index must be in [0, {stream.num_shards - 1}], got {info.index!r}")
        expected = stream.shard_range(info.index)
        if (info.name, info.first_sample, info.sample_count) != (shard_name(info.index), expected.start, len(expected)):
            raise ManifestError(f"{path}: shard entry {info.index} does not match the stream's shard layout: {entry!r}")
        shards.append(info)
    if len({info.index for info in shards}) != len(shards):
        raise ManifestError(f"{path}: a shard is listed more than once")
    return Manifest(
        stream=stream,
        plan_hash=plan_hash_value,
        library_versions=versions,
        shards=tuple(sorted(shards, key=lambda info: info.index)),
        previous_library_versions=tuple(previous),
    )
