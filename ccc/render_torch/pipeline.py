"""``render_batch``: specs and decoded source images → the stream's 224×224 uint8 images, in torch.

The CPU path's steps (``ccc.render.render_pixels`` then the JPEG encoding), for a whole batch:

1. :func:`~ccc.render_torch.geometry.crop_resize_flip` (Pillow's bytes);
2. stage 1: the samples are grouped by ``n1`` and each group (severity-0 samples skipped, as the CPU
   path skips them) is corrupted at its per-sample severities, drawing from ``SampleRandom(seeds, 0)``
   of the group's samples; the result is truncated to byte levels (``floor(clip(x * 255, 0, 255))``,
   the reference's ``np.uint8``);
3. stage 2: the same with ``n2``, ``s2`` and stage 1 of the random streams;
4. the JPEG quality-85 round trip (:func:`~ccc.render_torch.jpeg.jpeg_round_trip`), unless ``jpeg=False``.

``precision`` (:data:`ccc.render.RENDER_PRECISIONS`) picks the corruptions' working float dtype:
``"float64"`` (default) computes in float64 where the CPU path's bytes need it, ``"float32"`` runs every
such step in float32 (faster on a GPU, half the bytes moved; measured accuracy-level fidelity in
``docs/fidelity.md``).

A sample's bytes depend only on its spec and its source image: never on the batch size, the other
samples or its position (every group draws from fresh per-sample streams).

The host work of a batch all comes first: the crops' geometry and every group of both stages is
prepared on the host (checks, parameters, tables, host draws, the groups' stream keys and positions), all
of it staged in one :class:`~ccc.render_torch._upload.BatchUpload`; one copy then carries the batch's host
data to the device, and the device halves are queued after it. Nothing in a batch makes the host wait for
the device (no read back, no blocking copy), and a batch costs one upload whatever its number of groups.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from ccc.corruptions import get_corruption
from ccc.render import check_render_precision
from ccc.stream.spec import DEFAULT_CORRUPTION_SET, SampleSpec

from ._upload import BatchUpload
from .geometry import OUTPUT_SIZE, SourceImage, prepare_crop_resize_flip
from .jpeg import FINAL_QUALITY, jpeg_round_trip
from .numerics import byte_levels, truncate_rows_into
from .random import SampleRandom
from .registry import torch_corruption

__all__ = [
    "apply_corruption_stage",
    "check_torch_corruption_set",
    "prepare_corruption_stage",
    "render_batch",
    "working_dtype",
]

_DTYPES = {"float64": torch.float64, "float32": torch.float32}


def working_dtype(precision: str) -> torch.dtype:
    """The corruptions' working float dtype of ``precision`` (``"float64"`` or ``"float32"``).

    Raises:
        ValueError: one line, for another value.
    """
    return _DTYPES[check_render_precision(precision)]


def prepare_corruption_stage(
    names: Sequence[str],
    severities: Sequence[float],
    seeds: Tensor,
    stage: int,
    size: tuple[int, int],
    precision: str,
    upload: BatchUpload,
) -> Callable[[Tensor], Tensor]:
    """The host half of :func:`apply_corruption_stage`: every group's host work, its random streams' keys and
    its positions staged in ``upload`` (a group's keys and positions with the tables of its corruption).

    Args:
        names, severities, seeds, stage, precision: as in :func:`apply_corruption_stage`.
        size: the images' (height, width) in pixels.
        upload: the batch's upload; the returned device half reads its tables once it is sent.

    Returns:
        The device half: float32 (B, 3, H, W) byte levels → the stage's float32 (B, 3, H, W), a new tensor.
    """
    dtype = working_dtype(precision)
    canonical_of = {name: get_corruption(name).name for name in dict.fromkeys(names)}
    members_of: dict[str, list[int]] = {}
    untouched = []
    for k, (name, severity) in enumerate(zip(names, severities)):  # one pass over the samples
        if severity > 0:
            members_of.setdefault(canonical_of[name], []).append(k)
        else:
            untouched.append(k)
    groups = sorted(members_of.items())
    if not groups:
        return lambda images: images.clone()
    random = SampleRandom(seeds.cpu(), stage, dtype=dtype)  # on the host: each group stages its own keys
    lengths = [len(members) for _, members in groups] + [len(untouched)]
    positions = upload.tables(np.array([k for _, members in groups for k in members] + untouched, dtype=np.int64))
    steps = []
    for name, members in groups:
        group_severities = torch.tensor([severities[k] for k in members], dtype=torch.float64)
        group_random = random.staged_group(members, upload)
        steps.append(torch_corruption(name).prepare(group_severities, group_random, size, dtype, upload))

    def step(images: Tensor) -> Tensor:
        *indices, untouched_index = positions.tensor().split(lengths)
        output = torch.empty_like(images)
        for group_step, index in zip(steps, indices):  # each group's result truncated as it is written in place
            truncate_rows_into(output, index, group_step(images[index]))
        if untouched:
            output[untouched_index] = images[untouched_index]
        return output

    return step


def apply_corruption_stage(
    images: Tensor,
    names: Sequence[str],
    severities: Sequence[float],
    seeds: Tensor,
    stage: int,
    precision: str = "float64",
) -> Tensor:
    """One stage of the corruption pairs: sample ``k`` gets ``names[k]`` at ``severities[k]``.

    Args:
        images: float32 (B, 3, H, W) byte levels ``k / 255``.
        names: B corruption names; severities: B floats in [0, 5] (0 leaves the sample unchanged).
        seeds: int64 (B,) per-sample seeds, on the host (a device tensor is read back once).
        stage: 0 or 1 (which half of the pair; selects the random streams).
        precision: ``"float64"`` (default: the CPU path's arithmetic) or ``"float32"`` (every float64 step
            of the corruptions and of the random streams in float32), see :func:`working_dtype`.

    Returns:
        float32 (B, 3, H, W) byte levels (truncated), a new tensor. The stage's host data travels in one copy
        (:func:`prepare_corruption_stage`, then its device half).

    Raises:
        ValueError: an unknown ``precision``.
    """
    upload = BatchUpload(images.device)
    step = prepare_corruption_stage(names, severities, seeds, stage, tuple(images.shape[-2:]), precision, upload)
    upload.send()
    return step(images)


def check_torch_corruption_set(*corruption_sets: str | None) -> None:
    """ValueError (one line) unless every name is ``imagenet`` or None: the torch corruptions implement
    ImageNet-C's parameters at 224×224 only; streams of the other sets render on the CPU path."""
    others = sorted({name for name in corruption_sets if name not in (None, DEFAULT_CORRUPTION_SET)})
    if others:
        raise ValueError(
            f"the torch renderer implements corruption_set {DEFAULT_CORRUPTION_SET!r} only, got {', '.join(others)}: "
            "render this stream with the CPU path (no --render-device, no device=)"
        )


def render_batch(
    specs: Sequence[SampleSpec],
    images: Sequence[SourceImage],
    device: torch.device | str,
    jpeg: bool = True,
    precision: str = "float64",
) -> Tensor:
    """Render ``specs`` from their decoded source images on ``device``.

    Args:
        specs: the samples' plan entries (crop, flip, ``n1, s1, n2, s2``, seed).
        images: one decoded RGB source image per spec (numpy uint8 (H, W, 3) or torch uint8 (3, H, W)).
        device: where to render.
        jpeg: apply the stream's final JPEG quality-85 round trip (as a reader of the shards sees it).
        precision: the corruptions' working float dtype, ``"float64"`` (default) or ``"float32"``
            (:func:`apply_corruption_stage`).

    Returns:
        uint8 (B, 3, 224, 224) on ``device``.

    Raises:
        NotImplementedError: a corruption of the specs has no torch implementation.
        ValueError: mismatched inputs (see :func:`~ccc.render_torch.geometry.crop_resize_flip`), an
            unknown ``precision``, a sample of another corruption set than ``imagenet`` (the torch
            corruptions implement ImageNet-C's parameters at 224×224 only).
    """
    working_dtype(precision)
    check_torch_corruption_set(*(spec.corruption_set for spec in specs))
    pairs = [pair for spec in specs for pair in ((spec.n1, spec.s1), (spec.n2, spec.s2))]
    for name in dict.fromkeys(name for name, severity in pairs if severity > 0):  # each name once, in order
        torch_corruption(name)
    upload = BatchUpload(device)
    crops = prepare_crop_resize_flip(specs, images, upload)
    seeds = torch.tensor([spec.seed for spec in specs], dtype=torch.int64)
    size = (OUTPUT_SIZE, OUTPUT_SIZE)
    stages = (
        ([spec.n1 for spec in specs], [spec.s1 for spec in specs]),
        ([spec.n2 for spec in specs], [spec.s2 for spec in specs]),
    )
    first, second = (
        prepare_corruption_stage(names, severities, seeds, stage, size, precision, upload)
        for stage, (names, severities) in enumerate(stages)
    )
    upload.send()  # the batch's one copy: every step above is prepared
    output = byte_levels(second(first(crops())), torch.uint8)  # round(x · 255) as bytes
    return jpeg_round_trip(output, FINAL_QUALITY) if jpeg else output
