"""Weather corruptions on torch batches: snow, frost, fog and the hold-out spatter.

Each corruption follows its CPU counterpart in :mod:`ccc.corruptions.weather` step by step, on a whole
batch with per-sample severities; the random draws come from :class:`SampleRandom` (same shapes and
order as the CPU draws, different values). Given the same draws the results equal the CPU's (see
``docs/fidelity.md``, "The torch backend"). Each is registered as its host half, ``prepare_<name>`` (the
registry's contract; the working float dtype is ``torch.float64``, the CPU's arithmetic, or
``torch.float32``, every float64 step in float32), and exported whole under its name.

Snow: a snow layer (normal noise per pixel), zoomed about the centre, thresholded, quantised to 8 bits and
motion-blurred by ImageMagick's MotionBlurImage at an angle uniform in [-135, -45) degrees, is added
twice (as is and rotated by 180 degrees) to the image whitened towards ``max(x, 1.5 gray + 0.5)``.

The arithmetic after the draws is the CPU path's (float64 where it computes in float64, the same
zoom tables and motion-blur taps; float32 throughout in the float32 mode); the draws come from
:class:`~ccc.render_torch.random.SampleRandom` (``normal(H, W)`` then ``uniform()``), so the result is
equivalent in distribution, not equal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ccc.corruptions.assets import frost_textures
from ccc.corruptions.weather import FROST_CHOICES

from ._spatter_filters import box_blur3, canny, chamfer_distance, emboss, equalize_histogram
from ._triton import fuses
from ._upload import BatchUpload, to_device
from .numerics import (
    byte_levels,
    divide,
    gaussian_kernels,
    motion_blur_tables,
    motion_blur_with_tables,
    opencv_gray,
    separable_opencv,
    unit_float32,
    unit_values,
    zoom_device_tables,
    zoom_tables,
    zoom_with_tables,
)
from .parameters import per_sample_parameters
from .registry import CorruptionStep, register_torch_corruption

if TYPE_CHECKING:
    from .random import SampleRandom

__all__ = [
    "PLASMA_HOST_LEVELS",
    "fog",
    "frost",
    "plasma_coarse_map",
    "plasma_fractal",
    "plasma_scales",
    "prepare_fog",
    "prepare_frost",
    "prepare_snow",
    "prepare_spatter",
    "snow",
    "spatter",
]


_SNOW_ANGLE_RANGE = (-135.0, -45.0)
"""The snow layer's motion-blur angle, uniform in degrees (the CPU path's ``rng.uniform(-135, -45)``)."""


def prepare_snow(
    severities: Tensor, random: SampleRandom, size: tuple[int, int], dtype: torch.dtype, upload: BatchUpload
) -> CorruptionStep:
    """Snow flakes over a whitened image, per-sample parameters from the CPU path's table.

    Args:
        severities: float64 (B,) in (0, 5], on the host.
        random: one ``normal(H, W)`` draw (the flake layer, made on the device by the step) and one
            ``uniform()`` draw (the angle, made here on the host with ``random.on_host()``: it shapes the
            motion-blur taps), in that order of draw numbers.
        size: the images' (H, W) in pixels.
        dtype: the working float dtype, ``torch.float64`` (the CPU's arithmetic) or ``torch.float32``.
        upload: the batch's upload: the parameters, zoom tables and motion-blur taps.

    Returns:
        The step: float32 (B, 3, H, W) in [0, 1] (8-bit levels k / 255) → float32 (B, 3, H, W) in [0, 1], the
        CPU path's pre-truncation value divided by 255.
    """
    parameters = per_sample_parameters("snow", severities)
    host = parameters.tolist()
    height, width = size
    flake_random = random.reserve(1)  # the flake layer's draw comes first, before the angle's
    low, high = _SNOW_ANGLE_RANGE
    angles = (low + (high - low) * random.on_host().uniform().to(torch.float64)).tolist()
    zoom = zoom_tables(height, width, [row[2] for row in host])
    weights, starts, padding = motion_blur_tables(
        height, width, [row[4] for row in host], [row[5] for row in host], angles
    )
    staged = upload.tables(parameters[:, [0, 1, 3, 6]].numpy(), *zoom, weights, starts, float_dtype=dtype)

    def step(images: Tensor) -> Tensor:
        uploaded, *tables = staged.tensors()
        mean, spread, threshold, blend = (uploaded[:, index, None, None, None] for index in range(4))
        noise = flake_random.normal(height, width).to(dtype)[:, None]
        layer = zoom_with_tables(mean + spread * noise, zoom_device_tables(*tables[:6]), dtype)
        layer = torch.where(layer < threshold, torch.zeros_like(layer), layer)
        layer_levels = (layer.clamp(0.0, 1.0) * 255.0).floor()
        blurred = motion_blur_with_tables(layer_levels, *tables[6:], padding)
        flakes = divide(blurred, 255.0)
        unit = unit_values(images, torch.float32)
        brightened = torch.maximum(unit, opencv_gray(unit, dtype) * 1.5 + 0.5).to(dtype)
        whitened = blend * unit.to(dtype) + (1.0 - blend) * brightened
        return unit_float32(whitened + flakes + flakes.flip(2, 3), scale=255)

    return step


def _uniform_below(random: SampleRandom, bounds: Tensor) -> Tensor:
    """One integer per sample, uniform in [0, bounds) (int64 (B,)), from one ``uniform()`` draw of ``random``
    (on the device of ``bounds``).

    ``SampleRandom.integers`` takes one range for the batch; here the range depends on each sample's
    texture, so the draw is ``floor(u * bound)`` with ``u`` in [0, 1) (granularity 2**-24).
    """
    draws = random.uniform().double()
    return torch.clamp(torch.floor(draws * bounds).long(), max=bounds - 1)


@lru_cache(maxsize=1)
def _frost_host_stack() -> tuple[Tensor, Tensor, Tensor]:
    """The first five frost textures as one uint8 (5, Hmax, Wmax, 3) RGB tensor (zero-padded) with their
    heights and widths (int64 (5,)), all on the host; built once."""
    textures = frost_textures()[:FROST_CHOICES]
    height = max(texture.shape[0] for texture in textures)
    width = max(texture.shape[1] for texture in textures)
    stack = torch.zeros((len(textures), height, width, 3), dtype=torch.uint8)
    for index, texture in enumerate(textures):
        stack[index, : texture.shape[0], : texture.shape[1]] = torch.from_numpy(texture[..., ::-1].copy())
    heights = torch.tensor([texture.shape[0] for texture in textures])
    widths = torch.tensor([texture.shape[1] for texture in textures])
    return stack, heights, widths


@lru_cache(maxsize=8)
def _frost_stack(device: torch.device) -> Tensor:
    """The stacked frost textures of :func:`_frost_host_stack` on ``device``; copied once per device."""
    return to_device(_frost_host_stack()[0], device)


@lru_cache(maxsize=8)
def _colour(rgb: tuple[float, float, float], device: torch.device) -> Tensor:
    """float32 (1, 3, 1, 1) colour ``rgb`` on ``device``; copied once per device and colour."""
    return to_device(torch.tensor(rgb, dtype=torch.float32)[None, :, None, None], device)


def prepare_frost(
    severities: Tensor, random: SampleRandom, size: tuple[int, int], dtype: torch.dtype, upload: BatchUpload
) -> CorruptionStep:
    """``a * x + b * window`` of a random frost texture, per sample (ImageNet-C's frost).

    Args:
        severities: float64 (B,) in (0, 5].
        random: three draws per sample, on the host (they shape the window table): texture (among the
            first five), window top, window left.
        size: the images' (H, W) in pixels, below the smallest texture (314 x 484).
        dtype, upload: the working float dtype and the batch's upload (the weights and the windows).

    Returns:
        The step: float32 (B, 3, H, W) in [0, 1] → float32 (B, 3, H, W): ``clip(a * bytes + b * window, 0,
        255) / 255`` ((a, b) from ``FROST_TABLE``), exact given the same texture and window.

    Raises:
        ValueError: images as large as a texture, one line.
    """
    batch = len(severities)
    height, width = size
    _, heights, widths = _frost_host_stack()
    if height > int(heights.min()) - 1 or width > int(widths.min()) - 1:
        raise ValueError(
            f"frost needs images smaller than its textures (at most {int(heights.min()) - 1}x"
            f"{int(widths.min()) - 1} pixels), got {height}x{width}"
        )
    host_random = random.on_host()
    choice = _uniform_below(host_random, torch.full((batch,), FROST_CHOICES))
    top = _uniform_below(host_random, heights[choice] - height)
    left = _uniform_below(host_random, widths[choice] - width)
    # the weights (a, b) and the window (texture, top, left; exact in float32 too)
    host_table = torch.cat([per_sample_parameters("frost", severities), torch.stack([choice, top, left], dim=1)], dim=1)
    staged = upload.tables(host_table.to(torch.float64).numpy(), float_dtype=dtype)

    def step(images: Tensor) -> Tensor:
        table = staged.tensor()
        parameters, (choice, top, left) = table[:, :2], table[:, 2:].long().unbind(dim=1)
        stack = _frost_stack(images.device)
        rows = top[:, None] + torch.arange(height, device=images.device)
        columns = left[:, None] + torch.arange(width, device=images.device)
        window = stack[choice[:, None, None], rows[:, :, None], columns[:, None, :]].permute(0, 3, 1, 2)
        image_weight, frost_weight = parameters[:, 0, None, None, None], parameters[:, 1, None, None, None]
        values = image_weight * byte_levels(images, dtype) + frost_weight * window.to(dtype)
        return unit_float32(values)  # which clamps them to [0, 255] first

    return step


def plasma_scales(wibble_decay: Tensor, levels: int) -> Tensor:
    """The plasma fractal's perturbation scales per sample and level, on the host.

    Args:
        wibble_decay: (B,) host tensor of the working dtype (float64, or float32 in the float32 mode), the
            factor dividing the amplitude per level, > 0.
        levels: the map's levels, ``log2(size)``.

    Returns:
        (B, levels, 3) of the same dtype: per level the reference's ``wibble`` (100 divided by the decay once
        per level before it), ``-wibble`` and ``wibble - -wibble``: the factor and the bounds of its
        ``wibble · uniform(-wibble, wibble)``, in the dtype's arithmetic (IEEE division and negation, so
        the device's values would be the same bits).
    """
    wibble = torch.full_like(wibble_decay, 100.0)
    scales = []
    for _ in range(levels):
        scales.append(torch.stack([wibble, -wibble, wibble - -wibble], dim=1))
        wibble = wibble / wibble_decay
    return torch.stack(scales, dim=1)


PLASMA_HOST_LEVELS = 5
"""Levels of fog's plasma fractal made on the host, the first ones (1 to 16 points a side): on a GPU each level
costs about 20 launches on a few points per sample, whatever the map's size; their (B, 32, 32) map travels
with fog's parameters."""


def _composed_diamond_square_level(height_map: Tensor, scales: Tensor, draws: Tensor, step: int) -> None:
    """:func:`diamond_square_level` in ATen operations."""
    size = height_map.shape[-1]
    half = step // 2
    # the level's three perturbations at once: the reference's wibble · uniform(−wibble, wibble) per point,
    # elementwise the same arithmetic
    wibble, low, span = scales[:, :, None, None, None].unbind(1)  # each (B, 1, 1, 1)
    square, row, column = (wibble * (low + span * draws)).unbind(1)
    corners = height_map[:, 0:size:step, 0:size:step]
    square_total = corners + torch.roll(corners, -1, 1)
    square_total = square_total + torch.roll(square_total, -1, 2)
    # total / 4 + perturbation, written in place: total · 0.25 is exact (a power of two), so add's alpha
    # form rounds once, as the reference's two operations do
    torch.add(square, square_total, alpha=0.25, out=height_map[:, half:size:step, half:size:step])

    centres = height_map[:, half:size:step, half:size:step]
    corners = height_map[:, 0:size:step, 0:size:step]
    row_total = (centres + torch.roll(centres, 1, 1)) + (corners + torch.roll(corners, -1, 2))
    torch.add(row, row_total, alpha=0.25, out=height_map[:, 0:size:step, half:size:step])
    column_total = (centres + torch.roll(centres, 1, 2)) + (corners + torch.roll(corners, -1, 1))
    torch.add(column, column_total, alpha=0.25, out=height_map[:, half:size:step, 0:size:step])


@torch.library.custom_op("ccc::diamond_square_level", mutates_args=("height_map",))
def diamond_square_level(height_map: Tensor, scales: Tensor, draws: Tensor, step: int) -> None:
    """One diamond-square level on ``height_map``, in place: the square centres, then the diamonds on the corner
    rows and on the corner columns.

    Args:
        height_map: (B, n, n) float64 (float32 in the float32 mode); the level's corners, every ``step``-th row
            and column, are set, and its new points are written.
        scales: (B, 3) of the map's dtype: the level's :func:`plasma_scales` row (wibble, low, span).
        draws: (B, 3, s, s) of the map's dtype, s = n / step: the level's three uniform fields (square centres,
            diamonds on corner rows, diamonds between).
        step: the corners' spacing in points, a power of two >= 2.

    In ATen operations (:func:`_composed_diamond_square_level`), or on CUDA in one Triton kernel that reads the
    corners and draws and writes the level's points alone (:mod:`._triton.plasma`, where
    :func:`~._triton.fuses`): the same bits either way.
    """
    _composed_diamond_square_level(height_map, scales, draws, step)


@diamond_square_level.register_kernel("cuda")
def _diamond_square_level_cuda(height_map: Tensor, scales: Tensor, draws: Tensor, step: int) -> None:
    if not fuses(height_map.device):
        _composed_diamond_square_level(height_map, scales, draws, step)
        return
    from ._triton.plasma import diamond_square_level as kernel

    kernel(height_map, scales, draws, step)


@diamond_square_level.register_fake
def _diamond_square_level_shape(height_map: Tensor, scales: Tensor, draws: Tensor, step: int) -> None:
    return None


def _diamond_square(height_map: Tensor, scales: Tensor, fields: Sequence[Tensor]) -> None:
    """The diamond-square levels of ``fields`` on ``height_map`` (B, n, n), in place, from the level whose
    step is ``n >> (levels made before)``: level ``k`` of ``fields`` has step ``n / 2**(first + k)``, where
    ``2**first`` points a side are already set (every ``n / 2**first``-th row and column).

    ``scales`` (B, len(fields), 3): each level's :func:`plasma_scales` row; ``fields[k]`` (B, 3, side, side),
    the level's three uniform draws (square centres, diamonds on corner rows, diamonds between), side
    ``2**(first + k)``; all of ``height_map``'s dtype and device. One :func:`diamond_square_level` per level.
    """
    step = height_map.shape[-1] // fields[0].shape[-1]
    for level, draws in enumerate(fields):
        diamond_square_level(height_map, scales[:, level], draws, step)
        step //= 2


def _level_draws(random: SampleRandom, first: int, last: int, dtype: torch.dtype) -> list[Tensor]:
    """The three uniform fields of plasma levels ``first`` to ``last - 1`` (side ``2**level``), in one
    computation: (B, 3, side, side) each, of ``dtype``."""
    return random.uniform_sequence([(3, (1 << level, 1 << level)) for level in range(first, last)], dtype=dtype)


def plasma_coarse_map(scales: Tensor, random: SampleRandom, levels: int = PLASMA_HOST_LEVELS) -> Tensor:
    """The plasma fractal's first ``levels`` levels, on the host: (B, 2**levels, 2**levels) of ``scales``'
    dtype, every point of the map whose coordinates are multiples of ``size / 2**levels`` (the points those
    levels set, the same bits as the whole map's; a level's stencil reads only points of its own and
    earlier levels).

    ``scales``: (B, >= levels, 3) of :func:`plasma_scales`, on the host; the draws are ``random``'s first,
    made on the host (``random.on_host()``), which moves ``random``'s draw counter on past them.
    """
    height_map = torch.zeros((scales.shape[0], 1 << levels, 1 << levels), dtype=scales.dtype)
    _diamond_square(height_map, scales, _level_draws(random.on_host(), 0, levels, scales.dtype))
    return height_map


def plasma_fractal(size: int, scales: Tensor, random: SampleRandom, coarse: Tensor | None = None) -> Tensor:
    """Diamond-square height maps, one per sample, values in [0, 1].

    The reference's sequential recursion is already level-parallel: each level is a stencil over
    the previous levels' points (square centres from the corners, then the two diamond sets), so
    the batch runs level by level with the same arithmetic and ``uniform(n, n)`` draws per stencil.

    Args:
        size: side in pixels, a power of two >= 2.
        scales: (B, log2(size), 3) of :func:`plasma_scales` on the render device, float64 (float32 in the
            float32 mode); its dtype is the computation's.
        random: three draws per level (square centres, diamonds on corner rows, diamonds between).
        coarse: the first levels' map from :func:`plasma_coarse_map` (B, 2**k, 2**k), on the render device,
            whose draws ``random`` has already made; None: every level here.

    Returns:
        (B, size, size) of ``scales``' dtype: the same bits with or without ``coarse``.
    """
    batch, dtype = scales.shape[0], scales.dtype
    levels = scales.shape[1]
    height_map = torch.zeros((batch, size, size), dtype=dtype, device=scales.device)
    first = 0
    if coarse is not None:
        first = coarse.shape[-1].bit_length() - 1
        spacing = size >> first
        height_map[:, ::spacing, ::spacing] = coarse
    if first < levels:
        _diamond_square(height_map, scales[:, first:], _level_draws(random, first, levels, dtype))
    height_map = height_map - height_map.amin(dim=(1, 2), keepdim=True)
    return height_map / height_map.amax(dim=(1, 2), keepdim=True)


def prepare_fog(
    severities: Tensor, random: SampleRandom, size: tuple[int, int], dtype: torch.dtype, upload: BatchUpload
) -> CorruptionStep:
    """Add ``strength`` times a plasma fractal, rescaled by ``max / (max + strength)`` (ImageNet-C's fog).

    Args:
        severities: float64 (B,) in (0, 5].
        random: the plasma fractal's draws (3 per level of a map of side ``max(256, 2**ceil(log2 side))``): the
            first :data:`PLASMA_HOST_LEVELS` levels' here on the host (:func:`plasma_coarse_map`), the others
            on the device by the step.
        size, dtype, upload: the images' (H, W), the working float dtype and the batch's upload (the
            parameters, the plasma's scales and its coarse map).

    Returns:
        The step: float32 (B, 3, H, W) in [0, 1] → float32 (B, 3, H, W) in [0, 1], exact given the same draws.
    """
    height, width = size
    host_parameters = per_sample_parameters("fog", severities)
    map_size = max(256, 1 << math.ceil(math.log2(max(height, width))))
    scales = plasma_scales(host_parameters[:, 1].to(dtype), int(math.log2(map_size)))
    coarse = plasma_coarse_map(scales, random)
    staged = upload.tables(
        *(table.to(torch.float64).numpy() for table in (host_parameters, scales, coarse)), float_dtype=dtype
    )

    def step(images: Tensor) -> Tensor:
        parameters, device_scales, device_coarse = staged.tensors()
        strength = parameters[:, 0, None, None, None]
        unit = unit_values(images, dtype)
        maximum = unit.amax(dim=(1, 2, 3), keepdim=True)
        fractal = plasma_fractal(map_size, device_scales, random, device_coarse)[:, None, :height, :width]
        unit = unit + strength * fractal
        return unit_float32(torch.clamp(unit * maximum / (maximum + strength), 0, 1), scale=255)

    return step


def _blur_fields(fields: Tensor, kernels: Tensor) -> Tensor:
    """float64 (or float32) (B, H, W) fields blurred with replicated borders (the same dtype back) by
    :func:`~ccc.render_torch.numerics.gaussian_kernels` of the fields' dtype on their device (the CPU's
    ``gaussian_blur_nearest``, in OpenCV's operation order: :func:`~ccc.render_torch.numerics.separable_opencv`)."""
    return separable_opencv(fields[:, None], kernels)[:, 0]


_WATER = (175 / 255.0, 238 / 255.0, 238 / 255.0)
"""Spatter's water colour (RGB in [0, 1]), as the CPU path writes it."""

_MUD = (63 / 255.0, 42 / 255.0, 20 / 255.0)
"""Spatter's mud colour (RGB in [0, 1]), as the CPU path writes it."""


def _water(unit: Tensor, liquid: Tensor, intensity: Tensor) -> Tensor:
    """Spatter's water branch: drops shaded by an embossed, equalised distance-to-edge map (float32 [0, 1]).

    ``liquid`` and ``intensity`` are of the working dtype; the byte images between the filters are
    float32 (integers 0..255, exact), the two 3x3 box blurs run in the working dtype."""
    dtype = liquid.dtype
    # numpy's float -> uint8 cast wraps values of 256 and more (a liquid above 1.004, rare but seen)
    liquid_bytes = torch.remainder(torch.floor(liquid * 255), 256).float()
    edges = canny(liquid_bytes, 50, 150)
    distance = chamfer_distance(edges, 20.0)
    distance = torch.floor(box_blur3(distance.to(dtype)).float())
    distance = emboss(equalize_histogram(distance))
    distance = torch.round(box_blur3(distance.to(dtype))).float()
    wetness = liquid_bytes * distance
    peak = wetness.amax(dim=(1, 2), keepdim=True)
    wetness = torch.where(peak > 0, wetness / torch.where(peak > 0, peak, 1), wetness)
    wetness = (wetness.to(dtype) * intensity[:, None, None]).float()
    return torch.clamp(unit + wetness[:, None] * _colour(_WATER, unit.device), 0, 1)


def _mud(unit: Tensor, liquid: Tensor, threshold: Tensor, kernels: Tensor) -> Tensor:
    """Spatter's mud branch: brown blotches where the liquid mask, blurred by ``kernels`` (Gaussian kernels of
    the liquid's dtype, :func:`_blur_fields`), exceeds 0.8 (float32 [0, 1])."""
    mask = _blur_fields((liquid > threshold[:, None, None]).to(liquid.dtype), kernels).float()
    mask = torch.where(mask < 0.8, 0, mask)[:, None]
    mud = _colour(_MUD, unit.device) * mask
    return torch.clamp(unit * (1 - mask) + mud, 0, 1)


def prepare_spatter(
    severities: Tensor, random: SampleRandom, size: tuple[int, int], dtype: torch.dtype, upload: BatchUpload
) -> CorruptionStep:
    """Water drops or mud blotches from a smoothed, thresholded noise layer (ImageNet-C's spatter).

    Args:
        severities: float64 (B,) in (0, 5]; the branch (water or mud) is the table's switch at
            ``ceil(severity)``, so one batch may hold both: each branch runs on its samples, chosen on the
            host from the severities.
        random: one ``normal(H, W)`` draw per sample (the liquid layer).
        size, dtype, upload: the images' (H, W), the working float dtype and the batch's upload (the
            parameters, the samples in branch order, the liquid's and the mud's Gaussian kernels).

    Returns:
        The step: float32 (B, 3, H, W) in [0, 1] → float32 (B, 3, H, W) in [0, 1], exact given the same draws
        (see the fidelity notes for the filters of the water branch).
    """
    height, width = size
    host_parameters = per_sample_parameters("spatter", severities)
    _, _, liquid_sigma, _, host_intensity, mud = host_parameters.unbind(dim=1)
    water_count = int((mud < 0.5).sum())
    water_first = torch.argsort((mud >= 0.5).long(), stable=True)
    # the parameters and the samples in branch order (water first; positions exact in float32), the kernels
    kernel_tables = [gaussian_kernels(liquid_sigma.tolist())]
    if water_count < len(severities):
        kernel_tables.append(gaussian_kernels(host_intensity[water_first[water_count:]].tolist()))
    staged = upload.tables(
        torch.cat([host_parameters, water_first[:, None].double()], dim=1).numpy(), *kernel_tables, float_dtype=dtype
    )

    def step(images: Tensor) -> Tensor:
        table, liquid_kernels, *mud_kernels = staged.tensors()
        mean, spread, _, threshold, intensity, _, order = table.unbind(dim=1)
        order = order.long()
        noise = mean[:, None, None] + spread[:, None, None] * random.normal(height, width).to(dtype)
        liquid = _blur_fields(noise, liquid_kernels)
        liquid = torch.where(liquid < threshold[:, None, None], 0, liquid)
        output = torch.empty_like(images)
        if water_count > 0:
            water = order[:water_count]
            output[water] = _water(images[water], liquid[water], intensity[water])
        if mud_kernels:
            muddy = order[water_count:]
            output[muddy] = _mud(images[muddy], liquid[muddy], threshold[muddy], mud_kernels[0])
        return output

    return step


snow = register_torch_corruption("snow", prepare_snow)
frost = register_torch_corruption("frost", prepare_frost)
fog = register_torch_corruption("fog", prepare_fog)
spatter = register_torch_corruption("spatter", prepare_spatter)
