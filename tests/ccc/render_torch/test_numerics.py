"""The byte-level conversions every torch corruption shares (``ccc.render_torch.numerics``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ccc.render_torch.numerics import (
    byte_levels,
    divide,
    gaussian_kernels,
    separable_opencv,
    separable_opencv_levels,
    truncate_to_levels,
    unit_float32,
    unit_values,
)


def test_unit_float32_truncates_like_the_float64_values():
    """Integers, values a float64 rounding below them, tenths, out-of-range values: the pipeline's float32
    truncation of the result equals the float64 truncation of the clamped value."""
    levels = torch.arange(256, dtype=torch.float64)
    values = torch.cat(
        [
            levels,
            (levels - 1e-12).clamp(min=0.0),
            torch.arange(2550, dtype=torch.float64) / 10,
            torch.tensor([204.99999999999997, 1e-13, -3.0, 300.0], dtype=torch.float64),
        ]
    )
    converted = unit_float32(values)
    assert converted.dtype == torch.float32
    assert float(converted.min()) >= 0.0 and float(converted.max()) <= 1.0
    np.testing.assert_array_equal(truncate_to_levels(converted) * 255, torch.floor(values.clamp(0, 255)).float())


def test_byte_levels_recover_the_exact_bytes():
    bytes_ = torch.arange(256, dtype=torch.uint8)
    images = bytes_.to(torch.float32) / 255
    assert torch.equal(byte_levels(images), bytes_.to(torch.float64))
    np.testing.assert_array_equal(unit_values(images).numpy(), np.arange(256) / 255.0)


def test_a_divisor_first_made_under_inference_mode_serves_autograd_later():
    divisor = 1234.5  # a value no other test divides by: made here first
    with torch.inference_mode():
        assert torch.equal(divide(torch.tensor([2469.0]), divisor), torch.tensor([2.0]))
    values = torch.tensor([2469.0], requires_grad=True)
    divide(values, divisor).sum().backward()
    assert values.grad is not None and values.grad.item() == pytest.approx(1 / 1234.5)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("size", [(3, 2), (9, 17)])
def test_the_filter_of_byte_levels_is_the_filter_of_their_values_bit_for_bit(size: tuple[int, int], dtype: torch.dtype):
    """The row pass's products looked up per level give the bits of the products made per pixel: every level,
    kernels from a single tap (sigma 0.2) to wider than the image (sigma 3), flat and noisy images."""
    generator = torch.Generator().manual_seed(7)
    height, width = size
    levels = torch.randint(0, 256, (4, 3, height, width), generator=generator).float()
    levels[0] = 255.0
    levels[1, :, :, : width // 2] = 0.0
    kernels = torch.from_numpy(gaussian_kernels([0.2, 0.9, 1.7, 3.0])).to(dtype)
    filtered = separable_opencv_levels(levels, kernels)
    expected = separable_opencv(divide(levels.to(dtype), 255.0), kernels)
    assert filtered.dtype == dtype
    assert torch.equal(filtered.view(torch.int64 if dtype == torch.float64 else torch.int32),
                       expected.view(torch.int64 if dtype == torch.float64 else torch.int32))  # fmt: skip
