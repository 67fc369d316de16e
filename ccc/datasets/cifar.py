"""CIFAR-10 and CIFAR-100 in torchvision's on-disk format, read without running code from the files.

The files are the published Python-2 pickles (protocol 2) that torchvision's ``CIFAR10``/``CIFAR100``
download and unpack under their ``root``:

- ``cifar-10-batches-py/``: ``data_batch_1`` … ``data_batch_5`` (train, 10,000 images each),
  ``test_batch`` (10,000), ``batches.meta`` (``label_names``: the 10 class names);
- ``cifar-100-python/``: ``train`` (50,000), ``test`` (10,000), ``meta`` (``fine_label_names``: the
  100 class names, and ``coarse_label_names``).

Each batch is a dict whose ``data`` is a uint8 array of N rows of 3,072 values (the 1,024 red, then
green, then blue values of a 32×32 image, rows top to bottom) and whose ``labels`` (CIFAR-10) or
``fine_labels`` (CIFAR-100) are N class indices. Keys may be ``bytes`` (the published files) or ``str``
(a file saved again from Python 3). The pickles are read by :func:`ccc.datasets.plain_pickle.read_plain_pickle`:
plain values and numpy arrays only, no global imported or called, the work bounded.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ccc.datasets.plain_pickle import PlainPickleError, read_plain_pickle_file
from ccc.validation import check_choice

CIFAR_IMAGE_SIZE = 32
"""Side of a CIFAR image in pixels."""

CIFAR_CHANNELS = 3
CIFAR_ROW_VALUES = CIFAR_CHANNELS * CIFAR_IMAGE_SIZE * CIFAR_IMAGE_SIZE
"""Values per row of a batch's ``data``: 3,072."""

SPLITS = ("train", "test")


class CifarError(ValueError):
    """A CIFAR folder or file is missing, damaged, or not in torchvision's format; one line naming it."""


@dataclass(frozen=True)
class CifarFormat:
    """Where one CIFAR dataset's files are and which keys hold what.

    Attributes:
        name: "cifar10" or "cifar100".
        title: how messages name it ("CIFAR-10").
        folder: the folder torchvision unpacks under its ``root``.
        split_files: split name → the batch files of that split, in reading order.
        meta_file: the file holding the class names.
        labels_key: the batch key of the class indices (CIFAR-100: the fine labels).
        class_names_key: the meta key of the class names (position = class index).
        class_count: number of classes.
    """

    name: str
    title: str
    folder: str
    split_files: dict[str, tuple[str, ...]]
    meta_file: str
    labels_key: str
    class_names_key: str
    class_count: int


CIFAR_FORMATS = {
    "cifar10": CifarFormat(
        name="cifar10",
        title="CIFAR-10",
        folder="cifar-10-batches-py",
        split_files={"train": tuple(f"data_batch_{number}" for number in range(1, 6)), "test": ("test_batch",)},
        meta_file="batches.meta",
        labels_key="labels",
        class_names_key="label_names",
        class_count=10,
    ),
    "cifar100": CifarFormat(
        name="cifar100",
        title="CIFAR-100",
        folder="cifar-100-python",
        split_files={"train": ("train",), "test": ("test",)},
        meta_file="meta",
        labels_key="fine_labels",
        class_names_key="fine_label_names",
        class_count=100,
    ),
}
"""The CIFAR datasets read, by name."""


@dataclass(frozen=True, eq=False)
class CifarSplit:
    """One split of a CIFAR dataset, in the files' order (train: the batches in order, then rows).

    Attributes:
        name: "cifar10" or "cifar100".
        split: "train" or "test".
        images: uint8 array N×32×32×3 (RGB, height × width × channel), values 0–255; read-only.
        labels: int64 array of N class indices in [0, len(class_names)) (CIFAR-100: the fine labels); read-only.
        class_names: the class names, position = class index (10 or 100).
        source_files: the files read (batches in order, then the meta file).
        checksum: :func:`cifar_checksum` of images, labels and class names (sha256, hex).
    """

    name: str
    split: str
    images: NDArray[np.uint8]
    labels: NDArray[np.int64]
    class_names: tuple[str, ...]
    source_files: tuple[Path, ...]
    checksum: str

    def __len__(self) -> int:
        return len(self.labels)


def cifar_checksum(images: NDArray[np.uint8], labels: NDArray[np.int64], class_names: tuple[str, ...]) -> str:
    """sha256 (hex) of what a split holds, independent of how the pickles encode it: the images' bytes
    (uint8, N×32×32×3, C order), the labels' bytes (int64 little-endian) and the class names (UTF-8, one
    per line)."""
    digest = hashlib.sha256()
    digest.update(b"images %d\n" % len(images))
    digest.update(np.ascontiguousarray(images, dtype=np.uint8))
    digest.update(b"labels\n")
    digest.update(np.ascontiguousarray(labels, dtype="<i8"))
    digest.update(b"classes\n" + "\n".join(class_names).encode())
    return digest.hexdigest()


def find_cifar_folder(root: str | os.PathLike[str], name: str = "cifar10") -> Path:
    """The folder holding the files of CIFAR dataset ``name``: ``root`` itself, or its sub-folder
    ``cifar-10-batches-py`` / ``cifar-100-python`` (torchvision's ``root``).

    Raises:
        CifarError: neither holds the meta file (``batches.meta`` / ``meta``), or ``name`` is unknown.
    """
    cifar = _format(name)
    root = Path(root).expanduser()
    for folder in (root / cifar.folder, root):
        if (folder / cifar.meta_file).is_file():
            return folder
    raise CifarError(
        f"{cifar.title} folder not found: neither {str(root / cifar.folder)!r} nor {str(root)!r} holds "
        f"{cifar.meta_file!r}; pass torchvision's root or its {cifar.folder}/ folder "
        f"(files {', '.join(cifar.split_files['train'] + cifar.split_files['test'])}, {cifar.meta_file})"
    )


def read_cifar(root: str | os.PathLike[str], name: str = "cifar10", split: str = "test") -> CifarSplit:
    """Read one split of CIFAR-10 or CIFAR-100 from torchvision's on-disk format.

    Args:
        root: torchvision's ``root`` (holding ``cifar-10-batches-py/`` or ``cifar-100-python/``) or that
            folder itself.
        name: "cifar10" or "cifar100".
        split: "test" (10,000 images in the published files) or "train" (50,000).

    Returns:
        The :class:`CifarSplit`: images uint8 N×32×32×3 RGB, labels int64 in [0, 10) or [0, 100), the
        class names and a checksum.

    Raises:
        CifarError: one line naming the file for a missing folder or file, a pickle holding anything but
            plain values and uint8 arrays (nothing of it is run), a truncated or damaged file, or data
            of the wrong shape, type or label range.
    """
    cifar = _format(name)
    try:
        check_choice("split", split, SPLITS)
    except ValueError as error:
        raise CifarError(str(error)) from None
    folder = find_cifar_folder(root, name)
    class_names = _read_class_names(cifar, folder / cifar.meta_file)
    batches = [_read_batch(cifar, folder / file_name) for file_name in cifar.split_files[split]]
    rows = np.concatenate([rows for rows, _ in batches]) if len(batches) > 1 else batches[0][0]
    images = np.ascontiguousarray(
        rows.reshape(-1, CIFAR_CHANNELS, CIFAR_IMAGE_SIZE, CIFAR_IMAGE_SIZE).transpose(0, 2, 3, 1)
    )
    labels = np.concatenate([labels for _, labels in batches])
    images.flags.writeable = False
    labels.flags.writeable = False
    return CifarSplit(
        name=cifar.name,
        split=split,
        images=images,
        labels=labels,
        class_names=class_names,
        source_files=tuple(folder / file_name for file_name in (*cifar.split_files[split], cifar.meta_file)),
        checksum=cifar_checksum(images, labels, class_names),
    )


def _format(name: str) -> CifarFormat:
    try:
        check_choice("name", name, CIFAR_FORMATS)
    except ValueError as error:
        raise CifarError(str(error)) from None
    return CIFAR_FORMATS[name]


def _read_dict(cifar: CifarFormat, path: Path) -> dict[Any, Any]:
    try:
        content = read_plain_pickle_file(path, f"{cifar.title} file")
    except PlainPickleError as error:
        raise CifarError(str(error)) from None
    if not isinstance(content, dict):
        raise CifarError(f"{cifar.title} file {str(path)!r} holds a {type(content).__name__}, expected a dict")
    return content


def _field(cifar: CifarFormat, path: Path, content: dict[Any, Any], key: str) -> Any:
    """``content[key]``, the key as bytes (the published files) or text."""
    for stored in (key.encode(), key):
        if stored in content:
            return content[stored]
    keys = ", ".join(sorted(repr(stored) for stored in content)[:10])
    raise CifarError(f"{cifar.title} file {str(path)!r} has no {key!r} entry (its keys: {keys})")


def _read_class_names(cifar: CifarFormat, path: Path) -> tuple[str, ...]:
    names = _field(cifar, path, _read_dict(cifar, path), cifar.class_names_key)
    if not (isinstance(names, list) and len(names) == cifar.class_count):
        size = f"{len(names)} " if isinstance(names, (list, tuple)) else ""
        raise CifarError(
            f"{cifar.title} file {str(path)!r}: {cifar.class_names_key!r} must be a list of {cifar.class_count} names, "
            f"got a {size}{type(names).__name__}"
        )
    decoded = []
    for class_name in names:
        try:
            decoded.append(class_name.decode() if isinstance(class_name, bytes) else class_name)
        except UnicodeDecodeError:
            decoded.append(None)
        if not isinstance(decoded[-1], str):
            raise CifarError(
                f"{cifar.title} file {str(path)!r}: {cifar.class_names_key!r} must hold text (UTF-8 bytes or str), "
                f"got {repr(class_name)[:40]}"
            )
    return tuple(decoded)


def _read_batch(cifar: CifarFormat, path: Path) -> tuple[NDArray[np.uint8], NDArray[np.int64]]:
    """(rows N×3,072 uint8, labels N int64) of one batch file, checked."""
    content = _read_dict(cifar, path)
    rows = _field(cifar, path, content, "data")
    named = f"{cifar.title} file {str(path)!r}"
    if not (isinstance(rows, np.ndarray) and rows.dtype == np.uint8 and rows.ndim == 2):
        description = (
            f"an array of dtype {rows.dtype} and shape {rows.shape}"
            if isinstance(rows, np.ndarray)
            else f"a {type(rows).__name__}"
        )
        raise CifarError(f"{named}: 'data' must be a uint8 array N×{CIFAR_ROW_VALUES}, got {description}")
    if rows.shape[1] != CIFAR_ROW_VALUES:
        raise CifarError(
            f"{named}: 'data' must have {CIFAR_ROW_VALUES:,} values per row (3×32×32), got {rows.shape[1]:,}"
        )
    labels = _field(cifar, path, content, cifar.labels_key)
    if not (isinstance(labels, list) and all(type(label) is int for label in labels)):
        raise CifarError(f"{named}: {cifar.labels_key!r} must be a list of class indices (ints)")
    if len(labels) != len(rows):
        raise CifarError(f"{named}: {len(labels):,} {cifar.labels_key!r} for {len(rows):,} images")
    outside = [label for label in labels if not 0 <= label < cifar.class_count]
    if outside:
        raise CifarError(
            f"{named}: {cifar.labels_key!r} must be in [0, {cifar.class_count}), got {_shown(outside[0])} "
            f"({len(outside):,} outside)"
        )
    return rows, np.asarray(labels, dtype=np.int64)


def _shown(number: int) -> str:
    """``number`` as messages show it: its digits, or its size when it is too long to print."""
    return str(number) if abs(number) < 10**18 else f"an integer of {number.bit_length():,} bits"
