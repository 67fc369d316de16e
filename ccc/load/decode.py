"""Decoding: stream JPEG bytes or rendered pixels into an image format, a tar sample into a :class:`StreamSample`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from PIL import Image

from ccc.load.sample import StreamError, StreamSample
from ccc.render import decode_jpeg
from ccc.shards.errors import ShardReadError
from ccc.shards.record import SampleRecordError, decode_members, sample_place

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "IMAGE_FORMATS",
    "TENSOR_FORMATS",
    "check_image_format",
    "decode_image",
    "decode_tar_sample",
    "pixels_to_format",
    "tensor_to_format",
]

IMAGE_FORMATS = ("uint8", "float", "normalized", "pil", "jpeg")
"""Image forms: ``uint8`` tensor 3×224×224 (default), ``float`` tensor in [0, 1], ``normalized``
float tensor ``(x - IMAGENET_MEAN) / IMAGENET_STD``, ``pil`` RGB image, ``jpeg`` the encoded bytes as stored
(JPEG; PNG in a stream whose ``image_encoding`` is ``png``)."""

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_MEAN = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
_STD = torch.tensor(IMAGENET_STD).view(3, 1, 1)


def check_image_format(image_format: str) -> str:
    """``image_format`` if it is one of :data:`IMAGE_FORMATS`; ValueError naming the choices otherwise."""
    if image_format not in IMAGE_FORMATS:
        raise ValueError(f"image_format must be one of {', '.join(IMAGE_FORMATS)}, got {image_format!r}")
    return image_format


def pixels_to_format(pixels: np.ndarray, image_format: str) -> Any:
    """RGB pixels (H×W×3 uint8) in ``image_format``, one of :data:`IMAGE_FORMATS` except ``jpeg``.

    Tensors are C×H×W: ``uint8`` as is, ``float`` scaled to [0, 1], ``normalized`` then
    standardised with :data:`IMAGENET_MEAN` and :data:`IMAGENET_STD`; ``pil`` gives an RGB image.
    """
    if image_format == "pil":
        return Image.fromarray(pixels)
    return tensor_to_format(torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1))), image_format)


TENSOR_FORMATS = ("uint8", "float", "normalized")
"""The image forms :func:`tensor_to_format` gives (those of :data:`IMAGE_FORMATS` that are tensors)."""


def tensor_to_format(pixels: torch.Tensor, image_format: str) -> torch.Tensor:
    """uint8 RGB pixels ``(..., 3, H, W)`` (one image or a batch, any device) in ``image_format``, one of
    :data:`TENSOR_FORMATS`: ``uint8`` as is, ``float`` scaled to [0, 1], ``normalized`` then standardised
    with :data:`IMAGENET_MEAN` and :data:`IMAGENET_STD`; on the pixels' device."""
    if image_format == "uint8":
        return pixels
    scaled = pixels.float().div_(255.0)
    if image_format == "float":
        return scaled
    return scaled.sub_(_MEAN.to(scaled.device)).div_(_STD.to(scaled.device))


def decode_image(jpeg: bytes, image_format: str = "uint8") -> Any:
    """Decode a stream's encoded image (JPEG, or PNG in a lossless stream) into ``image_format`` (one of
    :data:`IMAGE_FORMATS`).

    Tensors are C×H×W (3×224×224 for CCC); ``pil`` gives an RGB image; ``jpeg`` returns the bytes.

    Raises:
        ValueError: unknown ``image_format``. PIL.UnidentifiedImageError, OSError: undecodable bytes.
    """
    check_image_format(image_format)
    if image_format == "jpeg":
        return jpeg
    image = decode_jpeg(jpeg)
    return image if image_format == "pil" else pixels_to_format(np.asarray(image), image_format)


def decode_tar_sample(
    members: Mapping[str, bytes], index: int, key: str, shard: str, image_format: str
) -> StreamSample:
    """Decode the members of one tar sample (extension → bytes) into a :class:`StreamSample`.

    Args:
        members: extension → bytes, ours or the published shards' (:func:`ccc.shards.record.decode_members`).
        index: the sample's stream index. key, shard: its key and shard, for messages and metadata.
        image_format: one of :data:`IMAGE_FORMATS`.

    Raises:
        StreamError: naming shard and sample, for a missing image, label or metadata, or undecodable content.
    """
    where = sample_place(shard, key, index)
    try:
        record = decode_members(members, index, where)
    except (SampleRecordError, ShardReadError) as error:
        raise StreamError(str(error)) from None
    metadata = {**record.metadata, "key": key, "shard": shard}
    try:
        image = decode_image(record.image, image_format)
    except (OSError, ValueError) as error:
        raise StreamError(f"{where}: {record.image_member} cannot be decoded ({error})") from None
    return StreamSample(image, record.label, metadata)
