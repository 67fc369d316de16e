"""The demo models: small BatchNorm CNNs for the 16 demo classes, and their checked weights.

Input: float images N×3×H×W in [0, 1]; the ImageNet mean/std normalisation is the model's first
step, as for every model ``ccc.models`` builds. Output: N×16 logits in
:data:`ccc.demo.images.CLASS_NAMES` order. Four convolutions with BatchNorm and ReLU, global
average pooling, a linear head:

- :class:`DemoNet` (the ``imagenet`` world, 224×224 inputs): an 8×8 stride-4 stem, then 3×3
  convolutions: stride 2, stride 2, stride 1; 24-48-96-96 channels; about 47 million multiply-adds
  per image, about 2 ms per image on one CPU core;
- :class:`DemoNetCifar` (the ``cifar`` world, 32×32 inputs): 3×3 convolutions, stride 1, 2, 2, 1;
  16-32-64-64 channels; about 5.2 million multiply-adds per image.

The weights files ship in this package (``demo_model.pt``, ``demo_model_cifar.pt``); their sha256
is checked before loading.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch
from torch import nn

from ccc.demo.images import CLASS_NAMES
from ccc.pickles import load_torch_file
from ccc.validation import check_integer

DEMO_WEIGHTS_PATH = Path(__file__).with_name("demo_model.pt")
"""The trained weights (a state_dict saved with ``torch.save``), written by ``scripts/train_demo_model.py``."""

DEMO_WEIGHTS_SHA256 = "28d577aa7a35a14fd25c095ef213febe200f0ebbaea41e9ac10752b998681944"
"""sha256 of :data:`DEMO_WEIGHTS_PATH`; a file with another checksum is refused."""

DEMO_CIFAR_WEIGHTS_PATH = Path(__file__).with_name("demo_model_cifar.pt")
"""The 32×32 world's trained weights (a :class:`DemoNetCifar` state_dict), written by
``scripts/train_demo_model.py --world cifar``."""

DEMO_CIFAR_WEIGHTS_SHA256 = "95142d2234dd1ec8ea5f8f62719951c70719b98a7b6b12b0be334c738f799f70"
"""sha256 of :data:`DEMO_CIFAR_WEIGHTS_PATH`; a file with another checksum is refused."""

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class WeightsChecksumError(ValueError):
    """A weights file's sha256 differs from the expected one (damaged or replaced file)."""


def _convolution(in_channels: int, out_channels: int, kernel: int, stride: int, padding: int) -> list[nn.Module]:
    return [
        nn.Conv2d(in_channels, out_channels, kernel, stride=stride, padding=padding, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    ]


class DemoNet(nn.Module):
    """The demo CNN: normalisation, 4 convolution-BatchNorm-ReLU layers, global pooling, linear head.

    Args:
        num_classes: output logits, ≥ 2 (16 for the demo world).
    """

    LAYERS: tuple[tuple[int, int, int, int, int], ...] = (
        (3, 24, 8, 4, 2),
        (24, 48, 3, 2, 1),
        (48, 96, 3, 2, 1),
        (96, 96, 3, 1, 1),
    )
    """(in channels, out channels, kernel, stride, padding) of each convolution."""

    def __init__(self, num_classes: int = len(CLASS_NAMES)) -> None:
        super().__init__()
        check_integer("num_classes", num_classes, 2)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1))
        layers = [module for layer in self.LAYERS for module in _convolution(*layer)]
        self.features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(self.LAYERS[-1][1], num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits N×classes for float images N×3×H×W in [0, 1] (H, W ≥ 32 for DemoNet, ≥ 8 for DemoNetCifar)."""
        return self.head(self.features((images - self.mean) / self.std))


class DemoNetCifar(DemoNet):
    """The 32×32 world's CNN: :class:`DemoNet`'s structure with 3×3 convolutions of stride 1, 2, 2, 1
    and 16-32-64-64 channels (about 5.2 million multiply-adds per 32×32 image, 62 k parameters).

    Args:
        num_classes: output logits, ≥ 2 (16 for the demo world).
    """

    LAYERS = (
        (3, 16, 3, 1, 1),
        (16, 32, 3, 2, 1),
        (32, 64, 3, 2, 1),
        (64, 64, 3, 1, 1),
    )


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 (hex) of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_demo_weights(
    model: nn.Module,
    path: str | os.PathLike[str] = DEMO_WEIGHTS_PATH,
    expected_sha256: str | None = DEMO_WEIGHTS_SHA256,
) -> nn.Module:
    """Load a state_dict file into ``model`` after checking the file's sha256; returns ``model``.

    Args:
        model: a :class:`DemoNet` or :class:`DemoNetCifar`, matching the file.
        path: the weights file (:data:`DEMO_WEIGHTS_PATH`, :data:`DEMO_CIFAR_WEIGHTS_PATH`).
        expected_sha256: 64 hex digits the file must hash to; None skips the check (for a freshly
            trained file).

    Raises:
        FileNotFoundError: the file does not exist.
        WeightsChecksumError: the file's sha256 differs from ``expected_sha256``.
        ValueError: the file does not hold a matching state_dict.
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"demo model weights {file} do not exist (train them with scripts/train_demo_model.py)")
    if expected_sha256 is not None:
        actual = file_sha256(file)
        if actual != expected_sha256:
            raise WeightsChecksumError(
                f"demo model weights {file} must have sha256 {expected_sha256}, got {actual} "
                "(the file is damaged or was replaced; restore it from the package)"
            )
    state = load_torch_file(file, "demo model weights")
    if not isinstance(state, dict):
        raise ValueError(f"demo model weights {file} must hold a state_dict, got {type(state).__name__}")
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        raise ValueError(f"demo model weights {file} do not match the model: {error}") from None
    return model


def demo_model() -> nn.Module:
    """The trained demo model in evaluation mode, on the CPU, weights checked.

    Usable as the model factory ``"ccc.demo:demo_model"`` wherever a ``ccc.models.ModelSpec``
    name is accepted (``ccc-calibrate compute --model ccc.demo:demo_model``, ``tta-eval run``).
    Input: float N×3×H×W in [0, 1]; output: N×16 logits.
    """
    return load_demo_weights(DemoNet()).eval()


def demo_model_cifar() -> nn.Module:
    """The trained 32×32 demo model (:class:`DemoNetCifar`) in evaluation mode, on the CPU, weights checked.

    Usable as the model factory ``"ccc.demo:demo_model_cifar"``. Input: float N×3×32×32 in [0, 1];
    output: N×16 logits.
    """
    return load_demo_weights(DemoNetCifar(), DEMO_CIFAR_WEIGHTS_PATH, DEMO_CIFAR_WEIGHTS_SHA256).eval()
