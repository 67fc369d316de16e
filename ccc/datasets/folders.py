"""A dataset as users hold it → an image folder of class sub-folders that every command reads.

``--dataset NAME[/SPLIT]:PATH`` names a dataset in its published on-disk form: ``cifar10`` and ``cifar100``
(torchvision's pickle batches, read by :func:`ccc.datasets.read_cifar`; split ``test`` by default) or
``tinyimagenet`` (the ``tiny-imagenet-200`` folder, :func:`ccc.datasets.index_tiny_imagenet`; split ``val`` by
default). :func:`dataset_image_folder` writes the split once into the cache as a folder of class sub-folders,
``<cache>/datasets/<name>-<split>-<checksum>/<class>/<file>``, so that the stream plan, rendering,
calibration and verification read it as they read an ImageNet folder:

- CIFAR images become lossless PNGs (:func:`ccc.render.encode_png`: the array's pixels exactly), named
  ``<position>.png`` by their position in the split (five digits) in a folder per class name; the class
  folders sort in label order (CIFAR's names are alphabetical; otherwise they are prefixed with the label);
- Tiny-ImageNet's JPEG files are copied byte for byte into a folder per WordNet id (the val images from
  ``val/images`` by their annotation).

The folder is written under a temporary name and renamed when complete (a killed build leaves no folder
under the final name); its name carries the content checksum of what was read, so another copy of the same
data reuses it and different data never does. ``dataset.json`` records what it was made from, and
``classes.txt`` (:data:`CLASS_LIST_NAME`) lists every class folder in label order, one per line: the explicit
class list (``--classes``) that keeps each label even when a class has no image in the split.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ccc.cache import default_cache_dir
from ccc.datasets.cifar import CIFAR_FORMATS, read_cifar
from ccc.datasets.tiny_imagenet import index_tiny_imagenet

logger = logging.getLogger(__name__)

__all__ = [
    "CLASS_LIST_NAME",
    "DATASET_SPLITS",
    "DatasetLocation",
    "DatasetLocationError",
    "dataset_image_folder",
    "parse_dataset",
]

DATASET_SPLITS: dict[str, tuple[str, ...]] = {
    **{name: ("test", "train") for name in CIFAR_FORMATS},
    "tinyimagenet": ("val", "train"),
}
"""Dataset name → its labelled splits, the default (the evaluation split) first."""

RECORD_NAME = "dataset.json"
"""The record a complete dataset folder holds."""

CLASS_LIST_NAME = "classes.txt"
"""The class list of a dataset folder: its class folder names in label order, one per line."""

_CHECKSUM_DIGITS = 16


class DatasetLocationError(ValueError):
    """A ``--dataset`` text that does not name a known dataset and split, or a path that is missing."""


@dataclass(frozen=True)
class DatasetLocation:
    """A parsed ``NAME[/SPLIT]:PATH``: ``name`` a key of :data:`DATASET_SPLITS`, ``split`` one of its splits,
    ``path`` where the user keeps it (torchvision's root or the dataset's own folder)."""

    name: str
    split: str
    path: Path


def parse_dataset(text: str) -> DatasetLocation:
    """Parse ``NAME[/SPLIT]:PATH``: ``cifar10:~/data``, ``cifar100/train:~/data``, ``tinyimagenet:~/tiny-imagenet-200``.

    Raises:
        DatasetLocationError: one line naming the valid datasets and splits.
    """
    head, separator, path = text.partition(":")
    name, _, split = head.partition("/")
    valid = ", ".join(f"{key} ({'/'.join(splits)})" for key, splits in DATASET_SPLITS.items())
    if not separator or not path or name not in DATASET_SPLITS:
        raise DatasetLocationError(f"--dataset must be NAME[/SPLIT]:PATH with NAME one of {valid}, got {text!r}")
    split = split or DATASET_SPLITS[name][0]
    if split not in DATASET_SPLITS[name]:
        raise DatasetLocationError(f"--dataset {name} has the splits {', '.join(DATASET_SPLITS[name])}, got {split!r}")
    return DatasetLocation(name, split, Path(path).expanduser())


def dataset_image_folder(location: str | DatasetLocation, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The image folder of a dataset split (module docstring), written into the cache on first use.

    Args:
        location: ``NAME[/SPLIT]:PATH`` or its :class:`DatasetLocation`.
        cache_dir: the cache folder; None for :func:`ccc.cache.default_cache_dir`.

    Returns:
        ``<cache>/datasets/<name>-<split>-<checksum>``: one sub-folder per class that has images, in label
        order when sorted, and the class list :data:`CLASS_LIST_NAME`.

    Raises:
        DatasetLocationError: a bad ``location``. ccc.datasets.CifarError, ccc.datasets.TinyImageNetError:
            files that are missing or not in the published format (one line naming the file).
    """
    dataset = parse_dataset(location) if isinstance(location, str) else location
    if dataset.name == "tinyimagenet":
        index = index_tiny_imagenet(dataset.path, dataset.split)
        checksum = index.checksum()
        files = [(image.wnid, image.relative_path) for image in index.images]

        def write(folder: Path) -> None:
            for wnid, relative in files:
                (folder / wnid).mkdir(exist_ok=True)
                shutil.copyfile(index.root / relative, folder / wnid / Path(relative).name)

        classes = index.classes
    else:
        split = read_cifar(dataset.path, dataset.name, dataset.split)
        checksum = split.checksum
        classes = _cifar_folder_names(split.class_names)

        def write(folder: Path) -> None:
            from ccc.render import encode_png

            for position, (image, label) in enumerate(zip(split.images, split.labels)):
                (folder / classes[label]).mkdir(exist_ok=True)
                (folder / classes[label] / f"{position:05d}.png").write_bytes(encode_png(image))

    folder_name = f"{dataset.name}-{dataset.split}-{checksum[:_CHECKSUM_DIGITS]}"
    target = Path(cache_dir or default_cache_dir()) / "datasets" / folder_name
    if (target / RECORD_NAME).is_file():
        return target
    record = {"dataset": dataset.name, "split": dataset.split, "checksum": checksum, "classes": list(classes)}
    _build(target, classes, write, record)
    return target


def _cifar_folder_names(class_names: tuple[str, ...]) -> tuple[str, ...]:
    """Class folder names that sort in label order: the names themselves when they already do (CIFAR-10's
    and CIFAR-100's do), else ``<label>_<name>`` with the label zero-padded."""
    if list(class_names) == sorted(class_names) and len(set(class_names)) == len(class_names):
        return class_names
    digits = len(str(len(class_names) - 1))
    return tuple(f"{label:0{digits}d}_{name}" for label, name in enumerate(class_names))


def _build(target: Path, classes: tuple[str, ...], write: Callable[[Path], None], record: dict) -> None:
    """Write the folder (``write`` makes a folder per class that has images) under a temporary name beside
    ``target``, with its class list and record, and rename it into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
    try:
        logger.info("writing %s %s into %s (once)", record["dataset"], record["split"], target)
        staging = temporary / "images"
        staging.mkdir()
        write(staging)
        (staging / CLASS_LIST_NAME).write_text("".join(f"{name}\n" for name in classes))
        (staging / RECORD_NAME).write_text(json.dumps(record, indent=1) + "\n")
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / RECORD_NAME).is_file():
                raise
            logger.info("another process finished %s first; using it", target)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
