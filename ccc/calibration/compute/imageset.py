"""The calibration image set: a deterministic, class-balanced subset of an ImageNet-layout folder.

The paper calibrates on 5,000 ImageNet validation images (5 per class). Here the subset is a pure
function of the folder index (:func:`ccc.stream.sources.index_image_folder`), the number of images and a
seed: classes are visited round-robin in a seeded order, each class giving its images in a seeded
order, so 5,000 images of the 1,000-class validation set are exactly 5 per class. The chosen images
keep the index's canonical order; ``position`` ``k`` (0 … N−1) in that order names image ``k`` of
the set everywhere (per-image seeds, result blocks).

Images are preprocessed before corrupting either as ImageNet-C does (resize the shorter side to 256,
PIL bilinear, and take the centre 224×224 crop: torchvision ``Resize(256)`` + ``CenterCrop(224)`` on
PIL images) or as a CCC stream draws its samples (random-resized crop, flip, and a JPEG quality-85
round trip after the corruptions; for the other corruption sets, the whole image at the set's size
and the set's image encoding). Smaller sizes are allowed for tests and quick runs
(:class:`Preprocessing`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from PIL import Image

from ccc.calibration.table_io import CENTRE_PREPROCESSING, PREPROCESSING_KINDS, STREAM_PREPROCESSING
from ccc.corruptions import DEFAULT_CORRUPTION_SET, MIN_IMAGE_SIDE, get_corruption_set
from ccc.render import crop_resize_flip, jpeg_round_trip
from ccc.stream.domains import center_crop
from ccc.stream.plan import FLIP_PROBABILITY, sample_resized_crop
from ccc.stream.sources import ImageFolderError, ImageIndex
from ccc.stream.spec import SET_DEFAULTS
from ccc.validation import check_non_negative_int

DEFAULT_IMAGE_COUNT = 5000
"""Calibration images of the paper (5 per ImageNet class)."""

DEFAULT_SELECTION_SEED = 0
"""Seed of the default calibration subset."""

MAX_PREPROCESSING_SIDE = 2**14
"""Upper bound in pixels of the preprocessing's resize and crop."""

CROP_KEY = zlib.crc32(b"random_resized_crop")
"""The last word of a stream-preprocessing crop's seed key (:func:`crop_generator`)."""

_SELECTION_STREAM = 0
_EVALUATION_ORDER_STREAM = 1


@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """How a source image becomes the uncorrupted input, and what the model sees after the corruptions.

    Two kinds (:data:`ccc.calibration.table_io.PREPROCESSING_KINDS`):

    - ``"centre"``: resize the shorter side to ``resize`` (PIL bilinear) and take the centre
      ``crop × crop`` (torchvision ``Resize`` + ``CenterCrop`` on PIL, ImageNet-C's); the corrupted
      image goes to the model as it is (``imagenet`` set only);
    - ``"stream"``: what a CCC stream of ``corruption_set`` does to each sample with the set's default crop
      and image encoding (:data:`ccc.stream.spec.SET_DEFAULTS`). For ``imagenet``: a random-resized crop of
      the source image resized to ``crop × crop`` and a horizontal flip with probability 0.5
      (:func:`ccc.stream.plan.sample_resized_crop`, :func:`ccc.render.crop_resize_flip`), drawn once per
      image from the run's seed, and after the corruptions the stream's JPEG quality-85 round trip
      (:func:`ccc.render.jpeg_round_trip`). For the other sets: the whole image resized to ``crop × crop``
      (unchanged when it already has that size, as CIFAR images), no flip, and the JPEG round trip only
      where the set's streams store JPEG (``tinyimagenet``, ``imagenet64``; ``cifar`` stores lossless PNG).
      ``resize`` is not used.

    Attributes:
        resize: centre kind: target length in pixels of the shorter side, in [``crop``,
            ``MAX_PREPROCESSING_SIDE``]; ImageNet-C: 256.
        crop: side in pixels of the square input, ≥ 32 (the corruptions' minimum); ImageNet-C and CCC: 224;
            for a set defined at one size only (``cifar``: 32, the 64-pixel sets: 64), that size.
        kind: ``"centre"`` or ``"stream"``.
        corruption_set: whose corruption parameters (:func:`ccc.corruptions.list_corruption_sets`); default
            ``"imagenet"``.
    """

    resize: int = 256
    crop: int = 224
    kind: str = CENTRE_PREPROCESSING
    corruption_set: str = DEFAULT_CORRUPTION_SET

    def __post_init__(self) -> None:
        if self.kind not in PREPROCESSING_KINDS:
            raise ValueError(f"preprocessing must be one of {', '.join(PREPROCESSING_KINDS)}, got {self.kind!r}")
        for name in ("resize", "crop"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"preprocessing {name} must be an integer number of pixels, got {value!r}")
            if value > MAX_PREPROCESSING_SIDE:
                raise ValueError(
                    f"preprocessing {name} must be at most {MAX_PREPROCESSING_SIDE:,} pixels, got {value:,}"
                )
        if self.crop < MIN_IMAGE_SIDE:
            raise ValueError(f"preprocessing crop must be >= {MIN_IMAGE_SIDE} pixels, got {self.crop}")
        if self.kind == CENTRE_PREPROCESSING and self.resize < self.crop:
            raise ValueError(f"preprocessing resize must be >= crop ({self.crop}) pixels, got {self.resize}")
        self._check_corruption_set()

    def _check_corruption_set(self) -> None:
        """ValueError for a set that is not registered, a centre kind outside ``imagenet``, or a crop
        other than the size a single-size set is defined for."""
        corruption_set = get_corruption_set(self.corruption_set)
        if self.corruption_set == DEFAULT_CORRUPTION_SET:
            return
        if self.kind == CENTRE_PREPROCESSING:
            raise ValueError(
                f"centre preprocessing is ImageNet-C's resize and centre crop, for corruption set "
                f"{DEFAULT_CORRUPTION_SET!r} only; corruption set {self.corruption_set!r} is measured as its streams "
                f"draw their samples: preprocessing {STREAM_PREPROCESSING!r}"
            )
        corruption_set.check_image_size(self.crop, self.crop, "preprocessing crop")

    @property
    def whole_image(self) -> bool:
        """Whether the stream kind uses the whole source image (no random crop, no flip): the set's default crop."""
        return SET_DEFAULTS[self.corruption_set][0] == "whole"

    def describe(self) -> str:
        """One line for the table metadata, e.g. ``"RGB, resize shorter side to 256 (PIL bilinear) …"``."""
        if self.kind == STREAM_PREPROCESSING and self.whole_image:
            finish = (
                "a JPEG quality-85 round trip (Pillow)" if self.jpeg_after_corruptions else "no JPEG step (lossless)"
            )
            return (
                f"RGB, the whole image resized to {self.crop}x{self.crop} (PIL bilinear; unchanged at that size), "
                f"no flip; corruption set {self.corruption_set!r}; after the corruptions {finish}, as the set's CCC "
                "streams' samples; uint8 image / 255 given to the model (normalisation inside the model)"
            )
        if self.kind == STREAM_PREPROCESSING:
            return (
                f"RGB, random-resized crop to {self.crop}x{self.crop} (torchvision RandomResizedCrop parameters, "
                "PIL bilinear) and horizontal flip with probability 0.5, drawn once per image from the run's seed; "
                "after the corruptions a JPEG quality-85 round trip (Pillow), as a CCC stream's samples; "
                "uint8 image / 255 given to the model (normalisation inside the model)"
            )
        return (
            f"RGB, resize shorter side to {self.resize} (PIL bilinear), centre crop {self.crop}x{self.crop} "
            f"(torchvision Resize({self.resize}) + CenterCrop({self.crop}) on PIL, as ImageNet-C); "
            "corrupted uint8 image / 255 given to the model (normalisation inside the model)"
        )

    def to_record(self) -> dict[str, object]:
        """JSON-able identity: ``{"resize", "crop"}`` for the centre kind (as before kinds existed),
        ``{"kind": "stream", "crop"}`` for the stream kind, with ``"corruption_set"`` for a set other than
        ``imagenet``."""
        if self.kind == STREAM_PREPROCESSING:
            record: dict[str, object] = {"kind": self.kind, "crop": self.crop}
            if self.corruption_set != DEFAULT_CORRUPTION_SET:
                record["corruption_set"] = self.corruption_set
            return record
        return {"resize": self.resize, "crop": self.crop}

    def apply(self, image: Image.Image, generator: np.random.Generator | None = None) -> NDArray[np.uint8]:
        """Preprocess one PIL image; returns uint8 ``crop × crop × 3`` (RGB).

        ``generator`` draws the stream kind's random crop box and flip (required there; unused by the
        centre kind and by whole-image sets).
        """
        rgb = image.convert("RGB")
        if self.kind == STREAM_PREPROCESSING and self.whole_image:
            return crop_resize_flip(rgb, (0, 0, *rgb.size), False, self.crop)
        if self.kind == STREAM_PREPROCESSING:
            if generator is None:
                raise ValueError("stream preprocessing draws its crop and flip: give it a generator")
            box = sample_resized_crop(generator, *rgb.size)
            return crop_resize_flip(rgb, box, bool(generator.random() < FLIP_PROBABILITY), self.crop)
        resized, box = center_crop(*rgb.size, self.resize, self.crop)
        cropped = rgb.resize(resized, Image.Resampling.BILINEAR).crop(box)
        return np.asarray(cropped, dtype=np.uint8).copy()

    @property
    def jpeg_after_corruptions(self) -> bool:
        """Whether :meth:`finish` changes images: the stream kind's JPEG round trip, for sets whose streams
        store JPEG."""
        return self.kind == STREAM_PREPROCESSING and SET_DEFAULTS[self.corruption_set][1] == "jpeg"

    def finish(self, images: NDArray[np.uint8]) -> NDArray[np.uint8]:
        """What follows the corruptions before the model, on uint8 ``N × H × W × 3``: the JPEG quality-85
        round trip of each image (a new array) when :attr:`jpeg_after_corruptions`, else ``images``."""
        if not self.jpeg_after_corruptions:
            return images
        finished = np.empty_like(images)
        for slot, image in enumerate(images):
            finished[slot] = jpeg_round_trip(image)
        return finished


def crop_generator(seed: int, position: int) -> np.random.Generator:
    """The generator of image ``position``'s stream-preprocessing crop and flip:
    ``SeedSequence(seed, spawn_key=(position, CROP_KEY))``, independent of the corruption draws
    (whose keys carry a corruption and a severity), of blocks, workers and backends."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(int(position), CROP_KEY)))


def load_preprocessed_image(
    path: str | Path, preprocessing: Preprocessing, generator: np.random.Generator | None = None
) -> NDArray[np.uint8]:
    """Decode ``path`` and preprocess it (``generator``: see :meth:`Preprocessing.apply`);
    ImageFolderError naming the file if it cannot be read."""
    try:
        with Image.open(path) as image:
            return preprocessing.apply(image, generator)
    except (OSError, SyntaxError, ValueError) as error:
        raise ImageFolderError(f"cannot read calibration image {path}: {error}") from None


@dataclasses.dataclass(frozen=True)
class CalibrationImageSet:
    """The chosen calibration images, in canonical index order.

    Attributes:
        root: the image folder.
        relative_paths: ``<wnid>/<file>`` of each chosen image; position ``k`` is image ``k``.
        labels: class index (0 … K−1, sorted folder names) of each image.
        seed: the selection seed.
        folder_checksum: :meth:`ccc.stream.sources.ImageIndex.checksum` of the folder the images came from.
        class_count: number of classes of the folder.
        preprocessing: how each image is turned into the uncorrupted input.
    """

    root: Path
    relative_paths: tuple[str, ...]
    labels: tuple[int, ...]
    seed: int
    folder_checksum: str
    class_count: int
    preprocessing: Preprocessing = Preprocessing()

    def __len__(self) -> int:
        return len(self.relative_paths)

    def checksum(self) -> str:
        """sha256 (hex) of the chosen ``wnid/file`` list, one per line (the metadata's image-set checksum)."""
        digest = hashlib.sha256()
        for relative_path in self.relative_paths:
            digest.update(relative_path.encode("utf-8") + b"\n")
        return digest.hexdigest()

    def describe(self) -> str:
        """One line for the table metadata: size, how chosen, and from which folder."""
        per_class = len(self) / self.class_count
        return (
            f"{len(self)} images ({per_class:g} per class on average, {self.class_count} classes) chosen "
            f"class-balanced with seed {self.seed} (ccc.calibration.select_calibration_images) from "
            f"{self.root.name}/ (folder index sha256 {self.folder_checksum})"
        )

    def evaluation_order(self) -> NDArray[np.int64]:
        """A seeded permutation of the positions 0 … N−1; result blocks are consecutive runs of it.

        Any run of this order mixes all classes, so a cell measured on a few blocks (as the adaptive
        scheme does, :func:`ccc.calibration.compute.job.cell_blocks`) sees a random subset of the set.
        """
        generator = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(_EVALUATION_ORDER_STREAM,)))
        return generator.permutation(len(self)).astype(np.int64)

    def load(self, positions: Sequence[int], seed: int = 0) -> NDArray[np.uint8]:
        """Decode and preprocess the images at ``positions``; uint8 ``len × crop × crop × 3``.

        ``seed`` (≥ 0, the run's root seed) keys each image's stream-preprocessing crop and flip
        (:func:`crop_generator`): image ``k`` gets the same crop in every cell, block and worker.
        The centre kind does not use it.
        """
        crop = self.preprocessing.crop
        stream = self.preprocessing.kind == STREAM_PREPROCESSING and not self.preprocessing.whole_image
        images = np.empty((len(positions), crop, crop, 3), dtype=np.uint8)
        for slot, position in enumerate(positions):
            generator = crop_generator(seed, position) if stream else None
            images[slot] = load_preprocessed_image(
                self.root / self.relative_paths[position], self.preprocessing, generator
            )
        return images


def select_calibration_images(
    index: ImageIndex,
    count: int = DEFAULT_IMAGE_COUNT,
    seed: int = DEFAULT_SELECTION_SEED,
    preprocessing: Preprocessing = Preprocessing(),
) -> CalibrationImageSet:
    """Choose ``count`` images of ``index``, class-balanced, deterministically from ``seed``.

    Classes are visited round-robin in a seeded order; each visit takes the next image of that class
    in a seeded order, skipping classes that have run out. On ImageNet's validation set (1,000
    classes × 50 images) ``count=5000`` gives exactly 5 images per class.

    Args:
        index: the folder index (canonical order).
        count: number of images, in [1, len(index)].
        seed: non-negative integer; the same index, count and seed give the same images.
        preprocessing: stored with the set, used by :meth:`CalibrationImageSet.load`.

    Raises:
        ValueError: for a count outside [1, len(index)] or a negative seed.
    """
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= len(index):
        raise ValueError(f"images must be an integer in [1, {len(index)}] (the images of {index.root}), got {count!r}")
    check_non_negative_int("seed", seed)
    generator = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_SELECTION_STREAM,)))
    by_class: list[list[int]] = [[] for _ in index.classes]
    for position, image in enumerate(index.images):
        by_class[image.class_index].append(position)
    shuffled = [[members[k] for k in generator.permutation(len(members))] for members in by_class]
    class_order = generator.permutation(len(index.classes))
    chosen: list[int] = []
    depth = 0
    while len(chosen) < count:
        for class_index in class_order:
            if depth < len(shuffled[class_index]):
                chosen.append(shuffled[class_index][depth])
                if len(chosen) == count:
                    break
        depth += 1
    chosen.sort()
    return CalibrationImageSet(
        root=index.root,
        relative_paths=tuple(index.images[k].relative_path for k in chosen),
        labels=tuple(index.images[k].class_index for k in chosen),
        seed=seed,
        folder_checksum=index.checksum(),
        class_count=len(index.classes),
        preprocessing=preprocessing,
    )
