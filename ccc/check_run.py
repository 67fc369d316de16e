"""Checking a whole run folder: its shards (:mod:`ccc.shards.verify`) and its plan hash.

The plan hash is recomputed from the calibration table and the source images the stream was made
from (:func:`ccc.stream.plan.plan_stream`), which the shard stage knows nothing about; this module
also finds them for a stream (:func:`locate_plan_inputs`: the demo world's, the converted published
tables, ``$CCC_IMAGENET``). Used by ``ccc-verify``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ccc.shards.manifest import Manifest, load_manifest
from ccc.shards.verify import ShardCheck, VerificationReport, verify_shards
from ccc.stream.spec import CCC_KIND, PlanError

__all__ = [
    "DEFAULT_TABLE_CANDIDATES",
    "PLAN_HASH_MAX_WORK",
    "PlanInputs",
    "locate_plan_inputs",
    "plan_hash_status",
    "verify_run",
]

PLAN_HASH_MAX_WORK = 10**7
"""Largest path steps + shards for which the plan hash is recomputed (the paper's streams: about 10^4)."""


def plan_hash_status(
    manifest: Manifest,
    calibration: str | os.PathLike[str] | None,
    imagenet: str | os.PathLike[str] | None,
    classes: Sequence[str] | None,
) -> str:
    """``"matches"``, ``"differs"`` or (without ``calibration`` or ``imagenet``) ``"not checked"``:
    the plan hash recomputed from the table and the images, compared with the manifest's. The
    ``cin-c`` and ``gradual`` kinds need no table (``calibration`` is ignored).

    Raises:
        ccc.stream.spec.PlanError: the table or images do not fit the stream, or the stream is too
            long to recompute its plan hash (:data:`PLAN_HASH_MAX_WORK`).
    """
    stream = manifest.stream
    needs_table = stream.kind == CCC_KIND
    if imagenet is None or (needs_table and calibration is None):
        return "not checked"
    work = -(-stream.num_images // stream.speed) + stream.num_shards
    if work > PLAN_HASH_MAX_WORK:
        raise PlanError(
            f"the plan hash of a stream of {stream.num_images:,} images at speed {stream.speed:,} "
            f"({work:,} steps and shards) "
            f"is not recomputed (limit {PLAN_HASH_MAX_WORK:,}); run ccc-verify without --calibration and --imagenet"
        )
    from ccc.calibration import CalibrationTable
    from ccc.stream.plan import plan_hash, plan_stream

    table = CalibrationTable.load(calibration) if needs_table and calibration is not None else None
    plan = plan_stream(manifest.stream, table, os.fspath(imagenet), classes=classes)
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
    """Find the table and the images a stream was made from, to recompute its plan hash (the
    ``cin-c`` and ``gradual`` kinds need no table: ``calibration`` stays None).

    Tables: the demo worlds' tables, ``tables`` and the converted published tables in the cache, matched by
    checksum to the manifest's. Images: the demo world's folder for a demo-world stream (built on first
    use), else ``$CCC_IMAGENET``. Reads tables' checksums only; never indexes a large folder.
    """
    from ccc.cache import default_cache_dir
    from ccc.calibration import CalibrationError, CalibrationTable
    from ccc.calibration.published import CONVERTED_TABLES_FOLDER
    from ccc.demo import demo_image_folder, demo_world_of
    from ccc.demo.calibration import DEMO_TABLES
    from ccc.stream.sources import IMAGENET_ENVIRONMENT_VARIABLE
    from ccc.stream.spec import DEFAULT_CORRUPTION_SET

    spec = manifest.stream
    candidates = [
        *(table.path for table in DEMO_TABLES.values()),
        *tables,
        *sorted((default_cache_dir() / CONVERTED_TABLES_FOLDER).glob("*.npz")),
    ]
    calibration = None
    for candidate in candidates if spec.kind == CCC_KIND else ():
        try:
            if candidate.is_file() and CalibrationTable.load(candidate).checksum() == spec.calibration_checksum:
                calibration = candidate
                break
        except CalibrationError:
            continue
    world = demo_world_of(spec)
    environment = os.environ.get(IMAGENET_ENVIRONMENT_VARIABLE)
    if world is not None:
        imagenet = demo_image_folder(corruption_set=world)
    else:
        imagenet = Path(environment) if environment else None
    missing = []
    if calibration is None and spec.kind == CCC_KIND:
        missing.append(f"--calibration FILE (the table with checksum {spec.calibration_checksum[:16]}…)")
    if imagenet is None:
        dataset = " or --dataset NAME:PATH" if spec.corruption_set != DEFAULT_CORRUPTION_SET else ""
        missing.append(
            f"--imagenet PATH{dataset} (or {IMAGENET_ENVIRONMENT_VARIABLE}; "
            f"images with index checksum {spec.source_index_checksum[:16]}…)"
        )
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
    """Check a run folder written by ``ccc-generate`` against its manifest, and its plan hash when possible.

    Args:
        folder: the run folder (holding ``manifest.json``).
        decode: also read and decode every sample (slower; sizes and sha256 are always checked).
        calibration, imagenet: the calibration table and source image folder the stream was made
            from; when both are given (for the ``cin-c`` and ``gradual`` kinds: the folder) the
            plan hash is recomputed and compared (first, before the shards are read).
        classes: the explicit class list the stream was made with (``ccc-generate --classes``;
            position = class index), None: the folder's own (``ccc.stream.sources.class_list``).
        on_shard: called after each shard check (see :func:`ccc.shards.verify.verify_shards`).

    Raises:
        FileNotFoundError: no manifest in ``folder``. ccc.shards.manifest.ManifestError: malformed manifest.
        ccc.stream.spec.PlanError: the table or images do not fit the stream (plan hash check), or the
            stream is too long to recompute its plan hash (:data:`PLAN_HASH_MAX_WORK`).
    """
    plan_status = plan_hash_status(load_manifest(Path(folder)), calibration, imagenet, classes)
    report = verify_shards(folder, decode=decode, on_shard=on_shard)
    return dataclasses.replace(report, plan_hash=plan_status)
