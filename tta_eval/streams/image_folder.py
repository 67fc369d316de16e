"""Image folders (root/<class>/<image>) as streams: a DataLoader whose unreadable images are named or
skipped deterministically. Imported by ``tta_eval.streams`` when a folder stream is opened (it needs
torch and torchvision, which the stream registry itself does not)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torchvision

from ccc.stream.sources import class_folder_images, class_list, read_class_list
from tta_eval.streams import StreamOptions

logger = logging.getLogger(__name__)


def open_image_folder(location: str, options: StreamOptions) -> _FolderLoader:
    """DataLoader over an ImageFolder (root/<class>/<image>), classes indexed as ``ccc-generate`` does
    (``ccc.stream.sources.class_list``): by ``options.classes`` when given; else the standard ImageNet index
    for folders named by its WordNet ids (a subset of the 1,000 classes keeps their indices; a folder
    that is not a class is refused), else sorted folder order. Folders without images and
    ``lost+found`` are skipped. Images: resize (short side image_size·256/224), centre crop
    image_size, in [0, 1].
    """
    from torchvision.transforms import v2

    root = Path(location)
    if not root.is_dir():
        raise ValueError(f"stream folder {location!r} does not exist or is not a directory")
    transform = v2.Compose(
        [
            v2.ToImage(),
            v2.Resize(round(options.image_size * 256 / 224), antialias=True),
            v2.CenterCrop(options.image_size),
            v2.ToDtype(torch.float32, scale=True),
        ]
    )
    try:
        dataset = _CheckedImageFolder(str(root), options.classes, transform=transform)
    except FileNotFoundError as error:
        raise ValueError(
            f"stream folder {location!r} is not in ImageFolder layout (root/<class>/<image>): {error}"
        ) from None
    if not dataset.samples:
        raise ValueError(
            f"stream folder {location!r}: none of the {len(dataset.classes)} classes of --classes has a folder with images"
        )
    if options.skip_bad_images:
        _exclude_unreadable(dataset, root)
    generator = None
    if options.shuffle_seed is not None:
        generator = torch.Generator().manual_seed(options.shuffle_seed)
    return _FolderLoader(
        torch.utils.data.DataLoader(
            dataset,
            batch_size=options.batch_size,
            shuffle=options.shuffle_seed is not None,
            generator=generator,
            num_workers=options.num_workers,
            collate_fn=_collate_checked,
        )
    )


class _CheckedImageFolder(torchvision.datasets.ImageFolder):
    """ImageFolder whose unreadable images become an ``_Unreadable`` item instead of an exception, so
    that the error reaches the main process intact (DataLoader workers would wrap it in a traceback),
    and whose class index follows ``ccc.stream.sources.class_list`` (``classes``: a class list file or None)."""

    def __init__(self, root: str, classes: str | None, **options: Any) -> None:
        self.class_file = classes
        super().__init__(root, allow_empty=True, **options)

    def find_classes(self, directory: str | os.PathLike[str]) -> tuple[list[str], dict[str, int]]:
        folders = class_folder_images(directory, torchvision.datasets.folder.IMG_EXTENSIONS)
        if not folders:
            raise FileNotFoundError(
                f"no class folder holding images ({', '.join(torchvision.datasets.folder.IMG_EXTENSIONS)})"
            )
        listed = None if self.class_file is None else read_class_list(self.class_file)
        classes = list(class_list(list(folders), listed, f"stream folder {str(directory)!r}", subset=True))
        return classes, {name: index for index, name in enumerate(classes)}

    def __getitem__(self, position: int) -> Any:
        from ccc.stream.sources import UNREADABLE_IMAGE_ERRORS

        path, label = self.samples[position]
        try:
            return super().__getitem__(position)
        except UNREADABLE_IMAGE_ERRORS as error:
            return _Unreadable(path, str(error) or type(error).__name__)


@dataclass(frozen=True)
class _Unreadable:
    path: str
    problem: str


def _collate_checked(items: list[Any]) -> Any:
    bad = [item for item in items if isinstance(item, _Unreadable)]
    return bad[0] if bad else torch.utils.data.default_collate(items)


class _FolderLoader:
    """The DataLoader of an image folder; an unreadable image ends the stream with a ValueError naming it."""

    def __init__(self, loader: torch.utils.data.DataLoader) -> None:
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        for batch in self.loader:
            if isinstance(batch, _Unreadable):
                raise ValueError(
                    f"unreadable image {batch.path}: {batch.problem}; fix or remove it, or pass --skip-bad-images "
                    "to check every image before the run and exclude the unreadable ones deterministically"
                )
            yield batch


def _exclude_unreadable(dataset: Any, root: Path) -> None:
    """Decode every image of ``dataset`` (threads) and drop the unreadable ones from its sample list."""
    from ccc.stream.sources import decode_problem

    paths = [path for path, _ in dataset.samples]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        problems = list(pool.map(decode_problem, paths, chunksize=64))
    bad = [(path, problem) for path, problem in zip(paths, problems) if problem is not None]
    if bad:
        logger.warning(
            "stream folder %s: excluded %d unreadable image(s): %s",
            root,
            len(bad),
            "; ".join(f"{Path(path).relative_to(root)}: {problem}" for path, problem in bad[:10]),
        )
        dataset.samples = [sample for sample, problem in zip(dataset.samples, problems) if problem is None]
        dataset.imgs = dataset.samples
        dataset.targets = [label for _, label in dataset.samples]
        if not dataset.samples:
            raise ValueError(f"stream folder {str(root)!r} has no readable image")
