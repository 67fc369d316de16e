"""Residual statistics of a corruption, for comparing implementations (as the golden data records them).

For every (generator, image) pair the corrupted image is compared with the clean one; the residual
is ``corrupted - clean`` in grey levels (float). These are the statistics the reference's golden
file stores, so any implementation can be checked against it the same way.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

import numpy as np
from numpy.typing import NDArray

from ._random import RngLike
from .apply import DEFAULT_CORRUPTION_SET, corrupt

STATISTICS = ("residual_mean", "residual_std", "psnr", "frac_changed")
"""Per-image statistics: residual mean and std (grey levels), PSNR (dB, peak 255), fraction of changed values."""


def per_image_statistics(
    name: str,
    severity: float,
    images: NDArray[np.uint8],
    generators: Iterable[Callable[[], RngLike]],
    corruption_set: str = DEFAULT_CORRUPTION_SET,
) -> dict[str, NDArray[np.float64]]:
    """One value per (generator, image) of each of :data:`STATISTICS`.

    Args:
        name, severity: the corruption and its severity in (0, 5].
        images: uint8 array NxHxWx3 of clean images.
        generators: callables returning a fresh ``rng`` for each corrupted image (called once per
            image, generators outermost).
        corruption_set: whose parameters (:func:`ccc.corruptions.corrupt`'s argument).
    """
    rows = []
    for make_rng in generators:
        for image in images:
            corrupted = corrupt(image, name, severity, rng=make_rng(), corruption_set=corruption_set)
            residual = corrupted.astype(np.float64) - image
            mean_square = float(np.mean(residual**2))
            psnr = math.inf if mean_square == 0 else 10 * math.log10(255.0**2 / mean_square)
            rows.append((residual.mean(), residual.std(), psnr, np.mean(residual != 0)))
    return dict(zip(STATISTICS, np.array(rows, dtype=np.float64).T))


def summary_statistics(per_image: dict[str, NDArray[np.float64]]) -> dict[str, float]:
    """The golden file's summary: means over images, plus the PSNR's standard deviation."""
    return {
        "residual_mean": float(per_image["residual_mean"].mean()),
        "residual_std": float(per_image["residual_std"].mean()),
        "psnr_mean": float(per_image["psnr"].mean()),
        "psnr_std": float(per_image["psnr"].std()),
        "frac_changed": float(per_image["frac_changed"].mean()),
    }
