"""Helpers of the tests of the time-constrained papers' methods (AdaBN … TTAC-NQ)."""

from __future__ import annotations

import copy
from collections import OrderedDict
from pathlib import Path

import torch
from torch import nn
from tta_helpers import make_batches

from tta_eval.methods import compute_source_statistics, create

EXTRA_METHODS = ["adabn", "lame", "neo", "pl", "shot_im", "shot", "sar", "deyo", "memo", "rotta", "cmf", "ttac_nq"]

# Options that make every method adapt on a random tiny CNN (its predictions are nearly uniform):
# filters accept every sample, MEMO uses few views, RoTTA updates every 8 samples.
ADAPTING_OPTIONS: dict[str, dict] = {
    "pl": {"confidence_threshold": 0.0},
    "sar": {"entropy_margin_fraction": 1.0},
    "deyo": {"filter_margin_fraction": 1.0, "plpd_threshold": -1.0},
    "memo": {"augmentation_count": 2},
    "rotta": {"update_every": 8},
    "ttac_nq": {"confidence_threshold": 0.0},
}


def statistics_file(model: nn.Module, folder: Path) -> str:
    """Source statistics of ``model`` on 48 random images, saved in ``folder``; returns the path."""
    path = folder / "source.ttac.pt"
    compute_source_statistics(model, [images for images, _ in make_batches(3, seed=7)]).save(path)
    return str(path)


def build(name: str, model: nn.Module, statistics_path: str | None = None, **extra) -> nn.Module:
    """``create`` with the adapting options (and the statistics file for ttac_nq)."""
    options = {**ADAPTING_OPTIONS.get(name, {}), **extra}
    if name == "ttac_nq":
        options.setdefault("source_statistics", statistics_path)
    return create(name, model, **options)


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
