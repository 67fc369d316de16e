"""The demo world: a small, self-contained stand-in for ImageNet + ResNet-50, clearly not CCC-on-ImageNet.

It lets the whole pipeline (calibrate → generate → load → evaluate test-time adaptation) run on a
fresh machine without ImageNet, pretrained weights or a GPU:

- :func:`demo_image_folder`: 2,400 procedural images (16 classes = 4 patterns × 4 colours,
  320×240 or 240×320 JPEGs; or, in the ``cifar`` world, 32×32 PNGs) in the ImageNet folder layout,
  built on first use into the cache folder in well under a minute, byte-reproducible
  (:mod:`ccc.demo.images`, :mod:`ccc.demo.folder`);
- :func:`demo_model`, :func:`demo_model_cifar`: small BatchNorm CNNs trained on other images of the
  same world by ``scripts/train_demo_model.py``, weights shipped in this package with their sha256
  checked (:mod:`ccc.demo.model`); usable as the model factories ``"ccc.demo:demo_model"`` and
  ``"ccc.demo:demo_model_cifar"``;
- :func:`demo_calibration_path`: its calibration table ``calibration/demo.npz``, with difficulty
  presets chosen for this world (:mod:`ccc.demo.calibration`).

``docs/demo.md`` describes the classes, the model's accuracies and how the table was made.
Importing this package does not import torch; :func:`demo_model` and :func:`demo_model_cifar` do.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ccc.demo.calibration import DEMO_DIFFICULTY_PRESETS, demo_calibration_path, demo_table
from ccc.demo.demonstration import (
    DEMO_CIFAR_METHOD_OPTIONS,
    DEMO_DOMAIN_IMAGES,
    DEMO_METHOD_OPTIONS,
    DEMO_METHODS,
    DEMO_NUM_IMAGES,
    DEMO_SHARD_BYTES_PER_IMAGE,
    DEMO_SPEED,
)
from ccc.demo.folder import (
    DEMO_IMAGES_PER_CLASS,
    DEMO_SOURCE_IMAGES,
    DEMO_WORLDS,
    EXPECTED_CIFAR_INDEX_SHA256,
    EXPECTED_INDEX_SHA256,
    ensure_demo_folder,
    get_demo_world,
)
from ccc.demo.images import CLASS_NAMES, DEMO_CLASSES

if TYPE_CHECKING:
    from torch import nn

    from ccc.stream.spec import StreamSpec

__all__ = [
    "CLASS_NAMES",
    "DEMO_CIFAR_MODEL_NAME",
    "DEMO_MODEL_NAME",
    "DEMO_MODEL_NAMES",
    "DEMO_CLASSES",
    "DEMO_DIFFICULTY_PRESETS",
    "DEMO_DOMAIN_IMAGES",
    "DEMO_IMAGES_PER_CLASS",
    "DEMO_METHODS",
    "DEMO_CIFAR_METHOD_OPTIONS",
    "DEMO_METHOD_OPTIONS",
    "DEMO_NUM_IMAGES",
    "DEMO_SHARD_BYTES_PER_IMAGE",
    "DEMO_SOURCE_IMAGES",
    "DEMO_SPEED",
    "DEMO_WORLDS",
    "EXPECTED_CIFAR_INDEX_SHA256",
    "EXPECTED_INDEX_SHA256",
    "count_source_images",
    "demo_calibration_path",
    "demo_image_folder",
    "demo_model",
    "demo_model_cifar",
    "demo_model_name",
    "demo_table",
    "demo_world_of",
    "is_demo_stream",
    "world_run_name",
]

DEMO_MODEL_NAME = "ccc.demo:demo_model"
"""The demo model as a model name (a ``module:function`` factory of ``ccc.models.ModelSpec``): what
every command evaluates by default on a demo-world stream."""

DEMO_CIFAR_MODEL_NAME = "ccc.demo:demo_model_cifar"
"""The 32×32 demo model as a model name (a ``module:function`` factory of ``ccc.models.ModelSpec``)."""

DEMO_MODEL_NAMES = {"imagenet": DEMO_MODEL_NAME, "cifar": DEMO_CIFAR_MODEL_NAME}
"""Each demo world's model name, by the world's corruption set (:data:`DEMO_WORLDS`)."""


def demo_image_folder(cache_dir: str | os.PathLike[str] | None = None, corruption_set: str = "imagenet") -> Path:
    """Path of the demo image folder of a world, building it on first use.

    Args:
        cache_dir: cache folder; None for :func:`ccc.cache.default_cache_dir` (``$CCC_CACHE_DIR``,
            else ``$XDG_CACHE_HOME/ccc``, else ``~/.cache/ccc``).
        corruption_set: the world, one of :data:`DEMO_WORLDS`: ``"imagenet"``
            (``<cache_dir>/demo/images-v1/<class>/*.JPEG``, 320×240 or 240×320) or ``"cifar"``
            (``<cache_dir>/demo/images-cifar-v1/<class>/*.png``, 32×32).

    The first call renders 2,400 images (imagenet: about 35 s of CPU, spread over up to 4 processes;
    cifar: about 6 s); later calls only check the folder's completion record. Raises
    ``ccc.demo.folder.DemoImagesError`` naming the worlds for another ``corruption_set``.
    """
    return ensure_demo_folder(cache_dir, world=corruption_set)


def count_source_images(
    imagenet: str | os.PathLike[str] | None, demo: bool, classes: Sequence[str] | None = None
) -> int:
    """Source images a stream draws from, listed without reading one: the demo world's 2,400 when
    ``demo``, else those of the ImageNet-layout folder ``imagenet`` (None: ``$CCC_IMAGENET``), only of
    ``classes`` when given. Raises ``ccc.stream.sources.ImageFolderError`` for a missing folder."""
    if demo:
        return DEMO_SOURCE_IMAGES
    from ccc.stream.sources import index_image_folder, resolve_imagenet_folder

    return len(
        index_image_folder(resolve_imagenet_folder(imagenet), classes=classes, check_images=False, progress=False)
    )


def demo_model() -> nn.Module:
    """The trained demo classifier, in evaluation mode on the CPU, its weights' sha256 checked.

    Input: float images N×3×H×W in [0, 1] (224×224 in the benchmark; normalisation is inside).
    Output: N×16 logits in :data:`CLASS_NAMES` order. The factory behind the model name
    ``"ccc.demo:demo_model"``. Raises :class:`ccc.demo.model.WeightsChecksumError` if the shipped
    weights file was altered.
    """
    from ccc.demo.model import demo_model as build

    return build()


def demo_model_cifar() -> nn.Module:
    """The trained 32×32 demo classifier, in evaluation mode on the CPU, its weights' sha256 checked.

    Input: float images N×3×32×32 in [0, 1] (normalisation is inside). Output: N×16 logits in
    :data:`CLASS_NAMES` order. The factory behind :data:`DEMO_CIFAR_MODEL_NAME`
    (``"ccc.demo:demo_model_cifar"``). Raises :class:`ccc.demo.model.WeightsChecksumError` if the
    shipped weights file was altered.
    """
    from ccc.demo.model import demo_model_cifar as build

    return build()


def demo_model_name(corruption_set: str = "imagenet") -> str:
    """The model name of the demo world of ``corruption_set`` (:data:`DEMO_WORLDS`): :data:`DEMO_MODEL_NAME`
    or :data:`DEMO_CIFAR_MODEL_NAME`; ValueError naming the worlds for another set."""
    demo_table(corruption_set)
    return DEMO_MODEL_NAMES[corruption_set]


def demo_world_of(spec: StreamSpec) -> str | None:
    """The corruption set of the demo world whose images the stream ``spec`` was rendered from (its source
    index checksum is that world's folder's), or None for a stream of other images."""
    for world in DEMO_WORLDS:
        if spec.source_index_checksum == get_demo_world(world).expected_index_sha256:
            return world
    return None


def is_demo_stream(spec: StreamSpec) -> bool:
    """True if the stream ``spec`` was rendered from a demo world's images (:func:`demo_world_of`), i.e. its
    labels are the 16 demo classes and that world's demo model fits it."""
    return demo_world_of(spec) is not None


def world_run_name(
    target_accuracy: float,
    speed: int,
    seed: int,
    num_images: int,
    demo: bool,
    image_encoding: str | None = None,
    corruption_set: str | None = None,
    crop: str | None = None,
) -> str:
    """The default run folder name of a ``ccc`` stream in its world (``ccc-generate``'s, and a
    ``ccc-render:`` stream's name): :func:`ccc.stream.spec.run_name`, prefixed ``demo_`` for the demo
    world, whose default length (:data:`DEMO_NUM_IMAGES`) is then not named; ``num_images`` >= 1;
    ``image_encoding``, ``corruption_set`` and ``crop`` as :func:`ccc.stream.spec.run_name` (None: the defaults)."""
    from ccc.stream.spec import DEFAULT_CORRUPTION_SET, PAPER_NUM_IMAGES, run_name

    default_images = DEMO_NUM_IMAGES if demo else PAPER_NUM_IMAGES
    corruption_set = corruption_set or DEFAULT_CORRUPTION_SET
    name = run_name(target_accuracy, speed, seed, num_images, default_images, image_encoding, corruption_set, crop)
    return ("demo_" if demo else "") + name
