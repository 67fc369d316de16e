"""Noise corruptions: gaussian_noise, shot_noise, impulse_noise and the hold-out speckle_noise.

Each acts on every value independently: the output byte depends only on the input byte and on
fresh noise. Two sampling modes give the same output distribution:

- legacy mode (a ``numpy.random.RandomState``): the reference's draws, in its order and with its
  arithmetic (``normal``/``poisson`` on ``x / 255`` in float64, two uniforms per value for salt and
  pepper as scikit-image draws them), so a RandomState seeded like ``np.random.seed`` reproduces
  the reference;
- generator mode (a ``numpy.random.Generator``, the default): the output byte is drawn directly
  from its exact distribution given the input byte, ``P(out = b | in = v)``, computed once per
  parameter value from the noise's CDF (normal or Poisson, through the reference's clip-and-truncate
  arithmetic) into 256 alias tables; sampling costs one uniform per value. This is several times
  faster than drawing the noise and equal in distribution (differences only where the reference's
  float arithmetic lands exactly on a byte boundary, a set of probability zero for the continuous
  noises).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numpy.typing import NDArray
from scipy import special

from ._kernels import build_alias_tables, sample_bytes_with_alias
from ._random import RandomSource
from .registry import Corruption, register_corruption

GAUSSIAN_NOISE_TABLE = (0.0, 0.08, 0.12, 0.18, 0.26, 0.38)
"""Standard deviation of the additive noise on [0, 1] values, severities 0..5."""

SHOT_NOISE_TABLE = (0.0, 1 / 60, 1 / 25, 1 / 12, 1 / 5, 1 / 3)
"""Inverse photon count per unit intensity, severities 0..5 (the Poisson rate is ``x / table``)."""

IMPULSE_NOISE_TABLE = (0.0, 0.03, 0.06, 0.09, 0.17, 0.27)
"""Fraction of values replaced by salt (255) or pepper (0), severities 0..5."""

SPECKLE_NOISE_TABLE = (0.0, 0.15, 0.2, 0.35, 0.45, 0.6)
"""Standard deviation of the multiplicative noise, severities 0..5."""

_LEVELS = np.arange(256) / 255.0
"""Input byte v as the reference's ``v / 255`` (float64)."""

_UPPER_EDGES = np.arange(1, 256) / 255.0
"""``(b + 1) / 255`` for b = 0..254: a value ``y`` in [0, 1] truncates to a byte <= b iff ``y * 255 < b + 1``."""

ByteTables = tuple[NDArray[np.float64], NDArray[np.int64]]


def _alias_tables_from_cumulative(below_edges: NDArray[np.float64]) -> ByteTables:
    """Alias tables from ``below_edges[v, b] = P(out <= b | v)`` for b = 0..254 (P(out <= 255) = 1)."""
    cumulative = np.concatenate([below_edges, np.ones((256, 1))], axis=1)
    probabilities = np.diff(cumulative, axis=1, prepend=0.0).clip(min=0.0)
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    acceptance, alias = build_alias_tables(probabilities)
    acceptance.setflags(write=False)
    alias.setflags(write=False)
    return acceptance, alias


@lru_cache(maxsize=128)
def _gaussian_byte_tables(standard_deviation: float) -> ByteTables:
    """Output-byte distribution of ``uint8(clip(v/255 + N(0, sd), 0, 1) * 255)``."""
    return _alias_tables_from_cumulative(special.ndtr((_UPPER_EDGES[None, :] - _LEVELS[:, None]) / standard_deviation))


@lru_cache(maxsize=128)
def _speckle_byte_tables(standard_deviation: float) -> ByteTables:
    """Output-byte distribution of ``uint8(clip(x + x * N(0, sd), 0, 1) * 255)``, x = v/255 (0 stays 0)."""
    levels = _LEVELS[1:, None]
    below = special.ndtr((_UPPER_EDGES[None, :] - levels) / (levels * standard_deviation))
    return _alias_tables_from_cumulative(np.concatenate([np.ones((1, 255)), below]))


@lru_cache(maxsize=128)
def _shot_byte_tables(photons: float) -> ByteTables:
    """Output-byte distribution of ``uint8(clip(Poisson(v/255 * photons) / photons, 0, 1) * 255)``.

    The output byte of a count k is computed with the reference's arithmetic; it is non-decreasing
    in k, so ``P(out <= b)`` is the Poisson CDF at the largest count mapping to a byte <= b.
    """
    counts = np.arange(int(np.ceil(photons)) + 2)
    outputs = (np.clip(counts / photons, 0, 1) * 255).astype(np.uint8)
    last_count = np.searchsorted(outputs, np.arange(255), side="right") - 1
    below = special.pdtr(np.maximum(last_count, 0)[None, :], (_LEVELS * photons)[:, None])
    below[:, last_count < 0] = 0.0
    return _alias_tables_from_cumulative(below)


@lru_cache(maxsize=128)
def _impulse_byte_tables(amount: float) -> ByteTables:
    """Output-byte distribution of salt and pepper: 255 and 0 with ``amount / 2`` each, else unchanged."""
    probabilities = np.zeros((256, 256))
    probabilities[np.arange(256), np.arange(256)] = 1.0 - amount
    probabilities[:, 255] += amount / 2
    probabilities[:, 0] += amount / 2
    return _alias_tables_from_cumulative(np.cumsum(probabilities, axis=1)[:, :255])


def _sample_bytes(image: NDArray[np.uint8], tables: ByteTables, rng: np.random.Generator) -> NDArray[np.uint8]:
    acceptance, alias = tables
    return sample_bytes_with_alias(image, acceptance, alias, rng.random(image.shape))


def gaussian_noise(image: NDArray[np.uint8], standard_deviation: float, rng: RandomSource) -> NDArray[np.generic]:
    """``clip(x/255 + N(0, standard_deviation), 0, 1) * 255``."""
    if isinstance(rng, np.random.RandomState):
        unit = image / 255.0
        return np.clip(unit + rng.normal(size=unit.shape, scale=standard_deviation), 0, 1) * 255
    return _sample_bytes(image, _gaussian_byte_tables(float(standard_deviation)), rng)


def shot_noise(image: NDArray[np.uint8], inverse_rate: float, rng: RandomSource) -> NDArray[np.generic]:
    """``clip(Poisson(x/255 * c) / c, 0, 1) * 255`` with ``c = 1 / inverse_rate`` photons per unit."""
    photons = 1.0 / inverse_rate if inverse_rate != 0 else 9999.0
    if isinstance(rng, np.random.RandomState):
        unit = image / 255.0
        return np.clip(rng.poisson(unit * photons) / photons, 0, 1) * 255
    return _sample_bytes(image, _shot_byte_tables(float(photons)), rng)


def impulse_noise(image: NDArray[np.uint8], amount: float, rng: RandomSource) -> NDArray[np.uint8]:
    """Salt and pepper as ``skimage.util.random_noise(mode="s&p")``: each value is flipped with
    probability ``amount``, then set to 255 (salt) or 0 (pepper) with probability 1/2 each."""
    if isinstance(rng, np.random.RandomState):
        flipped = rng.random_sample(image.shape) <= amount
        salted = rng.random_sample(image.shape) <= 0.5
        output = image.copy()
        output[flipped & salted] = 255
        output[flipped & ~salted] = 0
        return output
    return _sample_bytes(image, _impulse_byte_tables(float(amount)), rng)


def speckle_noise(image: NDArray[np.uint8], standard_deviation: float, rng: RandomSource) -> NDArray[np.generic]:
    """``clip(x + x * N(0, standard_deviation), 0, 1) * 255`` on ``x = image / 255``."""
    if isinstance(rng, np.random.RandomState):
        unit = image / 255.0
        return np.clip(unit + unit * rng.normal(size=unit.shape, scale=standard_deviation), 0, 1) * 255
    return _sample_bytes(image, _speckle_byte_tables(float(standard_deviation)), rng)


register_corruption(Corruption("gaussian_noise", "noise", gaussian_noise, GAUSSIAN_NOISE_TABLE, random=True, order=0))
register_corruption(Corruption("shot_noise", "noise", shot_noise, SHOT_NOISE_TABLE, random=True, order=1))
register_corruption(Corruption("impulse_noise", "noise", impulse_noise, IMPULSE_NOISE_TABLE, random=True, order=2))
register_corruption(
    Corruption("speckle_noise", "noise", speckle_noise, SPECKLE_NOISE_TABLE, random=True, order=15, holdout=True)
)
