"""Index of an ImageNet-layout image folder (``<root>/<wnid>/<file>.JPEG``).

Both calibration and stream generation address source images by position in this index, so its
order is part of the benchmark's definition:

- class indices never depend on what else a folder holds (see :func:`class_list`): an ImageNet
  folder (WordNet-id sub-folders from the ILSVRC-2012 list) gets the standard index, the position in
  the 1,000 sorted WordNet ids (``ccc/stream/imagenet_wnids.txt``), and must hold exactly those classes;
  an explicit class list (``classes=``, ``--classes FILE``) gives each class its line's position;
  any other folder (the demo world, the test fixtures) gets its class folders sorted as strings, the
  torchvision ``ImageFolder`` convention. Folders that are not classes (``lost+found``, folders
  without images) are skipped with a logged note, hidden folders ignored;
- images are sorted by (class folder, file name); only files with an image extension count;
- :meth:`ImageIndex.checksum` is the sha256 of the sorted ``wnid/file`` list (plus the excluded
  files, the class list when it is not the sorted class folders, and the class of every image whose
  path does not start with its class folder), so a plan or table can record exactly which image set
  and labels it was made from.

The plan's view of an index is :class:`SourceImages` (:func:`load_source_images`: paths, labels and
the pixel size of every image, read from the file headers).

Unreadable images are found at indexing time (a full decode of every file, in threads) and either
reported by name (the default: fail fast) or excluded deterministically (``skip_bad_images``).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
from PIL import Image, UnidentifiedImageError
from tqdm import tqdm

from ccc.stream.spec import PlanError, check_sha256

logger = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png")
"""File extensions (case-insensitive) counted as images."""

IMAGENET_ENVIRONMENT_VARIABLE = "CCC_IMAGENET"
"""Environment variable naming the ImageNet validation folder when ``--imagenet`` is not given."""


IMAGENET_CLASS_COUNT = 1000

NOT_CLASS_FOLDERS = ("lost+found",)
"""Folder names that are never classes (file-system artefacts at a partition root)."""


class ImageFolderError(ValueError):
    """The folder is missing, not in ImageNet layout, or holds unreadable images."""


@functools.cache
def imagenet_wnids() -> tuple[str, ...]:
    """The 1,000 ILSVRC-2012 WordNet ids, sorted: position = the standard ImageNet class index."""
    text = (Path(__file__).parent / "imagenet_wnids.txt").read_text()
    wnids = tuple(text.split())
    assert len(wnids) == IMAGENET_CLASS_COUNT and list(wnids) == sorted(wnids)
    return wnids


def read_class_list(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """An explicit class list: one class folder name per line (blank lines ignored); line k → class k.

    Raises ImageFolderError for a missing file, an empty list or a name given twice.
    """
    try:
        names = tuple(line.strip() for line in Path(path).read_text().splitlines() if line.strip())
    except (OSError, UnicodeDecodeError) as error:
        raise ImageFolderError(
            f"--classes {path}: cannot read the class list: {getattr(error, 'strerror', None) or error}"
        ) from None
    if not names:
        raise ImageFolderError(f"--classes {path}: the class list is empty; expected one class folder name per line")
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ImageFolderError(
            f"--classes {path}: each class may be listed once, got duplicates: {', '.join(duplicates[:10])}"
        )
    return names


def _listed(names: Sequence[str], limit: int = 10) -> str:
    more = f" (and {len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def class_list(
    folders: Sequence[str], classes: Sequence[str] | None = None, where: str = "the folder", *, subset: bool = False
) -> tuple[str, ...]:
    """The class list (position = class index) of a folder whose class folders holding images are
    ``folders``.

    classes: an explicit list (returned as is; folders not in it are skipped with a logged note,
    listed classes without a folder simply have no images). Without it: the standard ImageNet list
    when the folders are WordNet ids of it (every one of the 1,000 must be present), else the folders
    sorted as strings. subset: accept ImageNet folders with only some of the 1,000 classes (they keep
    their standard index; used to evaluate on a subset with a 1,000-class model). Raises
    ImageFolderError naming the extra (or, without ``subset``, missing) classes of a folder that is
    partly ImageNet.
    """
    if classes is not None:
        unlisted = sorted(set(folders) - set(classes))
        if unlisted:
            logger.warning(
                "%s: %d folder(s) not in the class list are skipped: %s", where, len(unlisted), _listed(unlisted)
            )
        return tuple(classes)
    standard = set(imagenet_wnids())
    if not standard.intersection(folders):
        return tuple(sorted(folders))
    extra = sorted(set(folders) - standard)
    missing = [] if subset else sorted(standard - set(folders))
    if extra or missing:
        problems = []
        if extra:
            problems.append(f"{len(extra)} folder(s) that are not ImageNet classes: {_listed(extra)}")
        if missing:
            problems.append(f"{len(missing)} of the 1,000 classes missing or without images: {_listed(missing)}")
        raise ImageFolderError(
            f"{where} looks like ImageNet but has {' and '.join(problems)}; class indices would not be the standard "
            "ones: fix the folder, or pass --classes FILE (one class folder name per line, line k = class k)"
        )
    return imagenet_wnids()


@dataclass(frozen=True)
class SourceImage:
    """One indexed image: ``relative_path`` is ``<wnid>/<file>`` (always with ``/``)."""

    relative_path: str
    wnid: str
    class_index: int


@dataclass(frozen=True)
class ImageIndex:
    """The ordered image list of a folder. ``images[k]`` is source image ``k``."""

    root: Path
    classes: tuple[str, ...]
    images: tuple[SourceImage, ...]
    excluded: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, position: int) -> SourceImage:
        return self.images[position]

    def __iter__(self) -> Iterator[SourceImage]:
        return iter(self.images)

    def path(self, position: int) -> Path:
        """Absolute path of source image ``position``."""
        return self.root / self.images[position].relative_path

    def checksum(self) -> str:
        """sha256 (hex) of the ordered ``wnid/file`` list, of the excluded files, and of the class list
        when it is not the sorted class folders (an explicit list: the labels differ). An image whose path
        does not start with its class folder (Tiny-ImageNet's ``val/images/…``, labelled by a file) adds
        its class to its line, so that its label is covered too; folders of class sub-folders keep their
        checksum."""
        digest = hashlib.sha256()
        for image in self.images:
            labelled_by_path = image.relative_path.startswith(image.wnid + "/")
            label = b"" if labelled_by_path else b" class " + image.wnid.encode()
            digest.update(image.relative_path.encode() + label + b"\n")
        for name in self.excluded:
            digest.update(b"excluded " + name.encode() + b"\n")
        if self.classes != tuple(sorted({image.wnid for image in self.images})):
            digest.update(b"classes " + "\n".join(self.classes).encode() + b"\n")
        return digest.hexdigest()


def resolve_imagenet_folder(path: str | os.PathLike[str] | None) -> Path:
    """The folder given, else ``$CCC_IMAGENET``; ImageFolderError saying what to provide if neither."""
    if path is None:
        path = os.environ.get(IMAGENET_ENVIRONMENT_VARIABLE) or None
    if path is None:
        raise ImageFolderError(
            "no ImageNet folder given: pass --imagenet PATH (the validation folder, val/<wnid>/*.JPEG) "
            f"or set {IMAGENET_ENVIRONMENT_VARIABLE}=PATH; "
            "without ImageNet, --demo runs the commands on the embedded demo world"
        )
    return Path(path).expanduser()


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


UNREADABLE_IMAGE_ERRORS = (OSError, UnidentifiedImageError, SyntaxError, ValueError, Image.DecompressionBombError)
"""What Pillow raises for a damaged, truncated, non-image or oversized (decompression bomb) file."""


def decode_problem(path: str | os.PathLike[str]) -> str | None:
    """None if the file decodes completely, else a short description of the problem (a damaged,
    truncated, empty or non-image file, or one above Pillow's decompression-bomb pixel limit)."""
    try:
        with Image.open(path) as image:
            image.load()
    except UNREADABLE_IMAGE_ERRORS as error:
        return str(error) or type(error).__name__
    return None


def class_folder_images(
    root: str | os.PathLike[str], extensions: Sequence[str] = IMAGE_EXTENSIONS, *, note: bool = True
) -> dict[str, list[str]]:
    """The class folders of ``root`` that hold images: folder name → its image file names, sorted.

    Images are files whose name ends with one of ``extensions`` (case-insensitive). Hidden folders
    are ignored; folders named in ``NOT_CLASS_FOLDERS`` and folders without images are skipped, with
    a logged note when ``note``. Folder names are returned in sorted order.
    """
    folder = Path(root)
    suffixes = tuple(extension.lower() for extension in extensions)
    files: dict[str, list[str]] = {}
    skipped = []
    for name in sorted(os.listdir(folder)):
        if name.startswith(".") or not (folder / name).is_dir():
            continue
        images = (
            []
            if name in NOT_CLASS_FOLDERS
            else sorted(
                entry
                for entry in os.listdir(folder / name)
                if entry.lower().endswith(suffixes) and (folder / name / entry).is_file()
            )
        )
        if images:
            files[name] = images
        else:
            skipped.append(name)
    if skipped and note:
        logger.warning(
            "%s: skipped %d folder(s) that are not classes (no images, or %s): %s",
            folder,
            len(skipped),
            ", ".join(NOT_CLASS_FOLDERS),
            _listed(skipped),
        )
    return files


def index_image_folder(
    root: str | os.PathLike[str],
    *,
    classes: Sequence[str] | None = None,
    check_images: bool = True,
    skip_bad_images: bool = False,
    threads: int | None = None,
    progress: bool = True,
) -> ImageIndex:
    """Index ``root`` (``<root>/<class>/<image>``) in the benchmark's canonical order.

    Args:
        root: the folder (for ImageNet, the validation folder with 1,000 WordNet-id sub-folders).
        classes: an explicit class list (position = class index, see :func:`class_list`); None:
            the standard ImageNet index, or the sorted class folders of a folder that is not ImageNet.
        check_images: decode every image once to find unreadable or truncated files.
        skip_bad_images: exclude unreadable images (recorded in :attr:`ImageIndex.excluded`)
            instead of failing.
        threads: decoding threads for the check (default: CPU count).
        progress: show a progress bar during the check.

    Raises:
        ImageFolderError: for a missing folder, a folder without class sub-folders or images,
            images outside class folders, an ImageNet folder with extra or missing classes (without
            ``classes``), or unreadable images (listing them) unless skipped.
    """
    folder = Path(root).expanduser()
    if not folder.is_dir():
        raise ImageFolderError(f"image folder {folder} does not exist or is not a directory")
    entries = sorted(os.listdir(folder))
    folders = tuple(name for name in entries if (folder / name).is_dir() and not name.startswith("."))
    stray = [name for name in entries if _is_image(name) and (folder / name).is_file()]
    if not folders:
        hint = f" (found {len(stray)} images directly inside it)" if stray else ""
        raise ImageFolderError(
            f"{folder} is not in ImageNet layout <folder>/<class>/<image>.JPEG: no class sub-folders{hint}"
        )
    if stray:
        raise ImageFolderError(
            f"{folder} mixes images and class sub-folders, e.g. {stray[0]}; expected <folder>/<class>/<image>.JPEG"
        )
    files = class_folder_images(folder)
    if not files:
        raise ImageFolderError(
            f"{folder} has {len(folders)} class folders but no images ({', '.join(IMAGE_EXTENSIONS)})"
        )
    classes = class_list(list(files), classes, str(folder))
    images: list[SourceImage] = []
    for class_index, wnid in enumerate(classes):
        images.extend(SourceImage(f"{wnid}/{name}", wnid, class_index) for name in files.get(wnid, ()))
    if not images:
        raise ImageFolderError(f"{folder}: none of the {len(classes)} listed classes has a folder with images")
    excluded: tuple[str, ...] = ()
    if check_images:
        problems = _find_unreadable(folder, images, threads, progress)
        if problems and not skip_bad_images:
            listed = "; ".join(f"{name}: {problem}" for name, problem in problems[:10])
            more = f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""
            raise ImageFolderError(
                f"{len(problems)} unreadable image(s) in {folder}: {listed}{more}. "
                "Fix or remove them, or pass --skip-bad-images to exclude them deterministically"
            )
        excluded = tuple(name for name, _ in problems)
        bad = set(excluded)
        images = [image for image in images if image.relative_path not in bad]
    return ImageIndex(folder, classes, tuple(images), excluded)


def _find_unreadable(
    folder: Path, images: Sequence[SourceImage], threads: int | None, progress: bool
) -> list[tuple[str, str]]:
    with ThreadPoolExecutor(max_workers=threads or os.cpu_count() or 1) as pool:
        results = pool.map(decode_problem, (folder / image.relative_path for image in images), chunksize=64)
        checked = tqdm(
            results, total=len(images), desc="checking images", unit="img", disable=not progress, mininterval=5.0
        )
        return [(image.relative_path, problem) for image, problem in zip(images, checked) if problem is not None]


@dataclass(frozen=True)
class SourceImages:
    """The source images a stream draws from, in the canonical order of :class:`ImageIndex`.

    Attributes:
        root: the image folder (absolute path as text); workers read ``root/relative_path``.
        relative_paths: ``<wnid>/<file>`` per image.
        class_indices: class index per image (sorted-folder order, 0..K-1).
        sizes: ``(width, height)`` in pixels per image, as stored in the file (the crop box depends on it).
        index_checksum: :meth:`ImageIndex.checksum` of the folder.
    """

    root: str
    relative_paths: tuple[str, ...]
    class_indices: tuple[int, ...]
    sizes: tuple[tuple[int, int], ...]
    index_checksum: str

    def __post_init__(self) -> None:
        count = len(self.relative_paths)
        if count == 0:
            raise PlanError("source images must not be empty")
        if len(self.class_indices) != count or len(self.sizes) != count:
            raise PlanError(
                f"source images need one class index and one size per path ({count}), "
                f"got {len(self.class_indices)} class indices and {len(self.sizes)} sizes"
            )
        check_sha256("index_checksum", self.index_checksum)

    def __len__(self) -> int:
        return len(self.relative_paths)

    def sizes_checksum(self) -> str:
        """sha256 (hex) of the image sizes in order (the index checksum covers only the names)."""
        return hashlib.sha256(np.asarray(self.sizes, dtype="<i8").tobytes()).hexdigest()


def _image_size(path: Path) -> tuple[int, int]:
    with Image.open(path) as image:
        return image.size


def load_source_images(index: ImageIndex, threads: int | None = None) -> SourceImages:
    """The plan's view of an image index: paths, labels and the pixel size of every image.

    Sizes are read from the file headers (no decoding), in ``threads`` threads (default: CPU count).
    """
    paths = [index.path(position) for position in range(len(index))]
    with ThreadPoolExecutor(max_workers=threads or os.cpu_count() or 1) as pool:
        sizes = tuple(pool.map(_image_size, paths, chunksize=256))
    return SourceImages(
        root=str(Path(index.root).resolve()),
        relative_paths=tuple(image.relative_path for image in index.images),
        class_indices=tuple(image.class_index for image in index.images),
        sizes=sizes,
        index_checksum=index.checksum(),
    )
