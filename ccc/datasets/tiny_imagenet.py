"""The index of a Tiny-ImageNet folder as published (``tiny-imagenet-200/``), for train and val.

The layout::

    tiny-imagenet-200/
        wnids.txt                      the 200 WordNet ids, one per line
        words.txt                      WordNet id <tab> names, for these and many more ids
        train/<wnid>/images/*.JPEG     500 images per class (and <wnid>_boxes.txt, not read)
        val/images/*.JPEG              10,000 images
        val/val_annotations.txt        file <tab> wnid <tab> box (4 ints), one line per val image
        test/images/*.JPEG             unlabelled (not indexed)

Class ``k`` is the ``k``-th WordNet id of ``wnids.txt`` in sorted order (the file itself is not
sorted): the index torchvision's ``ImageFolder`` gives over ``train/``, and the convention of
:func:`ccc.stream.sources.class_list` for folders that are not ImageNet. Images are ordered by
(class, relative path), as in :class:`~ccc.stream.sources.ImageIndex`, whose checksum covers the
ordered relative paths and each image's class. The layout is checked, not repaired: a missing file or folder, a class
without images, a folder or annotation naming an unknown WordNet id, a val image without annotation
or an annotation without image is a :class:`TinyImageNetError` naming it.
"""

from __future__ import annotations

import os
from pathlib import Path

from ccc.stream.sources import IMAGE_EXTENSIONS, ImageFolderError, ImageIndex, SourceImage
from ccc.validation import check_choice

TINY_IMAGENET_FOLDER = "tiny-imagenet-200"
"""The folder the published archive unpacks to."""

TINY_IMAGENET_IMAGE_SIZE = 64
"""Side of a Tiny-ImageNet image in pixels."""

LABELLED_SPLITS = ("train", "val")

ANNOTATIONS_FILE = "val/val_annotations.txt"


class TinyImageNetError(ImageFolderError):
    """A Tiny-ImageNet folder is missing or not in the published layout; one line naming the file."""


def find_tiny_imagenet_folder(root: str | os.PathLike[str]) -> Path:
    """The ``tiny-imagenet-200`` folder: ``root`` itself or its sub-folder of that name (whichever holds
    ``wnids.txt``).

    Raises:
        TinyImageNetError: neither holds ``wnids.txt``.
    """
    root = Path(root).expanduser()
    for folder in (root / TINY_IMAGENET_FOLDER, root):
        if (folder / "wnids.txt").is_file():
            return folder
    raise TinyImageNetError(
        f"Tiny-ImageNet folder not found: neither {str(root / TINY_IMAGENET_FOLDER)!r} nor {str(root)!r} holds "
        f"wnids.txt; pass the {TINY_IMAGENET_FOLDER}/ folder or the folder holding it"
    )


def read_tiny_imagenet_wnids(folder: str | os.PathLike[str]) -> tuple[str, ...]:
    """The WordNet ids of ``folder/wnids.txt`` (``folder``: the ``tiny-imagenet-200`` folder), sorted:
    position = class index (200 in the published folder).

    Raises:
        TinyImageNetError: the file is missing or unreadable, empty, lists an id twice, or has a line
            of more than one word.
    """
    path = Path(folder) / "wnids.txt"
    lines = _read_lines(path)
    wnids = [line.strip() for line in lines if line.strip()]
    malformed = [(number, line) for number, line in enumerate(lines, 1) if len(line.split()) > 1]
    if malformed:
        number, line = malformed[0]
        raise TinyImageNetError(f"{path}: line {number} must be one WordNet id, got {line.strip()[:60]!r}")
    if not wnids:
        raise TinyImageNetError(f"{path} is empty; expected one WordNet id per line")
    duplicates = sorted({wnid for wnid in wnids if wnids.count(wnid) > 1})
    if duplicates:
        raise TinyImageNetError(
            f"{path}: each WordNet id may be listed once, got duplicates: {', '.join(duplicates[:10])}"
        )
    return tuple(sorted(wnids))


def read_tiny_imagenet_class_names(folder: str | os.PathLike[str]) -> tuple[str, ...]:
    """The names of the classes of :func:`read_tiny_imagenet_wnids` from ``folder/words.txt``, in class
    order (e.g. "goldfish, Carassius auratus").

    Raises:
        TinyImageNetError: ``words.txt`` is missing or unreadable, or lacks one of the WordNet ids.
    """
    wnids = read_tiny_imagenet_wnids(folder)
    path = Path(folder) / "words.txt"
    names = {}
    # Names are only shown to people: a byte that is not UTF-8 in one line of this file (it names every
    # WordNet id) must not make the whole file unreadable.
    for line in _read_lines(path, errors="replace"):
        wnid, _, name = line.partition("\t")
        names[wnid.strip()] = name.strip()
    missing = [wnid for wnid in wnids if wnid not in names]
    if missing:
        raise TinyImageNetError(
            f"{path} has no name for {len(missing)} WordNet id(s) of wnids.txt: {', '.join(missing[:10])}"
        )
    return tuple(names[wnid] for wnid in wnids)


def index_tiny_imagenet(root: str | os.PathLike[str], split: str = "val") -> ImageIndex:
    """The index of one labelled split of a Tiny-ImageNet folder.

    Args:
        root: the ``tiny-imagenet-200`` folder or the folder holding it.
        split: "val" (10,000 images, 50 per class, in the published folder) or "train" (100,000, 500 per
            class); "test" has no labels.

    Returns:
        An :class:`~ccc.stream.sources.ImageIndex` rooted at the ``tiny-imagenet-200`` folder: ``classes``
        the sorted WordNet ids (position = class index), ``images`` one
        :class:`~ccc.stream.sources.SourceImage` per image (relative path ``train/<wnid>/images/<file>``
        or ``val/images/<file>``, WordNet id, class index in [0, len(classes))) ordered by (class,
        relative path); ``checksum()`` is the sha256 of that ordered list (paths and classes). Images are listed, not
        decoded (64×64 JPEGs in the published folder).

    Raises:
        TinyImageNetError: naming the file or folder, for any departure from the layout of the module
            docstring.
    """
    try:
        check_choice("split", split, LABELLED_SPLITS)
    except ValueError as error:
        raise TinyImageNetError(f"{error} (the test split of Tiny-ImageNet has no labels)") from None
    folder = find_tiny_imagenet_folder(root)
    wnids = read_tiny_imagenet_wnids(folder)
    images = _train_images(folder, wnids) if split == "train" else _val_images(folder, wnids)
    class_of = {wnid: index for index, wnid in enumerate(wnids)}
    ordered = sorted(images, key=lambda pair: (class_of[pair[1]], pair[0]))
    return ImageIndex(
        root=folder,
        classes=wnids,
        images=tuple(SourceImage(relative_path, wnid, class_of[wnid]) for relative_path, wnid in ordered),
    )


def _read_lines(path: Path, errors: str = "strict") -> list[str]:
    """The lines of the UTF-8 text file ``path``; ``errors``: how undecodable bytes are handled (``str.decode``)."""
    try:
        return path.read_text(encoding="utf-8", errors=errors).splitlines()
    except FileNotFoundError:
        raise TinyImageNetError(
            f"{path} does not exist; is this the {TINY_IMAGENET_FOLDER} folder as published?"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise TinyImageNetError(f"{path} cannot be read: {getattr(error, 'strerror', None) or error}") from None


def _image_files(folder: Path) -> list[str]:
    """The image files (by extension, case-insensitive) of ``folder``, sorted; TinyImageNetError if it is
    missing."""
    if not folder.is_dir():
        raise TinyImageNetError(
            f"{folder} does not exist or is not a folder; is this the {TINY_IMAGENET_FOLDER} layout?"
        )
    # scandir: the entry types come with the listing (no stat per file; 100,000 in train).
    with os.scandir(folder) as entries:
        return sorted(
            entry.name for entry in entries if entry.name.lower().endswith(IMAGE_EXTENSIONS) and entry.is_file()
        )


def _train_images(folder: Path, wnids: tuple[str, ...]) -> list[tuple[str, str]]:
    """(relative path, wnid) of every train image."""
    train = folder / "train"
    if not train.is_dir():
        raise TinyImageNetError(
            f"{train} does not exist or is not a folder; is this the {TINY_IMAGENET_FOLDER} layout?"
        )
    unknown = sorted(
        name for name in os.listdir(train) if (train / name).is_dir() and not name.startswith(".") and name not in wnids
    )
    if unknown:
        raise TinyImageNetError(f"{train} has folder(s) not listed in wnids.txt: {', '.join(unknown[:10])}")
    images = []
    for wnid in wnids:
        files = _image_files(train / wnid / "images")
        if not files:
            raise TinyImageNetError(f"{train / wnid / 'images'} holds no images ({', '.join(IMAGE_EXTENSIONS)})")
        images.extend((f"train/{wnid}/images/{name}", wnid) for name in files)
    return images


def _val_images(folder: Path, wnids: tuple[str, ...]) -> list[tuple[str, str]]:
    """(relative path, wnid) of every val image, the wnid from ``val/val_annotations.txt``."""
    annotations = folder / ANNOTATIONS_FILE
    known = set(wnids)
    labels: dict[str, str] = {}
    for number, line in enumerate(_read_lines(annotations), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2 or not fields[0].strip() or not fields[1].strip():
            raise TinyImageNetError(
                f"{annotations}: line {number} must be file <tab> wnid <tab> box, got {line[:80]!r}"
            )
        name, wnid = fields[0].strip(), fields[1].strip()
        if wnid not in known:
            raise TinyImageNetError(
                f"{annotations}: line {number} names {wnid!r}, which is not in wnids.txt (file {name})"
            )
        if name in labels:
            raise TinyImageNetError(f"{annotations}: line {number} annotates {name} a second time")
        labels[name] = wnid
    files = _image_files(folder / "val" / "images")
    if not files:
        raise TinyImageNetError(f"{folder / 'val' / 'images'} holds no images ({', '.join(IMAGE_EXTENSIONS)})")
    unannotated = [name for name in files if name not in labels]
    if unannotated:
        raise TinyImageNetError(
            f"{len(unannotated)} image(s) of {folder / 'val' / 'images'} have no line in {annotations}: "
            f"{', '.join(unannotated[:10])}"
        )
    present = set(files)
    absent = [name for name in labels if name not in present]
    if absent:
        raise TinyImageNetError(
            f"{annotations} annotates {len(absent)} image(s) missing from {folder / 'val' / 'images'}: "
            f"{', '.join(absent[:10])}"
        )
    return [(f"val/images/{name}", labels[name]) for name in files]
