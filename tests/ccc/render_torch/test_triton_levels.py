"""The pixel conversions' Triton kernels (``numerics``' byte levels, unit values and truncations): the compositions'
bits in Triton's interpreter at every level, on both sides of every boundary and out of range, in both dtypes;
the rounding half to even equal to ``torch.round``; they compile for an H100 (sm_90) with correctly rounded
divisions and no fused multiply-add; the operators on meta."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from ccc.render_torch import numerics

from .triton_kernels import compiled_for_hopper, fast_math_instructions, interpreted, kernel_module

kernels = kernel_module("levels")

_INTEGER_VIEWS = {torch.float32: torch.int32, torch.float64: torch.int64}

DTYPES = [torch.float64, torch.float32]


def _assert_same_bits(ours: torch.Tensor, composed: torch.Tensor) -> None:
    """Equal dtypes, shapes and bits (a zero's sign counts); integers by value."""
    assert ours.dtype == composed.dtype and ours.shape == composed.shape
    view = _INTEGER_VIEWS.get(ours.dtype)
    assert torch.equal(ours.view(view), composed.view(view)) if view else torch.equal(ours, composed)


def _both_sides(values: torch.Tensor) -> torch.Tensor:
    """``values`` and their neighbouring floats below and above."""
    return torch.cat([values, torch.nextafter(values, values - 1), torch.nextafter(values, values + 1)])


def _grey_levels(dtype: torch.dtype) -> torch.Tensor:
    """Pre-truncation grey levels of ``dtype`` (1-D): every level, and the floats next to it, its half and its
    neighbours, the products of the unit values ``k / 255`` by 255 (an exact 205 whose ``/ 255`` rounds down),
    values a float64 rounding below a level, negatives (``-0.0``: ATen's clamp keeps it) and values past 255
    (infinities included), no NaN."""
    levels = torch.arange(256, dtype=dtype)
    unit = numerics.divide(levels, 255.0)
    special = torch.tensor(
        [204.99999999999997, 1e-13, -0.0, -1e-300, -0.5, -3.0, 255.5, 256.0, 300.0, 1e30], dtype=dtype
    )
    infinities = torch.tensor([float("inf"), -float("inf")], dtype=dtype)
    return torch.cat([_both_sides(levels), _both_sides(levels + 0.5), _both_sides(unit) * 255.0, special, infinities])


def _random_levels(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Grey levels in [-20, 300) with every mantissa bit in use."""
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=generator, dtype=torch.float64) * 320.0 - 20.0).to(dtype)


def _unit_images(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """float32 byte levels ``k / 255`` (as the pipeline hands them over), every level in the first 256 values."""
    generator = torch.Generator().manual_seed(seed)
    levels = torch.randint(0, 256, shape, generator=generator)
    levels.view(-1)[: min(256, levels.numel())] = torch.arange(256)[: levels.numel()]
    return numerics.divide(levels.to(torch.float32), 255.0)


def _unit_boundaries(dtype: torch.dtype) -> torch.Tensor:
    """Unit values (1-D) of ``dtype`` whose product by 255 lies on or next to every level: ``k / 255`` and its
    neighbouring floats, ``(k ± ½) / 255`` and theirs; negatives, values past 1 and infinities."""
    levels = torch.arange(256, dtype=dtype)
    unit = numerics.divide(levels, 255.0)
    halves = numerics.divide(torch.cat([levels - 0.5, levels + 0.5]), 255.0)
    special = torch.tensor([-0.0, -1e-30, -0.2, 1.0 + 2**-20, 1.7, 3e30, float("inf"), -float("inf")], dtype=dtype)
    return torch.cat([_both_sides(unit), _both_sides(halves), special])


def _layouts(values: torch.Tensor) -> list[torch.Tensor]:
    """``values`` (4-D) contiguous, channels-last (read in place), and a strided view with gaps (copied first)."""
    return [
        values,
        values.contiguous(memory_format=torch.channels_last),
        values.transpose(2, 3).contiguous().transpose(2, 3)[:, :, 1:, ::2],
    ]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("scale", [1, 255])
def test_unit_float32_gives_the_compositions_bits(dtype: torch.dtype, scale: int) -> None:
    """Every level, both sides of it and of its half, out of range; then random values in odd shapes and
    layouts. With ``scale`` 255 the values are the same over 255 (unit values, and both sides of them)."""
    boundaries = _grey_levels(dtype)
    random_values = _random_levels((2, 3, 17, 23), dtype, seed=scale)
    if scale != 1:
        boundaries = _both_sides(numerics.divide(boundaries, 255.0))
        random_values = numerics.divide(random_values, 255.0)
    with interpreted(kernels):
        _assert_same_bits(kernels.unit_float32(boundaries, scale), numerics._composed_unit_float32(boundaries, scale))
        for values in _layouts(random_values):
            _assert_same_bits(kernels.unit_float32(values, scale), numerics._composed_unit_float32(values, scale))


def test_unit_float32_of_a_scale_is_the_product_first() -> None:
    """``unit_float32(x, 255)`` is the call sites' former ``unit_float32(x * 255.0)``, in both dtypes."""
    for dtype in DTYPES:
        values = _random_levels((3, 5, 7), dtype, seed=4) / 255.0
        _assert_same_bits(numerics.unit_float32(values, 255), numerics.unit_float32(values * 255.0))


def _truncated_by_the_rows_kernel(values: torch.Tensor) -> torch.Tensor:
    """``values`` (N, C, H, W) truncated by the rows kernel into an output of their shape."""
    output = torch.full(values.shape, -7.0, dtype=values.dtype)
    with interpreted(kernels):
        kernels.truncate_rows_into(output, torch.arange(len(values)), values)
    return output


def test_the_truncation_gives_the_compositions_bits() -> None:
    boundaries = _unit_boundaries(torch.float32)[None, None, None, :]
    _assert_same_bits(_truncated_by_the_rows_kernel(boundaries), numerics.truncate_to_levels(boundaries))
    for values in _layouts(_random_levels((2, 3, 9, 31), torch.float32, seed=7) / 255.0):
        _assert_same_bits(_truncated_by_the_rows_kernel(values), numerics.truncate_to_levels(values))


@pytest.mark.parametrize("output_layout", [torch.contiguous_format, torch.channels_last], ids=str)
def test_the_truncation_into_rows_gives_the_compositions_bits(output_layout: torch.memory_format) -> None:
    """Three of five samples of an output (contiguous, or channels-last as the crops are) written from values
    of the other layout, out of order; the other samples are left as they were."""
    output = torch.full((5, 3, 11, 13), -7.0).contiguous(memory_format=output_layout)
    rows = torch.tensor([4, 0, 2])
    values = _random_levels((3, 3, 11, 13), torch.float32, seed=2) / 255.0
    values.view(-1)[: 3 * 256] = _unit_boundaries(torch.float32)[: 3 * 256]
    other_layout = torch.channels_last if output_layout == torch.contiguous_format else torch.contiguous_format
    values = values.contiguous(memory_format=other_layout)
    expected = output.clone()
    numerics._composed_truncate_rows_into(expected, rows, values)
    with interpreted(kernels):
        kernels.truncate_rows_into(output, rows, values)
    _assert_same_bits(output, expected)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.uint8, torch.int64], ids=str)
def test_byte_levels_give_the_compositions_levels(dtype: torch.dtype) -> None:
    """The pipeline's byte levels (every level, odd shapes and layouts) as each dtype the renderer asks for; in a
    float dtype also values off the levels, on both sides of every half (the rounding's ties)."""
    cases = _layouts(_unit_images((2, 3, 19, 21), seed=1))
    if dtype.is_floating_point:
        cases.append(_unit_boundaries(torch.float32))
    with interpreted(kernels):
        for images in cases:
            _assert_same_bits(kernels.byte_levels(images, dtype), numerics._composed_byte_levels(images, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unit_values_give_the_compositions_bits(dtype: torch.dtype) -> None:
    cases = [*_layouts(_unit_images((2, 3, 19, 21), seed=3)), _unit_boundaries(torch.float32)]
    with interpreted(kernels):
        for images in cases:
            _assert_same_bits(kernels.unit_values(images, dtype), numerics._composed_unit_values(images, dtype))


# (levels' dtype, working dtype, result's dtype): the crops' and pixelate's bytes, motion blur's float64 and
# float32 levels, bytes to float64
_UNIT_OF_LEVELS = [
    (torch.uint8, torch.float32, torch.float32),
    (torch.float64, torch.float64, torch.float32),
    (torch.float32, torch.float32, torch.float32),
    (torch.uint8, torch.float64, torch.float64),
]


@pytest.mark.parametrize("dtypes", _UNIT_OF_LEVELS, ids=str)
def test_unit_of_levels_gives_the_compositions_bits(dtypes: tuple[torch.dtype, torch.dtype, torch.dtype]) -> None:
    levels_dtype, working, dtype = dtypes
    levels = (_unit_images((2, 3, 17, 16), seed=5) * 255.0).round().to(levels_dtype)
    with interpreted(kernels):
        for case in _layouts(levels):
            ours = kernels.unit_of_levels(case, working, dtype)
            _assert_same_bits(ours, numerics._composed_unit_of_levels(case, working, dtype))


@triton.jit
def _rounding_kernel(values, output, count, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < count
    rounded = kernels._round_half_to_even(tl.load(values + offsets, mask=inside, other=0.0))
    tl.store(output + offsets, rounded, mask=inside)


def _round_like_the_kernels(values: torch.Tensor) -> torch.Tensor:
    """:func:`kernels._round_half_to_even` of ``values`` (1-D) in the interpreter, 4096 values per program."""
    output = torch.empty_like(values)
    # numpy flags arithmetic on a signalling NaN (among the random patterns) as invalid; a GPU flags nothing
    with interpreted(kernels), interpreted(sys.modules[__name__]), np.errstate(invalid="ignore"):
        _rounding_kernel[(triton.cdiv(len(values), 4096),)](values, output, len(values), BLOCK=4096)
    return output


def _rounding_cases(dtype: torch.dtype) -> torch.Tensor:
    """Random bit patterns of ``dtype`` (every exponent, NaNs among them), and around every half and whole
    number near 0 and near the precision's limit 2**p (p = 23, 52) where a half is the last fraction: the
    number and its neighbouring floats, both signs; zeros, the smallest subnormal, infinities, the largest float."""
    integer = _INTEGER_VIEWS[dtype]
    generator = torch.Generator().manual_seed(17)
    bits = torch.randint(torch.iinfo(integer).min, torch.iinfo(integer).max, (1 << 16,), generator=generator)
    random_floats = bits.to(integer).view(dtype)
    limit = 2.0 / torch.finfo(dtype).eps  # 2**(p + 1): 2**24 or 2**53
    halves = torch.arange(-600, 601, dtype=dtype) / 2
    near_limit = torch.cat([limit / 2 + halves, limit / 4 + halves, limit + halves * 2]).to(dtype)
    tiny, largest = torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps, torch.finfo(dtype).max
    special = torch.tensor([0.0, tiny, float("inf"), largest], dtype=dtype)
    signed = torch.cat([_both_sides(halves), _both_sides(near_limit), special])
    return torch.cat([random_floats, signed, -signed])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_rounding_is_torchs_round_half_to_even(dtype: torch.dtype) -> None:
    """On the whole float domain, not only the levels: a zero's sign counts, NaNs stay NaN. (All 2**32 float32
    patterns were checked once, outside the tests, with numpy's IEEE float32 operations: equal.)"""
    values = _rounding_cases(dtype)
    ours, expected = _round_like_the_kernels(values), torch.round(values)
    nan = expected.isnan()
    assert torch.equal(ours.isnan(), nan)
    _assert_same_bits(ours[~nan], expected[~nan])


def test_nans_stay_nans_as_atens_clamp_keeps_them() -> None:
    values = torch.tensor([float("nan"), 0.5, float("nan")])[None, None, None, :]
    assert torch.equal(_truncated_by_the_rows_kernel(values).isnan(), values.isnan())
    for dtype in DTYPES:
        values = torch.tensor([float("nan"), 3.0, float("nan")], dtype=dtype)
        with interpreted(kernels):
            assert torch.equal(kernels.unit_float32(values, 1).isnan(), values.isnan())


_FTZ = re.compile(r"\b[a-z]+(?:\.[a-z0-9]+)*\.ftz(?:\.[a-z0-9]+)*")


def test_the_kernels_compile_for_an_h100_with_correctly_rounded_divisions() -> None:
    """Every launch with its dtypes: float32 divisions ``div.rn.f32`` (never ``div.full`` or ``div.approx``),
    float64's ``div.rn.f64``, no fused multiply-add, no fast-math flag; the only flush to zero is float32's floor
    (``cvt.rmi.ftz``, libdevice's), whose inputs are clamped to >= 0: a subnormal floors to 0 either way."""
    double = _random_levels((2, 3, 5, 7), torch.float64, seed=0)
    single = double.to(torch.float32)
    bytes_ = single.clamp(0, 255).to(torch.uint8)

    def launch() -> None:
        kernels.unit_float32(double, 1)
        kernels.unit_float32(single, 255)
        kernels.truncate_rows_into(torch.empty(3, 3, 5, 7), torch.tensor([2, 0]), single)
        kernels.byte_levels(single, torch.uint8)
        kernels.byte_levels(single, torch.float64)
        kernels.unit_values(single, torch.float32)
        kernels.unit_values(single, torch.float64)
        kernels.unit_of_levels(bytes_, torch.float32, torch.float32)
        kernels.unit_of_levels(double, torch.float64, torch.float32)

    launches = compiled_for_hopper(kernels, launch)
    divisions = []
    for compiled in launches:
        ptx = compiled["asm"]["ptx"]
        assert compiled["options"]["enable_fp_fusion"] is False
        assert ".target sm_90" in ptx and compiled["asm"]["cubin"]
        assert "fma" not in ptx and not fast_math_instructions(compiled["asm"]["llir"]), compiled["name"]
        assert set(_FTZ.findall(ptx)) <= {"cvt.rmi.ftz.f32.f32"}, compiled["name"]
        divisions.append((compiled["name"], sorted(set(re.findall(r"\bdiv(?:\.[a-z]+)*\.f(?:32|64)\b", ptx)))))
    float64, float32 = ["div.rn.f64"], ["div.rn.f32"]
    assert divisions == [  # by kernel, each kernel's launches in their order
        ("_unit_float32_kernel", float64),
        ("_unit_float32_kernel", float32),
        ("_truncate_rows_kernel", float32),
        ("_byte_levels_kernel", []),
        ("_byte_levels_kernel", []),
        ("_byte_levels_kernel", float32),
        ("_byte_levels_kernel", float64),
        ("_unit_of_levels_kernel", float32),
        ("_unit_of_levels_kernel", float64),
    ]


def test_the_operators_on_meta_give_the_shapes_of_their_results() -> None:
    images = torch.empty((2, 3, 5, 7), device="meta").contiguous(memory_format=torch.channels_last)
    levels = images.to(torch.float64)
    results = {
        "unit_float32": numerics.unit_float32(levels, 255),
        "truncate_to_levels": numerics.truncate_to_levels(images),
        "byte_levels": numerics.byte_levels(images, torch.uint8),
        "unit_values": numerics.unit_values(images, torch.float32),
        "unit_of_levels": numerics.unit_of_levels(levels, torch.float32, working=torch.float64),
    }
    dtypes = {"unit_float32": torch.float32, "byte_levels": torch.uint8, "truncate_to_levels": torch.float32}
    for name, result in results.items():
        assert result.device.type == "meta" and result.shape == (2, 3, 5, 7), name
        assert result.dtype == dtypes.get(name, torch.float32), name
        assert result.is_contiguous(memory_format=torch.channels_last), name
    output = torch.empty((4, 3, 5, 7), device="meta")
    numerics.truncate_rows_into(output, torch.tensor([3, 1], device="meta"), images)
