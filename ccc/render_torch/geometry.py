"""Crop, resize to 224×224 and flip source images on a torch device, with Pillow's bytes.

The CPU path (``ccc.render``) resizes with Pillow's 8-bit bilinear filter; here the same fixed-point
arithmetic runs as exact integer gathers and sums over per-sample tap tables (:mod:`._resample`), so
the result equals the CPU path's pixels on every device (no ``F.interpolate``: its antialiased
bilinear weights and float rounding differ from Pillow's by up to a few levels).
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, Union

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from ccc.render import check_source_size
from ccc.stream.spec import SampleSpec

from ._resample import prepare_resample
from ._upload import BatchUpload, Staged
from .numerics import divide

__all__ = ["OUTPUT_SIZE", "SourceImage", "crop_resize_flip", "prepare_crop_resize_flip"]

OUTPUT_SIZE = 224
"""Side of the rendered square image in pixels (``ccc.render.OUTPUT_SIZE``)."""

SourceImage = Union[NDArray[np.uint8], Tensor]
"""A decoded RGB source image: numpy uint8 (H, W, 3) or torch uint8 (3, H, W) (``torchvision.io``'s layout)."""


def _check(spec: SampleSpec, image: SourceImage) -> tuple[int, int]:
    """The (height, width) of ``image``, checked against ``spec``'s source size and crop box."""
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(f"a numpy source image must be uint8 (H, W, 3), got {image.dtype} {image.shape}")
        height, width = image.shape[:2]
    else:
        if image.dtype != torch.uint8 or image.ndim != 3 or image.shape[0] != 3:
            raise ValueError(f"a tensor source image must be uint8 (3, H, W), got {image.dtype} {tuple(image.shape)}")
        height, width = image.shape[1:]
    check_source_size(spec, (width, height))
    crop_width, crop_height = spec.resize if spec.resize is not None else (width, height)
    left, top, right, bottom = spec.crop_box
    if not (0 <= left < right <= crop_width and 0 <= top < bottom <= crop_height):
        raise ValueError(f"crop_box {spec.crop_box} must lie inside the {crop_width}x{crop_height} image")
    return height, width


_SAMPLES_PER_PACKING_THREAD = 32
"""Fewest samples a packing thread copies: below, a thread's start costs more than it saves."""


def _pack_boxes(images: Sequence[SourceImage], boxes: NDArray[np.int64], padded: NDArray[np.uint8]) -> None:
    """Copy the ``boxes`` (left, top, right, bottom; pixels) of the host images into the top-left corners
    of ``padded``'s uint8 (B, H, W, 3) planes (channels last), one numpy copy per sample.

    The copies (a third of a megabyte per ImageNet-size sample, the largest host work of a batch) run in
    up to ``torch.get_num_threads()`` threads, whole samples each (numpy releases the GIL while copying);
    each plane is written by one thread, so the bytes do not depend on the thread count.
    """
    corners = boxes.tolist()

    def pack(samples: range) -> None:
        for k in samples:
            left, top, right, bottom = corners[k]
            image = images[k]
            if isinstance(image, np.ndarray):
                padded[k, : bottom - top, : right - left] = image[top:bottom, left:right]
            else:
                padded[k, : bottom - top, : right - left] = image[:, top:bottom, left:right].permute(1, 2, 0).numpy()

    threads = max(1, min(torch.get_num_threads(), len(images) // _SAMPLES_PER_PACKING_THREAD))
    if threads == 1:
        pack(range(len(images)))
        return
    bounds = np.linspace(0, len(images), threads + 1).astype(int).tolist()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(pack, [range(start, stop) for start, stop in zip(bounds, bounds[1:])]))


def _stage_boxes(
    images: Sequence[SourceImage], boxes: NDArray[np.int64], upload: BatchUpload
) -> tuple[Callable[[], Tensor], tuple[int, int]]:
    """The ``boxes`` (left, top, right, bottom) of the images as one zero-padded uint8 (B, H, W, 3) tensor on
    the upload's device (channels last, numpy's layout), staged in ``upload`` (only the pixels a sample uses
    travel; they are packed straight into the batch's host buffer, pinned on CUDA, when it is sent).

    Returns the device half (no arguments → the padded tensor) and the planes' (H, W) in pixels. Where some
    images already lie on the device (decoded there), the tensor is filled there instead: those crops never
    visit the host, and the others are staged one by one."""
    device = upload.device
    sizes = np.stack([boxes[:, 3] - boxes[:, 1], boxes[:, 2] - boxes[:, 0]], axis=1)
    plane = tuple(sizes.max(axis=0).tolist())
    shape = (len(images), *plane, 3)
    # off the host: on the render device, whose tensors name their index ("cuda:0") where the caller may not
    if device.type != "cpu" and any(isinstance(image, Tensor) and image.device.type != "cpu" for image in images):
        crops = []
        for image, (left, top, right, bottom) in zip(images, boxes.tolist()):
            if isinstance(image, np.ndarray):
                crop = torch.from_numpy(image[top:bottom, left:right])
            else:
                crop = image[:, top:bottom, left:right].permute(1, 2, 0)
            if crop.device.type == "cpu":
                host_crop = crop.numpy()
                crop = upload.raw_bytes(host_crop.shape, functools.partial(np.copyto, src=host_crop))
            crops.append(crop)

        def filled() -> Tensor:
            padded = torch.empty(shape, dtype=torch.uint8, device=device)  # padding is never read
            for plane_levels, crop in zip(padded, crops):
                crop = crop.tensor() if isinstance(crop, Staged) else crop
                plane_levels[: crop.shape[0], : crop.shape[1]] = crop
            return padded

        return filled, plane
    staged = upload.raw_bytes(shape, lambda padded: _pack_boxes(images, boxes, padded))  # padding is never read
    return staged.tensor, plane


def _prepare_group(
    specs: Sequence[SampleSpec], images: Sequence[SourceImage], upload: BatchUpload
) -> Callable[[], Tensor]:
    """The host half of the uint8 (B, 224, 224, 3) crops of samples that all have, or all have no,
    ``spec.resize``: sources and tap tables staged in ``upload``; the device half takes no arguments."""
    sizes = np.array([_check(spec, image) for spec, image in zip(specs, images)], dtype=np.int64)
    boxes = np.array([spec.crop_box for spec in specs], dtype=np.int64)
    if specs[0].resize is None:
        sources, plane = _stage_boxes(images, boxes, upload)
        boxes = np.concatenate([np.zeros_like(sizes), boxes[:, 2:] - boxes[:, :2]], axis=1)
        resize = None
    else:
        whole = np.concatenate([np.zeros_like(sizes), sizes[:, ::-1]], axis=1)
        resized = np.array([spec.resize[::-1] for spec in specs], dtype=np.int64)
        sources, source_plane = _stage_boxes(images, whole, upload)
        plane = tuple(resized.max(axis=0).tolist())
        resize = prepare_resample(whole, resized, plane, "bilinear", None, source_plane, upload)
    flips = np.array([spec.flip for spec in specs], dtype=bool)
    square = np.full((len(specs), 2), OUTPUT_SIZE, dtype=np.int64)
    crop = prepare_resample(boxes, square, (OUTPUT_SIZE, OUTPUT_SIZE), "bilinear", flips, plane, upload)
    return lambda: crop(sources() if resize is None else resize(sources()))


def prepare_crop_resize_flip(
    specs: Sequence[SampleSpec], images: Sequence[SourceImage], upload: BatchUpload
) -> Callable[[], Tensor]:
    """The host half of :func:`crop_resize_flip` on ``upload``'s device: every check, the packed source
    crops and the tap tables staged in ``upload``. Returns the device half (no arguments → its result),
    to call once ``upload`` is sent.

    Raises:
        ValueError: as :func:`crop_resize_flip`.
    """
    if len(specs) != len(images):
        raise ValueError(f"specs and images must have the same length, got {len(specs)} and {len(images)}")
    device = upload.device
    if not specs:
        return lambda: torch.empty((0, 3, OUTPUT_SIZE, OUTPUT_SIZE), dtype=torch.float32, device=device)
    groups = [[k for k, spec in enumerate(specs) if (spec.resize is not None) == resized] for resized in (False, True)]
    groups = [members for members in groups if members]
    crops = [_prepare_group([specs[k] for k in members], [images[k] for k in members], upload) for members in groups]
    positions = upload.tables(*(np.array(members) for members in groups)) if len(groups) > 1 else None

    def step() -> Tensor:
        if positions is None:
            levels = crops[0]()
        else:
            levels = torch.empty((len(specs), OUTPUT_SIZE, OUTPUT_SIZE, 3), dtype=torch.uint8, device=device)
            for index, crop in zip(positions.tensors(), crops):
                levels[index] = crop()
        return divide(levels.permute(0, 3, 1, 2).to(torch.float32), 255.0)

    return step


def crop_resize_flip(specs: Sequence[SampleSpec], images: Sequence[SourceImage], device: torch.device | str) -> Tensor:
    """The 224×224 crops of ``specs`` from their decoded source images, as the CPU path cuts them.

    Per sample: with ``spec.resize``, the whole image is first resized to it (Pillow bilinear); then
    ``spec.crop_box`` (left, top, right, bottom; pixels, right and bottom exclusive) is cut, resized
    to 224×224 (Pillow bilinear; a 224×224 box is copied) and mirrored if ``spec.flip``.

    Args:
        specs: one :class:`SampleSpec` per image.
        images: decoded RGB images of any sizes (``spec.source_size`` each) in host memory or, as
            tensors, on ``device`` (e.g. decoded there by nvJPEG), see :data:`SourceImage`.
        device: where the work and the result live.

    Returns:
        float32 (B, 3, 224, 224) on ``device``, values ``k / 255`` for Pillow's bytes ``k``. The samples
        with and without ``spec.resize`` form at most two groups; each group's images are padded into
        one uint8 tensor and resampled together (:func:`._resample.resample_batch`), and all of them travel
        in one copy with their tables (:func:`prepare_crop_resize_flip`): no operation on the device runs
        per sample.

    Raises:
        ValueError: a count, dtype, layout or size mismatch, or a crop box outside the image.
    """
    upload = BatchUpload(device)
    step = prepare_crop_resize_flip(specs, images, upload)
    upload.send()
    return step()
