"""Distribution statistics of corrupted images, to compare the torch and CPU paths of a random corruption.

Per sample (uint8 H×W×3 corrupted image and its clean source): mean and standard deviation of the levels,
PSNR to the clean image, mean squared Laplacian (fine detail left), and the radially averaged log power
spectrum of the grey image in ``SPECTRUM_BANDS`` bands. Paired comparisons (same image and severity,
independent draws) give a z-score per statistic.
"""

from __future__ import annotations

import numpy as np

SPECTRUM_BANDS = 8
SCALAR_STATISTICS = ("mean", "std", "psnr", "laplacian")


def sample_statistics(clean: np.ndarray, corrupted: np.ndarray) -> dict[str, np.ndarray]:
    """Statistics of N corrupted samples (uint8 N×H×W×3) against their clean sources (same shape).

    Returns arrays of shape (N,) for the scalar statistics and (N, SPECTRUM_BANDS) for ``spectrum``
    (log10 of the mean power per radial frequency band, DC excluded).
    """
    levels = corrupted.astype(np.float64)
    error = ((levels - clean.astype(np.float64)) ** 2).mean(axis=(1, 2, 3))
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
        "psnr": 10 * np.log10(255.0**2 / np.maximum(error, 1e-12)),
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
