"""A calibration backend without pixels: simulated images whose correctness is correlated across cells.

Used to measure calibration schemes against brute force at scales that cannot be run here (the
paper's 5,000 images). Real images differ in how easy they are: an image the model gets wrong
under one corruption is more likely to be wrong under another, so every cell measured on the same
few images errs in the same direction. Drawing each (cell, block) count independently hides that
shared error; :class:`CorrelatedImagesBackend` keeps it.

Each simulated image ``m`` has a latent easiness ``g_m`` and, per corruption ``n``, a robustness
``u_{m,n}``, and per ordered pair a private term ``e_{m,pair}`` (all independent standard normal).
The image is classified correctly in a cell when the cell's latent score is below
``Φ⁻¹(accuracy of the cell)``, with the scores

- clean: ``g``;
- corruption ``n`` alone: ``α·g + √(1−α²)·u_n``;
- pair ``(a, b)``: ``α·g + √(1−α²)·(√σ·(u_a + u_b)/√2 + √(1−σ)·e_{ab})``,

where ``α`` is ``easiness_weight`` and ``σ`` is ``pair_share``. Every score is standard normal, so
each cell's expected accuracy is exactly the given one; within a grid the same image's scores are
equal across severities (an image lost at a low severity stays lost at higher ones where the
accuracy falls).

Registered as the calibration backend ``simulation`` (:mod:`ccc.calibration.compute.backends.registry`;
options: ``accuracies``, required, and ``seed``, ``easiness_weight``, ``pair_share``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from scipy.stats import norm

from ccc.calibration.compute.backends.registry import BackendEntry, BackendSetup, register_backend
from ccc.calibration.compute.engine import Cell, UnitResult, WorkUnit


class CorrelatedImagesBackend:
    """Serves (cell, block) correct counts of simulated images with known per-cell accuracies.

    Like the real engine, a (cell, block) result does not depend on which unit asks for it, so two
    schemes run on the same backend see the same numbers for the cells they share.

    Args:
        accuracies: cell → accuracy in [0, 1] for every cell a run may request (clean, singles, pairs).
        block_sizes: images per block, each ≥ 1.
        seed: seed of the simulated images.
        easiness_weight: ``α`` in [0, 1): how much of every score is the image's easiness.
        pair_share: ``σ`` in [0, 1]: how much of a pair's corruption-specific score comes from its two
            corruptions' robustness terms.
    """

    def __init__(
        self,
        accuracies: Mapping[Cell, float],
        block_sizes: Sequence[int],
        seed: int,
        easiness_weight: float = 0.6,
        pair_share: float = 0.9,
    ) -> None:
        if not 0.0 <= easiness_weight < 1.0:
            raise ValueError(f"easiness_weight must be in [0, 1), got {easiness_weight!r}")
        if not 0.0 <= pair_share <= 1.0:
            raise ValueError(f"pair_share must be in [0, 1], got {pair_share!r}")
        if not block_sizes or min(block_sizes) < 1:
            raise ValueError(f"block_sizes must be one or more sizes >= 1, got {list(block_sizes)}")
        self.block_sizes = [int(size) for size in block_sizes]
        generator = np.random.default_rng(seed)
        images = sum(self.block_sizes)
        easiness = generator.standard_normal(images)
        corruptions = sorted(
            {cell.n1 for cell in accuracies if cell.n1 >= 0} | {cell.n2 for cell in accuracies if cell.n2 >= 0}
        )
        robustness = {corruption: generator.standard_normal(images) for corruption in corruptions}
        private = {
            pair: generator.standard_normal(images)
            for pair in sorted({(cell.n1, cell.n2) for cell in accuracies if cell.n2 >= 0})
        }
        rest = math.sqrt(1.0 - easiness_weight**2)

        def score(cell: Cell) -> np.ndarray:
            if cell.is_clean:
                return easiness
            if cell.is_single:
                return easiness_weight * easiness + rest * robustness[cell.n1]
            shared = (robustness[cell.n1] + robustness[cell.n2]) / math.sqrt(2.0)
            specific = math.sqrt(pair_share) * shared + math.sqrt(1.0 - pair_share) * private[(cell.n1, cell.n2)]
            return easiness_weight * easiness + rest * specific

        edges = np.cumsum([0, *self.block_sizes])
        self.counts: dict[Cell, np.ndarray] = {}
        for cell, accuracy in accuracies.items():
            if not 0.0 <= accuracy <= 1.0:
                raise ValueError(f"accuracy of cell {tuple(cell)} must be in [0, 1], got {accuracy!r}")
            correct = score(cell) < norm.ppf(accuracy)
            self.counts[cell] = np.add.reduceat(correct.astype(np.int64), edges[:-1])

    def run(self, units: Sequence[WorkUnit], on_result: Callable[[UnitResult], None]) -> None:
        """Report every unit's counts (the :class:`~ccc.calibration.compute.backends.registry.CalibrationBackend`
        interface)."""
        for unit in units:
            correct = tuple(int(self.counts[cell][unit.block]) for cell in unit.cells())
            on_result(UnitResult(unit, correct, self.block_sizes[unit.block]))


def _simulation_backend(setup: BackendSetup) -> CorrelatedImagesBackend:
    setup.check_options("simulation", ("accuracies", "seed", "easiness_weight", "pair_share"))
    options = dict(setup.options)
    if "accuracies" not in options:
        raise ValueError(
            "calibration backend 'simulation' needs the option 'accuracies' (cell → accuracy in [0, 1] "
            "for every cell the run requests)"
        )
    return CorrelatedImagesBackend(
        options.pop("accuracies"), setup.block_sizes(), seed=options.pop("seed", setup.context.seed), **options
    )


register_backend(
    BackendEntry(
        "simulation",
        _simulation_backend,
        "simulated images with known per-cell accuracies (options: accuracies, seed (default: the job's), "
        "easiness_weight, pair_share)",
    )
)
