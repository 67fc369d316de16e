"""Helpers of the method tests: the one table of per-method test options, building a method for a test,
and small models with named stages."""

from __future__ import annotations

import copy
from collections import OrderedDict
from pathlib import Path

import torch
from torch import nn

from tests.tta_eval.tta_helpers import make_batches
from tta_eval.methods import compute_source_statistics, create, get_method

TEST_OPTIONS: dict[str, dict] = {
    "eta": {"entropy_margin_fraction": 1.0, "redundancy_margin": 1.0},
    "rdumb": {"entropy_margin_fraction": 1.0, "redundancy_margin": 1.0},
    "rdumbpp": {"entropy_margin_fraction": 1.0, "redundancy_margin": 1.0},
    "asr": {"entropy_margin_fraction": 1.0, "redundancy_margin": 1.0},
    "eata": {"entropy_margin_fraction": 1.0, "redundancy_margin": 1.0, "fisher_samples": 24},
    "cotta": {"augmentation_threshold": 1.0, "augmentation_count": 2},
    "pl": {"confidence_threshold": 0.0},
    "sar": {"entropy_margin_fraction": 1.0},
    "deyo": {"filter_margin_fraction": 1.0, "plpd_threshold": -1.0},
    "memo": {"augmentation_count": 2},
    "rotta": {"update_every": 8},
    "ttac_nq": {"confidence_threshold": 0.0},
}
"""Options that make a method adapt on a random tiny CNN, whose predictions are nearly uniform: the
filters accept every sample, CoTTA augments (2 views), MEMO uses few views, RoTTA updates every 8
samples. The only place tests name methods for the contract tests; a method without an entry runs with
its defaults."""


def statistics_file(model: nn.Module, folder: Path) -> str:
    """Source statistics of ``model`` on 48 random images, saved in ``folder``; returns the path."""
    path = folder / "source.ttac.pt"
    compute_source_statistics(model, [images for images, _ in make_batches(3, seed=7)]).save(path)
    return str(path)


def build(name: str, model: nn.Module, statistics_path: str | None = None, **extra) -> nn.Module:
    """``create`` with the method's TEST_OPTIONS and ``extra``; a method with a ``source_statistics``
    option gets ``statistics_path``."""
    options = {**TEST_OPTIONS.get(name, {}), **extra}
    if "source_statistics" in get_method(name).option_names():
        options.setdefault("source_statistics", statistics_path)
    return create(name, model, **options)


def prepared(method: nn.Module) -> nn.Module:
    """``method`` after its stream preparation (EATA's Fisher) on 48 random images, if it needs one."""
    if getattr(method, "preparation_samples", 0):
        method.prepare(images for images, _ in make_batches(3, seed=99))
    return method


def batch_statistics_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose BatchNorm layers normalise with batch statistics (the methods' mode)."""
    reference = copy.deepcopy(model).eval()
    for module in reference.modules():
        if isinstance(module, nn.BatchNorm2d | nn.BatchNorm1d):
            module.train()
    return reference


def make_staged_cnn(num_classes: int = 10, seed: int = 0) -> nn.Module:
    """A tiny CNN with ResNet-like stage names (layer1, layer4, fc) and a GroupNorm, for 3×8×8 inputs."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = nn.Sequential(
            OrderedDict(
                [
                    ("layer1", nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU())),
                    ("layer40", nn.Sequential(nn.Conv2d(6, 6, 3, padding=1), nn.GroupNorm(2, 6), nn.ReLU())),
                    ("layer4", nn.Sequential(nn.Conv2d(6, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU())),
                    ("pool", nn.AdaptiveAvgPool2d(1)),
                    ("flatten", nn.Flatten()),
                    ("fc", nn.Linear(8, num_classes)),
                ]
            )
        )
    return model.eval()
