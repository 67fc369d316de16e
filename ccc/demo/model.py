"""The demo model: a small BatchNorm CNN for the 16 demo classes, and its checked weights.

Input: float images N×3×H×W in [0, 1] (224×224 in the benchmark); the ImageNet mean/std
normalisation is the model's first step, as for every model ``ccc.models`` builds. Output:
N×16 logits in :data:`ccc.demo.images.CLASS_NAMES` order. Four convolutions with BatchNorm and
ReLU (an 8×8 stride-4 stem, then 3×3 convolutions: stride 2, stride 2, stride 1; 24-48-96-96
channels), global average pooling, a linear head: about 47 million multiply-adds per 224×224
image, about 2 ms per image on one CPU core.

The weights file ships in this package (``demo_model.pt``); its sha256 is checked before loading.
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

    def __init__(self, num_classes: int = len(CLASS_NAMES)) -> None:
        super().__init__()
        check_integer("num_classes", num_classes, 2)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1))
        self.features = nn.Sequential(
            *_convolution(3, 24, 8, 4, 2),
            *_convolution(24, 48, 3, 2, 1),
            *_convolution(48, 96, 3, 2, 1),
            *_convolution(96, 96, 3, 1, 1),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Linear(96, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits N×classes for float images N×3×H×W in [0, 1] (H, W ≥ 32)."""
        return self.head(self.features((images - self.mean) / self.std))


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
        model: a :class:`DemoNet`.
        path: the weights file.
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
