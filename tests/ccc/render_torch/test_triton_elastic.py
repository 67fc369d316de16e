"""The elastic transform's samplings as Triton kernels: OpenCV's reflect-101 warp and scipy's reflect bilinear
sampling at shifted pixels give their compositions' bits in Triton's interpreter (both working dtypes, maps
and shifts that reach far outside the images), compile for an H100 (sm_90) without a fused multiply-add, and
the operators give their results' shapes on meta."""

from __future__ import annotations

import pytest
import torch

from ccc.render_torch import digital

from .triton_kernels import compiled_for_hopper, fast_math_instructions, interpreted, kernel_module

kernels = kernel_module("elastic")

_INTEGER_VIEWS = {torch.float32: torch.int32, torch.float64: torch.int64}

_SIZES = [(13, 17), (16, 9)]
"""(height, width) of the images: odd, even, wider and taller."""


def _assert_same_bits(ours: torch.Tensor, composed: torch.Tensor) -> None:
    """Equal dtypes, shapes and bits (a signed zero or a NaN's payload would count)."""
    assert ours.dtype == composed.dtype and ours.shape == composed.shape
    assert torch.equal(ours.view(_INTEGER_VIEWS[ours.dtype]), composed.view(_INTEGER_VIEWS[composed.dtype]))


def _images(batch: int, height: int, width: int, seed: int) -> torch.Tensor:
    """float32 (B, 3, H, W): values of any sign, every mantissa bit in use (what the interpolations round)."""
    generator = torch.Generator().manual_seed(seed)
    return (0.5 + 0.4 * torch.randn((batch, 3, height, width), generator=generator, dtype=torch.float64)).float()


def _jittered_maps(height: int, width: int, jitter: float, seed: int) -> torch.Tensor:
    """float64 (2, 2, 3): :func:`digital._affine_matrices` of elastic's control points moved by up to ``jitter``
    pixels, as :func:`digital.prepare_elastic` builds them."""
    centre = torch.tensor([height // 2, width // 2], dtype=torch.float32)
    square = min(height, width) // 3
    corner = torch.tensor([square, -square], dtype=torch.float32)
    source = torch.stack([centre + square, centre + corner, centre - square])
    generator = torch.Generator().manual_seed(seed)
    offsets = (jitter * (2.0 * torch.rand((2, 3, 2), generator=generator, dtype=torch.float64) - 1.0)).float()
    return digital._affine_matrices(source, source + offsets)


def _far_maps(height: int, width: int) -> torch.Tensor:
    """float64 (2, 2, 3): maps that send the output far outside the image (negative, and beyond two periods):
    a scaled and sheared map, and a mirrored one shifted by several image sizes."""
    return torch.tensor(
        [
            [[5.3, -4.1, -7.7 * width], [4.4, 6.2, -60.2 - height]],
            [[-2.5, 0.7, 3.1 * width + 0.37], [0.3, -3.1, -2.9 * height - 0.71]],
        ],
        dtype=torch.float64,
    )


_MAPS = {"jittered": lambda h, w: _jittered_maps(h, w, min(h, w) / 3, seed=h), "far": _far_maps}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("maps", list(_MAPS))
@pytest.mark.parametrize("height, width", _SIZES)
def test_the_warp_kernel_gives_the_compositions_bits(height: int, width: int, maps: str, dtype: torch.dtype) -> None:
    """The float32 mode reads maps staged in float32, as the renderer stages them."""
    inverse = _MAPS[maps](height, width).to(dtype)
    images = _images(2, height, width, seed=width)
    with interpreted(kernels):
        ours = kernels.warp_affine_reflect_101(images, inverse, dtype)
    _assert_same_bits(ours, digital._composed_warp_affine_reflect_101(images, inverse, dtype))


def test_the_warp_kernel_reads_images_and_maps_in_their_own_layout() -> None:
    """Channels-last images and maps sliced out of a wider table (as elastic's step reads them) give the bits
    of contiguous ones."""
    images = _images(2, 13, 17, seed=3).permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    table = torch.cat([torch.ones((2, 1), dtype=torch.float64), _far_maps(13, 17).reshape(2, 6)], dim=1)
    inverse = table[:, 1:].reshape(2, 2, 3)
    with interpreted(kernels):
        ours = kernels.warp_affine_reflect_101(images, inverse, torch.float64)
    _assert_same_bits(ours, digital._composed_warp_affine_reflect_101(images.contiguous(), inverse, torch.float64))


def _edge_coordinates(length: int) -> list[float]:
    """Coordinates at and about the reflections' edges (-0.5, ``length - 0.5`` and their periodic images), a
    hair inside and outside them (where ``torch.remainder``'s ``fmod + period`` rounds up to the period), whole
    and half pixels, and coordinates past 2**31 and 2**53."""
    period = 2.0 * length
    edges = [-0.5, length - 0.5, -0.5 - period, period - 0.5, 3 * period - 0.5, -3 * period - 0.5, -length - 0.5]
    hair = [2.0**-50, 2.0**-30, 2.0**-24, 2.0**-20, 2.0**-9]
    near = [edge + sign * step for edge in edges for step in hair for sign in (-1.0, 1.0)]
    whole = [-period, -length, -1.0, 0.0, -0.0, 1.0, length - 1.0, float(length), period, 5 * period, -0.25, 0.75]
    far = [3.0e9 + 0.25, -3.0e9 - 0.75, 2.0**53 + 2.0, -(2.0**60), 1.0e15 + 0.5]
    return edges + near + whole + far


_SUBNORMALS = [-1e-40, 1e-40, -1e-310, -5e-324]
"""Coordinates that floor to -1 or 0 only where subnormal values are not flushed to zero."""


def _shifts(batch: int, height: int, width: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, H, W) row and column shifts of ``dtype`` (B >= 2): the first sample's to :func:`_edge_coordinates`
    (pixel k, row-major, to the k-th coordinate, cyclically; made in float64, then rounded to ``dtype``) but
    for :data:`_SUBNORMALS` on its first row and column, the others' uniform in ±3 image sizes."""
    generator = torch.Generator().manual_seed(seed)
    spread = 6.0 * torch.rand((2, batch, height, width), generator=generator, dtype=torch.float64) - 3.0
    rows, columns = spread[0] * height, spread[1] * width
    pixels = torch.arange(height * width)
    for field, length, grid in ((rows, height, pixels // width), (columns, width, pixels % width)):
        edges = torch.tensor(_edge_coordinates(length), dtype=torch.float64)
        field[0] = (edges[pixels % len(edges)] - grid).reshape(height, width)
    # subnormal coordinates at the grid's zeros (float32's, and float64's, which float32 rounds to zeros)
    rows[0, 0, : len(_SUBNORMALS)] = columns[0, : len(_SUBNORMALS), 0] = torch.tensor(_SUBNORMALS)
    return rows.to(dtype), columns.to(dtype)


# (working dtype, the shifts' dtype): elastic's float32 fields in both modes, and fields of the working dtype
_SHIFT_DTYPES = [
    (torch.float64, torch.float32),
    (torch.float32, torch.float32),
    (torch.float64, torch.float64),
]


@pytest.mark.parametrize("dtype, shift_dtype", _SHIFT_DTYPES, ids=str)
@pytest.mark.parametrize("height, width", _SIZES)
def test_the_shifted_sampling_kernel_gives_the_compositions_bits(
    height: int, width: int, dtype: torch.dtype, shift_dtype: torch.dtype
) -> None:
    shift_rows, shift_columns = _shifts(2, height, width, shift_dtype, seed=height + width)
    images = _images(2, height, width, seed=height)
    with interpreted(kernels):
        ours = kernels.sample_shifted_bilinear_reflect(images, shift_rows, shift_columns, dtype)
    composed = digital._composed_sample_shifted_bilinear_reflect(images, shift_rows, shift_columns, dtype)
    _assert_same_bits(ours, composed)


def _hair_shifts(height: int, width: int, length: int, grid: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(1, H, W) shifts of ``dtype`` from ``grid`` (the pixels' row or column indices, (H, W)) to coordinates
    about the edges -0.5, ``length - 0.5`` and their images a period away (the edges taken in turn by rows), a
    different hair each: pixel k (row-major) at ``edge ± m · 2**-e``, the sign alternating, e = 1..60 and odd
    m = 1..13 in turn (the smallest hairs under the period's half ulp, where ``fmod + period`` rounds to the
    period)."""
    pixels = torch.arange(height * width, dtype=torch.float64).reshape(height, width)
    signs = 1.0 - 2.0 * (pixels % 2)
    exponents = (pixels // 2) % 60 + 1
    odd = 2.0 * ((pixels // 120) % 7) + 1.0
    edges = torch.tensor([-0.5, length - 0.5, 2.0 * length - 0.5, -2.0 * length - 0.5], dtype=torch.float64)
    coordinates = edges[torch.arange(height) % len(edges)][:, None] + signs * odd * torch.exp2(-exponents)
    return (coordinates - grid)[None].to(dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_the_shifted_sampling_kernel_folds_every_coordinate_like_torchs_remainder(dtype: torch.dtype) -> None:
    """One plane (8, 600): every pixel's row and column coordinates a different hair about the reflections'
    edges, where the kernel's integer remainder plus fraction must be ``torch.remainder``, and the rounding of
    its ``+ period``."""
    height, width = 8, 600
    rows, columns = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    shift_rows = _hair_shifts(height, width, height, rows, dtype)
    shift_columns = _hair_shifts(height, width, width, columns, dtype)
    images = _images(1, height, width, seed=5)[:, :1]
    with interpreted(kernels):
        ours = kernels.sample_shifted_bilinear_reflect(images, shift_rows, shift_columns, dtype)
    composed = digital._composed_sample_shifted_bilinear_reflect(images, shift_rows, shift_columns, dtype)
    _assert_same_bits(ours, composed)


def test_the_shifted_sampling_kernel_reads_the_images_in_their_own_layout() -> None:
    images = _images(2, 16, 9, seed=8).permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    shift_rows, shift_columns = _shifts(2, 16, 9, torch.float32, seed=1)
    with interpreted(kernels):
        ours = kernels.sample_shifted_bilinear_reflect(images, shift_rows, shift_columns, torch.float64)
    composed = digital._composed_sample_shifted_bilinear_reflect(
        images.contiguous(), shift_rows, shift_columns, torch.float64
    )
    _assert_same_bits(ours, composed)


def test_the_shifted_sampling_is_the_sampling_at_the_shifted_grid() -> None:
    """The operator's composition is :func:`digital.sample_bilinear_reflect` at ``grid + shift`` (what elastic
    computed before), on the CPU."""
    images = _images(2, 13, 17, seed=2)
    shift_rows, shift_columns = _shifts(2, 13, 17, torch.float32, seed=4)
    rows = torch.arange(13, dtype=torch.float64)[None, :, None] + shift_rows.double()
    columns = torch.arange(17, dtype=torch.float64)[None, None, :] + shift_columns.double()
    expected = digital.sample_bilinear_reflect(images, rows, columns)
    _assert_same_bits(
        digital.sample_shifted_bilinear_reflect(images, shift_rows, shift_columns, torch.float64), expected
    )


def test_the_elastic_kernels_compile_for_an_h100_without_a_fused_multiply_add() -> None:
    images = _images(2, 13, 17, seed=0)
    shift_rows, shift_columns = _shifts(2, 13, 17, torch.float32, seed=0)

    def launch() -> None:
        for dtype in (torch.float64, torch.float32):
            kernels.warp_affine_reflect_101(images, _far_maps(13, 17).to(dtype), dtype)
            kernels.sample_shifted_bilinear_reflect(images, shift_rows, shift_columns, dtype)

    launches = compiled_for_hopper(kernels, launch)
    assert len(launches) == 4
    for compiled in launches:
        assert compiled["options"]["enable_fp_fusion"] is False
        assert ".target sm_90" in compiled["asm"]["ptx"] and compiled["asm"]["cubin"]
        assert "fma" not in compiled["asm"]["ptx"], compiled["name"]
        assert ".ftz" not in compiled["asm"]["ptx"], compiled["name"]  # subnormal values kept (the kernels' ``_floor``)
        assert not fast_math_instructions(compiled["asm"]["llir"]), compiled["name"]


def test_the_operators_on_meta_give_the_shapes_of_their_results() -> None:
    meta = torch.device("meta")
    images = torch.empty((2, 3, 13, 17), dtype=torch.float32, device=meta)
    warped = digital.warp_affine_reflect_101(images, torch.empty((2, 2, 3), dtype=torch.float64, device=meta))
    assert warped.shape == (2, 3, 13, 17) and warped.dtype == torch.float32
    shifts = torch.empty((2, 13, 17), dtype=torch.float32, device=meta)
    sampled = digital.sample_shifted_bilinear_reflect(images, shifts, shifts, torch.float32)
    assert sampled.shape == (2, 3, 13, 17) and sampled.dtype == torch.float32
