"""The run manifest (``manifest.json``): which stream a run folder holds and which shards are finished.

It records the :class:`ccc.stream.spec.StreamSpec`, the plan hash, the rendering settings, the
library versions that shape the bytes and, per finished shard, its sample range, size and sha256;
a run rendered by the torch backend (``ccc-generate --render-device``) also records its
``renderer`` (absent for the CPU reference path, whose manifests keep their bytes).
Written atomically (a fresh temporary file, fsync, rename: :func:`ccc.safe_files.write_atomically`)
after every finished shard; the full document is described in ``docs/generator.md``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ccc.render import JPEG_OPTIMIZE, JPEG_QUALITY, OUTPUT_SIZE
from ccc.safe_files import write_atomically
from ccc.shards.record import check_shard_file_name, shard_name
from ccc.shards.writer import ShardInfo, ShardWriteError
from ccc.stream.plan import CROP_ATTEMPTS, CROP_RATIO, CROP_SCALE, FLIP_PROBABILITY
from ccc.stream.spec import PlanError, StreamSpec
from ccc.validation import check_integer

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_FORMAT_VERSION",
    "MANIFEST_NAME",
    "MAX_MANIFEST_BYTES",
    "MAX_MANIFEST_SHARDS",
    "Manifest",
    "ManifestError",
    "describe_renderer",
    "file_sha256",
    "load_manifest",
    "rendering_settings",
    "save_manifest",
]

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "ccc-stream-manifest"
MANIFEST_FORMAT_VERSION = 1
MAX_MANIFEST_SHARDS = 100_000
"""The most shard entries a manifest read from a server may hold: a generous bound (the longest
published stream, 7,514,000 images, is 300 shards of 25,000; 100,000 shards is that stream in shards
of 76 samples)."""
MAX_MANIFEST_BYTES = MAX_MANIFEST_SHARDS * 256 + 2**16
"""The largest manifest read from a server, in bytes (25,665,536): at most 256 bytes per shard entry
(about 240 as :func:`save_manifest` writes one with 13-digit sample numbers and sizes) for
:data:`MAX_MANIFEST_SHARDS` entries, plus 64 KiB for the rest of the document (about 3 KB)."""
_HASH_CHUNK_BYTES = 1 << 20


class ManifestError(ValueError):
    """A manifest file is unreadable or inconsistent; the message names the file and the problem."""


def file_sha256(path: Path) -> str:
    """sha256 (hex) of a file's content."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


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


def describe_renderer(renderer: Mapping[str, str] | None) -> str:
    """The renderer a manifest records, in words: ``the CPU reference path`` (None) or e.g.
    ``the torch backend on cuda`` or ``the torch backend on cuda in float32`` (a ``precision`` entry)."""
    if renderer is None:
        return "the CPU reference path"
    precision = f" in {renderer['precision']}" if "precision" in renderer else ""
    return f"the {renderer.get('backend', '?')} backend on {renderer.get('device_type', '?')}{precision}"


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
        renderer: the rendering backend when it is not the CPU reference path, e.g.
            ``{"backend": "torch", "device_type": "cuda"}`` (plus ``"precision": "float32"`` for the torch
            backend's float32 mode); None (not written) for the CPU path.
    """

    stream: StreamSpec
    plan_hash: str
    library_versions: Mapping[str, str]
    shards: tuple[ShardInfo, ...] = ()
    previous_library_versions: tuple[Mapping[str, str], ...] = field(default=())
    renderer: Mapping[str, str] | None = None

    @property
    def complete(self) -> bool:
        """Whether every shard of the stream is finished."""
        return len(self.shards) == self.stream.num_shards

    def with_shard(self, info: ShardInfo) -> Manifest:
        """A copy with ``info`` added (replacing an entry with the same index)."""
        kept = [entry for entry in self.shards if entry.index != info.index]
        return replace(self, shards=tuple(sorted([*kept, info], key=lambda entry: entry.index)))

    def to_json_dict(self) -> dict[str, Any]:
        """The manifest document (see ``docs/generator.md``); ``renderer`` only when :attr:`renderer` is set."""
        renderer = {} if self.renderer is None else {"renderer": dict(self.renderer)}
        return {
            **renderer,
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
    """Write ``manifest.json`` into ``directory`` atomically (a fresh temporary file, fsync, rename; a
    symbolic link in its place is replaced, never followed); return its path."""
    path = Path(directory) / MANIFEST_NAME
    text = json.dumps(manifest.to_json_dict(), indent=1, sort_keys=True, allow_nan=False) + "\n"
    try:
        write_atomically(path, text.encode("utf-8"))
    except OSError as error:  # its message names the file ("cannot write …/manifest.json: No space left on device")
        raise ShardWriteError(error.errno or 0, error.strerror or str(error)) from error
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
    renderer = None if "renderer" not in document else _manifest_field(path, document, "renderer", dict)
    shards = []
    for entry in entries:
        if not isinstance(entry, dict) or set(entry) != {
            "index",
            "name",
            "first_sample",
            "sample_count",
            "sha256",
            "bytes",
        }:
            raise ManifestError(f"{path}: malformed shard entry {entry!r}")
        info = ShardInfo(**entry)
        check_shard_file_name(info.name, str(path), error=ManifestError)
        if not (
            isinstance(info.sha256, str) and len(info.sha256) == 64 and isinstance(info.bytes, int) and info.bytes > 0
        ):
            raise ManifestError(
                f"{path}: shard entry needs a sha256 hex digest and a positive byte size, got {entry!r}"
            )
        check_integer(f"{path}: shard index", info.index, 0, stream.num_shards - 1, error=ManifestError)
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
        renderer=renderer,
    )
