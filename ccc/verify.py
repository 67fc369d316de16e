"""Checking a run folder against its manifest (``ccc-verify``).

Per shard of the stream: present, recorded as finished, byte size and sha256 as recorded, and —
unless ``decode=False`` — every sample readable in order with the expected key, a decodable
``input.jpg``, a class index in ``output.cls`` and a ``json`` record of the same index. With the
calibration table and the source images, the plan hash is recomputed and compared too.

The work is per shard recorded in the manifest and per file in the folder, never per shard of the
stream: consecutive shards that are not recorded are reported as one ``unfinished`` range, so a
manifest claiming 10^15 images costs what its recorded shards cost.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccc.shard_reader import ShardReadError, load_json_member, open_shard, read_samples
from ccc.shards import TEMPORARY_SUFFIX, Manifest, file_sha256, load_manifest, sample_key, shard_name
from ccc.load import StreamError, decode_tar_sample
from ccc.stream.spec import PlanError

__all__ = ["SHARD_STATUSES", "PlanInputs", "ShardCheck", "VerificationReport", "locate_plan_inputs", "verify_run"]

_SHARD_FILE = re.compile(r"serial_(\d{5,})\.tar")

PLAN_HASH_MAX_WORK = 10**7
"""Largest path steps + shards for which the plan hash is recomputed (the paper's streams: about 10^4)."""

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
    """

    folder: Path
    num_images: int
    num_shards: int
    shards: tuple[ShardCheck, ...]
    plan_hash: str
    stray_files: tuple[str, ...] = field(default=())
    samples_decoded: int = 0

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
            "stray_files": list(self.stray_files),
            "shards": [vars(check) for check in self.shards],
        }


def _check_samples(path: Path, first_sample: int, sample_count: int) -> tuple[str, str, int]:
    """Read every sample; (status, detail, samples decoded)."""
    decoded = 0
    try:
        with open_shard(str(path)) as handle:
            for sample in read_samples(handle, path.name):
                index = first_sample + sample.position
                if sample.position >= sample_count:
                    return "altered", f"holds more than the {sample_count} recorded samples", decoded
                if sample.key != sample_key(index):
                    return "altered", f"sample {sample.position} has key {sample.key}, expected {sample_key(index)}", decoded
                assert sample.members is not None
                try:
                    decode_tar_sample(sample.members, index, sample.key, path.name, "uint8")
                    record = load_json_member(sample.members["json"], f"sample {sample.key}") if "json" in sample.members else None
                except (StreamError, ShardReadError) as error:
                    return "undecodable", str(error), decoded
                if not isinstance(record, dict) or record.get("index") != index:
                    return "altered", f"sample {sample.key}: json record missing or of another index", decoded
                decoded += 1
    except ShardReadError as error:
        return "undecodable", str(error), decoded
    if decoded != sample_count:
        return "altered", f"holds {decoded} samples, {sample_count} recorded", decoded
    return "ok", "", decoded


def _plan_hash_status(
    manifest: Manifest,
    calibration: str | os.PathLike[str] | None,
    imagenet: str | os.PathLike[str] | None,
    classes: Sequence[str] | None,
) -> str:
    if calibration is None or imagenet is None:
        return "not checked"
    stream = manifest.stream
    work = -(-stream.num_images // stream.speed) + stream.num_shards
    if work > PLAN_HASH_MAX_WORK:
        raise PlanError(
            f"the plan hash of a stream of {stream.num_images:,} images at speed {stream.speed:,} ({work:,} steps and shards) "
            f"is not recomputed (limit {PLAN_HASH_MAX_WORK:,}); run ccc-verify without --calibration and --imagenet"
        )
    from ccc.calibration import CalibrationTable
    from ccc.stream.plan import plan_hash, plan_stream

    plan = plan_stream(manifest.stream, CalibrationTable.load(calibration), os.fspath(imagenet), classes=classes)
    return "matches" if plan_hash(plan) == manifest.plan_hash else "differs"


@dataclass(frozen=True)
class PlanInputs:
    """The calibration table and source image folder found for a stream (None where not found), and
    a one-line ``hint`` saying which flags to add when either is missing."""

    calibration: Path | None
    imagenet: Path | None
    hint: str = ""


DEFAULT_TABLE_CANDIDATES = (Path("calibration") / "resnet50.npz",)
"""Tables (relative to the working folder) tried for a stream's plan hash, besides the demo table and
the tables converted from published pickles in the cache."""


def locate_plan_inputs(manifest: Manifest, tables: tuple[Path, ...] = DEFAULT_TABLE_CANDIDATES) -> PlanInputs:
    """Find the table and the images a stream was made from, to recompute its plan hash.

    Tables: the demo table, ``tables`` and the converted published tables in the cache, matched by
    checksum to the manifest's. Images: the demo folder for a demo-world stream (built on first
    use), else ``$CCC_IMAGENET``. Reads tables' checksums only; never indexes a large folder.
    """
    from ccc.cache import default_cache_dir
    from ccc.calibration import CalibrationError, CalibrationTable
    from ccc.calibration.published import CONVERTED_TABLES_FOLDER
    from ccc.demo import demo_image_folder, is_demo_stream
    from ccc.demo.calibration import DEMO_CALIBRATION_PATH
    from ccc.stream.sources import IMAGENET_ENVIRONMENT_VARIABLE

    spec = manifest.stream
    candidates = [DEMO_CALIBRATION_PATH, *tables, *sorted((default_cache_dir() / CONVERTED_TABLES_FOLDER).glob("*.npz"))]
    calibration = None
    for candidate in candidates:
        try:
            if candidate.is_file() and CalibrationTable.load(candidate).checksum() == spec.calibration_checksum:
                calibration = candidate
                break
        except CalibrationError:
            continue
    demo = is_demo_stream(spec)
    environment = os.environ.get(IMAGENET_ENVIRONMENT_VARIABLE)
    imagenet = demo_image_folder() if demo else (Path(environment) if environment else None)
    missing = []
    if calibration is None:
        missing.append(f"--calibration FILE (the table with checksum {spec.calibration_checksum[:16]}…)")
    if imagenet is None:
        missing.append(f"--imagenet PATH (or {IMAGENET_ENVIRONMENT_VARIABLE}; images with index checksum {spec.source_index_checksum[:16]}…)")
    hint = f"to check the plan hash, pass {' and '.join(missing)}" if missing else ""
    return PlanInputs(calibration, imagenet, hint)


def verify_run(
    folder: str | os.PathLike[str],
    *,
    decode: bool = True,
    calibration: str | os.PathLike[str] | None = None,
    imagenet: str | os.PathLike[str] | None = None,
    classes: Sequence[str] | None = None,
    on_shard: Callable[[ShardCheck], None] | None = None,
) -> VerificationReport:
    """Check a run folder written by ``ccc-generate`` against its manifest.

    Args:
        folder: the run folder (holding ``manifest.json``).
        decode: also read and decode every sample (slower; sizes and sha256 are always checked).
        calibration, imagenet: the calibration table and source image folder the stream was made
            from; when both are given the plan hash is recomputed and compared.
        classes: the explicit class list the stream was made with (``ccc-generate --classes``;
            position = class index), None: the folder's own (``ccc.stream.sources.class_list``).
        on_shard: called after each check (progress reporting): once per recorded shard and once
            per range of unrecorded ones.

    Raises:
        FileNotFoundError: no manifest in ``folder``. ccc.shards.ManifestError: malformed manifest.
        ccc.stream.spec.PlanError: the table or images do not fit the stream (plan hash check), or the
            stream is too long to recompute its plan hash (:data:`PLAN_HASH_MAX_WORK`).
    """
    root = Path(folder)
    manifest = load_manifest(root)
    plan_status = _plan_hash_status(manifest, calibration, imagenet, classes)
    num_shards = manifest.stream.num_shards
    unrecorded_files = sorted(
        int(match.group(1)) for path in root.iterdir() if (match := _SHARD_FILE.fullmatch(path.name)) and int(match.group(1)) < num_shards
    )
    checks: list[ShardCheck] = []
    decoded_total = 0

    def report(check: ShardCheck) -> None:
        checks.append(check)
        if on_shard is not None:
            on_shard(check)

    def unfinished(begin: int, end: int) -> None:
        if begin >= end:
            return
        name = shard_name(begin) if end - begin == 1 else f"{shard_name(begin)} … {shard_name(end - 1)}"
        present = [shard_name(index) for index in unrecorded_files if begin <= index < end]
        listed = ", ".join(present[:5]) + (" …" if len(present) > 5 else "")
        files = "" if not present else f" (an unrecorded file exists: {listed})" if len(present) == 1 else f" (unrecorded files exist: {listed})"
        counted = "not" if end - begin == 1 else f"{end - begin:,} shards not"
        report(ShardCheck(begin, name, "unfinished", f"{counted} recorded as finished{files}", end - begin))

    next_index = 0
    for entry in manifest.shards:
        unfinished(next_index, entry.index)
        next_index = entry.index + 1
        name = shard_name(entry.index)
        path = root / name
        sample_range = manifest.stream.shard_range(entry.index)
        if not path.is_file():
            check = ShardCheck(entry.index, name, "missing", f"recorded as finished ({entry.bytes} bytes) but absent")
        else:
            size = path.stat().st_size
            if size < entry.bytes:
                check = ShardCheck(entry.index, name, "truncated", f"{size} bytes, {entry.bytes} recorded")
            elif size != entry.bytes:
                check = ShardCheck(entry.index, name, "altered", f"{size} bytes, {entry.bytes} recorded")
            elif file_sha256(path) != entry.sha256:
                check = ShardCheck(entry.index, name, "altered", "sha256 differs from the manifest's")
            elif decode:
                status, detail, decoded = _check_samples(path, sample_range.start, len(sample_range))
                decoded_total += decoded
                check = ShardCheck(entry.index, name, status, detail)
            else:
                check = ShardCheck(entry.index, name, "ok")
        report(check)
    unfinished(next_index, num_shards)
    stray = tuple(sorted(path.name for path in root.glob(f".serial_*.tar{TEMPORARY_SUFFIX}")))
    return VerificationReport(
        folder=root,
        num_images=manifest.stream.num_images,
        num_shards=manifest.stream.num_shards,
        shards=tuple(checks),
        plan_hash=plan_status,
        stray_files=stray,
        samples_decoded=decoded_total,
    )
