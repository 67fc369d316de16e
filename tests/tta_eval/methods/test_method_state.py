"""A used method's state is tensors and plain values (``method_state_dict``): read back with
``torch.load(weights_only=True)`` into a method built anew, it continues exactly as the original.
Checked for each name in ``list_methods()``: this is what a resumed run relies on."""

from __future__ import annotations

import io

import pytest
import torch

from tests.tta_eval.method_helpers import build, prepared, statistics_file
from tests.tta_eval.tta_helpers import make_batches
from tta_eval.methods import list_methods
from tta_eval.methods.base import load_method_state_dict, method_state_dict


def continued(method: torch.nn.Module, batches: list[torch.Tensor]) -> list[torch.Tensor]:
    """Logits of ``method`` on ``batches``, then after a reset on the first again; global RNGs seeded."""
    logits = []
    with torch.random.fork_rng():
        torch.manual_seed(5)
        for images in batches:
            logits.append(method(images))
        method.reset()
        logits.append(method(batches[0]))
    return logits


@pytest.mark.parametrize("name", list_methods())
def test_a_used_methods_state_reloads_with_weights_only_and_continues_identically(name, tiny_cnn, tmp_path):
    statistics = statistics_file(tiny_cnn, tmp_path)
    images = [batch for batch, _ in make_batches(6)]
    used = prepared(build(name, tiny_cnn, statistics))
    with torch.random.fork_rng():
        torch.manual_seed(3)
        for batch in images[:3]:
            used(batch)
    buffer = io.BytesIO()
    torch.save(method_state_dict(used), buffer)
    buffer.seek(0)
    rebuilt = build(name, tiny_cnn, statistics)
    load_method_state_dict(rebuilt, torch.load(buffer, weights_only=True))
    expected, actual = continued(used, images[3:]), continued(rebuilt, images[3:])
    for step, (first, second) in enumerate(zip(expected, actual, strict=True)):
        assert torch.equal(first, second), f"{name}: logits differ at step {step} after reloading"
