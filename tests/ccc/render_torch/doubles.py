"""Test doubles for the torch weather tests: a per-sample ``SampleRandom`` and its numpy mirror.

``StreamRandom`` has ``SampleRandom``'s interface, sample ``k`` drawing float32 values from
``numpy.random.default_rng((seeds[k], stage))``. ``MirrorGenerator(seed, stage)`` hands a CPU
corruption (``entry.function(image, parameters, rng)``) the same values through the numpy calls it
makes (``uniform``, ``normal``, ``integers``), so that both paths see identical draws as long as they
draw in the same order and shapes (integers are ``low + floor(u * (high - low))`` of one uniform).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


class StreamRandom:
    """SampleRandom test double: one numpy generator per sample."""

    def __init__(self, seeds: Tensor, stage: int = 0, device: str = "cpu"):
        self.seeds = [int(seed) for seed in seeds]
        self.generators = [np.random.default_rng((seed, stage)) for seed in self.seeds]
        self.device = device

    def _stack(self, draw) -> Tensor:
        return torch.from_numpy(np.stack([draw(generator) for generator in self.generators])).to(self.device)

    def uniform(self, *shape: int) -> Tensor:
        return self._stack(lambda generator: generator.random(shape, dtype=np.float32))

    def normal(self, *shape: int) -> Tensor:
        return self._stack(lambda generator: generator.standard_normal(shape, dtype=np.float32))

    def integers(self, low: int, high: int, *shape: int) -> Tensor:
        return self._stack(lambda generator: generator.integers(low, high, shape))

    def poisson(self, rates: Tensor) -> Tensor:
        values = [generator.poisson(rate.cpu().numpy()) for generator, rate in zip(self.generators, rates)]
        return torch.as_tensor(np.stack(values), dtype=rates.dtype, device=rates.device)

    def subset(self, index: Tensor) -> StreamRandom:
        subset = StreamRandom(torch.tensor([self.seeds[int(k)] for k in index]), device=self.device)
        subset.generators = [self.generators[int(k)] for k in index]
        return subset


class MirrorGenerator:
    """The numpy calls of a CPU corruption, answered with the values ``StreamRandom`` draws for ``seed``."""

    def __init__(self, seed: int, stage: int = 0):
        self.generator = np.random.default_rng((seed, stage))

    def _unit(self, size) -> np.ndarray:
        shape = () if size is None else size
        return self.generator.random(shape, dtype=np.float32).astype(np.float64)

    def uniform(self, low=0.0, high=1.0, size=None):
        return low + (high - low) * self._unit(size)

    def normal(self, loc=0.0, scale=1.0, size=None):
        shape = () if size is None else size
        return loc + scale * self.generator.standard_normal(shape, dtype=np.float32).astype(np.float64)

    def integers(self, low, high=None, size=None):
        return np.minimum(low + np.floor(self._unit(size) * (high - low)).astype(np.int64), high - 1)
