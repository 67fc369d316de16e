"""Noise corruptions: gaussian_noise, shot_noise, impulse_noise and the hold-out speckle_noise.

All four follow the reference: same distributions, same shapes, same draw order, computed in float64
on ``x / 255``, with the generator given (a ``numpy.random.Generator`` by default, a ``RandomState``
in legacy mode, see :mod:`ccc.corruptions._random`). One deliberate difference: with a Generator,
shot noise samples the output bytes from their exact distribution instead of drawing Poisson counts
(same distribution, several times faster); legacy mode keeps the reference's Poisson draws.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numpy.typing import NDArray
from scipy import special

from ._kernels import build_alias_tables, sample_bytes_with_alias
from ._random import RandomSource, draw_unit_uniform

GAUSSIAN_NOISE_TABLE = (0.0, 0.08, 0.12, 0.18, 0.26, 0.38)
"""Standard deviation of the additive noise on [0, 1] values, severities 0..5."""

SHOT_NOISE_TABLE = (0.0, 1 / 60, 1 / 25, 1 / 12, 1 / 5, 1 / 3)
"""Inverse photon count per unit intensity, severities 0..5 (the Poisson rate is ``x / table``)."""

IMPULSE_NOISE_TABLE = (0.0, 0.03, 0.06, 0.09, 0.17, 0.27)
"""Fraction of values replaced by salt (1) or pepper (0), severities 0..5."""

SPECKLE_NOISE_TABLE = (0.0, 0.15, 0.2, 0.35, 0.45, 0.6)
"""Standard deviation of the multiplicative noise, severities 0..5."""


def gaussian_noise(image: NDArray[np.uint8], standard_deviation: float, rng: RandomSource) -> NDArray[np.float64]:
    """``clip(x/255 + N(0, standard_deviation), 0, 1) * 255``; one normal draw per value."""
    unit = image / 255.0
    return np.clip(unit + rng.normal(size=unit.shape, scale=standard_deviation), 0, 1) * 255


@lru_cache(maxsize=64)
def _shot_noise_alias_tables(photons: float) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Alias tables of ``P(output byte = b | input byte v)`` for shot noise with ``photons`` per unit.

    The output byte of a Poisson count k is ``uint8(clip(k / photons, 0, 1) * 255)``, computed with
    the reference's arithmetic; it is non-decreasing in k, so ``P(output <= b)`` is the Poisson CDF
    at the largest count mapping to b.
    """
    rates = (np.arange(256) / 255.0) * photons
    counts = np.arange(int(np.ceil(photons)) + 2)
    outputs = (np.clip(counts / photons, 0, 1) * 255).astype(np.uint8)
    last_count = np.searchsorted(outputs, np.arange(256), side="right") - 1
    cumulative = special.pdtr(np.maximum(last_count, 0)[np.newaxis, :], rates[:, np.newaxis])
    cumulative[:, last_count < 0] = 0.0
    cumulative[:, 255] = 1.0
    probabilities = np.diff(cumulative, axis=1, prepend=0.0).clip(min=0.0)
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    acceptance, alias = build_alias_tables(probabilities)
    acceptance.setflags(write=False)
    alias.setflags(write=False)
    return acceptance, alias


def shot_noise(image: NDArray[np.uint8], inverse_rate: float, rng: RandomSource) -> NDArray[np.generic]:
    """``clip(Poisson(x/255 * c) / c, 0, 1) * 255`` with ``c = 1 / inverse_rate`` photons per unit.

    With a ``Generator`` the output bytes are drawn from their exact distribution given the input
    byte (256 alias tables built from Poisson CDFs, one uniform per value), which is the distribution
    the reference's Poisson draws produce after truncation, at a fraction of the cost of Poisson
    sampling. In legacy mode (``RandomState``) the reference's Poisson draws are made.
    """
    photons = 1.0 / inverse_rate if inverse_rate != 0 else 9999.0
    if isinstance(rng, np.random.RandomState):
        unit = image / 255.0
        return np.clip(rng.poisson(unit * photons) / photons, 0, 1) * 255
    acceptance, alias = _shot_noise_alias_tables(float(photons))
    return sample_bytes_with_alias(image, acceptance, alias, rng.random(image.shape))


def impulse_noise(image: NDArray[np.uint8], amount: float, rng: RandomSource) -> NDArray[np.uint8]:
    """Salt and pepper as ``skimage.util.random_noise(mode="s&p")``: each value is flipped with
    probability ``amount`` (``u <= amount``), then salted (255) if a second uniform is <= 0.5, else
    peppered (0). Computed on uint8 directly: ``(v / 255) * 255`` truncates back to ``v`` exactly."""
    flipped = draw_unit_uniform(rng, image.shape) <= amount
    salted = draw_unit_uniform(rng, image.shape) <= 0.5
    output = image.copy()
    output[flipped & salted] = 255
    output[flipped & ~salted] = 0
    return output


def speckle_noise(image: NDArray[np.uint8], standard_deviation: float, rng: RandomSource) -> NDArray[np.float64]:
    """``clip(x + x * N(0, standard_deviation), 0, 1) * 255`` on ``x = image / 255``."""
    unit = image / 255.0
    return np.clip(unit + unit * rng.normal(size=unit.shape, scale=standard_deviation), 0, 1) * 255
