"""Glass blur's chain-following kernel: the composition's sources in Triton's interpreter (random offsets, the
longest chain, inactive passes), compiled for an H100 (sm_90), and the operator's shape on meta."""

from __future__ import annotations

import torch

from ccc.render_torch import blur

from .triton_kernels import compiled_for_hopper, interpreted, kernel_module

kernels = kernel_module("glass")


def _random_passes(height: int, width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Four passes: margins 1, 2, 4 and 3, offsets drawn in [-margin, margin) as glass blur draws them, the
    third pass inactive."""
    generator = torch.Generator().manual_seed(7)
    margins = torch.tensor([1, 2, 4, 3])
    spans = (2 * margins)[:, None, None, None]
    uniforms = torch.rand(4, height, width, 2, generator=generator)
    offsets = (uniforms * spans).floor().long() - margins[:, None, None, None]
    return offsets, margins, torch.tensor([True, True, False, True])


def _longest_chain(height: int, width: int, margin: int) -> torch.Tensor:
    """(dx, dy) = (1, 0) along each visited row and (-margin, 1) at its end: one chain through every visited
    pixel (test_blur.py's case)."""
    offsets = torch.zeros(1, height, width, 2, dtype=torch.int64)
    offsets[..., 0] = 1
    offsets[:, :, width - margin, :] = torch.tensor([-margin, 1])
    return offsets


def test_the_kernel_gives_the_compositions_sources() -> None:
    for height, width in ((13, 17), (9, 9), (20, 11)):
        offsets, margins, active = _random_passes(height, width)
        jumps = max(blur._glass_jumps(height, width, int(margin)) for margin in margins)
        expected = blur._composed_glass_sources(offsets, margins, active, jumps)
        with interpreted(kernels):
            assert torch.equal(kernels.glass_sources(offsets, margins, active), expected)
    height, width, margin = 16, 21, 3
    offsets, margins, active = _longest_chain(height, width, margin), torch.tensor([margin]), torch.tensor([True])
    expected = blur._composed_glass_sources(offsets, margins, active, blur._glass_jumps(height, width, margin))
    with interpreted(kernels):
        ours = kernels.glass_sources(offsets, margins, active)
    assert torch.equal(ours, expected)
    assert (ours[0] == ours[0, (margin + 1) * width + margin + 1]).sum() > 1  # chains were followed


def test_the_kernel_compiles_for_an_h100() -> None:
    offsets, margins, active = _random_passes(13, 17)
    [launch] = compiled_for_hopper(kernels, lambda: kernels.glass_sources(offsets, margins, active))
    assert launch["options"]["enable_fp_fusion"] is False
    assert ".target sm_90" in launch["asm"]["ptx"] and launch["asm"]["cubin"]


def test_the_operator_on_meta_gives_the_shape_of_its_result() -> None:
    offsets, margins, active = (tensor.to("meta") for tensor in _random_passes(13, 17))
    sources = blur.glass_sources(offsets, margins, active, 6)
    assert sources.shape == (4, 13 * 17) and sources.dtype == torch.int64
