"""Random generators accepted by the corruptions, and the few draws whose API differs between them.

A corruption draws all of its randomness from the generator it is given:

- a :class:`numpy.random.Generator` (the normal case; ``None`` and int seeds become one);
- a :class:`numpy.random.RandomState` (legacy mode): the draws are then made with the same calls,
  in the same order, as the reference does with ``np.random.*`` after ``np.random.seed``, so a
  RandomState seeded like the reference reproduces the reference's random choices.
"""

from __future__ import annotations

from typing import Union

import numpy as np
from numpy.typing import NDArray

RandomSource = Union[np.random.Generator, np.random.RandomState]
"""What a corruption function draws from."""

RngLike = Union[np.random.Generator, np.random.RandomState, int, np.integer, None]
"""What the public functions accept as ``rng``."""


def as_random_source(rng: RngLike, parameter: str = "rng") -> RandomSource:
    """Turn ``rng`` (Generator, RandomState, int seed >= 0 or None) into a generator to draw from.

    ``None`` gives a generator seeded from fresh OS entropy; an int gives ``default_rng(seed)``.
    """
    if isinstance(rng, (np.random.Generator, np.random.RandomState)):
        return rng
    if rng is None:
        return np.random.default_rng()
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, (bool, np.bool_)):
        if rng < 0:
            raise ValueError(f"{parameter} seed must be a non-negative integer, got {rng}")
        return np.random.default_rng(int(rng))
    raise TypeError(
        f"{parameter} must be a numpy.random.Generator, a numpy.random.RandomState, an int seed or None, "
        f"got {type(rng).__name__}"
    )


def draw_integers(
    rng: RandomSource, low: int, high: int, size: int | tuple[int, ...] | None = None
) -> NDArray[np.int64]:
    """Integers uniform in [low, high): ``Generator.integers`` or, in legacy mode, ``RandomState.randint``."""
    if isinstance(rng, np.random.RandomState):
        return rng.randint(low, high, size=size)
    return rng.integers(low, high, size=size)
