"""Rendering: a :class:`~ccc.stream.spec.SampleSpec` plus the source image's bytes → JPEG bytes.

Pixels only, no file access and no calibration table: the caller reads the source file. The
pipeline is the public generator's, with every random choice taken from the spec:

1. :func:`decode_source`: decode with PIL and convert to RGB (as the public ``pil_loader``);
2. crop ``spec.crop_box`` and resize to 224×224 (the size of ``spec.corruption_set``: 32×32 for ``cifar``,
   64×64 for ``tinyimagenet`` and ``imagenet64``) with PIL's bilinear filter (exactly what torchvision's
   ``RandomResizedCrop`` does to a PIL image), then mirror if ``spec.flip``; with ``spec.resize``
   (the ``center`` crop) the whole image is first resized to that size with the same filter, and the
   224×224 box is then cut from it unresized (exactly torchvision's ``Resize(256)`` then
   ``CenterCrop(224)`` on a PIL image, ImageNet-C's preprocessing);
3. :func:`ccc.corruptions.corrupt_pair` with ``n1, s1, n2, s2``, ``numpy.random.default_rng(spec.seed)``
   and the sample's corruption set;
4. encode JPEG quality 85 with ``optimize=True`` (Pillow, as the public code), or, for a stream whose
   ``image_encoding`` is ``png``, a lossless PNG (:func:`encode_png`).

PIL's resize and encoders give the same bytes on every x86-64 CPU for the same Pillow version
(tensor resizes do not), which is what makes shards byte-reproducible.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from PIL import Image

from ccc.corruptions import corrupt_pair, get_corruption_set
from ccc.stream.spec import DEFAULT_CORRUPTION_SET, DEFAULT_IMAGE_ENCODING, IMAGE_ENCODINGS, SampleSpec

__all__ = [
    "DEFAULT_IMAGE_ENCODING",
    "DEFAULT_RENDER_PRECISION",
    "IMAGE_ENCODINGS",
    "JPEG_OPTIMIZE",
    "JPEG_QUALITY",
    "OUTPUT_SIZE",
    "RENDER_PRECISIONS",
    "RenderedSample",
    "SourceImageMismatchError",
    "check_render_precision",
    "check_source_size",
    "crop_resize_flip",
    "decode_jpeg",
    "decode_source",
    "encode_image",
    "encode_jpeg",
    "encode_png",
    "jpeg_round_trip",
    "render_pixels",
    "render_sample",
]

OUTPUT_SIZE = 224
"""Side of the rendered square image in pixels."""

JPEG_QUALITY = 85
"""JPEG quality of the rendered image (the public generator's)."""

JPEG_OPTIMIZE = True
"""Pillow's optimised Huffman tables, as the public generator."""

_PNG_COMPRESS_LEVEL = 0
"""zlib level of :func:`encode_png`: stored blocks, whose bytes depend on no compressor heuristics."""

DEFAULT_RENDER_PRECISION = "float64"
"""The torch backend's default working float precision (the CPU path's arithmetic)."""

RENDER_PRECISIONS = (DEFAULT_RENDER_PRECISION, "float32")
"""Working float precisions of the torch backend (:func:`ccc.render_torch.render_batch`), the default first:
``float64`` computes in float64 where the CPU path's bytes need it (equal bytes given the same draws),
``float32`` runs those steps in float32 (faster on GPUs, equal in accuracy within the measured bounds of
``docs/fidelity.md``). Named here, not in the torch package, so that torch-free callers can check it."""


def check_render_precision(precision: str) -> str:
    """``precision`` if it is one of :data:`RENDER_PRECISIONS`.

    Raises:
        ValueError: one line naming the valid values, for another value.
    """
    if precision not in RENDER_PRECISIONS:
        raise ValueError(f"render precision must be one of {', '.join(RENDER_PRECISIONS)}, got {precision!r}")
    return precision


class SourceImageMismatchError(ValueError):
    """The source image is not the one the plan was made for (its size differs)."""


@dataclass(frozen=True)
class RenderedSample:
    """One rendered sample: its plan entry and the encoded image.

    Attributes:
        spec: the plan entry the image was rendered from.
        image: the encoded RGB image (224×224 for CCC).
        encoding: the encoding of ``image``, one of :data:`IMAGE_ENCODINGS`.
    """

    spec: SampleSpec
    image: bytes
    encoding: str = DEFAULT_IMAGE_ENCODING


def crop_resize_flip(
    image: Image.Image, crop_box: tuple[int, int, int, int], flip: bool, size: int = OUTPUT_SIZE
) -> NDArray[np.uint8]:
    """Crop ``crop_box`` (left, top, right, bottom; pixels) from an RGB PIL image, resize to
    ``size`` × ``size`` pixels (PIL bilinear; the stream's 224 by default), mirror if ``flip``.

    A box of that size is not resampled (PIL's resize to the same size is a copy). Returns a uint8
    array ``size × size × 3``.
    """
    resized = image.crop(crop_box).resize((size, size), Image.Resampling.BILINEAR)
    if flip:
        resized = resized.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(resized)


def decode_source(spec: SampleSpec, source: bytes) -> Image.Image:
    """The source image of ``spec`` decoded from its file's bytes ``source``: step 1 of :func:`render_sample`
    (PIL, converted to RGB as the public ``pil_loader``), the one decoder of both rendering backends.

    Returns:
        a loaded RGB PIL image of ``spec.source_size`` (width, height) pixels; ``numpy.asarray`` of it is
        uint8 (height, width, 3).

    Raises:
        SourceImageMismatchError: if the image's size is not ``spec.source_size``.
        PIL.UnidentifiedImageError, OSError: if ``source`` cannot be decoded.
    """
    with Image.open(io.BytesIO(source)) as opened:
        check_source_size(spec, opened.size)
        return opened.convert("RGB")


def check_source_size(spec: SampleSpec, size: tuple[int, int]) -> None:
    """Check that a source image of ``size`` (width, height; pixels) is the one ``spec`` was planned on.

    Raises:
        SourceImageMismatchError: if ``size`` is not ``spec.source_size``.
    """
    if tuple(size) != tuple(spec.source_size):
        raise SourceImageMismatchError(
            f"source image {spec.source_path} must be {spec.source_size[0]}x{spec.source_size[1]} pixels "
            f"as when the stream was planned, got {size[0]}x{size[1]}"
        )


def render_pixels(spec: SampleSpec, source: bytes) -> NDArray[np.uint8]:
    """The corrupted uint8 image of ``spec`` before encoding (steps 1–3 of :func:`render_sample`): 224×224×3, or
    the size of ``spec.corruption_set`` (32×32×3 for ``cifar``), corrupted with that set's parameters.

    Raises:
        SourceImageMismatchError: if the image's size is not ``spec.source_size``.
        PIL.UnidentifiedImageError, OSError: if ``source`` cannot be decoded.
    """
    image = decode_source(spec, source)
    if spec.resize is not None:
        image = image.resize(tuple(spec.resize), Image.Resampling.BILINEAR)
    corruption_set = spec.corruption_set or DEFAULT_CORRUPTION_SET
    size = get_corruption_set(corruption_set).image_size
    cropped = crop_resize_flip(image, spec.crop_box, spec.flip, size)
    rng = np.random.default_rng(spec.seed)
    return corrupt_pair(cropped, spec.n1, spec.s1, spec.n2, spec.s2, rng=rng, corruption_set=corruption_set)


def encode_jpeg(image: NDArray[np.uint8]) -> bytes:
    """JPEG bytes of a uint8 RGB image with the stream's settings (quality 85, optimised Huffman tables, PIL)."""
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=JPEG_QUALITY, optimize=JPEG_OPTIMIZE)
    return buffer.getvalue()


def encode_png(image: NDArray[np.uint8]) -> bytes:
    """Lossless PNG bytes of a uint8 RGB image (H×W×3): Pillow, deflate level 0 (stored), no metadata,
    so the bytes follow from the pixels alone; 3·H·W + about 100 bytes (3,170 at 32×32)."""
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG", compress_level=_PNG_COMPRESS_LEVEL)
    return buffer.getvalue()


def encode_image(image: NDArray[np.uint8], image_encoding: str = DEFAULT_IMAGE_ENCODING) -> bytes:
    """A uint8 RGB image (H×W×3) as a stream stores it: :func:`encode_jpeg` or :func:`encode_png`."""
    if image_encoding not in IMAGE_ENCODINGS:
        raise ValueError(f"image_encoding must be one of {', '.join(IMAGE_ENCODINGS)}, got {image_encoding!r}")
    return encode_png(image) if image_encoding == "png" else encode_jpeg(image)


def jpeg_round_trip(image: NDArray[np.uint8]) -> NDArray[np.uint8]:
    """The stream's last step as pixels: :func:`encode_jpeg` then :func:`decode_jpeg`, uint8 H×W×3 → H×W×3
    (what a model reading the stream's shard sees for ``image``)."""
    return np.asarray(decode_jpeg(encode_jpeg(image)))


def decode_jpeg(jpeg: bytes) -> Image.Image:
    """Decode JPEG (or any PIL-readable) bytes into a loaded RGB PIL image.

    Raises:
        PIL.UnidentifiedImageError, OSError, ValueError: undecodable bytes.
    """
    with Image.open(io.BytesIO(jpeg)) as opened:
        image = opened.convert("RGB") if opened.mode != "RGB" else opened
        image.load()
        return image.copy() if image is opened else image


def render_sample(spec: SampleSpec, source: bytes, image_encoding: str = DEFAULT_IMAGE_ENCODING) -> RenderedSample:
    """Render ``spec`` from the encoded source image ``source`` (the file's bytes), encoded as the
    stream's ``image_encoding`` (one of :data:`IMAGE_ENCODINGS`).

    Raises:
        SourceImageMismatchError: if the image's size is not ``spec.source_size`` (the file changed
            since the plan was made).
        PIL.UnidentifiedImageError, OSError: if ``source`` cannot be decoded.
    """
    return RenderedSample(spec, encode_image(render_pixels(spec, source), image_encoding), image_encoding)
