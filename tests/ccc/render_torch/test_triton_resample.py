"""The resampling pass's Triton kernel: the composition's bytes in Triton's interpreter, and it compiles for
an H100 (sm_90)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ccc.render_torch import _resample

from .triton_kernels import compiled_for_hopper, interpreted, kernel_module

kernels = kernel_module("resample")


def _passes(kind: str) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Both passes' inputs for 3 samples of one 23×19 plane: the rows on the planes as they are, the
    columns on their transposed view (read in place), boxes of every shape, output sizes up to 21, flips."""
    generator = np.random.default_rng(5)
    levels = torch.from_numpy(generator.integers(0, 256, (3, 23, 19, 3), dtype=np.uint8))
    boxes = np.array([[0, 0, 19, 23], [3, 5, 17, 21], [1, 2, 6, 23]])
    sizes = np.array([[21, 11], [4, 19], [23, 2]])
    tables = _resample._tables(boxes, sizes, (23, 21), kind, np.array([False, True, False]), (23, 19))
    rows_index, rows_weight, columns_index, columns_weight = (torch.from_numpy(table).long() for table in tables)
    return [
        (levels, rows_index, rows_weight.int()),
        (levels.transpose(1, 2), columns_index, columns_weight.int()),
    ]


@pytest.mark.parametrize("kind", ["box", "bilinear"])
def test_the_kernel_gives_the_compositions_bytes(kind: str) -> None:
    with interpreted(kernels):
        for levels, index, weight in _passes(kind):
            ours = kernels.resample_pass(levels, index, weight, _resample._PRECISION_BITS)
            torch.testing.assert_close(ours, _resample._composed_pass(levels, index, weight), rtol=0, atol=0)


def test_the_kernel_compiles_for_an_h100() -> None:
    levels, index, weight = _passes("bilinear")[1]
    [launch] = compiled_for_hopper(kernels, lambda: kernels.resample_pass(levels, index, weight, 22))
    assert launch["options"]["enable_fp_fusion"] is False
    assert ".target sm_90" in launch["asm"]["ptx"] and launch["asm"]["cubin"]


def test_the_operator_on_meta_gives_the_shape_of_its_result() -> None:
    levels, index, weight = _passes("box")[0]
    meta = _resample.resample_pass(levels.to("meta"), index.to("meta"), weight.to("meta"))
    assert meta.shape == (3, 23, 19, 3) and meta.dtype == torch.uint8
