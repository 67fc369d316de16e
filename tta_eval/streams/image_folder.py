"""Image folders (root/<class>/<image>) as streams, ``folder:PATH`` or a plain folder path: a
DataLoader whose unreadable images are named or skipped deterministically, and the command-line
options of image folders. torch and torchvision are imported when a folder is opened
(``tta_eval.streams._folder_dataset``), not by the stream registry."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tta_eval.cli_options import CliOption
from tta_eval.streams.batch import SizedStream
from tta_eval.streams.options import StreamOptions
from tta_eval.streams.registry import FOLDER_SCHEME, REGISTRY, StreamDescription, StreamSource, last_component

if TYPE_CHECKING:
    from tta_eval.streams._folder_dataset import FolderLoader

logger = logging.getLogger(__name__)


def open_image_folder(location: str, options: StreamOptions) -> FolderLoader:
    """DataLoader over an ImageFolder (root/<class>/<image>), classes indexed as ``ccc-generate`` does
    (``ccc.stream.sources.class_list``): by ``options.classes`` when given; else the standard ImageNet index
    for folders named by its WordNet ids (a subset of the 1,000 classes keeps their indices; a folder
    that is not a class is refused), else sorted folder order. Folders without images and
    ``lost+found`` are skipped. Images: resize (short side image_size·256/224), centre crop
    image_size, in [0, 1].
    """
    import torch
    from torchvision.transforms import v2

    from tta_eval.streams._folder_dataset import CheckedImageFolder, FolderLoader, collate_checked

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
        dataset = CheckedImageFolder(str(root), options.classes, transform=transform)
    except FileNotFoundError as error:
        raise ValueError(
            f"stream folder {location!r} is not in ImageFolder layout (root/<class>/<image>): {error}"
        ) from None
    if not dataset.samples:
        raise ValueError(
            f"stream folder {location!r}: none of the {len(dataset.classes)} classes of --classes "
            "has a folder with images"
        )
    if options.skip_bad_images:
        _exclude_unreadable(dataset, root)
    generator = None
    if options.shuffle_seed is not None:
        generator = torch.Generator().manual_seed(options.shuffle_seed)
    return FolderLoader(
        torch.utils.data.DataLoader(
            dataset,
            batch_size=options.batch_size,
            shuffle=options.shuffle_seed is not None,
            generator=generator,
            num_workers=options.num_workers,
            collate_fn=collate_checked,
        )
    )


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


def _describe_image_folder(location: str, options: StreamOptions) -> StreamDescription:
    """An ImageFolder's name and image count (the images of its class folders are counted, not read).
    Its class count is left unknown: a subset of ImageNet's classes is evaluated with a 1,000-class
    model."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    from ccc.stream.sources import class_folder_images, read_class_list

    root = Path(location)
    if not root.is_dir():
        raise ValueError(f"stream folder {location!r} does not exist or is not a directory")
    images = class_folder_images(root, IMG_EXTENSIONS, note=False)
    classes = images if options.classes is None else read_class_list(options.classes)
    samples = sum(len(images.get(name, ())) for name in classes)
    return StreamDescription(name=last_component(location), samples=samples or None)


def _open_sized_image_folder(location: str, options: StreamOptions) -> SizedStream:
    """``open_image_folder`` with its number of images as the stream's length."""
    loader = open_image_folder(location, options)
    return SizedStream(loader, len(loader.loader.dataset))  # type: ignore[arg-type]


def _stream_options(values: Mapping[str, Any]) -> dict[str, Any]:
    """The ``StreamOptions`` fields of the image folder options' values (``--no-shuffle`` wins over
    ``--shuffle-seed``)."""
    return {
        "image_size": values["image_size"],
        "shuffle_seed": None if values["no_shuffle"] else values["shuffle_seed"],
        "skip_bad_images": values["skip_bad_images"],
        "classes": values["classes"],
    }


REGISTRY.register(
    StreamSource(
        FOLDER_SCHEME,
        _open_sized_image_folder,
        order=2,
        describe=_describe_image_folder,
        options=(
            CliOption("--image-size", {"type": int, "default": 224, "help": "centre-crop size for image folders"}),
            CliOption("--shuffle-seed", {"type": int, "default": 0, "help": "fixed shuffling of image folders"}),
            CliOption("--no-shuffle", {"action": "store_true", "help": "read image folders in sorted (class) order"}),
            CliOption(
                "--skip-bad-images",
                {
                    "action": "store_true",
                    "help": "image folders: exclude unreadable images (all checked before the run) instead of stopping",
                },
            ),
            CliOption(
                "--classes",
                {
                    "metavar": "FILE",
                    "default": None,
                    "help": "image folders: class list, one class folder name per line, line k = class k "
                    "(default: the standard ImageNet index for WordNet-id folders, else sorted folder order), "
                    "as ccc-generate --classes",
                },
            ),
        ),
        title="image folders (folder:PATH or a plain folder path)",
        from_options=_stream_options,
    )
)
