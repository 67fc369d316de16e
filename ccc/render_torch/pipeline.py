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
samples or its position (every group draws from fresh per-sample streams). A stage copies its random
streams' keys and its groups' positions to the device once each, whatever the number of groups.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from ccc.corruptions import get_corruption
from ccc.render import check_render_precision
from ccc.stream.spec import DEFAULT_CORRUPTION_SET, SampleSpec

from ._upload import to_device
from .geometry import SourceImage, crop_resize_flip
from .jpeg import FINAL_QUALITY, jpeg_round_trip
from .numerics import truncate_to_levels
from .random import SampleRandom
from .registry import torch_corruption

__all__ = ["apply_corruption_stage", "check_torch_corruption_set", "render_batch", "working_dtype"]

_DTYPES = {"float64": torch.float64, "float32": torch.float32}


def working_dtype(precision: str) -> torch.dtype:
    """The corruptions' working float dtype of ``precision`` (``"float64"`` or ``"float32"``).

    Raises:
        ValueError: one line, for another value.
    """
    return _DTYPES[check_render_precision(precision)]


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
        float32 (B, 3, H, W) byte levels (truncated), a new tensor.

    Raises:
        ValueError: an unknown ``precision``.
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
        return images.clone()
    # one copy of the stage's keys and one of every group's positions (and the untouched samples'),
    # whatever the number of groups
    random = SampleRandom(seeds.cpu(), stage, images.device, dtype)
    lengths = [len(members) for _, members in groups] + [len(untouched)]
    positions = torch.tensor([k for _, members in groups for k in members] + untouched)
    *indices, untouched_index = to_device(positions, images.device).split(lengths)
    corrupted = torch.empty_like(images)
    for (name, members), index in zip(groups, indices):
        group_severities = torch.tensor([severities[k] for k in members], dtype=torch.float64)
        corrupted[index] = torch_corruption(name)(images[index], group_severities, random.group(members, index), dtype)
    output = truncate_to_levels(corrupted)  # elementwise: once for the whole stage rather than once per group
    if untouched:
        output[untouched_index] = images[untouched_index]
    return output


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
    device = torch.device(device)
    pixels = crop_resize_flip(specs, images, device)
    seeds = torch.tensor([spec.seed for spec in specs], dtype=torch.int64)
    pixels = apply_corruption_stage(pixels, [s.n1 for s in specs], [s.s1 for s in specs], seeds, 0, precision)
    pixels = apply_corruption_stage(pixels, [s.n2 for s in specs], [s.s2 for s in specs], seeds, 1, precision)
    output = torch.round(pixels * 255).to(torch.uint8)
    return jpeg_round_trip(output, FINAL_QUALITY) if jpeg else output
