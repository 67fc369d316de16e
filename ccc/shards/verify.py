"""Checking the shards of a run folder against its manifest (IO only; ``ccc-verify``).

Per shard of the stream: present, recorded as finished, byte size and sha256 as recorded, and —
unless ``decode=False`` — every sample readable in order with the expected key, a decodable
image, a class index and a ``json`` record of the same index (:mod:`ccc.shards.record`). The plan
hash, which needs the calibration table and the source images, is checked a stage higher, by
:func:`ccc.check_run.verify_run`.

The work is per shard recorded in the manifest and per file in the folder, never per shard of the
stream: consecutive shards that are not recorded are reported as one ``unfinished`` range, so a
manifest claiming 10^15 images costs what its recorded shards cost.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccc.render import decode_jpeg
from ccc.shards.errors import ShardReadError
from ccc.shards.location import open_shard
from ccc.shards.manifest import file_sha256, load_manifest
from ccc.shards.reader import TarSample, read_samples
from ccc.shards.record import (
    JSON_MEMBER,
    SHARD_FILE,
    TEMPORARY_SHARD_GLOB,
    SampleRecordError,
    decode_members,
    sample_key,
    sample_place,
    shard_name,
)
from ccc.shards.writer import ShardInfo

__all__ = ["SHARD_STATUSES", "ShardCheck", "VerificationReport", "verify_shards"]

SHARD_STATUSES = ("ok", "missing", "unfinished", "truncated", "altered", "undecodable")
"""``missing``: recorded as finished, file absent. ``unfinished``: not recorded, not written (resume
with ccc-generate). ``truncated``: shorter than recorded. ``altered``: other size or sha256, or
samples that are not the recorded ones. ``undecodable``: recorded bytes, but a sample cannot be read."""


@dataclass(frozen=True)
class ShardCheck:
    """The verdict on shard ``index`` (``count`` consecutive shards for an ``unfinished`` range).

    Attributes:
        index: first shard number, >= 0.
        name: its file name (``serial_00002.tar … serial_00009.tar`` for a range).
        status: one of :data:`SHARD_STATUSES`.
        detail: one line.
        count: shards covered, >= 1 (more than 1 only for ``unfinished``).
    """

    index: int
    name: str
    status: str
    detail: str = ""
    count: int = 1


@dataclass(frozen=True)
class VerificationReport:
    """The result of :func:`verify_run`.

    Attributes:
        folder: the run folder.
        num_images, num_shards: the stream's length and shard count.
        shards: one check per recorded shard and per range of unrecorded shards, in order.
        plan_hash: ``"matches"``, ``"differs"`` or ``"not checked"``.
        stray_files: temporary files of an interrupted run (removed by the next ``ccc-generate``).
        samples_decoded: samples read and decoded.
        renderer: the manifest's renderer (None: the CPU reference path; see
            :func:`ccc.shards.manifest.describe_renderer`).
    """

    folder: Path
    num_images: int
    num_shards: int
    shards: tuple[ShardCheck, ...]
    plan_hash: str
    stray_files: tuple[str, ...] = field(default=())
    samples_decoded: int = 0
    renderer: Mapping[str, str] | None = None

    @property
    def problems(self) -> tuple[ShardCheck, ...]:
        """The shards that are not ``ok``."""
        return tuple(check for check in self.shards if check.status != "ok")

    @property
    def intact_shards(self) -> int:
        """Shards of the stream that are present and intact."""
        return self.num_shards - sum(check.count for check in self.problems)

    @property
    def ok(self) -> bool:
        """Every shard is present and intact, and the plan hash (if checked) matches."""
        return not self.problems and self.plan_hash != "differs"

    def to_json_dict(self) -> dict[str, Any]:
        """The report as a JSON-serialisable dict."""
        return {
            "folder": str(self.folder),
            "ok": self.ok,
            "num_images": self.num_images,
            "num_shards": self.num_shards,
            "plan_hash": self.plan_hash,
            "samples_decoded": self.samples_decoded,
            "renderer": None if self.renderer is None else dict(self.renderer),
            "stray_files": list(self.stray_files),
            "shards": [vars(check) for check in self.shards],
        }


def _sample_problem(sample: TarSample, index: int, location: str) -> tuple[str, str] | None:
    """(status, detail) when the shard's sample at stream index ``index`` is not the recorded one, else None."""
    if sample.key != sample_key(index):
        return "altered", f"sample {sample.position} has key {sample.key}, expected {sample_key(index)}"
    assert sample.members is not None
    where = sample_place(location, sample.key, index)
    try:
        record = decode_members(sample.members, index, where)
        decode_jpeg(record.image)
    except (SampleRecordError, ShardReadError) as error:
        return "undecodable", str(error)
    except (OSError, ValueError) as error:
        return "undecodable", f"{where}: {record.image_member} cannot be decoded ({error})"
    if record.record is None or record.record.get("index") != index:
        return "altered", f"sample {sample.key}: {JSON_MEMBER} record missing or of another index"
    return None


def _check_samples(path: Path, first_sample: int, sample_count: int) -> tuple[str, str, int]:
    """Read every sample; (status, detail, samples decoded)."""
    decoded = 0
    try:
        with open_shard(str(path)) as handle:
            for sample in read_samples(handle, path.name):
                if sample.position >= sample_count:
                    return "altered", f"holds more than the {sample_count} recorded samples", decoded
                problem = _sample_problem(sample, first_sample + sample.position, path.name)
                if problem is not None:
                    return (*problem, decoded)
                decoded += 1
    except ShardReadError as error:
        return "undecodable", str(error), decoded
    if decoded != sample_count:
        return "altered", f"holds {decoded} samples, {sample_count} recorded", decoded
    return "ok", "", decoded


def _check_recorded_shard(root: Path, entry: ShardInfo, sample_range: range, decode: bool) -> tuple[ShardCheck, int]:
    """The verdict on a shard the manifest records as finished, and the samples decoded for it."""
    name = shard_name(entry.index)
    path = root / name
    if not path.is_file():
        return ShardCheck(entry.index, name, "missing", f"recorded as finished ({entry.bytes} bytes) but absent"), 0
    size = path.stat().st_size
    if size < entry.bytes:
        return ShardCheck(entry.index, name, "truncated", f"{size} bytes, {entry.bytes} recorded"), 0
    if size != entry.bytes:
        return ShardCheck(entry.index, name, "altered", f"{size} bytes, {entry.bytes} recorded"), 0
    if file_sha256(path) != entry.sha256:
        return ShardCheck(entry.index, name, "altered", "sha256 differs from the manifest's"), 0
    if not decode:
        return ShardCheck(entry.index, name, "ok"), 0
    status, detail, decoded = _check_samples(path, sample_range.start, len(sample_range))
    return ShardCheck(entry.index, name, status, detail), decoded


def _unfinished_range(begin: int, end: int, unrecorded_files: Sequence[int]) -> ShardCheck:
    """The verdict on shards ``begin … end - 1`` (``begin < end``), none recorded as finished.

    ``unrecorded_files``: indices of shard files present in the folder but not recorded (sorted).
    """
    name = shard_name(begin) if end - begin == 1 else f"{shard_name(begin)} … {shard_name(end - 1)}"
    present = [shard_name(index) for index in unrecorded_files if begin <= index < end]
    listed = ", ".join(present[:5]) + (" …" if len(present) > 5 else "")
    files = (
        ""
        if not present
        else f" (an unrecorded file exists: {listed})"
        if len(present) == 1
        else f" (unrecorded files exist: {listed})"
    )
    counted = "not" if end - begin == 1 else f"{end - begin:,} shards not"
    return ShardCheck(begin, name, "unfinished", f"{counted} recorded as finished{files}", end - begin)


def _shard_files(root: Path, num_shards: int) -> list[int]:
    """Sorted indices (< ``num_shards``) of the shard files present in ``root``."""
    return sorted(
        int(match.group(1))
        for path in root.iterdir()
        if (match := SHARD_FILE.fullmatch(path.name)) and int(match.group(1)) < num_shards
    )


def verify_shards(
    folder: str | os.PathLike[str],
    *,
    decode: bool = True,
    on_shard: Callable[[ShardCheck], None] | None = None,
) -> VerificationReport:
    """Check the shards of a run folder written by ``ccc-generate`` against its manifest.

    The plan hash is not checked here (``plan_hash="not checked"``): that needs the calibration
    table and the source images, see :func:`ccc.check_run.verify_run`.

    Args:
        folder: the run folder (holding ``manifest.json``).
        decode: also read and decode every sample (slower; sizes and sha256 are always checked).
        on_shard: called after each check (progress reporting): once per recorded shard and once
            per range of unrecorded ones.

    Raises:
        FileNotFoundError: no manifest in ``folder``. ccc.shards.manifest.ManifestError: malformed manifest.
    """
    root = Path(folder)
    manifest = load_manifest(root)
    num_shards = manifest.stream.num_shards
    unrecorded_files = _shard_files(root, num_shards)
    checks: list[ShardCheck] = []
    decoded_total = 0

    def report(check: ShardCheck) -> None:
        checks.append(check)
        if on_shard is not None:
            on_shard(check)

    next_index = 0
    for entry in manifest.shards:
        if next_index < entry.index:
            report(_unfinished_range(next_index, entry.index, unrecorded_files))
        next_index = entry.index + 1
        check, decoded = _check_recorded_shard(root, entry, manifest.stream.shard_range(entry.index), decode)
        decoded_total += decoded
        report(check)
    if next_index < num_shards:
        report(_unfinished_range(next_index, num_shards, unrecorded_files))
    stray = tuple(sorted(path.name for path in root.glob(TEMPORARY_SHARD_GLOB)))
    return VerificationReport(
        folder=root,
        num_images=manifest.stream.num_images,
        num_shards=manifest.stream.num_shards,
        shards=tuple(checks),
        plan_hash="not checked",
        stray_files=stray,
        samples_decoded=decoded_total,
        renderer=manifest.renderer,
    )
