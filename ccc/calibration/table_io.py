"""The calibration table's file: the documented ``.npz`` (encode, decode, atomic write) and its checksum.

The file is a zip of ``.npy`` arrays plus one JSON member that holds no pickled objects; reading
never unpickles and refuses oversized members. ``docs/calibration_format.md`` describes it field by
field and shows how to recompute the checksum without this package.

This module is the one owner of the format and the lowest calibration module: it works on
:class:`TableContent` (plain arrays and JSON values) and defines the severity grid the file stores
and :class:`CalibrationError`. :class:`ccc.calibration.table.CalibrationTable` builds on it (its
``save``, ``load``, ``to_bytes``, ``from_bytes`` and ``checksum`` call these functions and validate
the table); this module never imports the table.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import math
import os
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ccc.corruptions import DEFAULT_CORRUPTION_SET

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "GRID_SIZE",
    "MAX_ARRAY_MEMBER_BYTES",
    "MAX_METADATA_BYTES",
    "PREPROCESSING_KINDS",
    "SEVERITIES",
    "SEVERITY_STEP",
    "CalibrationError",
    "TableContent",
    "decode_table",
    "encode_table",
    "read_table_file",
    "table_checksum",
    "write_table_file",
]

GRID_SIZE = 21
"""Severity levels per axis of a pair's grid."""
SEVERITY_STEP = 0.25
"""Severity between neighbouring grid levels."""
SEVERITIES: NDArray[np.float64] = np.arange(GRID_SIZE, dtype=np.float64) * SEVERITY_STEP
"""The 21 severities of the grid axes, 0, 0.25, …, 5 (read-only); the file records them."""
SEVERITIES.flags.writeable = False

CENTRE_PREPROCESSING = "centre"
"""Preprocessing kind of a table measured on centre crops (ImageNet-C's, and the published CCC matrices')."""
STREAM_PREPROCESSING = "stream"
"""Preprocessing kind of a table measured the way a CCC stream draws its samples (random-resized crop,
flip, the corruptions, JPEG quality 85)."""
PREPROCESSING_KINDS = (CENTRE_PREPROCESSING, STREAM_PREPROCESSING)
"""The values of ``metadata.preprocessing_kind``; a file without the field (written before it existed) is
``"centre"``."""


class CalibrationError(ValueError):
    """A calibration table, its file or its source data is invalid; the message says where and why."""


@dataclass(frozen=True)
class TableContent:
    """What a table file holds, as plain arrays and JSON values (the table type validates them).

    Attributes:
        accuracy: float64 [P, 21, 21], percent.
        image_counts: int64 [P, 21, 21], images per cell.
        pairs: int64 [P, 2], indices into ``metadata["corruptions"]``.
        metadata: the ``metadata`` JSON object (:meth:`CalibrationMetadata.to_json_dict`).
        difficulty_presets: name → (target accuracy in percent, corruption names), in file order.
    """

    accuracy: NDArray[np.float64]
    image_counts: NDArray[np.int64]
    pairs: NDArray[np.int64]
    metadata: Mapping[str, Any]
    difficulty_presets: Mapping[str, tuple[float, Sequence[str]]]


FORMAT_NAME = "ccc-calibration-table"
FORMAT_VERSION = 1

ACCURACY_MEMBER = "accuracy.npy"
IMAGE_COUNTS_MEMBER = "image_counts.npy"
PAIRS_MEMBER = "pairs.npy"
METADATA_MEMBER = "metadata.json"
_MEMBERS = (ACCURACY_MEMBER, IMAGE_COUNTS_MEMBER, PAIRS_MEMBER, METADATA_MEMBER)

MAX_ARRAY_MEMBER_BYTES = 64 * 2**20
"""Largest ``.npy`` member a table may hold, inflated (100 corruptions: 35 MB; the 15 of CCC: 0.8 MB)."""

MAX_METADATA_BYTES = 4 * 2**20
"""Largest ``metadata.json`` a table may hold, inflated (a real one: a few KB)."""

# Zip entries carry a timestamp; a fixed one (the earliest zip can store) makes saves byte-stable.
_ZIP_TIMESTAMP = (1980, 1, 1, 0, 0, 0)
_ZIP_UNIX_SYSTEM = 3
_ZIP_FILE_MODE = 0o100644 << 16


def table_checksum(content: TableContent) -> str:
    """sha256 (hex) of the numbers and names stream generation reads; stable across save/load.

    Covers the corruption names, pairs, accuracy, image counts, difficulty presets, a preprocessing
    kind other than ``"centre"`` and a corruption set other than ``"imagenet"`` (which only such tables'
    files name), but not the descriptive metadata (so importing the same data twice,
    on another day or with another ccc version, gives the same checksum, and every centre-crop table
    keeps the checksum it had before the kind was recorded). ``docs/calibration_format.md`` shows how
    to recompute it without this package.
    """
    summary = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "corruptions": list(content.metadata["corruptions"]),
        "pairs": content.pairs.tolist(),
        "difficulty_presets": _presets_json(content),
    }
    kind = content.metadata.get("preprocessing_kind", CENTRE_PREPROCESSING)
    if kind != CENTRE_PREPROCESSING:
        summary["preprocessing_kind"] = kind
    corruption_set = content.metadata.get("corruption_set", DEFAULT_CORRUPTION_SET)
    if corruption_set != DEFAULT_CORRUPTION_SET:
        summary["corruption_set"] = corruption_set
    digest = hashlib.sha256()
    digest.update(json.dumps(summary, sort_keys=True, separators=(",", ":")).encode("utf-8"))
    digest.update(b"\n")
    digest.update(content.accuracy.astype("<f8").tobytes())
    digest.update(content.image_counts.astype("<i8").tobytes())
    return digest.hexdigest()


def _presets_json(content: TableContent) -> list[dict[str, Any]]:
    return [
        {"name": name, "target_accuracy": target, "corruptions": list(corruptions)}
        for name, (target, corruptions) in content.difficulty_presets.items()
    ]


def _metadata_document(content: TableContent) -> dict[str, Any]:
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "severities": SEVERITIES.tolist(),
        "metadata": dict(content.metadata),
        "difficulty_presets": _presets_json(content),
    }


def encode_table(content: TableContent) -> bytes:
    """The bytes of the table file holding ``content``; identical for identical content."""
    members = {
        ACCURACY_MEMBER: _npy_bytes(content.accuracy.astype("<f8")),
        IMAGE_COUNTS_MEMBER: _npy_bytes(content.image_counts.astype("<i8")),
        PAIRS_MEMBER: _npy_bytes(content.pairs.astype("<i8")),
        METADATA_MEMBER: (
            json.dumps(_metadata_document(content), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        ).encode("utf-8"),
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIMESTAMP)
            info.create_system = _ZIP_UNIX_SYSTEM
            info.external_attr = _ZIP_FILE_MODE
            info.compress_type = zipfile.ZIP_STORED
            archive.writestr(info, data)
    return buffer.getvalue()


def write_table_file(data: bytes, path: str | os.PathLike[str]) -> Path:
    """Write the table file bytes ``data`` to ``path`` (``.npz``) atomically: a temp file in the same
    folder, then rename. Returns the path written; FileNotFoundError if the folder does not exist."""
    destination = Path(path)
    if not destination.parent.is_dir():
        raise FileNotFoundError(
            errno.ENOENT, "cannot save calibration table: folder does not exist", str(destination.parent)
        )
    descriptor, temporary = tempfile.mkstemp(prefix=f".{destination.name}.", suffix=".tmp", dir=destination.parent)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, destination)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return destination


def read_table_file(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the table file ``path``; CalibrationError naming the file if it cannot be read."""
    source = Path(path)
    try:
        return source.read_bytes()
    except OSError as error:
        raise CalibrationError(f"{source}: cannot read calibration table: {error.strerror or error}") from None


def decode_table(data: bytes) -> TableContent:
    """The content of table file bytes, its structure checked; never unpickles anything.

    Raises :class:`CalibrationError` naming the problem (not a zip, missing or unexpected member,
    pickled objects, wrong dtype, unknown format version, malformed presets, …); the table type
    checks the values.
    """
    if not data.startswith(b"PK"):
        hint = (
            " (it looks like the published CCC pickle: pass it to ccc-generate --calibration as it is, or convert it "
            "with `ccc-calibrate import FILE --out TABLE.npz`)"
            if data[:1] == b"\x80"
            else ""
        )
        raise CalibrationError(f"not a calibration table: not a .npz (zip) file{hint}")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as error:
        raise CalibrationError(f"not a calibration table: damaged .npz (zip) file ({error})") from None
    with archive:
        _check_members(archive)
        try:
            document_text = _read_member(archive, METADATA_MEMBER, MAX_METADATA_BYTES).decode("utf-8")
            arrays = {
                name: _read_npy(name, _read_member(archive, name, MAX_ARRAY_MEMBER_BYTES)) for name in _MEMBERS[:3]
            }
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError) as error:
            raise CalibrationError(f"damaged .npz (zip) file ({error})") from None
        except UnicodeDecodeError:
            raise CalibrationError(f"{METADATA_MEMBER} is not UTF-8 text") from None
    try:
        document = json.loads(document_text)
    except json.JSONDecodeError as error:
        raise CalibrationError(f"{METADATA_MEMBER} is not valid JSON ({error})") from None
    return _content(document, arrays)


def _check_members(archive: zipfile.ZipFile) -> None:
    """The archive holds exactly the format's members, each once."""
    names = archive.namelist()
    missing = [name for name in _MEMBERS if name not in names]
    if missing:
        raise CalibrationError(
            f"not a calibration table: missing member(s) {', '.join(missing)} (has {', '.join(names) or 'none'})"
        )
    unexpected = sorted(set(names) - set(_MEMBERS)) + sorted({name for name in names if names.count(name) > 1})
    if unexpected:
        raise CalibrationError(f"unexpected or repeated member(s): {', '.join(unexpected)}")


_READ_PIECE_BYTES = 2**20
"""Most bytes one read of a member inflates (a compressed member can inflate about 1,000-fold)."""


def _read_member(archive: zipfile.ZipFile, name: str, limit: int) -> bytes:
    """The member ``name`` inflated, at most ``limit`` bytes: read in pieces and refused as soon as it
    exceeds ``limit``, whatever its header claims (a header may understate the size)."""
    pieces = []
    size = 0
    with archive.open(name) as member:
        while piece := member.read(_READ_PIECE_BYTES):
            size += len(piece)
            if size > limit:
                raise CalibrationError(
                    f"member {name} inflates to more than {limit:,} bytes, the limit; refusing to read it"
                )
            pieces.append(piece)
    return b"".join(pieces)


def _content(document: object, arrays: dict[str, np.ndarray]) -> TableContent:
    """The content of a parsed metadata document and the three arrays, their structure checked."""
    document = _checked_document(document)
    presets = _read_presets(document["difficulty_presets"])
    accuracy = arrays[ACCURACY_MEMBER]
    counts = arrays[IMAGE_COUNTS_MEMBER]
    pairs = arrays[PAIRS_MEMBER]
    for name, array, kind in (
        (ACCURACY_MEMBER, accuracy, "f"),
        (IMAGE_COUNTS_MEMBER, counts, "i"),
        (PAIRS_MEMBER, pairs, "i"),
    ):
        if array.dtype.kind != kind or array.dtype.itemsize != 8:
            expected = "float64" if kind == "f" else "int64"
            raise CalibrationError(f"{name} must be {expected}, got {array.dtype}")
    return TableContent(accuracy, counts, pairs, document["metadata"], presets)


def _checked_document(document: object) -> dict[str, Any]:
    """``document`` if it is this format's version with exactly its keys and the 21 severities."""
    if not isinstance(document, dict):
        raise CalibrationError(f"{METADATA_MEMBER} must hold a JSON object")
    if document.get("format") != FORMAT_NAME:
        raise CalibrationError(f"{METADATA_MEMBER} format must be {FORMAT_NAME!r}, got {document.get('format')!r}")
    version = document.get("format_version")
    if version != FORMAT_VERSION:
        raise CalibrationError(f"unsupported format_version {version!r}; this ccc reads version {FORMAT_VERSION}")
    expected_keys = {"format", "format_version", "severities", "metadata", "difficulty_presets"}
    if set(document) != expected_keys:
        missing = sorted(expected_keys - set(document))
        extra = sorted(set(document) - expected_keys)
        raise CalibrationError(
            f"{METADATA_MEMBER} must have the keys {sorted(expected_keys)}; missing {missing}, unexpected {extra}"
        )
    if document["severities"] != SEVERITIES.tolist():
        raise CalibrationError(f"severities must be the 21 values 0, 0.25, …, 5, got {document['severities']!r}")
    return document


def _read_presets(presets_json: object) -> dict[str, tuple[float, Sequence[str]]]:
    """The ``difficulty_presets`` list as name → (target, corruptions), its structure checked."""
    if not isinstance(presets_json, list):
        raise CalibrationError("difficulty_presets must be a JSON list")
    presets: dict[str, tuple[float, Sequence[str]]] = {}
    for preset in presets_json:
        if not isinstance(preset, dict) or set(preset) != {"name", "target_accuracy", "corruptions"}:
            raise CalibrationError(
                f"each difficulty preset must be an object with name, target_accuracy and corruptions, got {preset!r}"
            )
        if preset["name"] in presets:
            raise CalibrationError(f"difficulty preset {preset['name']!r} appears more than once")
        if not isinstance(preset["corruptions"], list):
            raise CalibrationError(
                f"difficulty preset {preset['name']!r} corruptions must be a list, got {preset['corruptions']!r}"
            )
        presets[preset["name"]] = (preset["target_accuracy"], preset["corruptions"])
    return presets


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.ascontiguousarray(array), version=(1, 0), allow_pickle=False)
    return buffer.getvalue()


def _read_npy(name: str, data: bytes) -> np.ndarray:
    if data[:1] == b"\x80":
        raise CalibrationError(f"member {name} is a pickle, not a .npy array; refusing to load it")
    if not data.startswith(np.lib.format.MAGIC_PREFIX):
        raise CalibrationError(f"member {name} is not a .npy array")
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f".npy format version {version} (this reader takes 1.0 and 2.0)")
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(stream)
    except (ValueError, TypeError, SyntaxError) as error:
        raise CalibrationError(f"member {name} is not a valid .npy array ({error})") from None
    declared = math.prod(shape) * dtype.itemsize
    if not dtype.hasobject and declared != len(data) - stream.tell():
        raise CalibrationError(
            f"member {name} declares a {'×'.join(map(str, shape)) or 'scalar'} {dtype} array ({declared:,} bytes) "
            f"but holds {len(data) - stream.tell():,} bytes of data; refusing to read it"
        )
    try:
        return np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
    except ValueError as error:
        if "allow_pickle" in str(error) or "Object arrays" in str(error):
            raise CalibrationError(f"member {name} holds pickled Python objects; refusing to load it") from None
        raise CalibrationError(f"member {name} is not a valid .npy array ({error})") from None
    except (OSError, EOFError) as error:
        raise CalibrationError(f"member {name} is a damaged .npy array ({error})") from None
