"""Fog's diamond-square level kernel: the composition's bits in Triton's interpreter, level after level from
random coarse maps (both dtypes, sides 16 and 32, draws laid end to end as the random streams lay them),
compiled for an H100 (sm_90) without fused multiply-add, and the operator on meta."""

from __future__ import annotations

import pytest
import torch

from ccc.render_torch import weather

from .triton_kernels import compiled_for_hopper, fast_math_instructions, interpreted, kernel_module

kernels = kernel_module("plasma")

_INTEGER_VIEWS = {torch.float32: torch.int32, torch.float64: torch.int64}

DTYPES = [torch.float64, torch.float32]


def _coarse_map(size: int, first: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """(2, size, size) zeros but every ``size >> first``-th row and column: random values of several
    magnitudes (the sums round differently in another order)."""
    generator = torch.Generator().manual_seed(seed)
    height_map = torch.zeros((2, size, size), dtype=torch.float64)
    spacing = size >> first
    coarse = torch.randn((2, 1 << first, 1 << first), generator=generator, dtype=torch.float64)
    height_map[:, ::spacing, ::spacing] = coarse * 10.0 ** torch.randint(-3, 4, coarse.shape, generator=generator)
    return height_map.to(dtype)


def _level_inputs(size: int, first: int, dtype: torch.dtype, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per level from ``first`` on: its (2, 3) scales (a view into all levels' :func:`weather.plasma_scales`) and
    its (2, 3, s, s) uniform draws, a view into one (2, N) buffer of all levels' draws."""
    generator = torch.Generator().manual_seed(seed + 1)
    levels = size.bit_length() - 1
    decay = torch.tensor([1.7, 2.9], dtype=torch.float64).to(dtype)
    scales = weather.plasma_scales(decay, levels)
    sides = [1 << level for level in range(first, levels)]
    buffer = torch.rand((2, sum(3 * side * side for side in sides)), generator=generator, dtype=torch.float64)
    fields = torch.split(buffer.to(dtype), [3 * side * side for side in sides], dim=1)
    draws = [field.unflatten(1, (3, side, side)) for field, side in zip(fields, sides)]
    return [(scales[:, first + level], level_draws) for level, level_draws in enumerate(draws)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_kernel_gives_the_compositions_bits_level_after_level(dtype: torch.dtype) -> None:
    for size, first, seed in ((16, 0, 0), (16, 2, 1), (32, 1, 2)):
        composed = _coarse_map(size, first, dtype, seed)
        ours = composed.clone()
        for scales, draws in _level_inputs(size, first, dtype, seed):
            step = size // draws.shape[-1]
            weather._composed_diamond_square_level(composed, scales, draws, step)
            with interpreted(kernels):
                kernels.diamond_square_level(ours, scales, draws, step)
            view = _INTEGER_VIEWS[dtype]
            assert torch.equal(ours.view(view), composed.view(view)), (size, first, step)
        assert (composed != 0).all()  # every point was set


def test_the_kernel_compiles_for_an_h100_without_fused_multiply_add() -> None:
    def launch() -> None:
        for dtype in DTYPES:
            height_map = _coarse_map(16, 2, dtype, seed=0)
            scales, draws = _level_inputs(16, 2, dtype, seed=0)[0]
            kernels.diamond_square_level(height_map, scales, draws, 4)

    launches = compiled_for_hopper(kernels, launch)
    assert len(launches) == 2
    for compiled in launches:
        ptx = compiled["asm"]["ptx"]
        assert compiled["options"]["enable_fp_fusion"] is False
        assert ".target sm_90" in ptx and compiled["asm"]["cubin"]
        assert "fma" not in ptx and not fast_math_instructions(compiled["asm"]["llir"])


def test_the_operator_on_meta_leaves_the_map_as_it_is() -> None:
    height_map = torch.empty((2, 16, 16), dtype=torch.float64, device="meta")
    scales, draws = torch.empty((2, 3), device="meta"), torch.empty((2, 3, 4, 4), device="meta")
    assert weather.diamond_square_level(height_map, scales.double(), draws.double(), 4) is None
    assert height_map.shape == (2, 16, 16) and height_map.dtype == torch.float64
