"""The sample schema of CCC shards: the one place that knows member names, the info text and shard names.

A shard is a plain ustar tar file named :func:`shard_name` (``serial_00000.tar``, the public name).
Each sample is a group of consecutive members sharing its key (WebDataset's convention), written in
the order of :data:`MEMBER_ORDER`:

- ``<key>.info`` (:data:`INFO_MEMBER`): the public text layout, :func:`format_info`;
- ``<key>.input.jpg`` (:data:`IMAGE_MEMBER`): the 224×224 JPEG, or ``<key>.input.png``
  (:data:`PNG_IMAGE_MEMBER`) in a stream whose ``image_encoding`` is ``png`` (:data:`IMAGE_MEMBERS`);
- ``<key>.json`` (:data:`JSON_MEMBER`): the full plan entry (:class:`ccc.stream.spec.SampleSpec`, sorted
  keys, compact);
- ``<key>.output.cls`` (:data:`LABEL_MEMBER`): the class index as ASCII digits.

``<key>`` is the sample's stream index zero-padded to :data:`SAMPLE_KEY_DIGITS` digits. The
published CCC shards have the same members except ``json`` (keys ``sample_<i>``); :func:`decode_members`
reads both. A shard being written is named :func:`temporary_shard_name` (hidden, suffix
:data:`TEMPORARY_SUFFIX`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ccc.shards.errors import ShardReadError
from ccc.stream.spec import DEFAULT_IMAGE_ENCODING, SampleSpec

__all__ = [
    "IMAGE_MEMBER",
    "IMAGE_MEMBERS",
    "INFO_MEMBER",
    "JSON_MEMBER",
    "LABEL_MEMBER",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "MEMBER_ORDER",
    "PNG_IMAGE_MEMBER",
    "SAMPLE_KEY_DIGITS",
    "SHARD_FILE",
    "TEMPORARY_SHARD_GLOB",
    "TEMPORARY_SUFFIX",
    "InfoRecord",
    "SampleRecord",
    "SampleRecordError",
    "decode_members",
    "encode_members",
    "format_info",
    "load_json_member",
    "parse_info",
    "record_metadata",
    "sample_key",
    "check_shard_file_name",
    "sample_place",
    "shard_name",
    "shard_pattern",
    "temporary_shard_name",
]

INFO_MEMBER = "info"
IMAGE_MEMBER = "input.jpg"
PNG_IMAGE_MEMBER = "input.png"
JSON_MEMBER = "json"
LABEL_MEMBER = "output.cls"
MEMBER_ORDER = (INFO_MEMBER, IMAGE_MEMBER, JSON_MEMBER, LABEL_MEMBER)
"""Member extensions of one sample, in the order they are written (the image's is that of its encoding)."""

IMAGE_MEMBERS = {DEFAULT_IMAGE_ENCODING: IMAGE_MEMBER, "png": PNG_IMAGE_MEMBER}
"""The image member's extension per image encoding (:data:`ccc.stream.spec.IMAGE_ENCODINGS`)."""

SAMPLE_KEY_DIGITS = 12
"""Digits of the zero-padded sample index used as ``__key__`` (fixed, so keys do not depend on the length)."""

MAX_JSON_BYTES = 2**20
"""Largest ``json`` member (bytes) :func:`load_json_member` parses; a CCC record is about 400 bytes."""

MAX_JSON_DEPTH = 32
"""Deepest nesting of arrays and objects :func:`load_json_member` parses; a CCC record has depth 2."""

_SHARD_PREFIX = "serial_"
_SHARD_SUFFIX = ".tar"
_SHARD_DIGITS = 5

TEMPORARY_SUFFIX = ".partial"
"""Suffix of a file being written (the name also starts with a dot)."""

SHARD_FILE = re.compile(rf"{_SHARD_PREFIX}(\d{{{_SHARD_DIGITS},}}){re.escape(_SHARD_SUFFIX)}")
"""Matches a shard's file name (``fullmatch``); group 1 is the shard index."""

TEMPORARY_SHARD_GLOB = f".{_SHARD_PREFIX}*{_SHARD_SUFFIX}{TEMPORARY_SUFFIX}"
"""Glob of the temporary files of shards being written."""


def shard_name(shard_index: int) -> str:
    """File name of shard ``shard_index`` (>= 0): ``serial_00000.tar``, ``serial_00001.tar``, …"""
    return f"{_SHARD_PREFIX}{shard_index:0{_SHARD_DIGITS}d}{_SHARD_SUFFIX}"


def check_shard_file_name(name: object, where: str, *, error: type[ValueError] = ValueError) -> str:
    """Require a plain file name inside a shard folder, as a manifest or ``mirror.json`` lists a shard.

    A plain name is a non-empty string without a folder part (``/``, ``\\``) or NUL, and not hidden (no
    leading ``.``, which also rules out ``.`` and ``..``): hidden names are the writers' own files
    (temporary shards, partial downloads, lock files), and any other name would be read, hashed or
    replaced outside the folder.

    Args:
        name: the listed name.
        where: the file that lists it, for the message.
        error: the ValueError subclass to raise (the caller's error type).

    Returns:
        ``name``.
    """
    if not isinstance(name, str) or not name or name.startswith(".") or any(c in name for c in "/\\\0"):
        raise error(f"{where}: shard name {name!r} is not a plain file name inside the folder")
    return name


def shard_pattern(num_shards: int) -> str:
    """Brace pattern of the names of shards 0 … ``num_shards - 1`` (>= 1): ``serial_{00000..00299}.tar``."""
    return f"{_SHARD_PREFIX}{{{0:0{_SHARD_DIGITS}d}..{num_shards - 1:0{_SHARD_DIGITS}d}}}{_SHARD_SUFFIX}"


def temporary_shard_name(shard_index: int) -> str:
    """Name under which shard ``shard_index`` is written before it is renamed into place."""
    return f".{shard_name(shard_index)}{TEMPORARY_SUFFIX}"


def sample_key(index: int) -> str:
    """The ``__key__`` of sample ``index``: the index zero-padded to :data:`SAMPLE_KEY_DIGITS` digits."""
    return f"{index:0{SAMPLE_KEY_DIGITS}d}"


def format_info(spec: SampleSpec) -> str:
    """The public shards' ``info`` text.

    For example
    ``++dir++n01440764++name++ILSVRC2012_val_00000293.JPEG++n1++gaussian_noise++s1++1.25++n2++fog++s2++0.5``.

    Severities are written with Python's ``str(float)`` as the public code does (``0.0``, ``1.25``, ``5.0``).
    """
    return (
        f"++dir++{spec.wnid}++name++{spec.file_name}"
        f"++n1++{spec.n1}++s1++{float(spec.s1)!s}++n2++{spec.n2}++s2++{float(spec.s2)!s}"
    )


@dataclass(frozen=True)
class InfoRecord:
    """The public ``info`` text parsed: ``++dir++<wnid>++name++<file>++n1++<a>++s1++<x>++n2++<b>++s2++<y>``.

    Attributes:
        source_path: ``<wnid>/<file>`` of the source image.
        n1, s1, n2, s2: corruption names and severities in [0, 5].
    """

    source_path: str
    n1: str
    s1: float
    n2: str
    s2: float


def parse_info(text: str) -> InfoRecord:
    """Parse an ``info`` text; ValueError naming what is wrong when it is not in the public layout."""
    parts = text.strip().split("++")
    if len(parts) != 13 or parts[0] != "" or parts[1::2] != ["dir", "name", "n1", "s1", "n2", "s2"]:
        raise ValueError(
            f"info must look like ++dir++<wnid>++name++<file>++n1++<a>++s1++<x>++n2++<b>++s2++<y>, got {text!r}"
        )
    fields = dict(zip(parts[1::2], parts[2::2]))
    try:
        s1, s2 = float(fields["s1"]), float(fields["s2"])
    except ValueError:
        raise ValueError(
            f"info severities s1 and s2 must be numbers, got {fields['s1']!r} and {fields['s2']!r}"
        ) from None
    return InfoRecord(f"{fields['dir']}/{fields['name']}", fields["n1"], s1, fields["n2"], s2)


def encode_members(
    spec: SampleSpec, image: bytes, image_encoding: str = DEFAULT_IMAGE_ENCODING
) -> list[tuple[str, bytes]]:
    """Tar members ``(name, content)`` of one sample, in the order of :data:`MEMBER_ORDER`; ``image`` is
    encoded as ``image_encoding`` (a key of :data:`IMAGE_MEMBERS`), which names its member."""
    key = sample_key(spec.index)
    record = json.dumps(spec.to_json_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)
    members = (
        (INFO_MEMBER, format_info(spec).encode("utf-8")),
        (IMAGE_MEMBERS[image_encoding], image),
        (JSON_MEMBER, record.encode("utf-8")),
        (LABEL_MEMBER, str(spec.class_index).encode("ascii")),
    )
    return [(f"{key}.{member}", content) for member, content in members]


class SampleRecordError(ValueError):
    """A sample's members lack the image, the label or the metadata, or hold malformed ones."""


@dataclass(frozen=True)
class SampleRecord:
    """One sample as read from a shard, the image still encoded.

    Attributes:
        image: the image member's bytes (``input.jpg``, or ``input.png`` in a lossless stream).
        label: the class index.
        metadata: ``index``, ``n1``, ``s1``, ``n2``, ``s2``, ``path_step`` (None in published shards),
            ``source_path``, ``calibrated_accuracy`` (None in published shards and domain kinds);
            ``domain`` and ``severity`` for the ``cin-c`` and ``gradual`` kinds (:func:`record_metadata`).
        record: the ``json`` member's object (None in published shards).
        image_member: the image member's extension, a value of :data:`IMAGE_MEMBERS`.
    """

    image: bytes
    label: int
    metadata: dict[str, Any]
    record: dict[str, Any] | None
    image_member: str = IMAGE_MEMBER


def record_metadata(record: Mapping[str, Any], index: int) -> dict[str, Any]:
    """A sample's metadata from its plan entry (the ``json`` member, or :meth:`SampleSpec.to_json_dict`).

    ``index``, ``n1``, ``s1``, ``n2``, ``s2``, ``path_step``, ``source_path``,
    ``calibrated_accuracy`` (None for the ``cin-c`` and ``gradual`` kinds); samples of those kinds
    add ``domain`` (their corruption) and ``severity`` (their integer severity, ``s1``).

    Raises:
        KeyError, TypeError, ValueError: a malformed entry.
    """
    accuracy = record["calibrated_accuracy"]
    metadata = {
        "index": index,
        "n1": record["n1"],
        "s1": float(record["s1"]),
        "n2": record["n2"],
        "s2": float(record["s2"]),
        "path_step": int(record["step"]),
        "source_path": record["source_path"],
        "calibrated_accuracy": None if accuracy is None else float(accuracy),
    }
    if record.get("domain") is not None:
        metadata["domain"] = str(record["domain"])
        metadata["severity"] = int(record["s1"])
    return metadata


def sample_place(shard: str, key: str, index: int) -> str:
    """How messages name a sample: ``shard serial_00000.tar: sample 000000000007 (stream index 7)``."""
    return f"shard {shard}: sample {key} (stream index {index})"


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


def decode_members(members: Mapping[str, bytes], index: int, where: str) -> SampleRecord:
    """Read the label and metadata of one sample (extension → bytes); the image is not decoded.

    ``json`` (ours) or else ``info`` (published shards) gives the metadata.

    Args:
        members: e.g. ``{"info": …, "input.jpg": …, "json": …, "output.cls": …}`` (the image member is
            ``input.jpg`` or ``input.png``, exactly one of them).
        index: the sample's stream index.
        where: the sample's place for messages (:func:`sample_place`).

    Raises:
        SampleRecordError: for a missing image, label or metadata or malformed content, naming ``where``.
        ccc.shards.errors.ShardReadError: for a ``json`` member beyond the reader's limits
            (:func:`load_json_member`).
    """
    images = [member for member in IMAGE_MEMBERS.values() if member in members]
    if len(images) != 1:
        found = "two images" if images else f"no {' or '.join(IMAGE_MEMBERS.values())} (image)"
        raise SampleRecordError(f"{where} has {found}; members: {', '.join(sorted(members)) or 'none'}")
    if LABEL_MEMBER not in members:
        raise SampleRecordError(
            f"{where} has no {LABEL_MEMBER} (label); members: {', '.join(sorted(members)) or 'none'}"
        )
    try:
        label = int(members[LABEL_MEMBER].decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        raise SampleRecordError(
            f"{where}: {LABEL_MEMBER} must hold a class index, got {members[LABEL_MEMBER][:40]!r}"
        ) from None
    record = None
    try:
        if JSON_MEMBER in members:
            record = load_json_member(members[JSON_MEMBER], where)
            if not isinstance(record, dict):
                raise SampleRecordError(
                    f"{where}: {JSON_MEMBER} member must hold an object, got {type(record).__name__}"
                )
            metadata = record_metadata(record, index)
        elif INFO_MEMBER in members:
            info = parse_info(members[INFO_MEMBER].decode("utf-8"))
            metadata = {
                "index": index,
                "n1": info.n1,
                "s1": info.s1,
                "n2": info.n2,
                "s2": info.s2,
                "path_step": None,
                "source_path": info.source_path,
                "calibrated_accuracy": None,
            }
        else:
            raise SampleRecordError(f"{where} has neither {JSON_MEMBER} nor {INFO_MEMBER} (corruption metadata)")
    except (SampleRecordError, ShardReadError):
        raise
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
        raise SampleRecordError(f"{where}: malformed metadata ({error})") from None
    return SampleRecord(members[images[0]], label, metadata, record, images[0])
