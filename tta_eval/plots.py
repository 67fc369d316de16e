"""Accuracy-over-samples figures (the CCC paper's Figures 5 and 7) from windowed accuracies."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from tta_eval.metrics import WindowedAccuracy

FEW_POINTS = 20
"""Curves with fewer windows than this are drawn with markers (a one-window run is a single point)."""


def _marker(curve: WindowedAccuracy) -> str:
    return "o" if curve.accuracy.size < FEW_POINTS else ""


def plot_accuracy_curves(
    curves: Mapping[str, WindowedAccuracy],
    output_stem: Path,
    references: Mapping[str, WindowedAccuracy] | None = None,
    title: str = "",
) -> list[Path]:
    """Draw windowed accuracy (%) against samples seen: one line per curve, references dashed.

    references: label → curve of a non-adapting reference model (the source model), drawn as dashed
    lines (black for a single reference). Writes ``output_stem`` with suffixes .png (150 dpi) and
    .svg (no timestamp) and returns both paths.
    """
    figure = Figure(figsize=(8.0, 4.0), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    references = references or {}
    for label, reference in references.items():
        if reference.accuracy.size:
            style = {"color": "black"} if len(references) == 1 else {}
            axes.plot(reference.sample_end, 100 * reference.accuracy, "--", marker=_marker(reference), linewidth=1.5, label=label, **style)
    for label, curve in curves.items():
        if curve.accuracy.size:
            axes.plot(curve.sample_end, 100 * curve.accuracy, marker=_marker(curve), linewidth=1.2, label=label)
    axes.set_xlabel("samples seen")
    axes.set_ylabel("accuracy (%)")
    axes.xaxis.set_major_formatter(EngFormatter(sep=""))
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    if title:
        axes.set_title(title)
    figure.legend(loc="outside right upper", fontsize="small")
    output_stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [output_stem.with_suffix(".png"), output_stem.with_suffix(".svg")]
    figure.savefig(paths[0], dpi=150)
    figure.savefig(paths[1], metadata={"Date": None})
    return paths
