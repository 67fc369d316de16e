"""Distribution statistics of corrupted images, to compare the torch and CPU paths of a random corruption.

The one owner of these statistics for the torch backend's tests and ``scripts/fidelity_torch.py``.
Per sample (uint8 H×W×3 corrupted image and its clean source): mean and standard deviation of the levels,
PSNR to the clean image, mean squared Laplacian (fine detail left), and the radially averaged log power
spectrum of the grey image in ``SPECTRUM_BANDS`` bands. Paired comparisons (same image and severity,
independent draws) give a z-score per statistic; :func:`histogram_distance` compares the output bytes.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

SPECTRUM_BANDS = 8
SCALAR_STATISTICS = ("mean", "std", "psnr", "laplacian")


def psnr(corrupted: NDArray[np.uint8], clean: NDArray[np.uint8], axis=None) -> NDArray[np.float64] | float:
    """PSNR (dB, peak 255) of ``corrupted`` against ``clean`` (broadcastable uint8 arrays).

    ``axis``: the axes averaged into one squared error (None: all, one number; ``(1, 2, 3)``: per sample).
    A zero error counts as 1e-12 (a finite, very large PSNR).
    """
    error = np.mean((corrupted.astype(np.float64) - clean) ** 2, axis=axis)
    return 10 * np.log10(255.0**2 / np.maximum(error, 1e-12))


def histogram_distance(first: NDArray[np.uint8], second: NDArray[np.uint8]) -> float:
    """Total variation distance in [0, 1] between the byte histograms (256 bins) of two uint8 arrays."""
    histograms = [np.bincount(values.ravel(), minlength=256) / values.size for values in (first, second)]
    return float(0.5 * np.abs(histograms[0] - histograms[1]).sum())


def sample_statistics(clean: NDArray[np.uint8], corrupted: NDArray[np.uint8]) -> dict[str, NDArray[np.float64]]:
    """Statistics of N corrupted samples (uint8 N×H×W×3) against their clean sources (same shape).

    Returns arrays of shape (N,) for the scalar statistics (levels; ``psnr`` in dB; ``laplacian`` in
    squared levels) and (N, SPECTRUM_BANDS) for ``spectrum`` (log10 of the mean power per radial
    frequency band, DC excluded).
    """
    levels = corrupted.astype(np.float64)
    gray = levels.mean(axis=3)
    laplacian = (
        4 * gray[:, 1:-1, 1:-1] - gray[:, :-2, 1:-1] - gray[:, 2:, 1:-1] - gray[:, 1:-1, :-2] - gray[:, 1:-1, 2:]
    )
    power = np.abs(np.fft.fft2(gray - gray.mean(axis=(1, 2), keepdims=True))) ** 2
    rows = np.fft.fftfreq(gray.shape[1])[:, None]
    columns = np.fft.fftfreq(gray.shape[2])[None, :]
    radius = np.sqrt(rows**2 + columns**2) / 0.5
    band = np.minimum((radius * SPECTRUM_BANDS).astype(int), SPECTRUM_BANDS - 1)
    spectrum = np.stack(
        [np.log10(power[:, (band == k) & (radius > 0)].mean(axis=1) + 1e-12) for k in range(SPECTRUM_BANDS)], 1
    )
    return {
        "mean": levels.mean(axis=(1, 2, 3)),
        "std": levels.std(axis=(1, 2, 3)),
        "psnr": psnr(corrupted, clean, axis=(1, 2, 3)),
        "laplacian": (laplacian**2).mean(axis=(1, 2)),
        "spectrum": spectrum,
    }


def paired_comparison(torch_statistics: dict[str, np.ndarray], cpu_statistics: dict[str, np.ndarray]) -> dict:
    """Per statistic: torch mean, CPU mean, mean paired difference, and its z-score (difference / standard error).

    ``spectrum`` is summarised by the largest absolute mean band difference (log10 power) and the largest
    band z-score.
    """
    rows = {}
    for name in (*SCALAR_STATISTICS, "spectrum"):
        difference = torch_statistics[name] - cpu_statistics[name]
        mean = difference.mean(axis=0)
        error = difference.std(axis=0, ddof=1) / np.sqrt(len(difference))
        z = np.abs(mean) / np.maximum(error, 1e-12)
        if name == "spectrum":
            rows[name] = {"difference": float(np.abs(mean).max()), "z": float(z.max())}
        else:
            rows[name] = {
                "torch": float(torch_statistics[name].mean()),
                "cpu": float(cpu_statistics[name].mean()),
                "difference": float(mean),
                "z": float(z),
            }
    return rows
