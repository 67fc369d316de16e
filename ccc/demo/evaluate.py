"""Accuracy of a classifier on the demo images: clean and per corruption, centre, random or no crops.

Three ways of turning a source image into a model input:

- ``"centre"``: the calibration's preprocessing (shorter side to 256, centre crop 224; ImageNet-C's),
  then the corruption — what a calibration table measures;
- ``"random"``: the stream's (torchvision random-resized crop to 224, flip with probability 0.5),
  then the corruption, then a JPEG quality-85 round trip — what a stream shows;
- ``"whole"``: the image as it is, then the corruption (the 32×32 world's images with the ``cifar``
  set, as CIFAR-10-C).

All randomness comes from ``numpy.random.SeedSequence(seed, spawn_key=(purpose, image position,
corruption number))``, so a measurement is reproducible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from numpy.typing import NDArray
from PIL import Image
from torch import nn

from ccc.calibration.compute.imageset import Preprocessing
from ccc.calibration.table_io import STREAM_PREPROCESSING
from ccc.corruptions import CORRUPTIONS, corrupt
from ccc.stream.sources import ImageIndex

CROPS = ("centre", "random", "whole")
"""Input preparations: calibration-style centre crop, stream-style random-resized crop, the whole image."""

_PREPROCESSING = {"centre": Preprocessing(), "random": Preprocessing(kind=STREAM_PREPROCESSING)}

_CROP_PURPOSE = 0
_CORRUPTION_PURPOSE = 1


def prepare_image(image: Image.Image, crop: str, generator: np.random.Generator) -> NDArray[np.uint8]:
    """A uint8 H×W×3 input from a PIL image: ``crop`` is ``"centre"`` or ``"random"`` (224×224, box
    and flip from ``generator``) or ``"whole"`` (the image's own size, RGB, ``generator`` unused)."""
    if crop not in CROPS:
        raise ValueError(f"crop must be one of {', '.join(CROPS)}, got {crop!r}")
    if crop == "whole":
        return np.asarray(image.convert("RGB"))
    return _PREPROCESSING[crop].apply(image, generator)


@torch.inference_mode()
def predict(model: nn.Module, images: NDArray[np.uint8], batch_size: int = 100) -> NDArray[np.int64]:
    """Top-1 class of each uint8 N×H×W×3 image (given to ``model`` as float in [0, 1]); model left in eval mode."""
    model.eval()
    predictions = np.empty(len(images), dtype=np.int64)
    for start in range(0, len(images), batch_size):
        batch = (
            torch.from_numpy(np.ascontiguousarray(images[start : start + batch_size])).permute(0, 3, 1, 2).float()
            / 255.0
        )
        predictions[start : start + len(batch)] = model(batch).argmax(dim=1).numpy()
    return predictions


def measure_accuracies(
    model: nn.Module,
    index: ImageIndex,
    *,
    corruptions: Sequence[str] = CORRUPTIONS,
    severity: float = 3.0,
    crop: str = "centre",
    positions: Sequence[int] | None = None,
    seed: int = 0,
    corruption_set: str = "imagenet",
) -> Mapping[str, float]:
    """Top-1 accuracy (percent) of ``model`` on the clean images and under each corruption.

    Args:
        model: classifier taking float N×3×H×W in [0, 1] (224×224, or the images' size for ``"whole"``).
        index: the image folder's index (``ccc.stream.sources.index_image_folder``).
        corruptions: corruption names of ``corruption_set`` (``ccc.corruptions``), each applied alone.
        severity: severity in [0, 5] of every corruption.
        crop: ``"centre"`` (calibration-style), ``"random"`` (stream-style, with JPEG quality 85) or
            ``"whole"`` (the image as it is).
        positions: which images of ``index`` (default all).
        seed: root of the crop and corruption randomness, ≥ 0.
        corruption_set: whose corruption parameters (``ccc.corruptions.list_corruption_sets``);
            ``"cifar"`` needs 32×32 inputs.

    Returns:
        ``{"clean": accuracy, <corruption>: accuracy, …}`` in percent, in [0, 100].
    """
    if crop not in CROPS:
        raise ValueError(f"crop must be one of {', '.join(CROPS)}, got {crop!r}")
    chosen = list(range(len(index))) if positions is None else [int(position) for position in positions]
    if not chosen:
        raise ValueError("positions must select at least one image, got none")
    labels = np.array([index[position].class_index for position in chosen])
    inputs = []
    for position in chosen:
        generator = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_CROP_PURPOSE, position)))
        with Image.open(index.path(position)) as image:
            inputs.append(prepare_image(image, crop, generator))
    clean = np.stack(inputs)
    finish = _PREPROCESSING[crop].finish if crop in _PREPROCESSING else _unchanged
    accuracies = {"clean": _percent(predict(model, finish(clean)), labels)}
    for number, name in enumerate(corruptions):
        corrupted = np.stack(
            [
                corrupt(
                    image,
                    name,
                    severity,
                    corruption_set=corruption_set,
                    rng=np.random.default_rng(
                        np.random.SeedSequence(seed, spawn_key=(_CORRUPTION_PURPOSE, position, number))
                    ),
                )
                for position, image in zip(chosen, clean)
            ]
        )
        accuracies[name] = _percent(predict(model, finish(corrupted)), labels)
    return accuracies


def _unchanged(images: NDArray[np.uint8]) -> NDArray[np.uint8]:
    return images


def _percent(predictions: NDArray[np.int64], labels: NDArray[np.int64]) -> float:
    return float(100.0 * np.mean(predictions == labels))
