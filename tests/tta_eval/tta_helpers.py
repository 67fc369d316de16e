"""Helpers of the tta_eval tests: tiny BatchNorm CNNs, a tiny ViT, a GroupNorm CNN and small constructed streams."""

from __future__ import annotations

import torch
from torch import nn
from torchvision.models import VisionTransformer

from tta_eval.methods import ResetPolicyWrapper

TINY_FACTORY = "tta_eval.synthetic:tiny_bn_cnn"
"""A 10-class BatchNorm CNN factory for ``--model`` (random initialisation)."""
SMALL_STREAM = "synthetic:num_batches=6,batch_size=16,domain_length=2,image_size=8"
"""A 96-sample synthetic stream for ``--stream``: 6 batches of 16 images of 8×8 pixels, 3 domains."""

TINY_VIT_FACTORY = "tests.tta_eval.tta_helpers:make_tiny_vit"
"""A 10-class tiny ViT factory for ``--model`` (32×32 images; random initialisation)."""
VIT_STREAM = "synthetic:num_batches=3,batch_size=8,domain_length=2,image_size=32"
"""A 24-sample synthetic stream of 32×32 images for the tiny ViT."""


def run_cli(capsys, *arguments: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    """Run ``tta-eval`` with ``arguments``; (exit code, stdout, stderr)."""
    from tta_eval.cli import main

    code = main(list(arguments))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def make_tiny_cnn(num_classes: int = 10, seed: int = 0) -> nn.Module:
    """A small BatchNorm CNN for 3×8×8 inputs with non-trivial BN statistics."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = nn.Sequential(
            nn.Conv2d(3, 6, 3, padding=1),
            nn.BatchNorm2d(6),
            nn.ReLU(),
            nn.Conv2d(6, 8, 3, stride=2, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(8, num_classes),
        )
        randomise_batchnorm(model, mean=0.5, variance=(0.5, 2.0), bias=0.2)
    return model.eval()


def randomise_batchnorm(model: nn.Module, mean: float, variance: tuple[float, float], bias: float) -> None:
    """Give every BatchNorm2d of ``model`` uniform random statistics and affine parameters (as if trained):
    running mean in [-mean, mean], running variance in ``variance``, weight in [0.5, 1.5], bias in [-bias, bias],
    drawn in that order from torch's global generator."""
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-mean, mean)
            module.running_var.uniform_(*variance)
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.uniform_(-bias, bias)


def make_tiny_vit(num_classes: int = 10, seed: int = 0) -> nn.Module:
    """A torchvision ``VisionTransformer`` for 3×32×32 inputs: patch 8, 2 layers, hidden size 32,
    2 heads, MLP size 64 (LayerNorm only, no BatchNorm), random weights from ``seed``, in eval mode."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = VisionTransformer(
            image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=num_classes
        )
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.data.uniform_(0.5, 1.5)
                module.bias.data.uniform_(-0.2, 0.2)
        nn.init.normal_(model.heads.head.weight, std=0.5)
    return model.eval()


def make_groupnorm_cnn(num_classes: int = 10, seed: int = 0) -> nn.Module:
    """A small GroupNorm CNN (no BatchNorm) for 3×H×W inputs, random weights from ``seed``, in eval mode."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.GroupNorm(2, 8),
            nn.ReLU(),
            nn.Conv2d(8, 8, 3, stride=2, padding=1),
            nn.GroupNorm(4, 8),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(8, num_classes),
        )
        for module in model.modules():
            if isinstance(module, nn.GroupNorm):
                module.weight.data.uniform_(0.5, 1.5)
                module.bias.data.uniform_(-0.2, 0.2)
    return model.eval()


def make_batches(
    count: int, batch_size: int = 16, num_classes: int = 10, seed: int = 1
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``count`` random (images in [0, 1] N×3×8×8, labels) batches."""
    generator = torch.Generator().manual_seed(seed)
    return [
        (
            torch.rand(batch_size, 3, 8, 8, generator=generator),
            torch.randint(0, num_classes, (batch_size,), generator=generator),
        )
        for _ in range(count)
    ]


def states_equal(first: dict, second: dict) -> bool:
    """Same keys and bit-identical tensors (state_dict comparison)."""
    return first.keys() == second.keys() and all(torch.equal(first[key], second[key]) for key in first)


def optimizer_of(method: nn.Module) -> torch.optim.Optimizer | None:
    """The optimiser of a method, looking through a reset policy's wrapper."""
    inner = method.method if isinstance(method, ResetPolicyWrapper) else method
    return inner.optimizer


def optimizer_states_equal(first: dict, second: dict) -> bool:
    """Bit-identical optimiser state dicts."""
    if first["state"].keys() != second["state"].keys():
        return False
    for key, values in first["state"].items():
        for name, value in values.items():
            other = second["state"][key][name]
            if isinstance(value, torch.Tensor):
                if not torch.equal(value, other):
                    return False
            elif value != other:
                return False
    return first["param_groups"] == second["param_groups"]


class ConstructedLogits(nn.Module):
    """Returns its input as logits exactly; a BatchNorm1d contributes 0·bn(x) so methods have parameters."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(classes)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits + 0.0 * self.norm(logits)


def assert_reset_matches_fresh(used: nn.Module, fresh: nn.Module, initial_state: dict, probe: torch.Tensor) -> None:
    """Call after ``used.reset()``: ``used`` holds ``initial_state`` with an empty optimiser, and gives
    the same logits on ``probe`` — and then the same state and optimiser — as the never-used ``fresh``."""
    assert states_equal(used.state_dict(), initial_state)
    if optimizer_of(used) is not None:
        assert optimizer_of(used).state_dict()["state"] == {}
    assert torch.equal(used(probe), fresh(probe))
    assert states_equal(used.state_dict(), fresh.state_dict())
    if optimizer_of(used) is not None:
        assert optimizer_states_equal(optimizer_of(used).state_dict(), optimizer_of(fresh).state_dict())
