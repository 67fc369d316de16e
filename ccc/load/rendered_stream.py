"""Rendered streams: :func:`render_stream` renders a stream's samples on the fly, as its shards would hold them.

Each sample is planned (:func:`ccc.stream.plan.plan_sample`) and rendered where the stream is
iterated, only for the positions this consumer reads (:mod:`ccc.load.selection`): by the CPU
reference path (:func:`ccc.render.render_pixels`, the shards' bytes) one sample at a time, or, with
``device=``, by the torch backend (:func:`ccc.render_torch.render_batch`) a batch at a time on that
device, the source images being decoded on the CPU (in DataLoader workers under
:func:`ccc.load.stream_loader`).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ccc.load.base import CCCStream, Skipped
from ccc.load.decode import TENSOR_FORMATS, decode_image, pixels_to_format, tensor_to_format
from ccc.load.sample import StreamError, StreamSample
from ccc.load.selection import DEFAULT_SAMPLES_PER_TURN, Selection
from ccc.render import DEFAULT_RENDER_PRECISION, check_render_precision, decode_source, encode_jpeg, render_pixels
from ccc.shards.manifest import MANIFEST_NAME, ManifestError, load_manifest
from ccc.shards.record import record_metadata
from ccc.stream.plan import StreamPlan, plan_sample, plan_stream
from ccc.stream.spec import CCC_KIND, PlanError, StreamSpec

__all__ = ["check_render_device", "render_stream"]


class _RenderedStream(CCCStream):
    """A plan's samples rendered one by one, only at the positions this consumer reads."""

    def __init__(self, plan: StreamPlan, compress: bool, **options: Any) -> None:
        self.plan = plan
        self.spec = plan.spec
        self.compress = compress
        super().__init__(total=plan.spec.num_images, **options)

    def _samples(self, selection: Selection) -> Iterator[StreamSample | Skipped]:
        root = Path(self.plan.sources.root)
        relative = selection.next_wanted(0)
        while relative is not None:
            index = self.start + relative
            spec = plan_sample(self.plan, index)
            pixels = render_pixels(spec, (root / spec.source_path).read_bytes())
            if self.compress:
                image = decode_image(encode_jpeg(pixels), self.image_format)
            else:
                image = pixels_to_format(pixels, self.image_format)
            metadata = {**record_metadata(spec.to_json_dict(), index), "key": None, "shard": None}
            yield StreamSample(image, spec.class_index, metadata)
            relative = selection.next_wanted(relative + 1)


class _DeviceRenderedStream(_RenderedStream):
    """A plan's samples rendered by the torch backend on ``device``, ``chunk_size`` samples at a time.

    Iterated directly, it decodes and renders in this process. Under :func:`ccc.load.stream_loader`
    the DataLoader workers iterate :meth:`for_workers` (each sample planned and its source decoded:
    ``(SampleSpec, uint8 (H, W, 3))``) and :meth:`finish_batch` renders each collated batch here, on
    the device. A sample's bytes depend only on its plan entry and source image: not on the batch
    size, the workers or the ranks.
    """

    def __init__(self, plan: StreamPlan, compress: bool, device: Any, precision: str, **options: Any) -> None:
        super().__init__(plan, compress, **options)
        self.device = device
        self.precision = precision
        self.decode_only = False

    def for_workers(self) -> CCCStream:
        workers_stream = copy.copy(self)
        workers_stream.decode_only = True
        return workers_stream

    def finish_batch(self, batch: tuple[Any, torch.Tensor, list[dict[str, Any]]]) -> tuple[Any, torch.Tensor, list]:
        """Render a collated batch of decoded sources (``(SampleSpec, uint8 (H, W, 3))`` pairs, as
        :meth:`for_workers` yields them) on the device: images (B, 3, 224, 224) there, in the stream's
        ``image_format``; labels and metadata as given."""
        from ccc.render_torch import render_batch

        planned, labels, metadata = batch
        specs, sources = zip(*planned)
        pixels = render_batch(specs, sources, self.device, jpeg=self.compress, precision=self.precision)
        return tensor_to_format(pixels, self.image_format), labels, metadata

    def _decoded(self, selection: Selection) -> Iterator[StreamSample]:
        """This consumer's samples with image ``(SampleSpec, decoded source uint8 (H, W, 3))``: planned
        once, so the rendering process does not plan them again."""
        root = Path(self.plan.sources.root)
        relative = selection.next_wanted(0)
        while relative is not None:
            index = self.start + relative
            spec = plan_sample(self.plan, index)
            image = np.array(decode_source(spec, (root / spec.source_path).read_bytes()))
            metadata = {**record_metadata(spec.to_json_dict(), index), "key": None, "shard": None}
            yield StreamSample((spec, image), spec.class_index, metadata)
            relative = selection.next_wanted(relative + 1)

    def _samples(self, selection: Selection) -> Iterator[StreamSample | Skipped]:
        if self.decode_only:
            yield from self._decoded(selection)
            return
        pending: list[StreamSample] = []
        for sample in self._decoded(selection):
            pending.append(sample)
            if len(pending) == self.chunk_size:
                yield from self._rendered(pending)
                pending = []
        yield from self._rendered(pending)

    def _rendered(self, samples: list[StreamSample]) -> Iterator[StreamSample]:
        if not samples:
            return
        labels = torch.tensor([sample.label for sample in samples], dtype=torch.int64)
        images, _, _ = self.finish_batch(([s.image for s in samples], labels, [s.metadata for s in samples]))
        for image, sample in zip(images, samples):
            yield StreamSample(image, sample.label, sample.metadata)


def _manifest_stream(definition: str | os.PathLike[str]) -> StreamSpec:
    """The stream of a run folder (or of its ``manifest.json``)."""
    folder = Path(definition)
    folder = folder.parent if folder.name == MANIFEST_NAME else folder
    try:
        return load_manifest(folder).stream
    except FileNotFoundError:
        raise StreamError(
            f"{folder} has no {MANIFEST_NAME}: pass a run folder written by ccc-generate, a StreamSpec or a mapping"
        ) from None
    except ManifestError as error:
        raise StreamError(str(error)) from None


def check_render_device(device: str | torch.device) -> torch.device:
    """The torch device of a rendering ``device`` (``cpu`` or ``cuda[:index]``, usable here).

    Raises:
        ValueError: one line, ``render device: …``, for another name, or CUDA or a GPU index this
            machine does not have.
    """
    from ccc.models import resolve_device

    try:
        return resolve_device(str(device))
    except ValueError as error:
        raise ValueError(f"render device: {error}") from None


def render_stream(
    definition: Any,
    *,
    imagenet: str | os.PathLike[str] | None = None,
    calibration: Any = None,
    start: int = 0,
    limit: int | None = None,
    image_format: str = "uint8",
    compress: bool = True,
    chunk_size: int = DEFAULT_SAMPLES_PER_TURN,
    rank: int | None = None,
    world_size: int | None = None,
    rank_split: str = "interleaved",
    skip_bad_images: bool = False,
    device: str | None = None,
    precision: str | None = None,
) -> CCCStream:
    """Render a stream on the fly: the samples its shards would hold, without storing them.

    Args:
        definition: a :class:`ccc.stream.spec.StreamSpec`, a run folder (its manifest's stream), or a
            mapping ``{"difficulty": "medium", "speed": 2000, "seed": 43}`` (optional keys
            ``kind``, ``baseline_accuracy``, ``corruptions``, ``num_images`` (default: unbounded),
            ``schedule``, ``path_objective``, and for the other kinds ``severity``, ``crop``;
            see :func:`ccc.stream.spec.resolve_stream_spec`).
        imagenet: the source image folder (default ``$CCC_IMAGENET``).
        calibration: a :class:`ccc.calibration.CalibrationTable` or the path of one; None for the
            ``cin-c`` and ``gradual`` kinds (``{"kind": "cin-c", "severity": 5, "speed": 5000}``),
            which need no table.
        start, limit, image_format, chunk_size, rank, world_size, rank_split: as :func:`ccc.load.open_stream`.
        compress: True (default) encodes and decodes each image with the shards' JPEG settings, so
            images are byte-identical to the shards'; False skips the JPEG step (uncompressed
            pixels, not those of the shards; ``image_format="jpeg"`` then is refused).
        skip_bad_images: exclude unreadable source images, as ``ccc-generate --skip-bad-images``.
        device: None (default) renders with the CPU reference path, the shards' bytes. ``"cpu"`` or
            ``"cuda[:index]"`` renders with the torch backend (:mod:`ccc.render_torch`) on that device,
            ``chunk_size`` samples at a time (the batch size under :func:`ccc.load.stream_loader`, whose
            workers then only decode the sources): images are tensors on the device, ``image_format``
            one of ``uint8``, ``float``, ``normalized``. Its bytes differ from the CPU path's (the random
            corruptions draw from counter-based per-sample streams) and are reproducible on the same
            device type, whatever the batch size or the workers (``docs/fidelity.md``). Choose it when a
            GPU is at hand: on the CPU the reference path is the faster one.
        precision: with ``device`` only: the torch backend's working float precision, ``"float64"``
            (default: the CPU path's arithmetic) or ``"float32"`` (faster on GPUs; accuracy within the
            measured bounds of ``docs/fidelity.md``, bytes not equal to float64's).

    Rendering runs where the stream is iterated: wrap it in :func:`ccc.load.stream_loader` with
    ``num_workers`` to render in worker processes.

    Raises:
        StreamError, ValueError, ccc.stream.sources.ImageFolderError, ccc.calibration.CalibrationError:
            bad definitions, folders or tables (messages say what to provide).
    """
    from ccc.calibration import CalibrationTable

    if not compress and image_format == "jpeg":
        raise ValueError("image_format 'jpeg' needs compress=True (uncompressed streams have no JPEG bytes)")
    if precision is not None and device is None:
        raise ValueError(f"precision={precision!r} applies to the torch backend: pass device='cpu' or 'cuda' with it")
    if device is not None:
        precision = check_render_precision(DEFAULT_RENDER_PRECISION if precision is None else precision)
        device = check_render_device(device)
        if image_format not in TENSOR_FORMATS:
            raise ValueError(
                f"a stream rendered on a device gives tensors there: image_format must be one of "
                f"{', '.join(TENSOR_FORMATS)}, got {image_format!r}"
            )
    if isinstance(definition, (str, os.PathLike)):
        definition = _manifest_stream(definition)
    elif not isinstance(definition, (StreamSpec, Mapping)):
        raise ValueError(
            f"stream definition must be a StreamSpec, a run folder or a mapping, got {type(definition).__name__}"
        )
    kind = definition.kind if isinstance(definition, StreamSpec) else definition.get("kind") or CCC_KIND
    if calibration is None and kind == CCC_KIND:
        raise ValueError(
            "calibration must be a CalibrationTable or the path of one (.npz), got None; a stream of the demo "
            "world (ccc-generate --demo) takes its table and images: render_stream(RUN, "
            "calibration=ccc.demo.demo_calibration_path(), imagenet=ccc.demo.demo_image_folder())"
        )
    if calibration is None:
        table = None
    else:
        table = calibration if isinstance(calibration, CalibrationTable) else CalibrationTable.load(calibration)
    try:
        plan = plan_stream(
            definition, table, None if imagenet is None else os.fspath(imagenet), skip_bad_images=skip_bad_images
        )
    except PlanError as error:
        raise StreamError(f"stream definition does not fit the calibration table and images: {error}") from None
    common = {
        "start": start,
        "limit": limit,
        "image_format": image_format,
        "chunk_size": chunk_size,
        "rank": rank,
        "world_size": world_size,
        "rank_split": rank_split,
        "on_error": "raise",
    }
    if device is None:
        return _RenderedStream(plan, compress, **common)
    return _DeviceRenderedStream(plan, compress, device, precision, **common)
