"""Applying a registered corruption: one image (:func:`corrupt`), a CCC pair (:func:`corrupt_pair`),
a batch at one severity (:func:`corrupt_batch`), each with the parameters of a corruption set
(:mod:`ccc.corruptions.sets`, ImageNet's by default); re-exported by :mod:`ccc.corruptions`."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from numpy.typing import NDArray

from ._random import RngLike, as_random_source
from ._severity import validate_severity
from .registry import Corruption, canonical_name, get_corruption
from .sets import CorruptionSet, get_corruption_set

MIN_IMAGE_SIDE = 32
"""Smallest accepted height and width in pixels."""


DEFAULT_CORRUPTION_SET = "imagenet"
"""The set :func:`corrupt` and its siblings use unless told otherwise: ImageNet-C at 224×224."""


def _validate_image(image: object, corruption_set: CorruptionSet, parameter: str = "image") -> NDArray[np.uint8]:
    if not isinstance(image, np.ndarray):
        raise ValueError(f"{parameter} must be a numpy uint8 array of shape HxWx3, got {type(image).__name__}")
    if image.dtype != np.uint8:
        raise ValueError(f"{parameter} must have dtype uint8 (values 0..255), got {image.dtype}")
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"{parameter} must have shape HxWx3 (RGB), got {image.shape}")
    if min(image.shape[:2]) < MIN_IMAGE_SIDE:
        raise ValueError(
            f"{parameter} must be at least {MIN_IMAGE_SIDE}x{MIN_IMAGE_SIDE} pixels, got {image.shape[:2]}"
        )
    corruption_set.check_image_size(image.shape[0], image.shape[1], parameter)
    return image


def _to_uint8(values: NDArray[np.generic]) -> NDArray[np.uint8]:
    """The reference's ``np.uint8(x)`` on values already in [0, 255]: truncation, not rounding."""
    if values.dtype == np.uint8:
        return np.ascontiguousarray(values)
    return values.astype(np.uint8)


def _apply(
    image: NDArray[np.uint8], entry: Corruption, severity: float, rng: RngLike, corruption_set: CorruptionSet
) -> NDArray[np.uint8]:
    if severity == 0.0:
        return image.copy()
    parameters = corruption_set.parameters(entry, severity)
    settings = corruption_set.function_settings(entry)
    return _to_uint8(entry.function(image, parameters, rng, **settings))


def corrupt(
    image: NDArray[np.uint8],
    name: str,
    severity: float,
    rng: RngLike = None,
    corruption_set: str = DEFAULT_CORRUPTION_SET,
) -> NDArray[np.uint8]:
    """Apply corruption ``name`` at ``severity`` to ``image``.

    Args:
        image: uint8 array HxWx3 (RGB), H and W >= 32; not modified. The ``imagenet`` set accepts any
            such size (exact at 224×224); the other sets only their own size (32×32 for ``cifar``, 64×64
            for ``tinyimagenet`` and ``imagenet64``).
        name: a name of :data:`CORRUPTIONS` or :data:`HOLDOUT_CORRUPTIONS`, or an alias
            (``elastic_transform``, ``jpeg_compression``).
        severity: float in [0, 5]; 0 returns a copy of ``image``.
        rng: ``numpy.random.Generator``, int seed, ``None`` (fresh entropy) or a
            ``numpy.random.RandomState`` (legacy reference draw order).
        corruption_set: the parameters to use, a name of :func:`list_corruption_sets` (``imagenet``,
            ``cifar``, ``tinyimagenet``, ``imagenet64``).

    Returns:
        A new uint8 array of the same shape.

    Raises:
        ValueError: for a wrong image dtype/shape (or a size the set is not defined for), an unknown
            corruption or set name, or a severity that is not a finite number in [0, 5].
    """
    set_entry = get_corruption_set(corruption_set)
    image = _validate_image(image, set_entry)
    entry = get_corruption(name)
    severity = validate_severity(severity)
    return _apply(image, entry, severity, as_random_source(rng), set_entry)


def corrupt_pair(
    image: NDArray[np.uint8],
    n1: str,
    s1: float,
    n2: str,
    s2: float,
    rng: RngLike = None,
    corruption_set: str = DEFAULT_CORRUPTION_SET,
) -> NDArray[np.uint8]:
    """CCC's composition: ``n1`` at severity ``s1``, then ``n2`` at ``s2`` on the uint8 result.

    A stage at severity 0 is skipped. Between the stages the float result is truncated to uint8,
    as the CCC generator does (``np.uint8``). Both stages draw from the same generator, stage one
    first, and use the same ``corruption_set``. Arguments as in :func:`corrupt`; ``n1`` and ``n2``
    may be equal.
    """
    set_entry = get_corruption_set(corruption_set)
    image = _validate_image(image, set_entry)
    first = get_corruption(canonical_name(n1, "n1"))
    second = get_corruption(canonical_name(n2, "n2"))
    s1 = validate_severity(s1, "s1")
    s2 = validate_severity(s2, "s2")
    source = as_random_source(rng)
    return _apply(_apply(image, first, s1, source, set_entry), second, s2, source, set_entry)


def corrupt_batch(
    images: NDArray[np.uint8],
    name: str,
    severity: float,
    rngs: Sequence[RngLike] | None = None,
    corruption_set: str = DEFAULT_CORRUPTION_SET,
) -> NDArray[np.uint8]:
    """Apply one corruption at one severity to a batch, image ``k`` drawing from ``rngs[k]``.

    The result equals ``[corrupt(images[k], name, severity, rngs[k]) for k in range(N)]`` bit for bit
    (the same functions run per image; validation, parameter interpolation and cached kernels are
    shared across the batch).

    Args:
        images: uint8 array NxHxWx3.
        name, severity, corruption_set: as in :func:`corrupt`.
        rngs: one generator or seed per image (length N); ``None`` gives fresh entropy to each image.

    Returns:
        A new uint8 array NxHxWx3.
    """
    if not isinstance(images, np.ndarray) or images.ndim != 4:
        shape = getattr(images, "shape", type(images).__name__)
        raise ValueError(f"images must be a numpy uint8 array of shape NxHxWx3, got {shape}")
    set_entry = get_corruption_set(corruption_set)
    if len(images) == 0:
        return images.copy()
    _validate_image(images[0], set_entry, "images[0]")
    entry = get_corruption(name)
    severity = validate_severity(severity)
    if rngs is None:
        rngs = [None] * len(images)
    if len(rngs) != len(images):
        raise ValueError(f"rngs must hold one generator per image ({len(images)}), got {len(rngs)}")
    output = np.empty_like(images)
    if severity == 0.0:
        output[...] = images
        return output
    parameters = set_entry.parameters(entry, severity)
    settings = set_entry.function_settings(entry)
    for index, (image, rng) in enumerate(zip(images, rngs)):
        output[index] = entry.function(image, parameters, as_random_source(rng, f"rngs[{index}]"), **settings)
    return output
