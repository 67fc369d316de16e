"""Blur corruptions in torch, batched with per-sample severities: defocus, glass, motion, zoom, gaussian.

Each corruption is registered as its host half, ``prepare_<name>(severities, random, size, dtype, upload)``
(the registry's contract: ``severities`` float64 (B,) in (0, 5], a
:class:`~ccc.render_torch.random.SampleRandom`, the images' size, the working float dtype, ``torch.float64``
or ``torch.float32``, and the batch's upload), and exported whole under its name. Its step takes ``images``
float32 (B, 3, H, W) in [0, 1] and returns float32 (B, 3, H, W): the CPU path's
(:mod:`ccc.corruptions.blur`) value before its uint8 truncation, divided by 255. In float64, filtering
runs in float64, as the CPU path does, and the Gaussian blurs in OpenCV's own operation order (fused
multiply-adds emulated exactly), so that the truncation to uint8 falls on the same side even on flat
regions (where exact values are integers). In float32 every such step runs in float32 with plain
multiply-adds (no emulation): close to the CPU's values, not equal to them.

Kernels and tables come from their CPU owners (the antialiased disk, scipy's Gaussian kernel, the
zoom tables, ImageMagick's motion-blur taps); they are built on the host from the host severities
(and, for motion blur's angle, the host copy of the random draw, ``random.on_host()``) and staged in
the batch's one upload (:class:`._upload.BatchUpload`); the filters it shares with the weather
family live in :mod:`.numerics`. No device data is read back: the pixels never leave the device, and
every loop has a trip count known on the host.

Parallel formulations (``docs/fidelity.md``, "The torch backend"):

- glass_blur: the reference's sequential scan copies pixel (h + dy, w + dx) onto (h, w); a pixel whose
  source was already visited in the same pass takes that source's new value. Each visited pixel thus
  points either at an original value or at another visited pixel's final value; these chains are
  acyclic and are resolved by pointer jumping: a fixed number of rounds, the bit length of a bound on
  the longest chain (:func:`_glass_jumps`). Given the same offsets the result equals the sequential loop
  exactly; the offsets are drawn from ``SampleRandom``.
- motion_blur: ImageMagick's taps applied as a tap-ordered sum of shifted (edge-clamped) gathers.

Host-side loops over the samples only build kernels and tap tables (numbers per sample, not pixels).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ccc.corruptions.blur import DEFOCUS_BLUR_TABLE, antialiased_disk

from ._triton import fuses
from ._upload import BatchUpload
from .numerics import (
    ZoomTables,
    byte_levels,
    gather_elements,
    gaussian_kernels,
    motion_blur_tables,
    motion_blur_with_tables,
    separable_opencv_levels,
    unit_float32,
    unit_of_levels,
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
    "FFT_SAMPLES_PER_CALL",
    "defocus_blur",
    "fft_samples_per_call",
    "gaussian_blur",
    "glass_blur",
    "motion_blur",
    "prepare_defocus_blur",
    "prepare_gaussian_blur",
    "prepare_glass_blur",
    "prepare_motion_blur",
    "prepare_zoom_blur",
    "zoom_blur",
]


_MAX_GLASS_ITERATIONS = 3
"""Largest iteration count of the glass-blur table: offsets are always drawn for this many passes,
so that a sample's draws do not depend on the other samples' severities."""

_GLASS_UNIFORM_BITS = 24
"""Bits of ``SampleRandom.uniform``'s values (``k / 2**24``), which glass blur's offsets scale in integers."""

_GLASS_UNIFORM_STEPS = float(1 << _GLASS_UNIFORM_BITS)

_MOTION_ANGLE_RANGE = (-45.0, 45.0)
"""Motion blur's angle, uniform in degrees (the CPU path's ``rng.uniform(-45, 45)``)."""


def prepare_gaussian_blur(
    severities: Tensor, random: SampleRandom, size: tuple[int, int], dtype: torch.dtype, upload: BatchUpload
) -> CorruptionStep:
    """Hold-out Gaussian blur: per-sample sigma from the table, truncated at 4 sigma, borders replicated.

    Deterministic (``random`` is not used). Shapes and ranges as in the module docstring.
    """
    sigmas = per_sample_parameters("gaussian_blur", severities).tolist()
    kernels = upload.tables(gaussian_kernels(sigmas), float_dtype=dtype)
    return lambda images: unit_float32(
        separable_opencv_levels(byte_levels(images, torch.uint8), kernels.tensor()), scale=255
    )


FFT_SAMPLES_PER_CALL = 16
"""Samples in every FFT call of defocus blur on a device other than the CPU (the last call of a group
zero-padded to it): a fixed transform count, so that launches grow with the batch only as B / 16."""


def fft_samples_per_call(device: torch.device) -> int:
    """Samples per FFT call of :func:`defocus_blur` on ``device``: 1 on the CPU (padding a call costs a
    whole transform per spare slot there), :data:`FFT_SAMPLES_PER_CALL` elsewhere (the GPU: padding costs
    little, launches are what count)."""
    return 1 if device.type == "cpu" else FFT_SAMPLES_PER_CALL


def _fft_correlate(images: Tensor, kernels: Tensor) -> Tensor:
    """Circular cross-correlations of padded images (B, C, H, W) with kernels (B, K, K), K <= H, W, in
    their float dtype (float64; float32 in the float32 precision).

    Returns (B, C, H, W) of that dtype. Every transform call holds the same number of samples
    (:func:`fft_samples_per_call`; the last call zero-padded): an FFT library may choose its blocking
    and vector kernels by the number of transforms in a call (with the batch in one call, an AVX-512
    Intel CPU changed last bits between a sample alone and in a batch), so that a sample's values do not
    depend on its batch.
    """
    count = len(images)
    per_call = fft_samples_per_call(images.device)
    spare = -count % per_call
    if spare:
        images = torch.cat([images, images.new_zeros((spare, *images.shape[1:]))])
        kernels = torch.cat([kernels, kernels.new_zeros((spare, *kernels.shape[1:]))])
    shape = images.shape[-2:]
    calls = []
    for call_images, call_kernels in zip(images.split(per_call), kernels.split(per_call)):
        spectrum = torch.fft.rfft2(call_images) * torch.fft.rfft2(call_kernels, s=shape).conj()[:, None]
        calls.append(torch.fft.irfft2(spectrum, s=shape))
    return torch.cat(calls)[:count]


def prepare_defocus_blur(
    severities: Tensor, random: SampleRandom, size: tuple[int, int], dtype: torch.dtype, upload: BatchUpload
) -> CorruptionStep:
    """Correlation with the CPU path's antialiased disk (per sample), reflect-101 borders, in ``dtype``.

    The kernels (up to 21×21) are embedded in one common square at OpenCV's anchor (size // 2) and
    applied by FFT on the reflect-101-padded images (as OpenCV's ``filter2D`` does for large kernels),
    a fixed number of samples per transform call (:func:`_fft_correlate`).
    Where the kernel is exactly a delta (radius < 1 with a negligible antialiasing blur, severities
    below 1/3) the exact result, the image itself, is returned: the CPU's value there is the image up to
    OpenCV's DFT rounding (±1e-14), whose sign alone decides its truncation (see the fidelity notes).
    Deterministic (``random`` is not used).
    """
    rows = per_sample_parameters("defocus_blur", severities).tolist()
    disks = [antialiased_disk(radius, alias) for radius, alias in rows]
    # The table's kernels fix the common size, whatever the batch holds (batch-independent rounding).
    table_disks = [antialiased_disk(radius, alias) for radius, alias in DEFOCUS_BLUR_TABLE[1:]]
    reach = max(max(disk.shape[0] // 2, disk.shape[0] - 1 - disk.shape[0] // 2) for disk in disks + table_disks)
    side = 2 * reach + 1
    embedded = np.zeros((len(disks), side, side))
    for index, disk in enumerate(disks):
        start = reach - disk.shape[0] // 2
        embedded[index, start : start + disk.shape[0], start : start + disk.shape[1]] = disk
    deltas = np.array([disk.max() == 1.0 for disk in disks])
    staged = upload.tables(embedded, deltas, float_dtype=dtype)

    def step(images: Tensor) -> Tensor:
        kernels, is_delta = staged.tensors()
        height, width = images.shape[-2:]
        unit = unit_values(images, dtype)
        padded = F.pad(unit, (reach, reach, reach, reach), mode="reflect")
        correlated = _fft_correlate(padded, kernels)[..., :height, :width]
        return unit_float32(torch.where(is_delta[:, None, None, None], unit, correlated), scale=255)

    return step


def _composed_zoom_blur_sum(images: Tensor, tables: ZoomTables, present: Tensor) -> Tensor:
    """:func:`zoom_blur_sum` in ATen operations: the images converted to the weights' dtype once, then
    :func:`gather_elements`' worth of zooms made at a time (:func:`zoom_with_tables`), weighted, and added
    one after the other."""
    source = images.to(tables.row_upper.dtype)  # once, not once per zoom
    accumulated = torch.zeros_like(images, dtype=torch.float32)
    slots = tables.row_low.shape[0]
    per_call = max(1, min(slots, gather_elements(images.device) // images.numel()))
    for first in range(0, slots, per_call):  # `per_call` slots zoomed in one set of operations
        chosen = slice(first, first + per_call)
        zoomed = zoom_with_tables(source, tables.slots(chosen), torch.float32)
        # Adding zoom × 0 leaves a finished sample's float32 sum unchanged, bit for bit.
        zoomed *= present[chosen][:, :, None, None, None]
        for slot_zoom in zoomed:  # summed one slot after the other, in the CPU path's order
            accumulated += slot_zoom
    return accumulated


@torch.library.custom_op("ccc::zoom_blur_sum", mutates_args=())
def zoom_blur_sum(images: Tensor, tables: list[Tensor], present: Tensor) -> Tensor:
    """Zoom blur's sum of zooms: ``Σ_z float32(zoom_z(images)) · present[z]`` added in float32 in slot order,
    from zero.

    Args:
        images: float (B, C, H, W), any memory layout, zoomed in the weights' dtype.
        tables: the eight :class:`~.numerics.ZoomTables` of Z zooms per sample in their order, (Z, B, H) and
            (Z, B, W) (:func:`~.numerics.zoom_device_tables`).
        present: float32 (Z, B), each slot's weight (1 where the sample has that zoom, 0 where not).

    Returns:
        float32 (B, C, H, W). Each zoom is :func:`~.numerics.zoom_with_tables` (cast to float32), times its
        weight, each rounded once. In ATen operations (:func:`_composed_zoom_blur_sum`), or on CUDA in one
        Triton kernel that keeps the zooms and their sum in registers (:mod:`._triton.zoom`, where
        :func:`~._triton.fuses`): the same bits either way.
    """
    return _composed_zoom_blur_sum(images, ZoomTables(*tables), present)


@zoom_blur_sum.register_kernel("cuda")
def _zoom_blur_sum_cuda(images: Tensor, tables: list[Tensor], present: Tensor) -> Tensor:
    if not fuses(images.device):
        return _composed_zoom_blur_sum(images, ZoomTables(*tables), present)
    from ._triton.zoom import zoom_sum as kernel

    return kernel(images, ZoomTables(*tables), present)


@zoom_blur_sum.register_fake
def _zoom_blur_sum_shape(images: Tensor, tables: list[Tensor], present: Tensor) -> Tensor:
    return images.new_empty(images.shape, dtype=torch.float32)


def prepare_zoom_blur(
    severities: Tensor, random: SampleRandom, size: tuple[int, int], dtype: torch.dtype, upload: BatchUpload
) -> CorruptionStep:
    """Average of each image and its centre zooms by ``numpy.arange(start, stop, step)`` (per sample).

    Zooms are accumulated in float32 in the CPU path's order; a sample with fewer zoom factors than
    the batch's longest list adds nothing for the missing slots. Every slot's tables are staged in the batch's
    upload. Each zoom interpolates in ``dtype``. Deterministic (``random`` unused).
    """
    rows = per_sample_parameters("zoom_blur", severities).tolist()
    factor_lists = [np.arange(start, stop, step).tolist() for start, stop, step in rows]
    slots = range(max(len(factors) for factors in factor_lists))
    height, width = size
    # (slots, B): a sample's missing slots zoom by 1 (and are weighted 0)
    slot_factors = [[factors[slot] if slot < len(factors) else 1.0 for factors in factor_lists] for slot in slots]
    present = np.array([[slot < len(factors) for factors in factor_lists] for slot in slots], dtype=np.float64)
    counts = np.array([len(factors) + 1 for factors in factor_lists], dtype=np.float64)
    staged = upload.tables(*zoom_tables(height, width, slot_factors), present, counts, float_dtype=dtype)

    def step(images: Tensor) -> Tensor:
        *tables, present_t, counts_t = staged.tensors()
        zooms = zoom_device_tables(*tables)  # every slot's weight complements at once
        unit = unit_values(images, torch.float32)
        accumulated = zoom_blur_sum(unit, list(zooms), present_t.to(torch.float32))
        averaged = (unit + accumulated) / counts_t.to(torch.float32)[:, None, None, None]
        return averaged.clamp(0.0, 1.0)

    return step


def prepare_motion_blur(
    severities: Tensor, random: SampleRandom, size: tuple[int, int], dtype: torch.dtype, upload: BatchUpload
) -> CorruptionStep:
    """ImageMagick motion blur with per-sample (radius, sigma) and an angle uniform in [-45, 45) degrees.

    One ``random.uniform()`` draw per sample gives the angle (drawn on the host, ``random.on_host()``: it
    shapes the taps). The result is the CPU path's uint8 value divided by 255 (its output is already 8-bit).
    """
    rows = per_sample_parameters("motion_blur", severities).tolist()
    low, high = _MOTION_ANGLE_RANGE
    angles = (low + (high - low) * random.on_host().uniform().to(torch.float64)).tolist()
    weights, starts, padding = motion_blur_tables(*size, [row[0] for row in rows], [row[1] for row in rows], angles)
    staged = upload.tables(weights, starts, float_dtype=dtype)

    def step(images: Tensor) -> Tensor:
        blurred = motion_blur_with_tables(byte_levels(images, dtype), *staged.tensors(), padding)
        return unit_of_levels(blurred, torch.float32, working=blurred.dtype)

    return step


def _glass_jumps(height: int, width: int, margin: int) -> int:
    """Pointer-jumping rounds that resolve every chain of one glass-blur pass (:func:`_composed_glass_sources`).

    A link goes from a visited pixel to its source when that source was visited earlier in the pass: a
    step (dy, dx) with dy in [1, margin) and dx >= -margin (a later row), or dy = 0 and dx in [1, margin)
    (the same row, further right). All pixels of a chain are visited, so they lie in the R = H - 2 margin
    rows and C = W - 2 margin columns of the visited block. Rows only grow along a chain, so it holds at
    most R - 1 row steps; its column grows by at least 1 per same-row step, shrinks by at most margin per
    row step, and stays within C columns, so it holds at most (C - 1) + margin (R - 1) same-row steps.
    A chain therefore has at most L = (C - 1) + (margin + 1)(R - 1) links (reached by steps (0, +1) along a
    row and (1, -margin) at its end). After j rounds every chain of up to 2**j - 1 links is resolved,
    so ``L.bit_length()`` rounds suffice (11 for 224×224 at margin 4); further rounds change nothing.
    """
    rows, columns = height - 2 * margin, width - 2 * margin
    if rows < 1 or columns < 1:
        return 0
    return ((columns - 1) + (margin + 1) * (rows - 1)).bit_length()


def _composed_glass_sources(offsets: Tensor, margins: Tensor, active: Tensor, jumps: int) -> Tensor:
    """For passes of glass blur's sequential copy, the flat index of each pixel's original source.

    Args:
        offsets: int64 (B, H, W, 2): (dx, dy) per pixel, in [-margin, margin); B passes (one or several
            per sample, each independent of the others).
        margins: int64 (B,) maximum displacement per pass (its sample's, >= 1).
        active: bool (B,): whether the pass runs (otherwise every pixel keeps its value).
        jumps: pointer-jumping rounds, at least :func:`_glass_jumps` of every sample.

    Returns:
        int64 (B, H * W): a pass's result is its input gathered at its indices. Visited pixels
        are those with margin < h <= H - margin and margin < w <= W - margin, in decreasing (h, w)
        order; a pixel whose source was visited before it follows the source's chain (pointer jumping).
    """
    height, width = offsets.shape[1:3]
    device = offsets.device
    h = torch.arange(height, device=device)[None, :, None]
    w = torch.arange(width, device=device)[None, None, :]
    margin = margins[:, None, None]

    def visited(rows: Tensor, columns: Tensor) -> Tensor:
        inside_rows = (rows > margin) & (rows <= height - margin)
        return inside_rows & (columns > margin) & (columns <= width - margin)

    dx, dy = offsets[..., 0], offsets[..., 1]
    moving = visited(h, w) & active[:, None, None]
    source_rows, source_columns = h + dy, w + dx
    own = (h * width + w).expand_as(dx)
    target = torch.where(moving, source_rows * width + source_columns, own).reshape(len(margins), -1)
    earlier = (dy > 0) | ((dy == 0) & (dx > 0))
    link = (moving & earlier & visited(source_rows, source_columns)).reshape(len(margins), -1)
    for _ in range(jumps):
        next_target = target.gather(1, target)
        next_link = link.gather(1, target)
        target = torch.where(link, next_target, target)
        link = link & next_link
    return target


@torch.library.custom_op("ccc::glass_sources", mutates_args=())
def glass_sources(offsets: Tensor, margins: Tensor, active: Tensor, jumps: int) -> Tensor:
    """Each pixel's original source in passes of glass blur's sequential copy: int64 (B, H * W).

    Arguments as :func:`_composed_glass_sources` (``jumps`` at least :func:`_glass_jumps` of every pass, so
    that every chain is resolved). In ATen operations (:func:`_composed_glass_sources`: ``jumps`` rounds of
    pointer jumping on whole passes), or on CUDA in one Triton kernel that follows each pixel's chain to its
    end in registers (:mod:`._triton.glass`, where :func:`~._triton.fuses`): the same sources either way.
    """
    return _composed_glass_sources(offsets, margins, active, jumps)


@glass_sources.register_kernel("cuda")
def _glass_sources_cuda(offsets: Tensor, margins: Tensor, active: Tensor, jumps: int) -> Tensor:
    if not fuses(offsets.device):
        return _composed_glass_sources(offsets, margins, active, jumps)
    from ._triton.glass import glass_sources as kernel

    return kernel(offsets, margins, active)


@glass_sources.register_fake
def _glass_sources_shape(offsets: Tensor, margins: Tensor, active: Tensor, jumps: int) -> Tensor:
    return offsets.new_empty((offsets.shape[0], offsets.shape[1] * offsets.shape[2]))


def prepare_glass_blur(
    severities: Tensor, random: SampleRandom, size: tuple[int, int], dtype: torch.dtype, upload: BatchUpload
) -> CorruptionStep:
    """Gaussian blur, per-sample passes of local pixel copies, Gaussian blur again.

    Parameters per sample: (sigma, max displacement rounded half to even and at least 1, iterations
    rounded half to even). One ``random.uniform(3, H, W, 2)`` draw per call gives the (dx, dy)
    offsets of every pixel for up to three passes, ``floor(u * 2 * margin) - margin`` (in integers:
    ``u`` is ``k / 2**24``). Kernels, margins and each pass's active samples are staged in the batch's upload; the
    pointer jumping runs a fixed number of rounds (:func:`_glass_jumps`), for the three passes at once, and
    moves the blurred bytes as uint8 (the CPU's ``np.uint8`` of the first blur). The blurs run in ``dtype``.
    """
    rows = per_sample_parameters("glass_blur", severities).tolist()
    height, width = size
    margins_list = [round(max(row[1], 1.0)) for row in rows]
    iterations = np.array([round(row[2]) for row in rows])
    active = np.arange(_MAX_GLASS_ITERATIONS)[:, None] < iterations[None, :]
    jumps = max(_glass_jumps(height, width, margin) for margin in margins_list)
    staged = upload.tables(
        gaussian_kernels([row[0] for row in rows]), np.array(margins_list), active, float_dtype=dtype
    )

    def step(images: Tensor) -> Tensor:
        kernels, margins, active_t = staged.tensors()
        batch, channels = images.shape[:2]
        # u = k / 2**24 exactly, so floor(u * span) = (k * span) >> 24, within [0, span) (no float64 product)
        steps = (random.uniform(_MAX_GLASS_ITERATIONS, height, width, 2) * _GLASS_UNIFORM_STEPS).to(torch.int64)
        spans = (2 * margins)[:, None, None, None, None]
        offsets = ((steps * spans) >> _GLASS_UNIFORM_BITS) - margins[:, None, None, None, None]
        # floor(x * 255) of a blur of [0, 1] values lies in 0..255: np.uint8 of the CPU path, one byte per value
        levels = (separable_opencv_levels(byte_levels(images, torch.uint8), kernels) * 255.0).floor().to(torch.uint8)
        flat = levels.reshape(batch, channels, height * width)
        # every pass's sources at once (they depend on its offsets alone, not on the image it shuffles)
        passes = batch * _MAX_GLASS_ITERATIONS
        sources = glass_sources(
            offsets.reshape(passes, height, width, 2),
            margins[:, None].expand(batch, _MAX_GLASS_ITERATIONS).reshape(passes),
            active_t.T.reshape(passes),
            jumps,
        ).view(batch, _MAX_GLASS_ITERATIONS, height * width)
        for iteration in range(_MAX_GLASS_ITERATIONS):
            flat = flat.gather(2, sources[:, iteration, None, :].expand(batch, channels, height * width))
        shuffled = flat.reshape(batch, channels, height, width)  # the byte levels, read as they are
        return unit_float32(separable_opencv_levels(shuffled, kernels), scale=255)

    return step


defocus_blur = register_torch_corruption("defocus_blur", prepare_defocus_blur)
glass_blur = register_torch_corruption("glass_blur", prepare_glass_blur)
motion_blur = register_torch_corruption("motion_blur", prepare_motion_blur)
zoom_blur = register_torch_corruption("zoom_blur", prepare_zoom_blur)
gaussian_blur = register_torch_corruption("gaussian_blur", prepare_gaussian_blur)
