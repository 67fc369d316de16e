"""Heat maps of calibration grids: accuracy over (s1, s2) per corruption pair, target contours, paths.

:func:`plot_table` draws one panel per ordered pair: the 21×21 accuracy grid (percent, s1 down the
rows, s2 along the columns, as ``grid[i, j]``), contour lines at the target accuracies and, with a
target, the severity path :func:`ccc.stream.paths.find_path` chooses for it. Cells that were only
predicted (no image evaluated, adaptive tables) are hatched. Matplotlib's Agg backend is used, so
no display is needed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ccc.calibration.table import SEVERITIES, CalibrationError, CalibrationTable  # noqa: E402
from ccc.stream.paths import PATH_OBJECTIVES, find_path  # noqa: E402
from ccc.stream.report import png_destination  # noqa: E402

DEFAULT_CONTOURS = (40.0, 20.0)
"""Contour levels (percent) when neither ``contours`` nor the table's presets give any."""


def plot_table(
    table: CalibrationTable,
    out: str | os.PathLike[str],
    pairs: Sequence[tuple[str, str]] | None = None,
    target: float | None = None,
    contours: Sequence[float] | None = None,
    objective: str = "reference",
    max_pairs: int = 30,
) -> Path:
    """Write a PNG with one heat map per pair and return the path written.

    Args:
        table: the calibration table.
        out: PNG file to write (its folder must exist); an existing folder gets ``calibration.png``,
            a name not ending in .png gets ".png" appended (see ``ccc.stream.report.png_destination``).
        pairs: ordered pairs ``(n1, n2)`` to draw (aliases accepted); None draws the table's pairs,
            at most ``max_pairs`` of them.
        target: accuracy in percent in [0, 100] whose path is drawn on every panel; None for no path.
        contours: contour levels in percent; None uses the targets of the table's difficulty presets,
            else 40 and 20.
        objective: path objective, one of :data:`ccc.stream.paths.PATH_OBJECTIVES`.
        max_pairs: cap on the number of panels when ``pairs`` is None, ≥ 1.

    Raises:
        CalibrationError: for a pair the table does not hold.
        ValueError: for an invalid target, contour level or objective.
    """
    destination = png_destination(out, "calibration.png")
    if not destination.parent.is_dir():
        raise CalibrationError(f"cannot write plot: folder {destination.parent} does not exist")
    if objective not in PATH_OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(PATH_OBJECTIVES)}, got {objective!r}")
    if target is not None and not (math.isfinite(target) and 0.0 <= target <= 100.0):
        raise ValueError(f"target must be an accuracy in [0, 100] percent, got {target}")
    if contours is None:
        levels = sorted({preset.target_accuracy for preset in table.difficulty_presets.values()}) or sorted(
            DEFAULT_CONTOURS
        )
    else:
        levels = sorted(float(level) for level in contours)
        if not all(math.isfinite(level) and 0.0 <= level <= 100.0 for level in levels):
            raise ValueError(f"contour levels must be accuracies in [0, 100] percent, got {list(contours)}")
    chosen = list(table.pairs())[:max_pairs] if pairs is None else [tuple(pair) for pair in pairs]
    for n1, n2 in chosen:
        if not table.has_pair(n1, n2):
            table.grid(n1, n2)  # raises CalibrationError naming the pair and what exists
    columns = min(len(chosen), 5)
    rows = math.ceil(len(chosen) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 3.0 * rows), squeeze=False)
    extent = (-0.125, 5.125, 5.125, -0.125)
    image = None
    for axis, (n1, n2) in zip(axes.flat, chosen):
        grid = table.grid(n1, n2)
        image = axis.imshow(grid, cmap="viridis", vmin=0.0, vmax=100.0, extent=extent, interpolation="nearest")
        predicted = np.ma.masked_where(table.image_counts(n1, n2) > 0, np.ones_like(grid))
        if predicted.count():
            axis.contourf(SEVERITIES, SEVERITIES, predicted, levels=[0.5, 1.5], hatches=["...."], colors="none")
        drawable = [level for level in levels if grid.min() < level < grid.max()]
        if drawable:
            lines = axis.contour(SEVERITIES, SEVERITIES, grid, levels=drawable, colors="white", linewidths=0.8)
            axis.clabel(lines, fmt="%g%%", fontsize=6)
        if target is not None:
            path = find_path(grid, target, objective)  # type: ignore[arg-type]
            severities = np.array(path, dtype=np.float64) * 0.25
            mean = float(np.mean([grid[i, j] for i, j in path]))
            axis.plot(severities[:, 1], severities[:, 0], color="red", marker="o", markersize=2, linewidth=1.2)
            axis.set_title(f"{n1} → {n2}\npath mean {mean:.1f}% (target {target:g}%)", fontsize=7)
        else:
            axis.set_title(f"{n1} → {n2}", fontsize=7)
        axis.set_xlabel(f"s2 ({n2})", fontsize=6)
        axis.set_ylabel(f"s1 ({n1})", fontsize=6)
        axis.tick_params(labelsize=6)
    for axis in list(axes.flat)[len(chosen) :]:
        axis.axis("off")
    if image is not None:
        figure.colorbar(image, ax=axes, shrink=0.8, label="top-1 accuracy (%)")
    figure.suptitle(f"{table.metadata.model_name} — {table.metadata.image_count} images", fontsize=9)
    figure.savefig(destination, dpi=110, format="png")
    plt.close(figure)
    return destination
