"""The centre zoom's, zoom blur's sum's and ImageMagick motion blur's Triton kernels: the compositions' bits in
Triton's interpreter, compiled for an H100 (sm_90) without a fused multiply-add, and their operators on meta."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ccc.render_torch import blur, numerics
from ccc.render_torch._upload import upload_tables

from .triton_kernels import compiled_for_hopper, fast_math_instructions, interpreted

zoom_kernels = pytest.importorskip("ccc.render_torch._triton.zoom")
motion_kernels = pytest.importorskip("ccc.render_torch._triton.motion_blur")

_INTEGER_VIEWS = {torch.float32: torch.int32, torch.float64: torch.int64}


def _assert_same_bits(ours: torch.Tensor, composed: torch.Tensor) -> None:
    """Equal dtypes, shapes and bits (a signed zero or a NaN's payload would count)."""
    assert ours.dtype == composed.dtype and ours.shape == composed.shape
    assert torch.equal(ours.view(_INTEGER_VIEWS[ours.dtype]), composed.view(_INTEGER_VIEWS[composed.dtype]))


def _zoom_tables(height: int, width: int, factors: np.ndarray, dtype: torch.dtype) -> numerics.ZoomTables:
    """:func:`numerics.zoom_tables` of ``factors`` (B,) or (Z, B) as the renderer uploads them, weights of
    ``dtype``."""
    tables = upload_tables(torch.device("cpu"), *numerics.zoom_tables(height, width, factors), float_dtype=dtype)
    return numerics.zoom_device_tables(*tables)


def _images(batch: int, channels: int, height: int, width: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Snow-layer-like values (normal, any sign, every mantissa bit in use), channels first."""
    generator = torch.Generator().manual_seed(seed)
    return (0.4 + 0.3 * torch.randn((batch, channels, height, width), generator=generator, dtype=torch.float64)).to(
        dtype
    )


_ZOOM_BLUR_DOUBLE = (torch.float32, torch.float64, torch.float32)
"""(images', weights', result's dtype) of zoom blur in float64: unit values zoomed in float64, cast to float32."""
_SNOW_DOUBLE = (torch.float64, torch.float64, torch.float64)
"""Snow's layer in float64: the images of the weights' dtype, the result kept in it."""
_SINGLE = (torch.float32, torch.float32, torch.float32)
"""Zoom blur's and snow's float32 mode."""
_ROUNDED_IMAGES = (torch.float64, torch.float32, torch.float64)
"""float64 images zoomed with float32 weights: the images' conversion rounds."""

# (height, width, zoom factors (B,) or (Z, B), dtypes): odd, square and narrow planes, one zoom or several per
# sample
_ZOOMS = [
    (17, 23, np.array([1.0, 1.37, 2.9]), _ZOOM_BLUR_DOUBLE),
    (20, 20, np.array([[1.0, 1.11], [1.5, 1.21], [1.9, 1.31]]), _ZOOM_BLUR_DOUBLE),
    (20, 20, np.array([[1.0, 1.11], [1.5, 1.21], [1.9, 1.31]]), _SINGLE),
    (31, 9, np.array([[1.06, 3.0]]), _SNOW_DOUBLE),
    (31, 9, np.array([1.06, 3.0]), _SINGLE),
    (17, 23, np.array([[1.0, 1.37, 2.9]]), _ROUNDED_IMAGES),
]


@pytest.mark.parametrize("height, width, factors, dtypes", _ZOOMS)
def test_the_zoom_kernel_gives_the_compositions_bits(
    height: int, width: int, factors: np.ndarray, dtypes: tuple[torch.dtype, torch.dtype, torch.dtype]
) -> None:
    images_dtype, weights_dtype, result_dtype = dtypes
    tables = _zoom_tables(height, width, factors, weights_dtype)
    images = _images(factors.shape[-1], 2, height, width, images_dtype, seed=height)
    with interpreted(zoom_kernels):
        ours = zoom_kernels.zoom(images, tables, result_dtype)
    _assert_same_bits(ours, numerics._composed_zoom(images, tables, result_dtype))


def test_the_zoom_kernel_reads_the_images_in_their_own_layout() -> None:
    """Channels-last planes, read through their strides (no copy), give the bits of contiguous ones."""
    tables = _zoom_tables(13, 19, np.array([1.3, 2.2]), torch.float64)
    images = _images(2, 3, 13, 19, torch.float32, seed=1).permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    with interpreted(zoom_kernels):
        ours = zoom_kernels.zoom(images, tables, torch.float32)
    _assert_same_bits(ours, numerics._composed_zoom(images.contiguous(), tables, torch.float32))


@pytest.mark.parametrize("weights_dtype", [torch.float64, torch.float32], ids=str)
def test_the_zoom_sum_kernel_gives_zoom_blurs_sum(weights_dtype: torch.dtype) -> None:
    """Four slots of two samples, the second sample's last two slots absent (zoom 1, weighted 0), as zoom blur
    stages them; the unit values ``k / 255`` zoom blur reads."""
    factors = np.array([[1.0, 1.01], [1.13, 1.02], [1.19, 1.0], [1.25, 1.0]])
    present = torch.tensor([[1, 1], [1, 1], [1, 0], [1, 0]], dtype=torch.float32)
    tables = _zoom_tables(11, 18, factors, weights_dtype)
    levels = torch.randint(0, 256, (2, 2, 11, 18), generator=torch.Generator().manual_seed(2))
    unit = numerics.divide(levels.to(torch.float32), 255.0)
    with interpreted(zoom_kernels):
        ours = zoom_kernels.zoom_sum(unit, tables, present)
    _assert_same_bits(ours, blur._composed_zoom_blur_sum(unit, tables, present))


def _motion_tables(
    height: int, width: int, radii: list[float], dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int]]:
    """:func:`numerics.motion_blur_tables` of B samples at spread angles, uploaded with weights of ``dtype``."""
    angles = np.linspace(-170.0, 170.0, len(radii)).tolist()
    sigmas = [0.6 * radius + 0.5 for radius in radii]
    weights, starts, padding = numerics.motion_blur_tables(height, width, radii, sigmas, angles)
    return (*upload_tables(torch.device("cpu"), weights, starts, float_dtype=dtype), padding)


# (height, width, channels, radii): taps shorter and longer than the plane (clamped to its edges), odd sizes
_MOTIONS = [
    (9, 27, 2, [1.5, 6.0]),
    (7, 13, 1, [14.0, 0.7]),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("height, width, channels, radii", _MOTIONS)
def test_the_motion_blur_kernel_gives_the_compositions_bits(
    height: int, width: int, channels: int, radii: list[float], dtype: torch.dtype
) -> None:
    weights, starts, padding = _motion_tables(height, width, radii, dtype)
    generator = torch.Generator().manual_seed(height)
    levels = torch.randint(0, 256, (len(radii), channels, height, width), generator=generator).to(dtype)
    levels[0, :, : height // 2] = 255.0  # saturated sums: the clamp to the largest quantum
    with interpreted(motion_kernels):
        ours = motion_kernels.motion_blur(levels, weights, starts, padding, 257, 65535.0)
    _assert_same_bits(ours, numerics._composed_motion_blur(levels, weights, starts, *padding))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_atens_floor_division_of_every_quantum_by_257_is_the_integer_quotient(dtype: torch.dtype) -> None:
    """The kernel divides the quantum (a whole number in [0, 65535]) by 257 in integers; ATen's floating floor
    division (``div_floor_floating``: fmod, the exact multiple's quotient, floored) gives the same numbers."""
    quanta = torch.arange(65536, dtype=dtype)
    expected = (torch.arange(65536) // 257).to(dtype)
    _assert_same_bits(torch.div(quanta, 257.0, rounding_mode="floor"), expected)


def _assert_compiled_without_fusion(launches: list[dict], count: int) -> None:
    assert len(launches) == count
    for launch in launches:
        assert launch["options"]["enable_fp_fusion"] is False
        assert ".target sm_90" in launch["asm"]["ptx"] and launch["asm"]["cubin"]
        assert "fma" not in launch["asm"]["ptx"], launch["name"]
        assert not fast_math_instructions(launch["asm"]["llir"]), launch["name"]


def test_the_zoom_kernels_compile_for_an_h100_without_a_fused_multiply_add() -> None:
    images = _images(3, 3, 17, 23, torch.float32, seed=0)
    double, single = (
        _zoom_tables(17, 23, np.array([[1.0, 1.37, 2.9]]), dtype) for dtype in (torch.float64, torch.float32)
    )
    present = torch.ones((1, 3), dtype=torch.float32)

    def launch() -> None:
        zoom_kernels.zoom(images, double, torch.float32)
        zoom_kernels.zoom(images.double(), single, torch.float64)
        zoom_kernels.zoom_sum(images, double, present)
        zoom_kernels.zoom_sum(images, single, present)

    _assert_compiled_without_fusion(compiled_for_hopper(zoom_kernels, launch), 4)


def test_the_motion_blur_kernel_compiles_for_an_h100_without_a_fused_multiply_add() -> None:
    def launch() -> None:
        for dtype in (torch.float64, torch.float32):
            weights, starts, padding = _motion_tables(19, 27, [1.5, 6.0], dtype)
            motion_kernels.motion_blur(torch.zeros((2, 3, 19, 27), dtype=dtype), weights, starts, padding, 257, 65535.0)

    _assert_compiled_without_fusion(compiled_for_hopper(motion_kernels, launch), 2)


def test_the_operators_on_meta_give_the_shapes_of_their_results() -> None:
    meta = torch.device("meta")
    factors = np.array([[1.0, 1.11], [1.5, 1.21], [1.9, 1.31]])
    tables = numerics.ZoomTables(*(table.to(meta) for table in _zoom_tables(20, 20, factors, torch.float64)))
    images = torch.empty((2, 3, 20, 20), dtype=torch.float32, device=meta)
    zoomed = numerics.zoom_with_tables(images, tables, torch.float32)
    assert zoomed.shape == (3, 2, 3, 20, 20) and zoomed.dtype == torch.float32
    single = numerics.zoom_with_tables(images.double(), tables.slots(0), torch.float64)
    assert single.shape == (2, 3, 20, 20) and single.dtype == torch.float64
    summed = blur.zoom_blur_sum(images, list(tables), torch.empty((3, 2), dtype=torch.float32, device=meta))
    assert summed.shape == (2, 3, 20, 20) and summed.dtype == torch.float32
    weights, starts, padding = _motion_tables(19, 27, [1.5, 6.0], torch.float32)
    levels = torch.empty((2, 1, 19, 27), dtype=torch.float32, device=meta)
    blurred = numerics.motion_blur_with_tables(levels, weights.to(meta), starts.to(meta), padding)
    assert blurred.shape == (2, 1, 19, 27) and blurred.dtype == torch.float32
