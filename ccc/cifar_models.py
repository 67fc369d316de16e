"""The CIFAR backbones of continual test-time adaptation, with the parameter names of RobustBench's
checkpoints, so that a user's weights file of RobustBench loads unchanged.

- :class:`WideResNet`: WideResNet-28-10 is RobustBench's CIFAR-10 ``Standard`` model (the model of
  CIFAR-10-C in Tent, CoTTA, EATA, RDumb, ROID and mariodoebler/test-time-adaptation); it takes
  images in [0, 1] with no input normalisation.
- :class:`WideResNet` again: WideResNet-40-2 is RobustBench's ``Hendrycks2020AugMix_WRN`` (CIFAR-10 and
  CIFAR-100), trained by AugMix on images normalised with mean 0.5 and std 0.5 per channel.
- :class:`CifarResNeXt`: ResNeXt-29 is RobustBench's ``Hendrycks2020AugMix_ResNeXt`` (CIFAR-10 and
  CIFAR-100; the model of CIFAR-100-C in the same works), trained by AugMix on images normalised
  with mean 0.5 and std 0.5 per channel. Its blocks have 4 groups of 32 channels (AugMix's
  ``resnext29(cardinality=4, base_width=32)``), which RobustBench's leaderboard calls "ResNeXt29_32x4d".

The modules here hold no input normalisation (RobustBench's checkpoints hold none either): the
architectures' :data:`CIFAR_ARCHITECTURES` entries name it and ``ccc.models`` wraps the network in a
``NormalizedClassifier``. Every module holds plain torch layers only; the attribute names (``convShortcut``
included) are those of the checkpoints' keys.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

CIFAR_CLASS_COUNTS = {"cifar10": 10, "cifar100": 100}
"""Number of classes of each CIFAR dataset, by the prefix of a model name (``cifar10:wrn28_10``)."""


def _initialise(network: nn.Module) -> None:
    """He-normal convolutions (fan-out), BatchNorm weight 1 and bias 0, linear bias 0: the initialisation
    of the public definitions, so that a model with random weights (``--weights none``) behaves like theirs."""
    for module in network.modules():
        if isinstance(module, nn.Conv2d):
            fan_out = module.kernel_size[0] * module.kernel_size[1] * module.out_channels
            nn.init.normal_(module.weight, 0.0, math.sqrt(2.0 / fan_out))
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)


class WideBasicBlock(nn.Module):
    """A pre-activation residual block of two 3×3 convolutions (BN-ReLU-conv, twice).

    in_channels, out_channels >= 1; stride 1 or 2 (of the first convolution). When the channel count
    changes, the shortcut is a 1×1 convolution (``convShortcut``) of the pre-activated input;
    otherwise it is the input itself.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=False)
        self.convShortcut = (
            nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False) if in_channels != out_channels else None
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """N×in_channels×H×W features to N×out_channels×(H/stride)×(W/stride)."""
        activated = F.relu(self.bn1(features))
        residual = F.relu(self.bn2(self.conv1(activated)))
        residual = self.conv2(residual)
        shortcut = features if self.convShortcut is None else self.convShortcut(activated)
        return shortcut + residual


class WideStage(nn.Module):
    """``blocks`` (>= 1) wide blocks in ``layer`` (an ``nn.Sequential``); the first one changes the
    channel count and applies ``stride``."""

    def __init__(self, blocks: int, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.layer = nn.Sequential(
            *(
                WideBasicBlock(in_channels if index == 0 else out_channels, out_channels, stride if index == 0 else 1)
                for index in range(blocks)
            )
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """The stage's output features."""
        return self.layer(features)


class WideResNet(nn.Module):
    """WideResNet-``depth``-``widen_factor`` for 32×32 images (Zagoruyko & Komodakis 2016), as
    RobustBench's ``WideResNet`` (its ``Standard`` CIFAR-10 model: depth 28, widen factor 10; 36.5 M
    parameters for 10 classes).

    depth: 6·n + 4 for n >= 1 blocks per stage (10, 16, 22, 28, 34, 40, ...); widen_factor >= 1: the
    stages have 16·k, 32·k and 64·k channels; num_classes >= 1. Input: N×3×H×W (32×32 for the
    published weights; the head averages the last feature map, whatever its size). Output: N×num_classes
    logits. State-dict keys: ``conv1``, ``block{1,2,3}.layer.{i}.{bn1,conv1,bn2,conv2,convShortcut}``,
    ``bn1``, ``fc``.
    """

    def __init__(self, depth: int = 28, widen_factor: int = 10, num_classes: int = 10) -> None:
        super().__init__()
        if depth < 10 or (depth - 4) % 6:
            raise ValueError(f"WideResNet depth must be 6·n + 4 with n >= 1 (10, 16, 22, 28, ...), got {depth}")
        if widen_factor < 1 or num_classes < 1:
            raise ValueError(
                f"WideResNet widen_factor and num_classes must be >= 1, got {widen_factor} and {num_classes}"
            )
        blocks = (depth - 4) // 6
        widths = (16, 16 * widen_factor, 32 * widen_factor, 64 * widen_factor)
        self.conv1 = nn.Conv2d(3, widths[0], 3, stride=1, padding=1, bias=False)
        self.block1 = WideStage(blocks, widths[0], widths[1], stride=1)
        self.block2 = WideStage(blocks, widths[1], widths[2], stride=2)
        self.block3 = WideStage(blocks, widths[2], widths[3], stride=2)
        self.bn1 = nn.BatchNorm2d(widths[3])
        self.fc = nn.Linear(widths[3], num_classes)
        _initialise(self)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×num_classes) of N×3×H×W images (as the weights expect them: [0, 1] for ``Standard``)."""
        features = self.block3(self.block2(self.block1(self.conv1(images))))
        features = F.relu(self.bn1(features))
        return self.fc(features.mean(dim=(2, 3)))


class ResNeXtBottleneck(nn.Module):
    """A ResNeXt bottleneck (type C: grouped 3×3 convolution) with post-activation.

    in_channels >= 1; planes: the stage's base width (its output has 4·planes channels); cardinality
    >= 1 groups of ``floor(planes · base_width / 64)`` channels each; stride 1 or 2. ``downsample``
    (a 1×1 convolution and a BatchNorm, or None for the identity) maps the input to the shortcut.
    """

    expansion = 4

    def __init__(
        self,
        in_channels: int,
        planes: int,
        cardinality: int,
        base_width: int,
        stride: int,
        downsample: nn.Module | None,
    ) -> None:
        super().__init__()
        grouped = (planes * base_width // 64) * cardinality
        self.conv_reduce = nn.Conv2d(in_channels, grouped, 1, bias=False)
        self.bn_reduce = nn.BatchNorm2d(grouped)
        self.conv_conv = nn.Conv2d(grouped, grouped, 3, stride=stride, padding=1, groups=cardinality, bias=False)
        self.bn = nn.BatchNorm2d(grouped)
        self.conv_expand = nn.Conv2d(grouped, planes * self.expansion, 1, bias=False)
        self.bn_expand = nn.BatchNorm2d(planes * self.expansion)
        self.downsample = downsample

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """N×in_channels×H×W features to N×(4·planes)×(H/stride)×(W/stride)."""
        residual = F.relu(self.bn_reduce(self.conv_reduce(features)))
        residual = F.relu(self.bn(self.conv_conv(residual)))
        residual = self.bn_expand(self.conv_expand(residual))
        shortcut = features if self.downsample is None else self.downsample(features)
        return F.relu(shortcut + residual)


class CifarResNeXt(nn.Module):
    """ResNeXt-``depth`` for 32×32 images (Xie et al. 2017), as RobustBench's ``CifarResNeXt`` (its
    ``Hendrycks2020AugMix_ResNeXt``: depth 29, cardinality 4, base width 32; 6.8 M parameters for 10
    classes, 6.9 M for 100).

    depth: 9·n + 2 for n >= 1 blocks per stage (11, 20, 29, ...); cardinality >= 1 groups; base_width
    >= 1 channels per group at the first stage (the stages have base planes 64, 128 and 256, outputs
    of 256, 512 and 1024 channels); num_classes >= 1. Input: N×3×H×W (32×32 for the published
    weights, normalised by the caller: mean 0.5, std 0.5 for AugMix's). Output: N×num_classes logits.
    State-dict keys: ``conv_1_3x3``, ``bn_1``, ``stage_{1,2,3}.{i}.{conv_reduce,bn_reduce,conv_conv,bn,
    conv_expand,bn_expand}``, ``stage_{1,2,3}.0.downsample.{0,1}``, ``classifier``.
    """

    def __init__(self, depth: int = 29, cardinality: int = 4, base_width: int = 32, num_classes: int = 10) -> None:
        super().__init__()
        if depth < 11 or (depth - 2) % 9:
            raise ValueError(f"CifarResNeXt depth must be 9·n + 2 with n >= 1 (11, 20, 29, ...), got {depth}")
        if min(cardinality, base_width, num_classes) < 1:
            raise ValueError(
                "CifarResNeXt cardinality, base_width and num_classes must be >= 1, "
                f"got {cardinality}, {base_width} and {num_classes}"
            )
        blocks = (depth - 2) // 9
        self.conv_1_3x3 = nn.Conv2d(3, 64, 3, stride=1, padding=1, bias=False)
        self.bn_1 = nn.BatchNorm2d(64)
        in_channels = 64
        stages = []
        for planes, stride in ((64, 1), (128, 2), (256, 2)):
            stage, in_channels = _resnext_stage(in_channels, planes, blocks, cardinality, base_width, stride)
            stages.append(stage)
        self.stage_1, self.stage_2, self.stage_3 = stages
        self.classifier = nn.Linear(in_channels, num_classes)
        _initialise(self)
        nn.init.kaiming_normal_(self.classifier.weight)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×num_classes) of N×3×H×W normalised images."""
        features = F.relu(self.bn_1(self.conv_1_3x3(images)))
        features = self.stage_3(self.stage_2(self.stage_1(features)))
        return self.classifier(features.mean(dim=(2, 3)))


def _resnext_stage(
    in_channels: int, planes: int, blocks: int, cardinality: int, base_width: int, stride: int
) -> tuple[nn.Sequential, int]:
    """``blocks`` bottlenecks (the first with ``stride`` and a projection shortcut when the shape
    changes) and the stage's output channel count."""
    out_channels = planes * ResNeXtBottleneck.expansion
    downsample = None
    if stride != 1 or in_channels != out_channels:
        downsample = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False), nn.BatchNorm2d(out_channels)
        )
    layers = [ResNeXtBottleneck(in_channels, planes, cardinality, base_width, stride, downsample)]
    layers += [ResNeXtBottleneck(out_channels, planes, cardinality, base_width, 1, None) for _ in range(1, blocks)]
    return nn.Sequential(*layers), out_channels


@dataclass(frozen=True)
class CifarArchitecture:
    """A named CIFAR architecture: ``build(num_classes)`` makes it with random weights; ``mean`` and
    ``std`` (per RGB channel, for images in [0, 1]) are the input normalisation of its published
    weights, None for none."""

    name: str
    build: Callable[[int], nn.Module]
    mean: tuple[float, float, float] | None
    std: tuple[float, float, float] | None
    weights: str
    """Which public weights files fit, e.g. "RobustBench's CIFAR-10 Standard.pt" (for messages)."""


AUGMIX_MEAN = (0.5, 0.5, 0.5)
AUGMIX_STD = (0.5, 0.5, 0.5)
"""AugMix's CIFAR input normalisation (``Normalize([0.5] * 3, [0.5] * 3)``, RobustBench's mu and sigma)."""

CIFAR_ARCHITECTURES = {
    architecture.name: architecture
    for architecture in (
        CifarArchitecture(
            "wrn28_10",
            lambda num_classes: WideResNet(28, 10, num_classes),
            None,
            None,
            "RobustBench's CIFAR-10 Standard.pt",
        ),
        CifarArchitecture(
            "wrn40_2",
            lambda num_classes: WideResNet(40, 2, num_classes),
            AUGMIX_MEAN,
            AUGMIX_STD,
            "RobustBench's Hendrycks2020AugMix_WRN.pt",
        ),
        CifarArchitecture(
            "resnext29",
            lambda num_classes: CifarResNeXt(29, 4, 32, num_classes),
            AUGMIX_MEAN,
            AUGMIX_STD,
            "RobustBench's Hendrycks2020AugMix_ResNeXt.pt",
        ),
    )
}
"""The named architectures, by the name after a ``cifar10:`` or ``cifar100:`` prefix."""
