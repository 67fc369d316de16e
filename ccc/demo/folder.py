"""Writing the demo images as an ImageNet-layout folder in the cache, once, atomically.

The folder is ``<cache>/demo/<DEMO_IMAGES_VERSION>/`` (``<cache>`` = :func:`ccc.cache.default_cache_dir`,
i.e. ``$CCC_CACHE_DIR``, ``$XDG_CACHE_HOME/ccc`` or ``~/.cache/ccc``) holding
``<class>/<class>_<k>.JPEG`` for the 16 classes and a ``demo-images.json`` record (count, seed,
sha256 of every file's name and bytes). It is built into a temporary sibling folder and renamed into
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
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ccc.cache import default_cache_dir
from ccc.demo.images import CLASS_NAMES, encode_jpeg, render_demo_image
from ccc.validation import check_non_negative_int, check_positive_int

logger = logging.getLogger(__name__)

DEMO_IMAGES_VERSION = "images-v1"
"""Name of the cached folder; changes whenever the generator's output changes."""

DEMO_IMAGE_SEED = 20231
"""Root seed of the demo images."""

DEMO_IMAGES_PER_CLASS = 150
"""Images per class in the demo folder (16 classes → 2,400 images)."""

DEMO_SOURCE_IMAGES = len(CLASS_NAMES) * DEMO_IMAGES_PER_CLASS
"""Images in the demo folder (16 classes × 150 = 2,400): a demo ``cin-c`` stream's images per corruption by default."""

RECORD_NAME = "demo-images.json"
"""The completion record written at the folder's root (not an image, ignored by the index)."""

SPLITS = {"val": 0, "train": 1}
"""Image splits → the first element of the seed's spawn key. The folder is ``val``; the demo model
is trained on ``train`` images that are never written to the folder."""

EXPECTED_INDEX_SHA256 = "cdf3837e5d20f9aee7f10821093a1d259b13c2e4018b0aeeada0a585a4295f1e"
"""``ccc.stream.sources.ImageIndex.checksum()`` of the demo folder (its sorted file names)."""

EXPECTED_CONTENT_SHA256 = "96062c75144e229467b717896099999b88f40b40aed640d8462f2a03c3e367c6"
"""sha256 of the reference build's files (see :func:`content_checksum`), numpy 2.4 and Pillow 13 on
x86-64; another value means other bytes (e.g. another libjpeg), which is logged, not an error."""


class DemoImagesError(ValueError):
    """A demo image request or folder is invalid (bad count, seed, split, or a damaged folder)."""


@dataclass(frozen=True)
class DemoImageSpec:
    """Which demo images: ``images_per_class`` (≥ 1) of each class, from ``seed`` (≥ 0), of ``split``."""

    images_per_class: int = DEMO_IMAGES_PER_CLASS
    seed: int = DEMO_IMAGE_SEED
    split: str = "val"

    def __post_init__(self) -> None:
        check_positive_int("images_per_class", self.images_per_class, error=DemoImagesError)
        check_non_negative_int("seed", self.seed, error=DemoImagesError)
        if self.split not in SPLITS:
            raise DemoImagesError(f"split must be one of {', '.join(SPLITS)}, got {self.split!r}")

    def items(self) -> Iterator[tuple[int, int]]:
        """(class index, image index within the class) of every image, in folder order."""
        for class_index in range(len(CLASS_NAMES)):
            for image_index in range(self.images_per_class):
                yield class_index, image_index


def file_name(class_index: int, image_index: int) -> str:
    """Relative path ``<class>/<class>_<image_index:05d>.JPEG`` of one demo image."""
    name = CLASS_NAMES[class_index]
    return f"{name}/{name}_{image_index:05d}.JPEG"


def render_demo_jpeg(spec: DemoImageSpec, class_index: int, image_index: int) -> bytes:
    """JPEG bytes of image ``image_index`` of class ``class_index`` for ``spec`` (pure: same arguments, same bytes)."""
    seed = np.random.SeedSequence(spec.seed, spawn_key=(SPLITS[spec.split], class_index, image_index))
    return encode_jpeg(render_demo_image(class_index, np.random.default_rng(seed)))


def _render_chunk(spec: DemoImageSpec, items: list[tuple[int, int]]) -> list[bytes]:
    return [render_demo_jpeg(spec, class_index, image_index) for class_index, image_index in items]


def render_demo_jpegs(spec: DemoImageSpec, workers: int = 1) -> Iterator[tuple[int, int, bytes]]:
    """(class index, image index, JPEG bytes) of every image of ``spec`` in folder order.

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


def content_checksum(root: str | os.PathLike[str]) -> str:
    """sha256 (hex) over the sorted ``<class>/<file>`` paths of ``root`` and each file's bytes."""
    folder = Path(root)
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*/*.JPEG"), key=lambda item: item.relative_to(folder).as_posix()):
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
    for class_index, image_index, data in render_demo_jpegs(spec, workers):
        relative = file_name(class_index, image_index)
        (folder / relative).write_bytes(data)
        digest.update(f"{relative} {len(data)}\n".encode())
        digest.update(data)
    record = {
        "format": "ccc-demo-images",
        "version": DEMO_IMAGES_VERSION,
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


def default_demo_folder(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the demo images live: ``<cache>/demo/<DEMO_IMAGES_VERSION>`` (not built by this call)."""
    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return base / "demo" / DEMO_IMAGES_VERSION


def ensure_demo_folder(cache_dir: str | os.PathLike[str] | None = None, workers: int | None = None) -> Path:
    """The demo image folder, built on first use (about 20–40 s on 2 cores); returns its path.

    Args:
        cache_dir: cache folder; None for :func:`ccc.cache.default_cache_dir`.
        workers: rendering processes; None for the CPU count (at most 4).

    A complete folder is recognised by its record; a folder without one (an interrupted build of an
    older version) is refused with a message saying to delete it.
    """
    folder = default_demo_folder(cache_dir)
    if folder.is_dir():
        read_record(folder)
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".partial", dir=folder.parent))
    try:
        logger.info("building the demo images in %s (once)", folder)
        staging = write_demo_folder(temporary / "images", workers=workers or min(4, os.cpu_count() or 1))
        record = read_record(staging)
        if record["content_sha256"] != EXPECTED_CONTENT_SHA256:
            logger.warning(
                "demo images differ from the reference build (content sha256 %s, expected %s): "
                "other numpy/Pillow versions; the committed calibration may fit them slightly less well",
                record["content_sha256"],
                EXPECTED_CONTENT_SHA256,
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
