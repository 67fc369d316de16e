"""A small synthetic stream with changing corruptions, and a tiny BatchNorm CNN trained on its clean images.

For demos, tests and benchmarks without ImageNet. Images are float tensors in [0, 1], N×3×S×S.
Each class has a fixed smooth colour pattern; a sample is its class pattern, randomly shifted by up
to 2 pixels, with random gain, offset and pixel noise. The stream is cut into domains of
``domain_length`` batches, domain d applying corruption ``corruptions[d % len(corruptions)]`` at
``severity``; metadata gives each sample's domain ("<corruption>-<severity>"), corruption and severity.
All randomness comes from ``numpy.random.SeedSequence(seed, spawn_key=...)``: class patterns use key
(0,), batch i uses key (1, i), so any batch can be generated alone and the stream is re-iterable.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ccc.validation import (
    MAX_BATCH_SIZE,
    MAX_IMAGE_SIZE,
    check_choice,
    check_in_range,
    check_integer,
    check_non_negative_int,
    check_positive_int,
)

SYNTHETIC_CORRUPTIONS = ("noise", "contrast", "brightness", "blur")
SYNTHETIC_SEVERITIES = (1, 2, 3, 4, 5)


@dataclass(frozen=True)
class SyntheticStreamSpec:
    """Parameters of a synthetic stream.

    num_classes >= 2; image_size >= 8 pixels; batch_size >= 1; num_batches >= 1; domain_length >= 1
    batches per domain; corruptions: names from SYNTHETIC_CORRUPTIONS (or "clean"); severity in
    [1, 5]; seed >= 0.
    """

    num_classes: int = 10
    image_size: int = 16
    batch_size: int = 64
    num_batches: int = 200
    domain_length: int = 50
    corruptions: tuple[str, ...] = SYNTHETIC_CORRUPTIONS
    severity: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        check_integer("num_classes", self.num_classes, 2)
        check_integer("image_size", self.image_size, 8, MAX_IMAGE_SIZE)
        check_positive_int("batch_size", self.batch_size, MAX_BATCH_SIZE)
        check_positive_int("num_batches", self.num_batches)
        check_positive_int("domain_length", self.domain_length)
        if not self.corruptions:
            raise ValueError("corruptions must name at least one corruption, got an empty list")
        for corruption in self.corruptions:
            check_choice("corruptions", corruption, (*SYNTHETIC_CORRUPTIONS, "clean"))
        check_in_range("severity", self.severity, 1, 5)
        check_non_negative_int("seed", self.seed)


def class_patterns(num_classes: int, image_size: int, seed: int) -> torch.Tensor:
    """One smooth colour pattern per class, values in [0.15, 0.85], shape classes×3×size×size."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0,)))
    coarse = torch.from_numpy(rng.uniform(0.15, 0.85, size=(num_classes, 3, 4, 4)).astype(np.float32))
    return F.interpolate(coarse, size=(image_size, image_size), mode="bilinear", align_corners=False)


def corrupt(images: torch.Tensor, corruption: str, severity: int, rng: np.random.Generator) -> torch.Tensor:
    """Apply a synthetic corruption of ``severity`` in [1, 5] to images in [0, 1]; result clipped to [0, 1]."""
    import torchvision.transforms.v2.functional as TF  # torchvision's import costs seconds: only when used

    if corruption == "clean":
        return images
    if corruption == "noise":
        noise = torch.from_numpy(rng.normal(0.0, 0.06 * severity, size=images.shape).astype(np.float32))
        return (images + noise).clamp(0.0, 1.0)
    if corruption == "contrast":
        mean = images.mean(dim=(1, 2, 3), keepdim=True)
        return (mean + (images - mean) * (1.0 - 0.17 * severity)).clamp(0.0, 1.0)
    if corruption == "brightness":
        return (images + 0.12 * severity).clamp(0.0, 1.0)
    if corruption == "blur":
        return TF.gaussian_blur(images, kernel_size=[7, 7], sigma=[0.4 * severity, 0.4 * severity])
    raise ValueError(f"corruption must be one of {', '.join(SYNTHETIC_CORRUPTIONS)}, clean; got {corruption!r}")


def clean_images(patterns: torch.Tensor, labels: np.ndarray, rng: np.random.Generator) -> torch.Tensor:
    """Uncorrupted samples of the given labels: shifted class pattern, gain, offset, noise; in [0, 1]."""
    count = labels.shape[0]
    images = patterns[torch.from_numpy(labels)]
    size = patterns.shape[-1]
    shifts = torch.from_numpy(rng.integers(-2, 3, size=(count, 2)))
    pixel = torch.arange(size)
    rows = (pixel.view(1, -1) - shifts[:, :1]) % size
    columns = (pixel.view(1, -1) - shifts[:, 1:]) % size
    images = images[
        torch.arange(count).view(-1, 1, 1, 1),
        torch.arange(3).view(1, -1, 1, 1),
        rows.view(count, 1, size, 1),
        columns.view(count, 1, 1, size),
    ]
    gain = torch.from_numpy(rng.uniform(0.8, 1.2, size=(count, 1, 1, 1)).astype(np.float32))
    offset = torch.from_numpy(rng.uniform(-0.1, 0.1, size=(count, 1, 1, 1)).astype(np.float32))
    noise = torch.from_numpy(rng.normal(0.0, 0.05, size=images.shape).astype(np.float32))
    return (images * gain + offset + noise).clamp(0.0, 1.0)


class SyntheticStream:
    """Re-iterable stream of (images, labels, metadata) batches described by a SyntheticStreamSpec."""

    def __init__(self, spec: SyntheticStreamSpec) -> None:
        self.spec = spec
        self.patterns = class_patterns(spec.num_classes, spec.image_size, spec.seed)

    def __len__(self) -> int:
        return self.spec.num_batches

    def domain_of_batch(self, batch_index: int) -> tuple[str, int]:
        """(corruption, severity) applied to batch ``batch_index``."""
        spec = self.spec
        corruption = spec.corruptions[(batch_index // spec.domain_length) % len(spec.corruptions)]
        return corruption, spec.severity

    def batch(self, batch_index: int) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Batch ``batch_index``: images (N×3×S×S in [0, 1]), labels (N,), metadata (per-sample lists)."""
        spec = self.spec
        rng = np.random.default_rng(np.random.SeedSequence(spec.seed, spawn_key=(1, batch_index)))
        labels = rng.integers(0, spec.num_classes, size=spec.batch_size)
        corruption, severity = self.domain_of_batch(batch_index)
        images = corrupt(clean_images(self.patterns, labels, rng), corruption, severity, rng)
        domain = f"{corruption}-{severity}"
        metadata = {
            "domain": [domain] * spec.batch_size,
            "corruption": [corruption] * spec.batch_size,
            "severity": [severity] * spec.batch_size,
        }
        return images, torch.from_numpy(labels), metadata

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, dict[str, Any]]]:
        for batch_index in range(self.spec.num_batches):
            yield self.batch(batch_index)


def tiny_bn_cnn(num_classes: int = 10, width: int = 8) -> nn.Module:
    """A three-convolution BatchNorm CNN for small images (random initialisation)."""
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(2 * width),
        nn.ReLU(),
        nn.Conv2d(2 * width, 2 * width, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(2 * width),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2 * width, num_classes),
    )


def train_source_model(
    spec: SyntheticStreamSpec, steps: int = 150, learning_rate: float = 0.02, seed: int = 0
) -> nn.Module:
    """Train ``tiny_bn_cnn`` with Adam on clean images of ``spec``'s classes; returns it in eval mode.

    The global torch random state is restored afterwards (initialisation uses ``seed``).
    """
    check_positive_int("steps", steps)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = tiny_bn_cnn(spec.num_classes)
    patterns = class_patterns(spec.num_classes, spec.image_size, spec.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    rng = np.random.default_rng(np.random.SeedSequence(spec.seed, spawn_key=(2, seed)))
    model.train()
    for _ in range(steps):
        labels = rng.integers(0, spec.num_classes, size=spec.batch_size)
        images = clean_images(patterns, labels, rng)
        loss = F.cross_entropy(model(images), torch.from_numpy(labels))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return model.eval()


@functools.lru_cache(maxsize=1)
def _pretrained_default() -> nn.Module:
    return train_source_model(SyntheticStreamSpec())


def pretrained_tiny_cnn() -> nn.Module:
    """Factory for ``--model tta_eval.synthetic:pretrained_tiny_cnn``: the tiny CNN trained on the
    default synthetic stream's clean images (10 classes, 16×16; about a second on a CPU)."""
    return copy.deepcopy(_pretrained_default())
