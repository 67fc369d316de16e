"""Generating a stream into a run folder: plan → render (serial or Ray) → write shards, resumable.

The driver (this process) owns the run folder: it checks or creates the manifest, splits the
unfinished shards into chunks of consecutive samples, maps :func:`render_chunk` over the chunks
with an executor (:mod:`ccc.execution`: :class:`~ccc.execution.SerialExecutor` in this process,
:class:`~ccc.execution.RayExecutor` one Ray task per chunk on a local or remote cluster, a bounded
number in flight, a task retried when its worker died or it raised ``OSError``) and writes the
rendered samples in order, shard by shard, updating the manifest after each shard.

Workers return encoded samples to the driver, so only the source image folder must be readable
at the same path on every node; the run folder is written by the driver alone.

Every sample is a pure function of the plan and its index, so the shards are byte-identical
whatever the executor, the number of workers or the number of interruptions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import platform
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from PIL import Image
from tqdm import tqdm

from ccc.execution import Executor
from ccc.folder_lock import FolderInUseError, FolderLock
from ccc.render import RenderedSample, render_sample
from ccc.shards.manifest import MANIFEST_NAME, Manifest, ManifestError, file_sha256, load_manifest, save_manifest
from ccc.shards.record import SHARD_FILE, TEMPORARY_SUFFIX, shard_name
from ccc.shards.writer import ShardWriter
from ccc.stream.plan import StreamPlan, plan_hash, plan_sample
from ccc.validation import check_positive_int

__all__ = [
    "DEFAULT_SAMPLES_PER_TASK",
    "GenerationSummary",
    "OutputFolderError",
    "expected_shard_names",
    "generate_stream",
    "library_versions",
    "render_chunk",
]

logger = logging.getLogger(__name__)

DEFAULT_SAMPLES_PER_TASK = 25
"""Samples rendered per executor task (``chunk_size`` of :func:`generate_stream`)."""

LOCK_NAME = ".ccc-generate.lock"
_PROGRESS_INTERVAL_TTY_SECONDS = 0.5
_PROGRESS_INTERVAL_LOG_SECONDS = 60.0


class OutputFolderError(ValueError):
    """The run folder holds another stream, unknown shards, or is in use by another run."""


def library_versions() -> dict[str, str]:
    """Versions of what determines the output bytes (Python, ccc, numpy, Pillow and libjpeg-turbo, OpenCV,
    SciPy, scikit-image, numba, CPU architecture)."""
    import cv2
    import numba
    import numpy
    import scipy
    import skimage
    from PIL import features

    import ccc

    return {
        "python": platform.python_version(),
        "ccc": ccc.__version__,
        "numpy": numpy.__version__,
        "pillow": Image.__version__,
        "libjpeg_turbo": str(features.version("libjpeg_turbo")),
        "opencv": cv2.__version__,
        "scipy": scipy.__version__,
        "scikit-image": skimage.__version__,
        "numba": numba.__version__,
        "machine": platform.machine(),
    }


def render_chunk(plan: StreamPlan, chunk: tuple[int, int]) -> list[RenderedSample]:
    """Plan and render samples ``chunk[0]`` … ``chunk[1] - 1``, reading the source files from ``plan.sources.root``."""
    root = Path(plan.sources.root)
    rendered = []
    for index in range(*chunk):
        spec = plan_sample(plan, index)
        rendered.append(render_sample(spec, (root / spec.source_path).read_bytes()))
    return rendered


@dataclasses.dataclass(frozen=True)
class GenerationSummary:
    """What a call of :func:`generate_stream` did.

    Attributes:
        run_dir: the run folder.
        images_rendered: samples rendered and written by this call.
        shards_written: shards finished by this call.
        shards_skipped: shards already finished (verified) before this call.
        bytes_written: bytes of the shards written by this call.
        seconds: wall time of the rendering phase.
    """

    run_dir: Path
    images_rendered: int
    shards_written: int
    shards_skipped: int
    bytes_written: int
    seconds: float

    @property
    def images_per_second(self) -> float:
        """Rendered images per second of wall time (0 when nothing was rendered)."""
        return self.images_rendered / self.seconds if self.images_rendered and self.seconds > 0 else 0.0


@contextlib.contextmanager
def _folder_lock(run_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on the run folder (``ccc.folder_lock``: on the folder itself and its
    lock file, released by the OS if the process dies; deleting the lock file does not free it). The
    lock file is removed when the block exits, so a finished run leaves no trace of it."""
    try:
        lock = FolderLock.acquire(run_dir, LOCK_NAME)
    except FolderInUseError as error:
        holder = f" ({error.holder})" if error.holder else ""
        raise OutputFolderError(f"{run_dir} is being written by another ccc-generate process{holder}") from None
    with lock:
        try:
            yield
        finally:
            (run_dir / LOCK_NAME).unlink(missing_ok=True)


def _own_files(run_dir: Path) -> list[Path]:
    """Shards, temporary shards and the manifest in ``run_dir`` (what ``overwrite`` removes)."""
    return sorted(
        path
        for path in run_dir.iterdir()
        if path.is_file()
        and (SHARD_FILE.fullmatch(path.name) or path.name.endswith(TEMPORARY_SUFFIX) or path.name == MANIFEST_NAME)
    )


def _verified_shards(run_dir: Path, manifest: Manifest) -> Manifest:
    """Keep the manifest entries whose file exists with the recorded size and sha256; delete the others' files."""

    def check(entry: Any) -> bool:
        path = run_dir / entry.name
        return path.is_file() and path.stat().st_size == entry.bytes and file_sha256(path) == entry.sha256

    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        results = list(pool.map(check, manifest.shards))
    kept = tuple(entry for entry, good in zip(manifest.shards, results) if good)
    for entry, good in zip(manifest.shards, results):
        if not good:
            logger.warning("shard %s does not match its manifest entry; it will be rendered again", entry.name)
            (run_dir / entry.name).unlink(missing_ok=True)
    return dataclasses.replace(manifest, shards=kept)


def _prepare_folder(
    run_dir: Path, plan: StreamPlan, hash_of_plan: str, versions: dict[str, str], overwrite: bool
) -> Manifest:
    """Return the manifest to continue from, after checking that ``run_dir`` holds this stream (or nothing)."""
    fresh = Manifest(stream=plan.spec, plan_hash=hash_of_plan, library_versions=versions)
    manifest_path = run_dir / MANIFEST_NAME
    if overwrite:
        for path in _own_files(run_dir):
            path.unlink()
        return fresh
    for path in run_dir.glob(f".*{TEMPORARY_SUFFIX}"):
        logger.info("removing stale temporary file %s", path.name)
        path.unlink()
    if not manifest_path.exists():
        strays = [path.name for path in _own_files(run_dir)]
        if strays:
            raise OutputFolderError(
                f"{run_dir} holds shards but no {MANIFEST_NAME} (e.g. {strays[0]}), so their stream is unknown; "
                "use another folder or pass --overwrite to delete them"
            )
        return fresh
    try:
        existing = load_manifest(run_dir)
    except ManifestError as error:
        raise OutputFolderError(f"{error}; pass --overwrite to start the folder afresh") from None
    if existing.stream != plan.spec:
        differences = [
            f"{name}: {getattr(existing.stream, name)!r} -> {getattr(plan.spec, name)!r}"
            for name in (field.name for field in dataclasses.fields(plan.spec))
            if getattr(existing.stream, name) != getattr(plan.spec, name)
        ]
        raise OutputFolderError(
            f"{run_dir} holds a different stream ({'; '.join(differences)}); use another folder or pass --overwrite"
        )
    if existing.plan_hash != hash_of_plan:
        raise OutputFolderError(
            f"{run_dir} holds the same stream definition but a different plan (plan hash {existing.plan_hash[:12]}… "
            f"vs {hash_of_plan[:12]}…, e.g. another numpy version or changed source images); pass --overwrite"
        )
    previous = existing.previous_library_versions
    if dict(existing.library_versions) != versions:
        logger.warning(
            "%s was started with other library versions (%s); shards written now may differ in bytes from an "
            "uninterrupted run",
            run_dir,
            existing.library_versions,
        )
        if existing.shards:
            previous = (*previous, existing.library_versions)
    verified = _verified_shards(run_dir, existing)
    return dataclasses.replace(verified, library_versions=versions, previous_library_versions=previous)


def _chunks(sample_range: range, chunk_size: int) -> list[tuple[int, int]]:
    return [
        (start, min(start + chunk_size, sample_range.stop))
        for start in range(sample_range.start, sample_range.stop, chunk_size)
    ]


def generate_stream(
    plan: StreamPlan,
    run_dir: str | os.PathLike[str],
    executor: Executor,
    *,
    overwrite: bool = False,
    progress: bool = True,
    chunk_size: int = DEFAULT_SAMPLES_PER_TASK,
) -> GenerationSummary:
    """Render the stream of ``plan`` into ``run_dir`` (created if needed), resuming an earlier run.

    Shards already recorded in the manifest with a matching sha256 are kept; stale temporary files
    are removed; every other shard is rendered and written, the manifest updated after each one.

    Args:
        plan: the stream plan.
        run_dir: the run folder.
        executor: where chunks are rendered (:class:`~ccc.execution.SerialExecutor` or
            :class:`~ccc.execution.RayExecutor`).
        overwrite: delete shards, temporary files and manifest of whatever stream the folder holds first.
        progress: show a tqdm progress bar on stderr (redrawn at most every 60 s when stderr is not a terminal).
        chunk_size: samples per executor task, >= 1.

    Raises:
        OutputFolderError: the folder holds another stream or unknown shards (without ``overwrite``),
            or another process is writing to it.
        ccc.shards.writer.ShardWriteError: the file system failed (e.g. disk full); finished shards stay recorded.
    """
    check_positive_int("chunk_size", chunk_size)
    folder = Path(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    spec = plan.spec
    with _folder_lock(folder):
        manifest = _prepare_folder(folder, plan, plan_hash(plan), library_versions(), overwrite)
        save_manifest(manifest, folder)
        finished = {entry.index for entry in manifest.shards}
        pending = [index for index in range(spec.num_shards) if index not in finished]
        done_images = sum(entry.sample_count for entry in manifest.shards)
        logger.info("%s: %d of %d shards finished, %d to render", folder, len(finished), spec.num_shards, len(pending))
        chunks = (chunk for index in pending for chunk in _chunks(spec.shard_range(index), chunk_size))
        interval = _PROGRESS_INTERVAL_TTY_SECONDS if sys.stderr.isatty() else _PROGRESS_INTERVAL_LOG_SECONDS
        started = time.perf_counter()
        rendered_images = bytes_written = 0
        with (
            tqdm(
                total=spec.num_images,
                initial=done_images,
                unit="img",
                desc=folder.name,
                disable=not progress,
                mininterval=interval,
            ) as bar,
            contextlib.closing(executor.map_ordered(render_chunk, plan, chunks)) as results,
        ):
            for shard_index in pending:
                sample_range = spec.shard_range(shard_index)
                with ShardWriter(folder, shard_index, sample_range.start) as writer:
                    for _ in _chunks(sample_range, chunk_size):
                        samples = next(results)
                        for sample in samples:
                            writer.write(sample)
                        bar.update(len(samples))
                    info = writer.commit()
                manifest = manifest.with_shard(info)
                save_manifest(manifest, folder)
                rendered_images += info.sample_count
                bytes_written += info.bytes
                logger.info("wrote %s (%d samples, %d bytes)", info.name, info.sample_count, info.bytes)
        seconds = time.perf_counter() - started
    return GenerationSummary(folder, rendered_images, len(pending), len(finished), bytes_written, seconds)


def expected_shard_names(plan: StreamPlan) -> list[str]:
    """File names of all shards of the stream, in order."""
    return [shard_name(index) for index in range(plan.spec.num_shards)]
