"""OpenCV's separable filter of byte levels as Triton kernels: the row and column passes give the compositions'
bits in Triton's interpreter, compile for an H100 (sm_90) without a float64 fused multiply-add, and the
operators give their results' shapes on meta."""

from __future__ import annotations

import pytest
import torch

from ccc.render_torch import numerics

from .triton_kernels import compiled_for_hopper, fast_math_instructions, interpreted, kernel_module

kernels = kernel_module("opencv_filter")

_KERNELS = {
    "one tap": lambda: torch.tensor([[1.0], [0.6180339887498949]], dtype=torch.float64),
    "three taps": lambda: torch.from_numpy(numerics.gaussian_kernels([0.2, 0.3])),
    "wider than the image": lambda: torch.from_numpy(numerics.gaussian_kernels([0.9, 3.0])),
    "mixed": lambda: torch.from_numpy(numerics.gaussian_kernels([0.45, 1.7, 3.0])),
}
"""Per case the samples' float64 kernels (N, K): 1 tap, 3 taps, up to 25 taps (sigma 3, wider than the images)."""


def _inputs(case: str, size: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 levels (N, 3, *size) covering 0..255 (the first sample's first plane holds every level it has
    room for, the last one's second plane a flat run at the left border) and the case's kernels (N, K)."""
    kernels_ = _KERNELS[case]()
    generator = torch.Generator().manual_seed(11)
    height, width = size
    levels = torch.randint(0, 256, (len(kernels_), 3, height, width), generator=generator).float()
    levels[0, 0].view(-1)[: min(256, height * width)] = torch.arange(256.0)[: height * width]
    levels[-1, 1, :, : width // 2] = 255.0
    return levels, kernels_


def _tables(kernels_: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The row pass's product and error tables (N, K, 256), made as :func:`numerics.separable_opencv_levels`
    makes them."""
    values = numerics.divide(torch.arange(256, dtype=torch.float64), 255.0)
    weights = kernels_[:, :, None]
    return numerics._product_and_error(weights, numerics._split(weights), values, numerics._split(values))


def _bits(values: torch.Tensor) -> torch.Tensor:
    return values.view(torch.int64)


@pytest.mark.parametrize("case", list(_KERNELS))
@pytest.mark.parametrize("size", [(17, 19), (5, 2), (1, 23)])
def test_the_kernels_give_the_compositions_bits(case: str, size: tuple[int, int]) -> None:
    levels, kernels_ = _inputs(case, size)
    products, errors = _tables(kernels_)
    expected_rows = numerics._composed_rows_from_levels(levels, products, errors)
    expected = numerics._composed_symmetric_columns(expected_rows, kernels_)
    with interpreted(kernels):
        rows = kernels.opencv_rows_from_levels(levels, products, errors)
        uint8_rows = kernels.opencv_rows_from_levels(levels.to(torch.uint8), products, errors)
        columns = kernels.opencv_symmetric_columns(expected_rows, kernels_)
    assert torch.equal(_bits(rows), _bits(expected_rows)) and torch.equal(_bits(uint8_rows), _bits(expected_rows))
    assert torch.equal(_bits(columns), _bits(expected))


def test_the_row_kernel_reads_strided_levels_in_place() -> None:
    """Levels as a channels-last view (the strides the kernel is handed, no copy)."""
    levels, kernels_ = _inputs("mixed", (9, 13))
    strided = levels.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    products, errors = _tables(kernels_)
    with interpreted(kernels):
        rows = kernels.opencv_rows_from_levels(strided, products, errors)
    assert torch.equal(_bits(rows), _bits(numerics._composed_rows_from_levels(levels, products, errors)))


def test_the_kernels_compile_for_an_h100_without_a_float64_fused_multiply_add() -> None:
    levels, kernels_ = _inputs("mixed", (17, 19))
    products, errors = _tables(kernels_)
    rows = numerics._composed_rows_from_levels(levels, products, errors)

    def launch() -> None:
        kernels.opencv_rows_from_levels(levels, products, errors)
        kernels.opencv_symmetric_columns(rows, kernels_)

    launches = compiled_for_hopper(kernels, launch)
    assert sorted(launch["name"] for launch in launches) == ["_rows_from_levels_kernel", "_symmetric_columns_kernel"]
    for compiled in launches:
        ptx = compiled["asm"]["ptx"]
        assert compiled["options"]["enable_fp_fusion"] is False
        assert ".target sm_90" in ptx and compiled["asm"]["cubin"]
        assert "fma.rn.f64" not in ptx and "fma" not in ptx  # no fused multiply-add at all
        assert not fast_math_instructions(compiled["asm"]["llir"])
        assert ".f64" in ptx


def test_the_operators_on_meta_give_the_shapes_of_their_results() -> None:
    levels, kernels_ = _inputs("mixed", (5, 7))
    products, errors = _tables(kernels_)
    rows = numerics.opencv_rows_from_levels(levels.to("meta"), products.to("meta"), errors.to("meta"))
    columns = numerics.opencv_symmetric_columns(rows, kernels_.to("meta"))
    assert rows.shape == columns.shape == (3, 3, 5, 7)
    assert rows.dtype == columns.dtype == torch.float64 and columns.device.type == "meta"
