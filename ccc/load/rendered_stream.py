"""Rendered streams: :func:`render_stream` renders a stream's samples on the fly, as its shards would hold them.

Each sample is planned (:func:`ccc.stream.plan.plan_sample`) and rendered where the stream is
iterated, only for the positions this consumer reads (:mod:`ccc.load.selection`): by the CPU
reference path (:func:`ccc.render.render_pixels`, the shards' bytes) one sample at a time, or, with
``device=``, by the torch backend (:func:`ccc.render_torch.render_batch`) a batch at a time on that
device, the source images being decoded on the CPU (in DataLoader workers under
:func:`ccc.load.stream_loader`) or, with ``source_decoder="device"``, by torchvision on the device.
"""

from __future__ import annotations

import copy
import io
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from PIL import Image

from ccc.load.base import CCCStream, Skipped
from ccc.load.decode import TENSOR_FORMATS, decode_image, pixels_to_format, tensor_to_format
from ccc.load.sample import StreamError, StreamSample
from ccc.load.selection import DEFAULT_SAMPLES_PER_TURN, Selection
from ccc.render import (
    DEFAULT_RENDER_PRECISION,
    check_render_precision,
    check_source_size,
    decode_source,
    encode_image,
    render_pixels,
)
from ccc.shards.manifest import MANIFEST_NAME, ManifestError, load_manifest
from ccc.shards.record import record_metadata
from ccc.stream.plan import StreamPlan, plan_sample, plan_stream
from ccc.stream.spec import CCC_KIND, PlanError, SampleSpec, StreamSpec

__all__ = ["SOURCE_DECODERS", "check_render_device", "check_source_decoder", "render_stream"]

SOURCE_DECODERS = ("pillow", "device")
"""Who decodes the source images of a stream rendered on a device: ``pillow`` (Pillow, on the CPU, in
the loader's workers: the reference decoder) or ``device`` (``torchvision.io.decode_jpeg`` on the render
device: nvJPEG on CUDA, libjpeg-turbo on the CPU; not guaranteed byte-identical to Pillow)."""

DEVICE_DECODED_MODES = ("RGB", "L")
"""Pillow modes of the baseline JPEGs that ``source_decoder="device"`` sends as bytes; torchvision's
``ImageReadMode.RGB`` repeats a grayscale (``L``) image's level in the three channels, as Pillow's
``convert("RGB")``. Other sources (CMYK, progressive, not JPEG) are decoded by Pillow in the workers."""


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
                image = decode_image(encode_image(pixels, self.spec.image_encoding), self.image_format)
            else:
                image = pixels_to_format(pixels, self.image_format)
            metadata = {**record_metadata(spec.to_json_dict(), index), "key": None, "shard": None}
            yield StreamSample(image, spec.class_index, metadata)
            relative = selection.next_wanted(relative + 1)


GPU_RENDER_BATCH = 512
"""Fewest samples a stream rendered on a GPU renders at once (a multiple of the loader's batch size). The
torch renderer is host-bound at small batches: on an H200 the medium mix ran at about 1,000 images/s in
batches of 128, 2,900 in batches of 512 and 3,500 in batches of 1,024 (BENCHMARKS.md)."""


class _DeviceRenderedStream(_RenderedStream):
    """A plan's samples rendered by the torch backend on ``device``, ``chunk_size`` samples at a time.

    Iterated directly, it decodes and renders in this process. Under :func:`ccc.load.stream_loader`
    the DataLoader workers iterate :meth:`for_workers` (each sample planned and its source decoded:
    ``(SampleSpec, uint8 (H, W, 3))``) and :meth:`finish_batch` renders each collated batch here, on
    the device. A sample's bytes depend only on its plan entry and source image: not on the batch
    size, the workers or the ranks. With ``source_decoder="device"``, the workers send a baseline
    JPEG's bytes (uint8 (N,)) instead of its pixels, and :meth:`finish_batch` decodes them on the device.
    """

    def __init__(
        self, plan: StreamPlan, compress: bool, device: Any, source_decoder: str, precision: str, **options: Any
    ) -> None:
        super().__init__(plan, compress, **options)
        self.device = device
        self.source_decoder = source_decoder
        self.precision = precision
        self.decode_only = False

    def for_workers(self) -> CCCStream:
        workers_stream = copy.copy(self)
        workers_stream.decode_only = True
        return workers_stream

    def finishing_batch_size(self, batch_size: int) -> int:
        """On a GPU the smallest multiple of ``batch_size`` of at least :data:`GPU_RENDER_BATCH` samples (a model's
        batch of 64 would leave the GPU waiting for its host); on the CPU, and across several ranks (whose
        samples the loader's chunks of ``batch_size`` split, as for every stream), ``batch_size``."""
        if torch.device(self.device).type == "cpu" or self.world_size > 1:
            return batch_size
        return batch_size * -(-GPU_RENDER_BATCH // batch_size)

    def finish_batch(self, batch: tuple[Any, torch.Tensor, list[dict[str, Any]]]) -> tuple[Any, torch.Tensor, list]:
        """Render a collated batch of sources (``(SampleSpec, uint8 (H, W, 3) or JPEG bytes uint8 (N,))``
        pairs, as :meth:`for_workers` yields them) on the device, the JPEG bytes decoded there first:
        images (B, 3, 224, 224) there, in the stream's ``image_format``; labels and metadata as given."""
        from ccc.render_torch import render_batch

        planned, labels, metadata = batch
        specs, sources = zip(*planned)
        sources = _decode_on_device(specs, sources, self.device)
        jpeg = self.compress and self.spec.image_encoding == "jpeg"
        pixels = render_batch(specs, sources, self.device, jpeg=jpeg, precision=self.precision)
        return tensor_to_format(pixels, self.image_format), labels, metadata

    def _decoded(self, selection: Selection) -> Iterator[StreamSample]:
        """This consumer's samples with image ``(SampleSpec, source)``: planned once, so the rendering
        process does not plan them again; the source decoded (uint8 (H, W, 3)) or, for the device's
        decoder, a JPEG's bytes (see :func:`_worker_source`)."""
        root = Path(self.plan.sources.root)
        relative = selection.next_wanted(0)
        while relative is not None:
            index = self.start + relative
            spec = plan_sample(self.plan, index)
            image = _worker_source(spec, (root / spec.source_path).read_bytes(), self.source_decoder)
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


def _worker_source(spec: SampleSpec, data: bytes, source_decoder: str) -> NDArray[np.uint8] | torch.Tensor:
    """What a loader worker sends for ``spec`` whose source file holds ``data``: for the device's
    decoder, a baseline JPEG of a :data:`DEVICE_DECODED_MODES` mode as its bytes (uint8 (N,); only its
    header read here, its size checked as :func:`ccc.render.decode_source` does); otherwise the image
    decoded by :func:`ccc.render.decode_source` (uint8 (H, W, 3)).

    Raises:
        SourceImageMismatchError, PIL.UnidentifiedImageError, OSError: as :func:`ccc.render.decode_source`.
    """
    if source_decoder == "device":
        with Image.open(io.BytesIO(data)) as opened:
            if opened.format == "JPEG" and opened.mode in DEVICE_DECODED_MODES and not opened.info.get("progressive"):
                check_source_size(spec, opened.size)
                return torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return np.array(decode_source(spec, data))


def _decode_on_device(
    specs: Sequence[SampleSpec], sources: Sequence[NDArray[np.uint8] | torch.Tensor], device: torch.device
) -> list[NDArray[np.uint8] | torch.Tensor]:
    """``sources`` with each JPEG's bytes (uint8 (N,)) decoded to RGB uint8 (3, H, W) on ``device`` by
    ``torchvision.io.decode_jpeg``, in one call for the batch; decoded images as given.

    Raises:
        StreamError: one line naming the batch's first source sent as bytes, if torchvision cannot
            decode the bytes.
    """
    encoded = [k for k, source in enumerate(sources) if isinstance(source, torch.Tensor) and source.ndim == 1]
    if not encoded:
        return list(sources)
    from torchvision.io import ImageReadMode, decode_jpeg

    with warnings.catch_warnings():
        # torchvision 0.29 deprecates its decoders for TorchCodec's; they are still the ones that decode on CUDA
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torchvision\.io")
        try:
            decoded = decode_jpeg([sources[k] for k in encoded], mode=ImageReadMode.RGB, device=device)
        except RuntimeError as error:
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise StreamError(
                f"torchvision could not decode the source JPEGs of a batch on {device} (from "
                f"{specs[encoded[0]].source_path}): {reason}; render with source_decoder='pillow'"
            ) from None
    result = list(sources)
    for k, image in zip(encoded, decoded):
        result[k] = image
    return result


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
            machine does not have, or ``CCC_TORCH_KERNELS`` set to neither ``aten`` nor ``triton``.
    """
    from ccc.models import resolve_device
    from ccc.render_torch._triton import kernels_choice

    try:
        kernels_choice()  # checked before the first batch, not inside it
        return resolve_device(str(device))
    except ValueError as error:
        raise ValueError(f"render device: {error}") from None


def check_source_decoder(source_decoder: str, device: str | torch.device | None) -> None:
    """Check a ``source_decoder`` (one of :data:`SOURCE_DECODERS`) for a stream rendered on ``device``.

    Raises:
        ValueError: one line, for another name, or for ``"device"`` with the CPU reference path
            (``device`` None), which decodes with Pillow.
    """
    if source_decoder not in SOURCE_DECODERS:
        raise ValueError(f"source_decoder must be one of {', '.join(SOURCE_DECODERS)}, got {source_decoder!r}")
    if source_decoder == "device" and device is None:
        raise ValueError(
            "source_decoder 'device' needs a render device (device='cpu' or 'cuda[:index]'): the CPU reference "
            "path decodes with Pillow, as the shards"
        )


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
    source_decoder: str = "pillow",
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
        compress: True (default) encodes and decodes each image as the shards store it (the stream's
            ``image_encoding``: JPEG with the shards' settings, or lossless PNG), so images are
            byte-identical to the shards'; False skips the JPEG step (uncompressed pixels, not those of
            a JPEG stream's shards; ``image_format="jpeg"`` then is refused).
        skip_bad_images: exclude unreadable source images, as ``ccc-generate --skip-bad-images``.
        device: None (default) renders with the CPU reference path, the shards' bytes. ``"cpu"`` or
            ``"cuda[:index]"`` renders with the torch backend (:mod:`ccc.render_torch`) on that device,
            ``chunk_size`` samples at a time (the batch size under :func:`ccc.load.stream_loader`, whose
            workers then only decode the sources): images are tensors on the device, ``image_format``
            one of ``uint8``, ``float``, ``normalized``. Its bytes differ from the CPU path's (the random
            corruptions draw from counter-based per-sample streams) and are reproducible on the same
            device type, whatever the batch size or the workers (``docs/fidelity.md``). Choose it when a
            GPU is at hand: on the CPU the reference path is the faster one.
        source_decoder: with ``device``, who decodes the source images (:data:`SOURCE_DECODERS`).
            ``"pillow"`` (default): Pillow in the loader's workers, as the CPU path (its rate per core
            and the workers it takes to feed a GPU: ``docs/tta_eval.md``, "Feeding a GPU renderer").
            ``"device"``: the workers only read the files and their headers, and each batch's baseline
            RGB or grayscale JPEGs are decoded on ``device`` by ``torchvision.io.decode_jpeg`` (nvJPEG
            on CUDA, libjpeg-turbo on the CPU; grayscale made RGB as Pillow's ``convert("RGB")``; no
            EXIF rotation, as with Pillow); other sources (CMYK, progressive, not JPEG) are decoded by
            Pillow in the workers. Not guaranteed byte-identical to Pillow: libjpeg-turbo on the CPU
            gave Pillow's pixels exactly on every JPEG measured (``scripts/bench/feed.py``); nvJPEG's
            IDCT and chroma upsampling may differ by a few levels (``docs/fidelity.md``).
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
    check_source_decoder(source_decoder, device)
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
    return _DeviceRenderedStream(plan, compress, device, source_decoder, precision, **common)
