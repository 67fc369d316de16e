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

Two renderers: the CPU reference path (:func:`render_chunk`, ``ccc.render``; the default) and, when
a :class:`TorchRendering` is given, the torch backend (:func:`render_chunk_torch`): each task decodes
a batch of source images on the CPU with the CPU path's decoder, renders them with
:func:`ccc.render_torch.render_batch` on the device and encodes them with the CPU path's JPEG encoder
(Pillow, quality 85, optimised Huffman tables). Its bytes differ from the CPU path's (the random
corruptions draw from counter-based per-sample streams); they are reproducible on the same device
type and do not depend on the batch size or the number of workers. The manifest records the
renderer, and a run folder is only resumed with the renderer that started it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import platform
import re
import sys
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from tqdm import tqdm

from ccc.execution import DEFAULT_TASK_OPTIONS, Executor, TaskOptions
from ccc.folder_lock import FolderInUseError, FolderLock
from ccc.render import (
    DEFAULT_RENDER_PRECISION,
    RenderedSample,
    check_render_precision,
    decode_source,
    encode_image,
    render_sample,
)
from ccc.shards.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    describe_renderer,
    file_sha256,
    load_manifest,
    save_manifest,
)
from ccc.shards.record import SHARD_FILE, TEMPORARY_SUFFIX, shard_name
from ccc.shards.writer import ShardWriter
from ccc.stream.plan import StreamPlan, plan_hash, plan_sample
from ccc.stream.spec import StreamSpec
from ccc.validation import check_positive_int

__all__ = [
    "DEFAULT_RENDER_BATCH_SIZE",
    "DEFAULT_SAMPLES_PER_TASK",
    "GenerationSummary",
    "OutputFolderError",
    "RenderDeviceError",
    "TorchRendering",
    "expected_shard_names",
    "generate_stream",
    "library_versions",
    "check_render_device",
    "render_chunk",
    "render_chunk_torch",
    "task_count",
]

logger = logging.getLogger(__name__)

DEFAULT_SAMPLES_PER_TASK = 25
"""Samples rendered per executor task (``chunk_size`` of :func:`generate_stream`)."""

DEFAULT_RENDER_BATCH_SIZE = 64
"""Samples per torch rendering batch (one executor task) of :class:`TorchRendering`."""

_RENDER_DEVICE = re.compile(r"cpu|cuda(:[0-9]+)?")

LOCK_NAME = ".ccc-generate.lock"
_PROGRESS_INTERVAL_TTY_SECONDS = 0.5
_PROGRESS_INTERVAL_LOG_SECONDS = 60.0


class OutputFolderError(ValueError):
    """The run folder holds another stream, unknown shards, or is in use by another run."""


class RenderDeviceError(ValueError):
    """The torch renderer's device cannot be used here (not ``cpu`` or ``cuda[:index]``, no torch, no GPU)."""


@dataclasses.dataclass(frozen=True)
class TorchRendering:
    """Render shards with the torch backend (:func:`ccc.render_torch.render_batch`) instead of the CPU
    reference path.

    The bytes differ from the CPU path's: the random corruptions draw from counter-based per-sample
    streams (and on CUDA the float arithmetic differs in the last bits); they are reproducible on the
    same device type, whatever the batch size or the number of workers. The final JPEG is the CPU
    path's (Pillow, quality 85, optimised Huffman tables, on the host).

    Attributes:
        device: ``"cpu"`` or ``"cuda[:index]"``; with Ray each task takes one GPU (``num_gpus=1``)
            and renders on ``"cuda"``, the GPU Ray gives it, so an index is only for one process.
        batch_size: samples per batch (one executor task; a batch never straddles two shards), >= 1.
        precision: the backend's working float precision, one of :data:`ccc.render.RENDER_PRECISIONS`:
            ``"float64"`` (default) or ``"float32"`` (faster on GPUs; other bytes, accuracy within the
            bounds measured in ``docs/fidelity.md``).

    Raises:
        RenderDeviceError: a device that is not ``cpu`` or ``cuda[:index]``.
        ValueError: an unknown precision.
    """

    device: str
    batch_size: int = DEFAULT_RENDER_BATCH_SIZE
    precision: str = DEFAULT_RENDER_PRECISION

    def __post_init__(self) -> None:
        if not _RENDER_DEVICE.fullmatch(self.device):
            raise RenderDeviceError(f"render device must be 'cpu' or 'cuda[:index]', got {self.device!r}")
        check_positive_int("batch_size", self.batch_size)
        check_render_precision(self.precision)

    @property
    def device_type(self) -> str:
        """``"cpu"`` or ``"cuda"``."""
        return self.device.partition(":")[0]

    def manifest_record(self) -> dict[str, str]:
        """What the manifest records as its ``renderer``: the device type and, when not the default, the
        precision (they change the bytes; the index and batch size do not). Without the default
        precision's key, the runs started before the option existed resume unchanged."""
        record = {"backend": "torch", "device_type": self.device_type}
        if self.precision != DEFAULT_RENDER_PRECISION:
            record["precision"] = self.precision
        return record

    def describe(self) -> str:
        """One line for the command's output."""
        return (
            f"{describe_renderer(self.manifest_record())} ({self.device}, batches of {self.batch_size}; "
            "bytes differ from the CPU reference path's)"
        )


def _torch_versions() -> dict[str, str]:
    """Versions of torch and torchvision (recorded besides :func:`library_versions` by the torch renderer)."""
    import torch
    import torchvision

    return {"torch": torch.__version__, "torchvision": torchvision.__version__}


def check_render_device(rendering: TorchRendering, executor: Executor | None = None) -> TaskOptions:
    """Check that ``rendering.device`` can be used by ``executor``'s tasks and return the resources each
    task asks for (one GPU on Ray with CUDA).

    In this process (``executor`` None or not distributed): torch and torchvision import and see the
    device (CUDA available, the index a visible GPU). On Ray: the cluster has a GPU, and the device
    is ``cuda`` without an index (each task renders on the GPU Ray gives it).

    Raises:
        RenderDeviceError: one line saying what is missing.
    """
    try:
        _torch_versions()
        from ccc.models import resolve_device
        from ccc.render_torch._triton import kernels_choice
    except ImportError as error:
        raise RenderDeviceError(f"the torch renderer needs torch and torchvision ({error})") from None
    try:
        kernels_choice()
    except ValueError as error:
        raise RenderDeviceError(f"render device: {error}") from None
    if executor is None or not executor.distributed or rendering.device_type != "cuda":
        try:
            resolve_device(rendering.device)
        except ValueError as error:
            raise RenderDeviceError(f"render device: {error}") from None
        return DEFAULT_TASK_OPTIONS
    if rendering.device != "cuda":
        raise RenderDeviceError(
            f"render device {rendering.device!r}: with Ray each worker renders on the one GPU Ray gives it; "
            "pass 'cuda', or render in one process (--workers 1) to pick a GPU"
        )
    if executor.gpus < 1:
        raise RenderDeviceError("render device 'cuda' requested but the Ray cluster has no GPU")
    return TaskOptions(gpus=1)


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
        rendered.append(render_sample(spec, (root / spec.source_path).read_bytes(), plan.spec.image_encoding))
    return rendered


def render_chunk_torch(job: tuple[StreamPlan, TorchRendering], chunk: tuple[int, int]) -> list[RenderedSample]:
    """Plan and render samples ``chunk[0]`` … ``chunk[1] - 1`` as one batch with the torch backend.

    The sources are read from ``plan.sources.root`` and decoded by :func:`ccc.render.decode_source`
    (the CPU path's decoder), rendered by :func:`ccc.render_torch.render_batch` on
    ``rendering.device`` without its JPEG round trip, then encoded by :func:`ccc.render.encode_image` as the
    stream's ``image_encoding``.
    On CUDA the host work (reading, decoding, encoding) runs on a thread per CPU (Pillow releases
    the GIL), so that it keeps up with the GPU.

    Args:
        job: the stream plan and the :class:`TorchRendering`.
        chunk: (first, stop) sample indices, at most ``rendering.batch_size`` samples.

    Returns:
        the rendered samples in index order; each depends only on its spec and source image.
    """
    from ccc.render_torch import render_batch

    plan, rendering = job
    root = Path(plan.sources.root)
    specs = [plan_sample(plan, index) for index in range(*chunk)]
    threads = (os.cpu_count() or 1) if rendering.device_type == "cuda" else 1

    def decode(spec: Any) -> np.ndarray:
        return np.array(decode_source(spec, (root / spec.source_path).read_bytes()))

    with ThreadPoolExecutor(max_workers=threads) as pool:
        images = list(pool.map(decode, specs))
        pixels = render_batch(specs, images, rendering.device, jpeg=False, precision=rendering.precision)
        pixels = pixels.permute(0, 2, 3, 1).cpu().numpy()
        encoding = plan.spec.image_encoding
        encoded = list(pool.map(functools.partial(encode_image, image_encoding=encoding), pixels))
    return [RenderedSample(spec, image, encoding) for spec, image in zip(specs, encoded)]


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
    run_dir: Path,
    plan: StreamPlan,
    hash_of_plan: str,
    versions: dict[str, str],
    overwrite: bool,
    renderer: Mapping[str, str] | None = None,
) -> Manifest:
    """Return the manifest to continue from, after checking that ``run_dir`` holds this stream (or nothing),
    rendered by ``renderer`` (the manifest's record; None for the CPU reference path)."""
    fresh = Manifest(stream=plan.spec, plan_hash=hash_of_plan, library_versions=versions, renderer=renderer)
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
    if (None if existing.renderer is None else dict(existing.renderer)) != renderer:
        raise OutputFolderError(
            f"{run_dir} was rendered by {describe_renderer(existing.renderer)}, not {describe_renderer(renderer)}: "
            "resume it with the renderer that started it (--render-device, --render-precision), use another folder "
            "or pass --overwrite"
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


def task_count(spec: StreamSpec, rendering: TorchRendering | None = None) -> int:
    """Executor tasks :func:`generate_stream` submits for the whole stream ``spec`` at its default chunk size
    (:data:`DEFAULT_SAMPLES_PER_TASK` samples on the CPU path, one batch of ``rendering``): ≥ 1, as a
    task never crosses a shard. More workers than this would wait."""
    chunk_size = DEFAULT_SAMPLES_PER_TASK if rendering is None else rendering.batch_size
    full_shards, last_shard = divmod(spec.num_images, spec.shard_size)
    return full_shards * -(-spec.shard_size // chunk_size) + -(-last_shard // chunk_size)


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
    rendering: TorchRendering | None = None,
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
        chunk_size: samples per executor task, >= 1 (the CPU path; the torch renderer's tasks are its batches).
        rendering: render with the torch backend (see :class:`TorchRendering`: its bytes differ from the
            CPU path's); None: the CPU reference path.

    Raises:
        OutputFolderError: the folder holds another stream or unknown shards (without ``overwrite``),
            another renderer's shards, or another process is writing to it.
        RenderDeviceError: the torch renderer's device cannot be used (checked before anything is written).
        ccc.shards.writer.ShardWriteError: the file system failed (e.g. disk full); finished shards stay recorded.
    """
    check_positive_int("chunk_size", chunk_size)
    versions, renderer = library_versions(), None
    function: Any = render_chunk
    shared: Any = plan
    options = DEFAULT_TASK_OPTIONS
    if rendering is not None:
        options = check_render_device(rendering, executor)
        versions, renderer = {**versions, **_torch_versions()}, rendering.manifest_record()
        function, shared, chunk_size = render_chunk_torch, (plan, rendering), rendering.batch_size
    folder = Path(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    spec = plan.spec
    with _folder_lock(folder):
        manifest = _prepare_folder(folder, plan, plan_hash(plan), versions, overwrite, renderer)
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
            contextlib.closing(executor.map_ordered(function, shared, chunks, options=options)) as results,
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
