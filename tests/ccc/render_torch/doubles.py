"""Test double: a numpy generator that replays one sample's ``SampleRandom`` draws to a CPU corruption.

``MirroredDraws(seed, stage)`` answers the numpy calls a CPU corruption function makes
(``entry.function(image, parameters, rng)``: ``uniform``, ``normal``, ``integers``) with the values
``SampleRandom(seeds, stage)`` gives that sample when the torch corruption draws in the same order and
shapes, turned into the CPU's arguments with numpy's formulas (``low + (high - low) * u``,
``loc + scale * z``). So both paths see identical draws and their bytes can be compared exactly.
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import NDArray

from ccc.corruptions import get_corruption
from ccc.render_torch.random import SampleRandom


class MirroredDraws:
    """The draws of sample ``seed`` of a ``SampleRandom(seeds, stage)``, through numpy's Generator calls.

    ``integers``: the preset array ``integers`` when given (glass blur lays its draws out differently
    from the CPU loop), else ``low + floor(u * (high - low))`` of one uniform (frost's texture and window).
    """

    def __init__(self, seed: int, stage: int = 0, integers: NDArray[np.int64] | None = None) -> None:
        self.random = SampleRandom(torch.tensor([seed]), stage)
        self.preset_integers = integers

    @staticmethod
    def _shape(size) -> tuple[int, ...]:
        return () if size is None else tuple(np.atleast_1d(size).tolist())

    def _unit(self, size) -> NDArray[np.float64]:
        return self.random.uniform(*self._shape(size))[0].to(torch.float64).numpy()

    def uniform(self, low=0.0, high=1.0, size=None):
        return low + (high - low) * self._unit(size)

    def normal(self, loc=0.0, scale=1.0, size=None):
        return loc + scale * self.random.normal(*self._shape(size))[0].to(torch.float64).numpy()

    def integers(self, low, high=None, size=None):
        if self.preset_integers is not None:
            assert self.preset_integers.shape == self._shape(size)
            return self.preset_integers
        return np.minimum(low + np.floor(self._unit(size) * (high - low)).astype(np.int64), high - 1)


def corrupt_mirrored(image: NDArray[np.uint8], name: str, severity: float, draws: MirroredDraws) -> NDArray[np.uint8]:
    """The CPU path's corruption ``name`` of ``image`` (uint8 H×W×3) drawing from ``draws``, clipped and
    truncated to uint8 as ``ccc.corruptions.corrupt`` does."""
    entry = get_corruption(name)
    return np.clip(entry.function(image, entry.parameters(float(severity)), draws), 0, 255).astype(np.uint8)
