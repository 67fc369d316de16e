"""Writing the demo images as an ImageNet-layout folder in the cache, once, atomically.

Two worlds (:data:`DEMO_WORLDS`): ``"imagenet"`` (320×240 JPEGs) and ``"cifar"`` (32×32 PNGs). A
world's folder is ``<cache>/demo/<version>/`` (``<cache>`` = :func:`ccc.cache.default_cache_dir`,
i.e. ``$CCC_CACHE_DIR``, ``$XDG_CACHE_HOME/ccc`` or ``~/.cache/ccc``; ``<version>``
:data:`DEMO_IMAGES_VERSION` or :data:`DEMO_CIFAR_IMAGES_VERSION`) holding
``<class>/<class>_<k>.JPEG`` (``.png``) for the 16 classes and a ``demo-images.json`` record (world,
count, seed, sha256 of every file's name and bytes). It is built into a temporary sibling folder and renamed into
place when complete, so a reader never sees half a folder and two processes building at once both
end with the same complete folder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ccc.cache import default_cache_dir
from ccc.demo.images import CIFAR_GEOMETRY, CLASS_NAMES, IMAGENET_GEOMETRY, DemoGeometry, encode_jpeg, render_demo_image
from ccc.render import encode_png
from ccc.validation import check_non_negative_int, check_positive_int

logger = logging.getLogger(__name__)

DEMO_IMAGES_VERSION = "images-v1"
"""Name of the ``imagenet`` world's cached folder; changes whenever the generator's output changes."""

DEMO_CIFAR_IMAGES_VERSION = "images-cifar-v1"
"""Name of the ``cifar`` world's cached folder; changes whenever the generator's output changes."""

DEMO_IMAGE_SEED = 20231
"""Root seed of the demo images."""

DEMO_IMAGES_PER_CLASS = 150
"""Images per class in the demo folder (16 classes → 2,400 images)."""

DEMO_SOURCE_IMAGES = len(CLASS_NAMES) * DEMO_IMAGES_PER_CLASS
"""Images in the demo folder (16 classes × 150 = 2,400): a demo ``cin-c`` stream's images per corruption by default."""

RECORD_NAME = "demo-images.json"
"""The completion record written at the folder's root (not an image, ignored by the index)."""

SPLITS = {"val": 0, "train": 1}
"""Image splits → their number, added to the world's :attr:`DemoWorld.split_offset` to give the first
element of the seed's spawn key. The folder is ``val``; the demo models are trained on ``train``
images that are never written to the folder."""

EXPECTED_INDEX_SHA256 = "cdf3837e5d20f9aee7f10821093a1d259b13c2e4018b0aeeada0a585a4295f1e"
"""``ccc.stream.sources.ImageIndex.checksum()`` of the ``imagenet`` world's demo folder (its sorted file names)."""

EXPECTED_CONTENT_SHA256 = "96062c75144e229467b717896099999b88f40b40aed640d8462f2a03c3e367c6"
"""sha256 of the ``imagenet`` world's reference build (see :func:`content_checksum`), numpy 2.4 and
Pillow 13 on x86-64; another value means other bytes (e.g. another libjpeg), which is logged, not an error."""

EXPECTED_CIFAR_INDEX_SHA256 = "818d527ca93104c241bfbf7bde52bc5fc83f0284e87dfc8e22b2be763d230f14"
"""``ccc.stream.sources.ImageIndex.checksum()`` of the ``cifar`` world's demo folder (its sorted file names)."""

EXPECTED_CIFAR_CONTENT_SHA256 = "ed5ac0121b869ebec63780eaf2052c8e267649a7344fb27d51f7a5727681b78b"
"""sha256 of the ``cifar`` world's reference build (see :func:`content_checksum`): PNGs with stored
(uncompressed) deflate blocks, so the bytes follow from the pixels alone; another value is logged."""


class DemoImagesError(ValueError):
    """A demo image request or folder is invalid (bad count, seed, split, world, or a damaged folder)."""


@dataclass(frozen=True)
class DemoWorld:
    """One demo world: how its images look, where they are cached and how they are stored.

    Attributes:
        name: the world's name, a corruption set's (``"imagenet"``, ``"cifar"``).
        geometry: the images' sizes (:class:`ccc.demo.images.DemoGeometry`).
        version: the cached folder's name under ``<cache>/demo``.
        split_offset: added to a split's number (:data:`SPLITS`) as the first element of every image's
            seed spawn key, so that two worlds never draw the same numbers.
        extension: the image files' extension, without the dot.
        encode: uint8 H×W×3 RGB image → file bytes.
        expected_index_sha256, expected_content_sha256: the reference build's checksums.
    """

    name: str
    geometry: DemoGeometry
    version: str
    split_offset: int
    extension: str
    encode: Callable[[NDArray[np.uint8]], bytes]
    expected_index_sha256: str
    expected_content_sha256: str


_WORLDS = {
    world.name: world
    for world in (
        DemoWorld(
            "imagenet",
            IMAGENET_GEOMETRY,
            DEMO_IMAGES_VERSION,
            0,
            "JPEG",
            encode_jpeg,
            EXPECTED_INDEX_SHA256,
            EXPECTED_CONTENT_SHA256,
        ),
        DemoWorld(
            "cifar",
            CIFAR_GEOMETRY,
            DEMO_CIFAR_IMAGES_VERSION,
            len(SPLITS),
            "png",
            encode_png,
            EXPECTED_CIFAR_INDEX_SHA256,
            EXPECTED_CIFAR_CONTENT_SHA256,
        ),
    )
}

DEMO_WORLDS: tuple[str, ...] = tuple(_WORLDS)
"""Names of the demo worlds: ``"imagenet"`` (320×240 JPEGs) and ``"cifar"`` (32×32 PNGs)."""


def get_demo_world(name: str) -> DemoWorld:
    """The :class:`DemoWorld` called ``name`` (one of :data:`DEMO_WORLDS`); DemoImagesError otherwise."""
    if name not in _WORLDS:
        raise DemoImagesError(f"unknown demo world {name!r}; available: {', '.join(DEMO_WORLDS)}")
    return _WORLDS[name]


@dataclass(frozen=True)
class DemoImageSpec:
    """Which demo images: ``images_per_class`` (≥ 1) of each class, from ``seed`` (≥ 0), of ``split``,
    in ``world`` (one of :data:`DEMO_WORLDS`)."""

    images_per_class: int = DEMO_IMAGES_PER_CLASS
    seed: int = DEMO_IMAGE_SEED
    split: str = "val"
    world: str = "imagenet"

    def __post_init__(self) -> None:
        check_positive_int("images_per_class", self.images_per_class, error=DemoImagesError)
        check_non_negative_int("seed", self.seed, error=DemoImagesError)
        if self.split not in SPLITS:
            raise DemoImagesError(f"split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        get_demo_world(self.world)

    def items(self) -> Iterator[tuple[int, int]]:
        """(class index, image index within the class) of every image, in folder order."""
        for class_index in range(len(CLASS_NAMES)):
            for image_index in range(self.images_per_class):
                yield class_index, image_index


def file_name(class_index: int, image_index: int, world: str = "imagenet") -> str:
    """Relative path ``<class>/<class>_<image_index:05d>.<extension>`` of one image of ``world``
    (``.JPEG`` for ``imagenet``, ``.png`` for ``cifar``)."""
    name = CLASS_NAMES[class_index]
    return f"{name}/{name}_{image_index:05d}.{get_demo_world(world).extension}"


def demo_image_generator(spec: DemoImageSpec, class_index: int, image_index: int) -> np.random.Generator:
    """The generator all of one image's draws come from: ``default_rng(SeedSequence(spec.seed,
    spawn_key=(split_offset + SPLITS[spec.split], class_index, image_index)))``, class_index in 0–15,
    image_index ≥ 0; the world's ``split_offset`` keeps the worlds' draws apart."""
    key = (get_demo_world(spec.world).split_offset + SPLITS[spec.split], class_index, image_index)
    return np.random.default_rng(np.random.SeedSequence(spec.seed, spawn_key=key))


def render_demo_file(spec: DemoImageSpec, class_index: int, image_index: int) -> bytes:
    """File bytes (JPEG or PNG, as the world stores them) of image ``image_index`` (≥ 0) of class
    ``class_index`` (0–15) for ``spec`` (pure: same arguments, same bytes)."""
    world = get_demo_world(spec.world)
    generator = demo_image_generator(spec, class_index, image_index)
    return world.encode(render_demo_image(class_index, generator, world.geometry))


def _render_chunk(spec: DemoImageSpec, items: list[tuple[int, int]]) -> list[bytes]:
    return [render_demo_file(spec, class_index, image_index) for class_index, image_index in items]


def render_demo_files(spec: DemoImageSpec, workers: int = 1) -> Iterator[tuple[int, int, bytes]]:
    """(class index, image index, file bytes) of every image of ``spec`` in folder order.

    ``workers`` (≥ 1) processes render chunks of 40 images; the bytes do not depend on it. Worker
    processes are spawned, not forked (forking a process that runs threads, e.g. torch's, is unsafe).
    """
    check_positive_int("workers", workers, error=DemoImagesError)
    items = list(spec.items())
    chunks = [items[start : start + 40] for start in range(0, len(items), 40)]
    if workers == 1:
        results: Iterator[list[bytes]] = (_render_chunk(spec, chunk) for chunk in chunks)
        for chunk, encoded in zip(chunks, results):
            for (class_index, image_index), data in zip(chunk, encoded):
                yield class_index, image_index, data
        return
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for chunk, encoded in zip(chunks, pool.map(_render_chunk, [spec] * len(chunks), chunks)):
            for (class_index, image_index), data in zip(chunk, encoded):
                yield class_index, image_index, data


def content_checksum(root: str | os.PathLike[str], world: str = "imagenet") -> str:
    """sha256 (hex) over the sorted ``<class>/<file>`` paths of ``root``'s images of ``world`` and each file's bytes."""
    folder = Path(root)
    digest = hashlib.sha256()
    pattern = f"*/*.{get_demo_world(world).extension}"
    for path in sorted(folder.glob(pattern), key=lambda item: item.relative_to(folder).as_posix()):
        data = path.read_bytes()
        digest.update(f"{path.relative_to(folder).as_posix()} {len(data)}\n".encode())
        digest.update(data)
    return digest.hexdigest()


def write_demo_folder(root: str | os.PathLike[str], spec: DemoImageSpec = DemoImageSpec(), workers: int = 1) -> Path:
    """Write the images of ``spec`` into the new folder ``root`` (ImageNet layout) with its record; returns ``root``.

    Raises DemoImagesError if ``root`` already exists.
    """
    folder = Path(root)
    if folder.exists():
        raise DemoImagesError(f"demo image folder {folder} already exists; remove it or choose another path")
    folder.mkdir(parents=True)
    for name in CLASS_NAMES:
        (folder / name).mkdir()
    digest = hashlib.sha256()
    for class_index, image_index, data in render_demo_files(spec, workers):
        relative = file_name(class_index, image_index, spec.world)
        (folder / relative).write_bytes(data)
        digest.update(f"{relative} {len(data)}\n".encode())
        digest.update(data)
    record = {
        "format": "ccc-demo-images",
        "world": spec.world,
        "version": get_demo_world(spec.world).version,
        "classes": list(CLASS_NAMES),
        "images_per_class": spec.images_per_class,
        "seed": spec.seed,
        "split": spec.split,
        "content_sha256": digest.hexdigest(),
    }
    (folder / RECORD_NAME).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return folder


def read_record(root: str | os.PathLike[str]) -> dict[str, object]:
    """The ``demo-images.json`` record of a demo folder; DemoImagesError if absent or unreadable."""
    path = Path(root) / RECORD_NAME
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise DemoImagesError(f"{path} is missing or unreadable ({error}); delete {Path(root)} to rebuild it") from None
    if not isinstance(record, dict) or record.get("format") != "ccc-demo-images":
        raise DemoImagesError(f"{path} is not a ccc demo image record; delete {Path(root)} to rebuild it")
    return record


def default_demo_folder(cache_dir: str | os.PathLike[str] | None = None, world: str = "imagenet") -> Path:
    """Where the images of ``world`` (one of :data:`DEMO_WORLDS`) live: ``<cache>/demo/<version>``
    (:data:`DEMO_IMAGES_VERSION`, :data:`DEMO_CIFAR_IMAGES_VERSION`; not built by this call)."""
    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return base / "demo" / get_demo_world(world).version


def ensure_demo_folder(
    cache_dir: str | os.PathLike[str] | None = None, workers: int | None = None, world: str = "imagenet"
) -> Path:
    """The demo image folder of ``world``, built on first use; returns its path.

    Args:
        cache_dir: cache folder; None for :func:`ccc.cache.default_cache_dir`.
        workers: rendering processes, ≥ 1; None for the CPU count (at most 4).
        world: ``"imagenet"`` (2,400 JPEGs of 320×240, about 20–40 s on 2 cores) or ``"cifar"``
            (2,400 PNGs of 32×32, a few seconds).

    A complete folder is recognised by its record; a folder without one (an interrupted build of an
    older version) is refused with a message saying to delete it.
    """
    demo_world = get_demo_world(world)
    folder = default_demo_folder(cache_dir, world)
    if folder.is_dir():
        read_record(folder)
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".partial", dir=folder.parent))
    try:
        logger.info("building the demo images in %s (once)", folder)
        spec = DemoImageSpec(world=world)
        staging = write_demo_folder(temporary / "images", spec, workers=workers or min(4, os.cpu_count() or 1))
        record = read_record(staging)
        if record["content_sha256"] != demo_world.expected_content_sha256:
            logger.warning(
                "%s demo images differ from the reference build (content sha256 %s, expected %s): "
                "other numpy/Pillow versions; the committed calibration may fit them slightly less well",
                world,
                record["content_sha256"],
                demo_world.expected_content_sha256,
            )
        try:
            os.rename(staging, folder)
        except OSError:
            if not (folder / RECORD_NAME).is_file():
                raise
            logger.info("another process finished %s first; using it", folder)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return folder
