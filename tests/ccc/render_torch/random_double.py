"""A test double of ``ccc.render_torch.random.SampleRandom`` (per-sample torch.Generator streams).

Used by the blur tests until the foundation's counter-based SampleRandom is merged; the tests import
the real class when it exists. Same interface: draws are per sample and depend only on (seed, stage,
the sequence of calls and their shapes).
"""

from __future__ import annotations

import torch
from torch import Tensor


class SampleRandomDouble:
    """Per-sample ``torch.Generator`` streams seeded from (seed, stage); CPU generation, moved to the seeds' device."""

    def __init__(self, seeds: Tensor, stage: int = 0) -> None:
        self.seeds = seeds.to("cpu", torch.int64)
        self.stage = stage
        self.device = seeds.device
        self.generators = []
        for seed in self.seeds.tolist():
            generator = torch.Generator()
            generator.manual_seed((seed * 2 + stage) % (2**63))
            self.generators.append(generator)

    def _stack(self, draw) -> Tensor:
        return torch.stack([draw(generator) for generator in self.generators]).to(self.device)

    def uniform(self, *shape: int) -> Tensor:
        return self._stack(lambda generator: torch.rand(shape, generator=generator))

    def normal(self, *shape: int) -> Tensor:
        return self._stack(lambda generator: torch.randn(shape, generator=generator))

    def integers(self, low: int, high: int, *shape: int) -> Tensor:
        return self._stack(lambda generator: torch.randint(low, high, shape, generator=generator))

    def poisson(self, rates: Tensor) -> Tensor:
        return torch.stack(
            [torch.poisson(rate.cpu(), generator=generator) for rate, generator in zip(rates, self.generators)]
        ).to(rates.device)

    def subset(self, index: Tensor) -> "SampleRandomDouble":
        double = SampleRandomDouble.__new__(SampleRandomDouble)
        double.seeds = self.seeds[index.cpu()]
        double.stage = self.stage
        double.device = self.device
        double.generators = [self.generators[i] for i in index.cpu().tolist()]
        return double


def sample_random(seeds: Tensor, stage: int = 0):
    """The real SampleRandom when the foundation is merged, else the double."""
    try:
        from ccc.render_torch.random import SampleRandom
    except ImportError:
        return SampleRandomDouble(seeds, stage)
    return SampleRandom(seeds, stage)
