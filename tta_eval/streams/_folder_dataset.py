"""The torch side of image folder streams (``tta_eval.streams.image_folder``): an ImageFolder that
names its unreadable images instead of raising in a DataLoader worker, and the loader that stops on
them. Imported when a folder stream is opened, so that the stream registry loads without torch."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torchvision

from ccc.stream.sources import class_folder_images, class_list, read_class_list


class CheckedImageFolder(torchvision.datasets.ImageFolder):
    """ImageFolder whose unreadable images become an ``Unreadable`` item instead of an exception, so
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
            return Unreadable(path, str(error) or type(error).__name__)


@dataclass(frozen=True)
class Unreadable:
    """An image the dataset could not decode: its path and the problem (the item a DataLoader yields for it)."""

    path: str
    problem: str


def collate_checked(items: list[Any]) -> Any:
    """torch's default collate, or the first ``Unreadable`` item of the batch."""
    bad = [item for item in items if isinstance(item, Unreadable)]
    return bad[0] if bad else torch.utils.data.default_collate(items)


class FolderLoader:
    """The DataLoader of an image folder; an unreadable image ends the stream with a ValueError naming it."""

    def __init__(self, loader: torch.utils.data.DataLoader) -> None:
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        for batch in self.loader:
            if isinstance(batch, Unreadable):
                raise ValueError(
                    f"unreadable image {batch.path}: {batch.problem}; fix or remove it, or pass --skip-bad-images "
                    "to check every image before the run and exclude the unreadable ones deterministically"
                )
            yield batch
