"""Rendered streams: :func:`render_stream` renders a stream's samples on the fly, as its shards would hold them.

Each sample is planned (:func:`ccc.stream.plan.plan_sample`) and rendered
(:func:`ccc.render.render_pixels`) where the stream is iterated, only for the positions this
consumer reads (:mod:`ccc.load.selection`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ccc.load.base import CCCStream, Skipped
from ccc.load.decode import decode_image, pixels_to_format
from ccc.load.sample import StreamError, StreamSample
from ccc.load.selection import DEFAULT_SAMPLES_PER_TURN, Selection
from ccc.render import encode_jpeg, render_pixels
from ccc.shards.manifest import MANIFEST_NAME, ManifestError, load_manifest
from ccc.shards.record import record_metadata
from ccc.stream.plan import StreamPlan, plan_sample, plan_stream
from ccc.stream.spec import CCC_KIND, PlanError, StreamSpec

__all__ = ["render_stream"]


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

    Rendering runs where the stream is iterated: wrap it in :func:`ccc.load.stream_loader` with
    ``num_workers`` to render in worker processes.

    Raises:
        StreamError, ValueError, ccc.stream.sources.ImageFolderError, ccc.calibration.CalibrationError:
            bad definitions, folders or tables (messages say what to provide).
    """
    from ccc.calibration import CalibrationTable

    if not compress and image_format == "jpeg":
        raise ValueError("image_format 'jpeg' needs compress=True (uncompressed streams have no JPEG bytes)")
    if isinstance(definition, (str, os.PathLike)):
        definition = _manifest_stream(definition)
    elif not isinstance(definition, (StreamSpec, Mapping)):
        raise ValueError(
            f"stream definition must be a StreamSpec, a run folder or a mapping, got {type(definition).__name__}"
        )
    kind = definition.kind if isinstance(definition, StreamSpec) else definition.get("kind") or CCC_KIND
    if calibration is None and kind == CCC_KIND:
        raise ValueError("calibration must be a CalibrationTable or the path of one (.npz), got None")
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
    return _RenderedStream(
        plan,
        compress,
        start=start,
        limit=limit,
        image_format=image_format,
        chunk_size=chunk_size,
        rank=rank,
        world_size=world_size,
        rank_split=rank_split,
        on_error="raise",
    )
