"""Adaptive calibration: measure pair cells only where severity paths need them.

The brute-force grid evaluates every image in every cell (``C·(C−1)·400·N`` evaluations), but a
stream only uses the cells along the severity paths for a few target accuracies. Accuracy falls
smoothly as either severity rises, so most of the grid can be predicted from little data and only
cells near the targets need precise numbers. :class:`AdaptivePlanner` works in rounds:

1. **Exact single-corruption curves and the clean accuracy** on every image. They are shared by
   all pairs and are the first row and column of every grid, exactly as brute force has them.
2. **Coarse pass**: each pair's cells on a lattice of severities (every ``coarse_stride``-th
   index; 1.0, 2.0, … 5.0 by default) on ``coarse_blocks`` blocks of images. Each pair cell takes
   its blocks from its own offset (:func:`ccc.calibration.compute.job.cell_blocks`), so cells measured
   on few blocks see different images and their errors average out over cells; had they all used
   the same first blocks, all would share the luck of those blocks' images.
3. **Estimate** every pair cell (:func:`estimate_grid`). Measured cells are first corrected
   towards the whole image set with the single-corruption cells of the same blocks as control
   variates (:func:`control_variate_grid`), with a finite-population correction (the estimand is
   what brute force measures on this image set). Each measured cell is then combined with the
   other order's cell at swapped severities, ``(j, i)`` of pair (b, a), through an order offset
   fitted to the cells both orders measured, with its own misfit variance
   (:func:`_borrow_other_order`): commuting pairs (blur and contrast) pool their measurements,
   pairs whose orders differ irregularly keep their own. Then the single curves predict the pair
   on the logit scale (``logit m(i, j) ≈ logit m(i, 0) + logit m(0, j) − logit m(0, 0)``: two
   corruptions' effects add up); measured cells correct that prediction. Each cell gets a prior
   from the other measured cells (leave-one-out kernel-weighted local-linear fit), and the grid's
   misfit variance τ² (how far cells really stray from such a fit) decides how much a measured cell
   keeps its own number: smooth grids are smoothed, rough grids keep their measurements. Every cell
   gets a standard error.
4. **Sequential refinement**: a cell whose interval ``estimate ± z·se`` overlaps the band
   ``target ± band`` of some target gets its images multiplied by ``growth`` (1.5 by default,
   rounded up), up to ``refine_blocks``; a cell on the path currently chosen for a target, up to
   ``path_blocks`` while its interval reaches within ``path_window`` points of the target, else (a
   path crossing a cliff) up to ``explore_blocks``: such a cell adds its distance to the path's
   mean deviation whatever its small error, so more images would hardly change which path is
   chosen. Limits count a cell's images at their worth after borrowing: a cell whose other-order
   twin adds an equal measurement stops at about half of them. (By default both levels are 1/5
   of the set, so the window only matters when ``path_fraction`` is raised above
   ``explore_fraction``.)
5. **Optimistic exploration** (where the local prior is wrong, e.g. a ridge next to a cliff, a
   cell can be estimated several points off with a small standard error, and no path ever goes
   there to correct it): each cell is moved towards the target by up to ``optimism·se`` (the best
   value it could plausibly have); if the exact ``mean_abs`` path on that optimistic grid is a
   different path that beats the chosen ``mean_abs`` path on the same optimistic grid, its cells
   grow the same way (up to ``explore_blocks``). Exploration stops by itself once no plausible
   alternative is better than the chosen path. Then estimate again; stop when no cell grows.
   Explored cells get as many images as path cells by default: a wrong path is chosen mostly
   because a better alternative was measured too little, less because the chosen path's own cells
   were (docs/calibration.md, "Measured against brute force").

Because each round only reads results of blocks requested in earlier rounds, a resumed run makes
the same decisions. The table's interior cells hold the estimates; ``image_counts`` hold the images
really evaluated per cell (0 for cells that were only predicted); the border holds the exact single
curves.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from ccc.calibration.compute.engine import Cell, grid_cell
from ccc.calibration.compute.job import Measurements, Requests, measured_grids, ordered_pairs, single_cells
from ccc.calibration.table import GRID_SIZE
from ccc.options import parse_value, split_option
from ccc.stream.paths import PATH_OBJECTIVES, find_path
from ccc.validation import check_positive_int

DEFAULT_TARGETS = (40.0, 20.0, 0.0)
"""Target accuracies (percent) of the public CCC difficulties (easy, medium, hard)."""


@dataclasses.dataclass(frozen=True)
class AdaptiveSettings:
    """Settings of the adaptive scheme (all accuracies in percent).

    Attributes:
        targets: target accuracies the table must serve, each in [0, 100].
        band: half-width of the band around each target within which cells are refined, > 0.
        z: width of the refinement interval in standard errors, > 0.
        coarse_stride: severity-index step of the coarse lattice, in 1 … 20 (4 → severities 1, 2, …, 5).
        coarse_fraction: share of the images used by the coarse pass, in (0, 1].
        refine_fraction: largest share of the images a pair cell near a target gets, in
            [coarse_fraction, 1].
        path_fraction: largest share of the images a pair cell on a current path gets, in
            [refine_fraction, 1], while its interval (estimate ± z·se) reaches within ``path_window``
            of the target.
        path_window: distance from the target (percentage points, > 0; 100 = every path cell)
            within which a path cell's interval must reach for it to get ``path_fraction``; farther
            path cells get up to ``explore_fraction``.
        bandwidth: kernel width (in grid cells) of the residual smoothing, > 0.
        path_objective: objective of the paths whose cells are refined (see :func:`ccc.stream.paths.find_path`).
        optimism: how far (in standard errors, ≥ 0) each cell is moved towards the target when
            looking for a plausibly better path to explore; 0 turns exploration off.
        explore_fraction: largest share of the images a pair cell on an explored (optimistic) path
            gets, in (0, 1]; kept within [refine_fraction, path_fraction] when applied.
        growth: factor (> 1) by which a growing cell's blocks are multiplied per round (rounded up);
            smaller steps stop cells on paths that are abandoned later at fewer images, at the
            cost of more rounds.
        control_variates: correct each pair cell towards the whole image set with the
            single-corruption cells of the same blocks (:func:`control_variate_grid`); False keeps
            the plain means of the measured blocks (and the finite-population correction).
        borrow_orders: combine each pair cell with the other order's cell at swapped severities
            through a fitted order offset (:func:`_borrow_other_order`), and count a cell's images
            at their combined worth when deciding whether it needs more; False estimates every
            ordered pair on its own.
    """

    targets: tuple[float, ...] = DEFAULT_TARGETS
    band: float = 1.0
    z: float = 1.0
    coarse_stride: int = 4
    coarse_fraction: float = 1 / 32
    refine_fraction: float = 1 / 16
    path_fraction: float = 1 / 5
    path_window: float = 5.0
    bandwidth: float = 0.8
    path_objective: str = "reference"
    optimism: float = 1.5
    explore_fraction: float = 1 / 5
    growth: float = 1.5
    control_variates: bool = True
    borrow_orders: bool = True

    def __post_init__(self) -> None:
        targets = tuple(float(target) for target in self.targets)
        if not targets or not all(math.isfinite(t) and 0.0 <= t <= 100.0 for t in targets):
            raise ValueError(f"targets must be one or more accuracies in [0, 100] percent, got {list(self.targets)}")
        object.__setattr__(self, "targets", targets)
        for name in ("band", "z", "bandwidth", "path_window"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        check_positive_int("coarse_stride", self.coarse_stride, GRID_SIZE - 1)
        if not 0.0 < self.coarse_fraction <= 1.0:
            raise ValueError(f"coarse_fraction must be in (0, 1], got {self.coarse_fraction!r}")
        if not self.coarse_fraction <= self.refine_fraction <= 1.0:
            raise ValueError(
                f"refine_fraction must be in [coarse_fraction ({self.coarse_fraction}), 1], "
                f"got {self.refine_fraction!r}"
            )
        if not self.refine_fraction <= self.path_fraction <= 1.0:
            raise ValueError(
                f"path_fraction must be in [refine_fraction ({self.refine_fraction}), 1], got {self.path_fraction!r}"
            )
        if not (isinstance(self.optimism, (int, float)) and math.isfinite(self.optimism) and self.optimism >= 0):
            raise ValueError(f"optimism must be a number >= 0, got {self.optimism!r}")
        if not (isinstance(self.growth, (int, float)) and math.isfinite(self.growth) and self.growth > 1.0):
            raise ValueError(f"growth must be a number > 1, got {self.growth!r}")
        if not 0.0 < self.explore_fraction <= 1.0:
            raise ValueError(f"explore_fraction must be in (0, 1], got {self.explore_fraction!r}")
        if self.path_objective not in PATH_OBJECTIVES:
            raise ValueError(f"path_objective must be one of {', '.join(PATH_OBJECTIVES)}, got {self.path_objective!r}")


_SETTINGS_OWNER = "the adaptive settings"
"""Names the settings in the errors of :func:`parse_adaptive_setting`."""


def _setting_defaults() -> dict[str, Any]:
    """Default value of every :class:`AdaptiveSettings` field but ``targets`` (name → value)."""
    return {field.name: field.default for field in dataclasses.fields(AdaptiveSettings) if field.name != "targets"}


def parse_adaptive_setting(text: str) -> tuple[str, Any]:
    """Parse ``NAME=VALUE`` into (field name, value) of :class:`AdaptiveSettings` (any field but ``targets``).

    The pair and its numbers are read by :mod:`ccc.options` (decimal numbers only); the value takes
    the type of the field's default: numbers may also be written as a fraction of two decimal
    numbers (``explore_fraction=3/32``), booleans as ``true`` or ``false``, the path objective by
    its name. Ranges are checked when the settings are built (:class:`AdaptiveSettings` raises
    ValueError).

    Raises:
        ValueError: unknown name, missing ``=`` or value, or a value of the wrong type (the message
            names the settings, or the expected type).
    """
    defaults = _setting_defaults()
    name, separator, _ = text.partition("=")
    if not separator or name.strip() not in defaults:
        raise ValueError(f"expected NAME=VALUE with NAME one of {', '.join(defaults)}, got {text!r}")
    name, value = split_option(text, _SETTINGS_OWNER)
    default = defaults[name]
    if isinstance(default, bool):
        if value.lower() not in ("true", "false"):
            raise ValueError(f"{name} needs true or false, got {value!r}")
        return name, value.lower() == "true"
    if isinstance(default, (int, float)):
        terms = [parse_value(name, term, _SETTINGS_OWNER) for term in value.split("/", 1)]
        if not all(isinstance(term, (int, float)) and not isinstance(term, bool) for term in terms) or terms[1:] == [0]:
            raise ValueError(f"{name} needs a {type(default).__name__}, got {value!r}")
        number = Fraction(terms[0]) / Fraction(terms[-1]) if len(terms) == 2 else Fraction(terms[0])
        if isinstance(default, int):
            if number.denominator != 1:
                raise ValueError(f"{name} needs an int, got {value!r}")
            return name, int(number)
        return name, float(number)
    return name, value


def _logit(proportion: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.log(proportion / (1.0 - proportion))


def _expit(value: NDArray[np.float64]) -> NDArray[np.float64]:
    return 1.0 / (1.0 + np.exp(-value))


_SMALLEST_RESIDUAL_SHARE = 0.05
"""Floor of the block variance a control variate may be credited with removing."""

_SMALLEST_LOGIT_VARIANCE = 1e-6
"""Floor of a measured cell's logit variance: a cell measured on every image is known exactly."""


def _bounded_proportion(
    correct: NDArray[np.int64] | NDArray[np.float64], images: NDArray[np.int64]
) -> NDArray[np.float64]:
    """Proportion correct, kept within [0.5, n − 0.5] / (n + 1) so that its logit is finite (0 images → 0.5)."""
    low, high = 0.5 / (images + 1.0), (images + 0.5) / (images + 1.0)
    return np.clip(np.divide(correct, images, out=np.full(images.shape, 0.5), where=images > 0), low, high)


class _LogitObservations(NamedTuple):
    """One pair's measurements on the logit scale (21×21 arrays)."""

    baseline: NDArray[np.float64]
    """The additive prediction from the single curves, ``logit m(i, 0) + logit m(0, j) − logit m(0, 0)``."""
    residual: NDArray[np.float64]
    """Measured logit minus baseline (meaningful where ``measured``)."""
    variance: NDArray[np.float64]
    """Variance of ``residual`` (infinite where not measured)."""
    measured: NDArray[np.bool_]
    """Interior cells with at least one image evaluated."""


def _logit_observations(
    correct: NDArray[np.int64] | NDArray[np.float64],
    images: NDArray[np.int64],
    variance_factor: NDArray[np.float64] | None,
) -> _LogitObservations:
    """Logit residuals of one pair's measured cells and their variances (see :func:`estimate_grid`'s arguments)."""
    proportion = _bounded_proportion(correct, images)
    logit = _logit(proportion)
    baseline = logit[:, :1] + logit[:1, :] - logit[0, 0]
    measured = np.zeros((GRID_SIZE, GRID_SIZE), dtype=bool)
    measured[1:, 1:] = images[1:, 1:] > 0
    variance = 1.0 / np.maximum(images * proportion * (1.0 - proportion), 1e-12)
    if variance_factor is not None:
        variance = np.maximum(variance * variance_factor, _SMALLEST_LOGIT_VARIANCE)
    return _LogitObservations(baseline, logit - baseline, np.where(measured, variance, np.inf), measured)


_ORDER_OFFSET_BANDWIDTH = 1.2
"""Kernel width (grid cells) of the fitted offset between a pair's two orders."""

_ORDER_MISFIT_BANDWIDTH = 2.0
"""Kernel width (grid cells) over which the misfit around that offset is averaged."""


def _borrow_other_order(
    own: _LogitObservations, other: _LogitObservations
) -> tuple[_LogitObservations, NDArray[np.float64]]:
    """Combine a pair's measured cells with those of the other order at swapped severities.

    Cell ``(i, j)`` of pair (a, b) and cell ``(j, i)`` of pair (b, a) apply the same two corruptions
    at the same severities in the other order, and both residuals are taken from the same baseline
    (the single curves are shared). Where the corruptions commute, the two cells are two
    measurements of one number; elsewhere they differ by an *order offset*. The offset is fitted to
    the cells both orders measured (leave-one-out kernel-weighted local-linear, width
    ``_ORDER_OFFSET_BANDWIDTH``), and how far the cells stray from it, the local misfit variance
    (mean of the leave-one-out excess over the expected noise, Gaussian kernel of width
    ``_ORDER_MISFIT_BANDWIDTH``), joins the variance of the borrowed value. So commuting pairs
    borrow almost a full measurement, pairs whose orders differ irregularly almost nothing.

    Returns:
        (the combined observations, worth): worth is, per cell this order measured, its combined
        precision over its own precision (≥ 1; 2 when the other order adds an equal, exact
        measurement), 1 elsewhere.
    """
    other_residual, other_variance, other_measured = other.residual.T, other.variance.T, other.measured.T
    both = own.measured & other_measured
    worth = np.ones((GRID_SIZE, GRID_SIZE))
    if both.sum() < 3:
        return own, worth
    difference = own.residual - other_residual
    difference_variance = own.variance + other_variance
    points = np.argwhere(both)
    offset = np.zeros((GRID_SIZE, GRID_SIZE))
    offset_variance = np.full((GRID_SIZE, GRID_SIZE), np.inf)
    offset[1:, 1:], offset_variance[1:, 1:] = _local_linear(
        points, difference[both], 1.0 / difference_variance[both], _ORDER_OFFSET_BANDWIDTH
    )
    excess = (difference - offset) ** 2 - difference_variance - offset_variance
    cells = np.argwhere(np.ones((GRID_SIZE, GRID_SIZE), dtype=bool))
    kernel = np.exp(-0.5 * ((cells[:, None, :] - points[None, :, :]) ** 2).sum(axis=2) / _ORDER_MISFIT_BANDWIDTH**2)
    misfit = np.maximum(0.0, (kernel @ excess[both]) / kernel.sum(axis=1)).reshape(GRID_SIZE, GRID_SIZE)
    borrowed_variance = other_variance + offset_variance + misfit
    usable = other_measured & np.isfinite(borrowed_variance)
    own_precision = np.where(own.measured, 1.0 / own.variance, 0.0)
    borrowed_precision = np.where(usable, 1.0 / np.where(usable, borrowed_variance, 1.0), 0.0)
    precision = own_precision + borrowed_precision
    measured = own.measured | usable
    safe_precision = np.where(measured, precision, 1.0)
    own_part = own_precision * np.where(own.measured, own.residual, 0.0)
    borrowed_part = borrowed_precision * np.where(usable, other_residual + offset, 0.0)
    residual = np.where(measured, (own_part + borrowed_part) / safe_precision, own.residual)
    worth = np.where(own.measured, precision / np.where(own.measured, own_precision, 1.0), 1.0)
    return _LogitObservations(own.baseline, residual, np.where(measured, 1.0 / safe_precision, np.inf), measured), worth


def estimate_grid(
    correct: NDArray[np.int64] | NDArray[np.float64],
    images: NDArray[np.int64],
    bandwidth: float,
    variance_factor: NDArray[np.float64] | None = None,
    other_order: tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64] | None] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Estimate one pair's 21×21 accuracy grid from partial measurements.

    On the logit scale, the single curves predict the pair additively; measured interior cells
    correct that baseline. With ``other_order``, each cell's measurement is first combined with the
    other order's cell at swapped severities through a fitted order offset
    (:func:`_borrow_other_order`). For every interior cell a *prior* is fitted to the residuals of
    the other measured cells (leave-one-out, Gaussian-kernel local-linear, inverse-variance
    weights). How far real cells stray from such a fit (the misfit variance τ², estimated per grid
    from the measured cells by the method of moments) decides how much a measured cell keeps its
    own value: smooth grids are smoothed, rough grids (cliffs, one corruption undoing another)
    keep their measurements. An unmeasured cell gets the prior, with standard error
    √(prior variance + τ²).

    Args:
        correct, images: 21×21 correct predictions and images evaluated per cell; the first row and
            column (single corruptions) and the corner (clean) must be measured. Interior counts may
            be fractional (control-variate adjusted, :func:`control_variate_grid`).
        bandwidth: Gaussian kernel width in cells of the prior's local fit.
        variance_factor: optional 21×21 factor (≥ 0) on each measured interior cell's binomial
            variance (control-variate residual share × finite-population correction); 1 if omitted.
        other_order: optional (correct, images, variance_factor) of the pair in the other order,
            (b, a) for a grid of (a, b), in that pair's own orientation.

    Returns:
        (accuracy in percent, standard error in percentage points), two 21×21 arrays. The first row
        and column are the measured values (standard error from the binomial count).
    """
    accuracy, error, _ = _estimate(correct, images, bandwidth, variance_factor, other_order)
    return accuracy, error


def _estimate(
    correct: NDArray[np.int64] | NDArray[np.float64],
    images: NDArray[np.int64],
    bandwidth: float,
    variance_factor: NDArray[np.float64] | None,
    other_order: tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64] | None] | None,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """:func:`estimate_grid`, plus the worth of each measured cell's own images (see :func:`_borrow_other_order`)."""
    observations = _logit_observations(correct, images, variance_factor)
    worth = np.ones((GRID_SIZE, GRID_SIZE))
    if other_order is not None:
        observations, worth = _borrow_other_order(observations, _logit_observations(*other_order))
    baseline, residual, measurement_variance, measured = observations
    estimate_logit = baseline.copy()
    variance_logit = np.zeros((GRID_SIZE, GRID_SIZE))
    if measured.any():
        points = np.argwhere(measured)
        prior, prior_variance = _local_linear(
            points, residual[measured], 1.0 / measurement_variance[measured], bandwidth
        )
        own = measured[1:, 1:]
        own_variance = np.where(own, measurement_variance[1:, 1:], 1.0)
        excess = (residual[1:, 1:] - prior) ** 2 - own_variance - prior_variance
        misfit = max(0.0, float(np.mean(excess[own]))) if own.sum() >= 3 else 0.0
        prior_total = prior_variance + misfit
        combined_variance = np.where(own, 1.0 / (1.0 / own_variance + 1.0 / prior_total), prior_total)
        combined = np.where(own, combined_variance * (residual[1:, 1:] / own_variance + prior / prior_total), prior)
        estimate_logit[1:, 1:] += combined
        variance_logit[1:, 1:] = combined_variance
    estimate = _expit(estimate_logit)
    border = np.ones((GRID_SIZE, GRID_SIZE), dtype=bool)
    border[1:, 1:] = False
    estimate[border] = correct[border] / np.maximum(images[border], 1)
    error = np.sqrt(variance_logit) * estimate * (1.0 - estimate)
    error[border] = np.sqrt(estimate[border] * (1 - estimate[border]) / np.maximum(images[border], 1))
    accuracy = 100.0 * estimate
    # The same arithmetic as brute force, so that shared cells are bit-identical.
    accuracy[border] = 100.0 * correct[border] / np.maximum(images[border], 1)
    return accuracy, 100.0 * error, worth


def control_variate_grid(
    block_results: Mapping[tuple[int, int], tuple[Sequence[int], Sequence[int]]],
    block_sizes: Sequence[int],
    control: bool = True,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Correct-prediction counts of one pair's measured cells, adjusted towards the whole image set.

    A pair cell measured on ``k`` blocks estimates the accuracy brute force would measure on all
    blocks; part of its error is the luck of its blocks holding easier or harder images than
    average. The single-corruption cells and the clean cell are measured on every block, so each
    block's images reveal how easy they are: per block, the independence prediction
    ``rate(i, 0) · rate(0, j) / rate(0, 0)`` serves as a control variate ``x``. The adjusted rate is
    ``mean_k(y) − β · (mean_k(x) − mean_all(x))`` (a regression estimator; means weighted by block
    size), with one slope β per grid fitted by least squares to the within-cell block variation of
    all cells measured on at least two blocks (β = 0, the plain mean, when there are none).

    Args:
        block_results: ``(i, j)`` → (measured blocks, correct predictions per measured block) for
            every measured cell of the grid; cells ``(i, 0)``, ``(0, j)`` and ``(0, 0)`` measured on
            every block.
        block_sizes: images per block of the whole set, each ≥ 1.
        control: False sets β = 0 (plain means; the finite-population correction stays).

    Returns:
        (correct counts, variance factor): two 21×21 arrays. Counts equal the measured ones on the
        first row and column and where β = 0, and are fractional elsewhere (0 where unmeasured). The
        variance factor of a measured interior cell is the pooled share of the block variance the
        control variate leaves (in [0.05, 1]) times the finite-population correction
        ``1 − images / set size`` (a cell measured on every image is known exactly: factor 0);
        elsewhere 1.
    """
    sizes = np.asarray(block_sizes, dtype=np.float64)
    total_images = float(sizes.sum())
    counts = np.zeros((GRID_SIZE, GRID_SIZE))
    factor = np.ones((GRID_SIZE, GRID_SIZE))
    every_block: dict[tuple[int, int], NDArray[np.float64]] = {}
    for (i, j), (blocks, values) in block_results.items():
        if i == 0 or j == 0:
            counts[i, j] = float(sum(values))
            rates = np.full(len(sizes), np.nan)
            rates[list(blocks)] = np.asarray(values, dtype=np.float64) / sizes[list(blocks)]
            every_block[i, j] = rates
    cells = []
    for (i, j), (blocks, values) in block_results.items():
        if i == 0 or j == 0:
            continue
        predicted = np.clip(
            every_block[i, 0] * every_block[0, j] / np.maximum(every_block[0, 0], 1.0 / sizes), 0.0, 1.0
        )
        if np.isnan(predicted).any():
            raise ValueError(f"cells ({i}, 0), (0, {j}) and (0, 0) must be measured on every block")
        measured = list(blocks)
        weights = sizes[measured]
        rate = np.asarray(values, dtype=np.float64) / weights
        control_rate = predicted[measured]
        images = float(weights.sum())
        # np.average's arithmetic (the weighted sum over the weights' sum), without its per-call checks
        cells.append(
            _MeasuredCell(
                i, j, images, weights, rate, control_rate,
                mean_rate=(rate * weights).sum() / images,
                mean_control=(control_rate * weights).sum() / images,
                control_mean=float(np.dot(sizes, predicted)) / total_images,
            )
        )  # fmt: skip
    covariance = variance = spread = 0.0
    for cell in cells:
        if control and len(cell.rate) >= 2:
            centred_rate = cell.rate - cell.mean_rate
            centred_control = cell.control_rate - cell.mean_control
            covariance += float(np.sum(cell.weights * centred_rate * centred_control))
            variance += float(np.sum(cell.weights * centred_control**2))
            spread += float(np.sum(cell.weights * centred_rate**2))
    slope = covariance / variance if variance > 0 else 0.0
    residual_share = 1.0
    if spread > 0:
        residual_share = min(1.0, max(_SMALLEST_RESIDUAL_SHARE, (spread - slope * covariance) / spread))
    for cell in cells:
        adjusted = cell.mean_rate - slope * (cell.mean_control - cell.control_mean)
        counts[cell.i, cell.j] = adjusted * cell.images
        factor[cell.i, cell.j] = residual_share * max(0.0, 1.0 - cell.images / total_images)
    return counts, factor


class _MeasuredCell(NamedTuple):
    """One interior cell of :func:`control_variate_grid`: its measured blocks' sizes (``weights``), rates and
    control-variate rates, their weighted means, and the control variate's mean over all blocks."""

    i: int
    j: int
    images: float
    weights: NDArray[np.float64]
    rate: NDArray[np.float64]
    control_rate: NDArray[np.float64]
    mean_rate: float
    mean_control: float
    control_mean: float


def _local_linear(
    points: NDArray[np.int64], values: NDArray[np.float64], weights: NDArray[np.float64], bandwidth: float
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Leave-one-out kernel-weighted local-linear fit of ``values`` (at grid ``points``) at every interior cell.

    Observation weights are ``weights`` (inverse variances) times a Gaussian kernel of the distance;
    a point never contributes to the fit at its own cell. Returns (fitted values, their variances),
    two 20×20 arrays for cells (1…20, 1…20). Where the local design is degenerate (too few or
    collinear points nearby) the fit is the local weighted mean; with no other point at all, 0 with
    an infinite variance.
    """
    cells = np.argwhere(np.ones((GRID_SIZE - 1, GRID_SIZE - 1), dtype=bool)) + 1
    offsets = points[None, :, :] - cells[:, None, :]
    distance_squared = (offsets**2).sum(axis=2)
    kernel = np.exp(-0.5 * distance_squared / bandwidth**2) * weights[None, :]
    kernel[distance_squared == 0] = 0.0
    design = np.concatenate([np.ones(offsets.shape[:2] + (1,)), offsets], axis=2)
    weighted = design * kernel[:, :, None]
    normal = np.einsum("cmk,cml->ckl", weighted, design)
    determinant = np.linalg.det(normal)
    scale = np.einsum("ckk->c", normal) ** 3
    regular = determinant > 1e-9 * scale
    total = kernel.sum(axis=1, keepdims=True)
    coefficients = np.divide(kernel, total, out=np.zeros_like(kernel), where=total > 0)
    if regular.any():
        solved = np.linalg.solve(normal[regular], np.transpose(weighted[regular], (0, 2, 1)))
        coefficients[regular] = solved[:, 0, :]
    fitted = coefficients @ values
    variance = np.where(total[:, 0] > 0, (coefficients**2) @ (1.0 / weights), np.inf)
    shape = (GRID_SIZE - 1, GRID_SIZE - 1)
    return fitted.reshape(shape), variance.reshape(shape)


def _mean_deviation(grid: NDArray[np.float64], path: list[tuple[int, int]], target: float) -> float:
    return float(np.mean([abs(grid[i, j] - target) for i, j in path]))


def _path_worth_exploring(
    estimate: NDArray[np.float64], error: NDArray[np.float64], target: float, optimism: float
) -> list[tuple[int, int]]:
    """The ``mean_abs`` path of the optimistic grid if it could beat the chosen path, else [].

    The optimistic grid moves every cell towards ``target`` by up to ``optimism`` standard errors.
    Both paths are scored on that grid, so a path only counts as better if its advantage survives
    giving the chosen path the same benefit of the doubt.
    """
    hopeful = np.clip(np.clip(target, estimate - optimism * error, estimate + optimism * error), 0.0, 100.0)
    chosen = find_path(estimate, target, "mean_abs")
    candidate = find_path(hopeful, target, "mean_abs")
    if _mean_deviation(hopeful, candidate, target) < _mean_deviation(hopeful, chosen, target):
        return candidate
    return []


@dataclasses.dataclass(frozen=True)
class AdaptivePlanner:
    """The adaptive scheme as a :class:`ccc.calibration.compute.job.CalibrationPlanner`.

    Attributes:
        settings: the scheme's parameters.
        corruption_count: corruptions of the run (all ordered pairs are calibrated).
        block_count: blocks of the image set.
        block_size: images per block.
        image_count: images of the set.
    """

    settings: AdaptiveSettings
    corruption_count: int
    block_count: int
    block_size: int
    image_count: int

    @property
    def coarse_blocks(self) -> int:
        """Blocks of the coarse pass (≥ 1)."""
        return max(1, min(self.block_count, round(self.block_count * self.settings.coarse_fraction)))

    @property
    def refine_blocks(self) -> int:
        """Most blocks a pair cell near a target gets (≥ coarse_blocks)."""
        return max(self.coarse_blocks, min(self.block_count, round(self.block_count * self.settings.refine_fraction)))

    @property
    def path_blocks(self) -> int:
        """Most blocks a cell on a current path gets (≥ refine_blocks)."""
        return max(self.refine_blocks, min(self.block_count, round(self.block_count * self.settings.path_fraction)))

    @property
    def explore_blocks(self) -> int:
        """Most blocks a cell on an explored (optimistic) path gets (in [refine_blocks, path_blocks])."""
        blocks = max(
            self.refine_blocks, min(self.block_count, round(self.block_count * self.settings.explore_fraction))
        )
        return min(blocks, self.path_blocks)

    def identity(self) -> dict[str, Any]:
        """Scheme name and settings."""
        return {"scheme": "adaptive", **dataclasses.asdict(self.settings), "targets": list(self.settings.targets)}

    def notes(self) -> str:
        """How the values were obtained."""
        settings = self.settings
        return (
            "adaptive: single-corruption curves and clean accuracy on every image; pair cells measured "
            f"on {self.coarse_blocks * self.block_size}-{self.path_blocks * self.block_size} images where "
            f"paths for targets {', '.join(f'{t:g}' for t in settings.targets)} % need them (band ±{settings.band:g}), "
            "interior values are estimates (additive logit model of the single curves + smoothed measured "
            "residual); image_counts are the images really evaluated per cell (0 = predicted only)"
            + "".join(f"; {name}={value!r}" for name, value in self._changed_settings().items())
        )

    def _changed_settings(self) -> dict[str, Any]:
        """Settings other than ``targets`` that differ from the defaults of :class:`AdaptiveSettings` (name → value)."""
        return {
            name: getattr(self.settings, name)
            for name, default in _setting_defaults().items()
            if getattr(self.settings, name) != default
        }

    def next_round(self, requested: Mapping[Cell, int], measured: Measurements) -> Requests | None:
        """Round 0: singles + coarse lattice; later rounds: grow the blocks of cells near the targets by ``growth``."""
        if not requested:
            wanted: Requests = {cell: self.block_count for cell in single_cells(self.corruption_count)}
            lattice = range(self.settings.coarse_stride, GRID_SIZE, self.settings.coarse_stride)
            for a, b in ordered_pairs(self.corruption_count):
                for i in lattice:
                    for j in lattice:
                        wanted[Cell(a, i, b, j)] = self.coarse_blocks
            return wanted
        wanted = dict(requested)
        grown = False
        estimates = self._estimates(self._grid_inputs(measured))
        for (a, b), (estimate, error, worth) in zip(ordered_pairs(self.corruption_count), estimates):
            for (i, j), limit in self._refinement_limits(estimate, error).items():
                cell = Cell(a, i, b, j)
                current = requested.get(cell, 0)
                blocks = min(
                    math.ceil(limit / worth[i, j]), max(self.coarse_blocks, math.ceil(self.settings.growth * current))
                )
                if blocks > current:
                    wanted[cell] = blocks
                    grown = True
        return wanted if grown else None

    def _refinement_limits(
        self, estimate: NDArray[np.float64], error: NDArray[np.float64]
    ) -> dict[tuple[int, int], int]:
        """Blocks each interior cell may grow to, given the current estimate and its standard error
        (cells with 0 left out)."""
        settings = self.settings
        low = estimate - settings.z * error
        high = estimate + settings.z * error
        limits = np.zeros((GRID_SIZE, GRID_SIZE), dtype=np.int64)
        for target in settings.targets:
            near = (high >= target - settings.band) & (low <= target + settings.band)
            limits[near] = np.maximum(limits[near], self.refine_blocks)
            for i, j in find_path(estimate, target, settings.path_objective):  # type: ignore[arg-type]
                within = abs(estimate[i, j] - target) <= settings.path_window + settings.z * error[i, j]
                limits[i, j] = max(limits[i, j], self.path_blocks if within else self.explore_blocks)
            if settings.optimism > 0:
                for i, j in _path_worth_exploring(estimate, error, target, settings.optimism):
                    limits[i, j] = max(limits[i, j], self.explore_blocks)
        limits[0, :] = 0
        limits[:, 0] = 0
        return {(int(i), int(j)): int(limits[i, j]) for i, j in np.argwhere(limits > 0)}

    def grids(self, measured: Measurements) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        """Estimated accuracy (percent) per pair and the images really evaluated per cell."""
        inputs = self._grid_inputs(measured)
        images = np.stack([grid_images for _, grid_images, _ in inputs])
        accuracy = np.stack([estimate for estimate, _, _ in self._estimates(inputs)])
        return np.clip(accuracy, 0.0, 100.0), images

    def _estimates(
        self, inputs: list[tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]]]
    ) -> list[tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]]:
        """Per ordered pair, from its :meth:`_grid_inputs`: (accuracy, standard error, worth of each
        cell's own images), see :func:`_estimate`."""
        pairs = ordered_pairs(self.corruption_count)
        position = {pair: p for p, pair in enumerate(pairs)}
        estimates = []
        for p, (a, b) in enumerate(pairs):
            correct, images, factor = inputs[p]
            other_order = inputs[position[b, a]] if self.settings.borrow_orders else None
            estimates.append(_estimate(correct, images, self.settings.bandwidth, factor, other_order))
        return estimates

    def _grid_inputs(
        self, measured: Measurements
    ) -> list[tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]]]:
        """Per ordered pair: (correct counts, images, variance factor) for :func:`estimate_grid`."""
        _, images = measured_grids(self.corruption_count, measured)
        sizes = [self.block_size] * (self.block_count - 1) + [
            self.image_count - self.block_size * (self.block_count - 1)
        ]
        inputs = []
        for p, (a, b) in enumerate(ordered_pairs(self.corruption_count)):
            block_results = {
                (i, j): (known.blocks, known.block_correct)
                for i in range(GRID_SIZE)
                for j in range(GRID_SIZE)
                if (known := measured.get(grid_cell(a, b, i, j))) is not None
            }
            counts, factor = control_variate_grid(block_results, sizes, self.settings.control_variates)
            inputs.append((counts, images[p], factor))
        return inputs
