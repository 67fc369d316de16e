"""Noise corruptions in torch: gaussian_noise, shot_noise, impulse_noise, speckle_noise.

Each draws the reference's noise directly (no byte tables), per value, from :class:`SampleRandom`,
with every sample at its own severity; the results are equal in distribution to the CPU path's
(``ccc.corruptions.noise``), not equal in bytes (another random stream, float32 instead of float64
arithmetic on the noisy value). ``dtype`` (the working float dtype) shapes the normal draws'
Box–Muller (through ``random``) and shot noise's division; the other steps are float32 in both modes.

Each corruption is registered as its host half, ``prepare_<name>`` (the registry's contract), and exported
whole under its name.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._upload import BatchUpload, Staged
from .numerics import byte_levels
from .parameters import per_sample_parameters
from .random import SampleRandom
from .registry import CorruptionStep, register_torch_corruption

__all__ = [
    "gaussian_noise",
    "impulse_noise",
    "prepare_gaussian_noise",
    "prepare_impulse_noise",
    "prepare_shot_noise",
    "prepare_speckle_noise",
    "shot_noise",
    "speckle_noise",
]


def _per_sample(name: str, severities: Tensor, upload: BatchUpload) -> Staged:
    """Scalar parameters staged as float32 (B,) (the noise's arithmetic is float32 in both modes)."""
    return upload.tables(per_sample_parameters(name, severities).numpy(), float_dtype=torch.float32)


def prepare_gaussian_noise(
    severities: Tensor, random: SampleRandom, size: tuple[int, int], dtype: torch.dtype, upload: BatchUpload
) -> CorruptionStep:
    """``clip(x + N(0, sd), 0, 1)`` per value, ``sd`` from severity (0.08..0.38 on [0, 1] values).

    The step maps float32 (B, 3, H, W) in [0, 1] to float32 (B, 3, H, W) in [0, 1]. One normal draw of shape
    (3, H, W).
    """
    deviation = _per_sample("gaussian_noise", severities, upload)
    return lambda images: torch.clamp(
        images + random.normal(*images.shape[1:]) * deviation.tensor().view(-1, 1, 1, 1), 0, 1
    )


def prepare_shot_noise(
    severities: Tensor, random: SampleRandom, size: tuple[int, int], dtype: torch.dtype, upload: BatchUpload
) -> CorruptionStep:
    """``clip(Poisson(x * c) / c, 0, 1)`` per value with ``c = 1 / table(severity)`` photons (60..3).

    The step maps float32 (B, 3, H, W) byte levels ``k / 255`` (as the pipeline passes them) to float32
    (B, 3, H, W) in [0, 1]. One Poisson draw at rates ``float32(k / 255) * c`` in float64, from a (B, 256)
    host table of every level's rate; the counts divided by ``c`` in ``dtype``.
    """
    photons = 1.0 / per_sample_parameters("shot_noise", severities).to(torch.float64)
    rates = (torch.arange(256, dtype=torch.float32) / 255).to(torch.float64)[None, :] * photons[:, None]
    tables = random.poisson_tables(rates, upload)
    scale = upload.tables(photons.numpy(), float_dtype=dtype)

    def step(images: Tensor) -> Tensor:
        counts = random.poisson_with(tables, byte_levels(images, torch.int64))
        return torch.clamp(counts.to(dtype) / scale.tensor().view(-1, 1, 1, 1), 0, 1).to(torch.float32)

    return step


def prepare_impulse_noise(
    severities: Tensor, random: SampleRandom, size: tuple[int, int], dtype: torch.dtype, upload: BatchUpload
) -> CorruptionStep:
    """Salt and pepper as ``skimage.util.random_noise(mode="s&p", amount=a)``.

    Each value is replaced with probability ``a`` (0.03..0.27), by 1 or 0 with probability 1/2 each. The step
    maps float32 (B, 3, H, W) in [0, 1] to float32 (B, 3, H, W). Two uniform draws of shape (3, H, W), in one
    computation: replaced, salt.
    """
    amount = _per_sample("impulse_noise", severities, upload)

    def step(images: Tensor) -> Tensor:
        replace_draws, salt_draws = random.uniform_draws(2, *images.shape[1:]).unbind(1)
        replaced = replace_draws <= amount.tensor().view(-1, 1, 1, 1)
        return torch.where(replaced, (salt_draws <= 0.5).to(images.dtype), images)

    return step


def prepare_speckle_noise(
    severities: Tensor, random: SampleRandom, size: tuple[int, int], dtype: torch.dtype, upload: BatchUpload
) -> CorruptionStep:
    """``clip(x + x * N(0, sd), 0, 1)`` per value, ``sd`` from severity (0.15..0.6).

    The step maps float32 (B, 3, H, W) in [0, 1] to float32 (B, 3, H, W) in [0, 1]. One normal draw of shape
    (3, H, W).
    """
    deviation = _per_sample("speckle_noise", severities, upload)
    return lambda images: torch.clamp(
        images + images * random.normal(*images.shape[1:]) * deviation.tensor().view(-1, 1, 1, 1), 0, 1
    )


gaussian_noise = register_torch_corruption("gaussian_noise", prepare_gaussian_noise)
shot_noise = register_torch_corruption("shot_noise", prepare_shot_noise)
impulse_noise = register_torch_corruption("impulse_noise", prepare_impulse_noise)
speckle_noise = register_torch_corruption("speckle_noise", prepare_speckle_noise)
