"""Noise corruptions in torch: gaussian_noise, shot_noise, impulse_noise, speckle_noise.

Each draws the reference's noise directly (no byte tables), per value, from :class:`SampleRandom`,
with every sample at its own severity; the results are equal in distribution to the CPU path's
(``ccc.corruptions.noise``), not equal in bytes (another random stream, float32 instead of float64
arithmetic on the noisy value). ``dtype`` (the working float dtype) shapes the normal draws'
Box–Muller (through ``random``) and shot noise's division; the other steps are float32 in both modes.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._upload import to_device
from .numerics import byte_levels
from .parameters import per_sample_parameters
from .random import SampleRandom
from .registry import register_torch_corruption

__all__ = ["gaussian_noise", "impulse_noise", "shot_noise", "speckle_noise"]


def _per_sample(name: str, severities: Tensor, images: Tensor) -> Tensor:
    """Scalar parameters as float32 (B, 1, 1, 1) on the images' device."""
    return to_device(per_sample_parameters(name, severities), images.device, torch.float32).view(-1, 1, 1, 1)


def gaussian_noise(
    images: Tensor, severities: Tensor, random: SampleRandom, dtype: torch.dtype = torch.float64
) -> Tensor:
    """``clip(x + N(0, sd), 0, 1)`` per value, ``sd`` from severity (0.08..0.38 on [0, 1] values).

    images: float32 (B, 3, H, W) in [0, 1]; severities: float64 (B,) in (0, 5]; returns float32
    (B, 3, H, W) in [0, 1]. One normal draw of shape (3, H, W).
    """
    deviation = _per_sample("gaussian_noise", severities, images)
    return torch.clamp(images + random.normal(*images.shape[1:]) * deviation, 0, 1)


def shot_noise(images: Tensor, severities: Tensor, random: SampleRandom, dtype: torch.dtype = torch.float64) -> Tensor:
    """``clip(Poisson(x * c) / c, 0, 1)`` per value with ``c = 1 / table(severity)`` photons (60..3).

    images: float32 (B, 3, H, W) byte levels ``k / 255`` (as the pipeline passes them); severities:
    float64 (B,) in (0, 5] on the host; returns float32 (B, 3, H, W) in [0, 1]. One Poisson draw at
    rates ``float32(k / 255) * c`` in float64, from a (B, 256) host table of every level's rate; the counts
    divided by ``c`` in ``dtype``.
    """
    photons = 1.0 / per_sample_parameters("shot_noise", severities).to(torch.float64)
    rates = (torch.arange(256, dtype=torch.float32) / 255).to(torch.float64)[None, :] * photons[:, None]
    counts = random.poisson(rates, byte_levels(images, torch.float32).to(torch.int64))
    scale = to_device(photons, images.device, dtype).view(-1, 1, 1, 1)
    return torch.clamp(counts.to(dtype) / scale, 0, 1).to(torch.float32)


def impulse_noise(
    images: Tensor, severities: Tensor, random: SampleRandom, dtype: torch.dtype = torch.float64
) -> Tensor:
    """Salt and pepper as ``skimage.util.random_noise(mode="s&p", amount=a)``.

    Each value is replaced with probability ``a`` (0.03..0.27), by 1 or 0 with probability 1/2 each.
    images: float32 (B, 3, H, W) in [0, 1]; severities: float64 (B,) in (0, 5]; returns float32
    (B, 3, H, W). Two uniform draws of shape (3, H, W), in one computation: replaced, salt.
    """
    amount = _per_sample("impulse_noise", severities, images)
    replace_draws, salt_draws = random.uniform_draws(2, *images.shape[1:]).unbind(1)
    return torch.where(replace_draws <= amount, (salt_draws <= 0.5).to(images.dtype), images)


def speckle_noise(
    images: Tensor, severities: Tensor, random: SampleRandom, dtype: torch.dtype = torch.float64
) -> Tensor:
    """``clip(x + x * N(0, sd), 0, 1)`` per value, ``sd`` from severity (0.15..0.6).

    images: float32 (B, 3, H, W) in [0, 1]; severities: float64 (B,) in (0, 5]; returns float32
    (B, 3, H, W) in [0, 1]. One normal draw of shape (3, H, W).
    """
    deviation = _per_sample("speckle_noise", severities, images)
    return torch.clamp(images + images * random.normal(*images.shape[1:]) * deviation, 0, 1)


register_torch_corruption("gaussian_noise", gaussian_noise)
register_torch_corruption("shot_noise", shot_noise)
register_torch_corruption("impulse_noise", impulse_noise)
register_torch_corruption("speckle_noise", speckle_noise)
