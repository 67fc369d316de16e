"""Figures: accuracy over samples (the CCC paper's Figures 5 and 7) from windowed accuracies; the best
method per scenario (Tempora's Figure 1 style) and utility against time pressure, from sweep results."""

from __future__ import annotations

import textwrap
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import EngFormatter

from tta_eval.methods import get_method, list_methods
from tta_eval.metrics import DomainSegment, WindowedAccuracy

FEW_POINTS = 20
"""Curves with fewer windows than this are drawn with markers (a one-window run is a single point)."""

_SPARE_COLOURS = ("#17becf", "#bcbd22", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#2ca02c")
"""Colours of methods whose entry names none (and of unregistered names), picked by a checksum of the
name (stable across runs and machines); a registered method's colour is its entry's ``colour``."""

LINE_STYLES = ("-", "--", ":", "-.")
"""Line styles telling apart curves of the same method (e.g. one method on several streams)."""

SEGMENT_SHADE = "#000000"
SEGMENT_ALPHA = (0.0, 0.06)
"""Alternating shading of domain segments (corruption pairs)."""


def method_colour(method: str) -> str:
    """The colour of ``method`` (a method name; options after ':' are ignored) in every plot: the
    ``colour`` of its registry entry, else a spare colour picked from the name."""
    name = method.split(":", 1)[0]
    colour = get_method(name).colour if name in list_methods() else None
    return colour if colour is not None else _SPARE_COLOURS[zlib.crc32(name.encode()) % len(_SPARE_COLOURS)]


def _marker(curve: WindowedAccuracy) -> str:
    return "o" if curve.accuracy.size < FEW_POINTS else ""


def _pair_label(domain: str, two_lines: bool = True) -> str:
    """A segment's tick label: a corruption pair "n1→n2" as "n1 → n2", on two lines or one."""
    first, arrow, second = domain.partition("→")
    return f"{first}{chr(10) if two_lines else ' '}→ {second}" if arrow else domain


LABELLED_SEGMENTS = 24
"""Up to this many segments are named above the axes (more only shaded: the names would not fit)."""

SHADED_SEGMENTS = 120
"""Up to this many segments are shaded and their boundaries marked; beyond (a million-image CCC stream crosses
about 260 pairs) the stripes would be thinner than a pixel and grey out the axes, so none are drawn."""

LEGEND_LABEL_WIDTH = 28
"""Legend labels longer than this many characters are wrapped (long stream tags of a comparison would
otherwise take half the figure's width)."""

CROWDED_FRACTION = 0.14
"""A segment narrower than this fraction of the x range is too narrow for its two-line name: names
alternate between two rows (up to 8 segments) or are rotated (more)."""


def _shade_segments(axes: Axes, segments: Sequence[DomainSegment], x_end: float, named: bool = True) -> None:
    """Alternately shade the segments, mark their boundaries and (``named``) name them on top axes; nothing
    for more than :data:`SHADED_SEGMENTS` segments."""
    if len(segments) > SHADED_SEGMENTS:
        return
    for index, segment in enumerate(segments):
        axes.axvspan(
            segment.first_sample,
            segment.end_sample,
            color=SEGMENT_SHADE,
            alpha=SEGMENT_ALPHA[index % 2],
            linewidth=0,
            zorder=0,
        )
        if index:
            axes.axvline(segment.first_sample, color="0.5", linewidth=0.6, linestyle=":", zorder=0.5)
    if not named or len(segments) > LABELLED_SEGMENTS:
        return
    crowded = any((segment.end_sample - segment.first_sample) < CROWDED_FRACTION * x_end for segment in segments)
    rows = 2 if crowded and len(segments) <= 8 else 1
    rotated = crowded and rows == 1
    for row in range(rows):
        chosen = segments[row::rows]
        # among narrow pairs, the last name ends at the axes' end: centred on a pair the stream's end cut
        # short, it would run into the margin
        flush = rows == 2 and chosen[-1] is segments[-1]
        top = axes.secondary_xaxis("top")
        top.set_xticks(
            [(segment.first_sample + segment.end_sample) / 2 for segment in chosen[:-1]]
            + [x_end if flush else (chosen[-1].first_sample + chosen[-1].end_sample) / 2],
            [_pair_label(segment.domain, two_lines=not rotated) for segment in chosen],
            fontsize="x-small",
        )
        top.tick_params(length=0, pad=2 + 20 * row)
        if flush:
            top.get_xticklabels()[-1].set_horizontalalignment("right")
        if rotated:
            # upright, centred on their pair: a slanted name would run past the last pair into the margin
            top.tick_params(labelrotation=90)
            for label in top.get_xticklabels():
                label.set_horizontalalignment("center")


def plot_accuracy_curves(
    curves: Mapping[str, WindowedAccuracy],
    output_stem: Path,
    references: Mapping[str, WindowedAccuracy] | None = None,
    title: str = "",
    methods: Mapping[str, str] | None = None,
    segments: Sequence[DomainSegment] = (),
    styles: Mapping[str, str] | None = None,
    baseline: str | None = None,
) -> list[Path]:
    """``accuracy_figure`` written to ``output_stem`` with suffixes .png (150 dpi) and .svg (no
    timestamp); returns both paths."""
    return _save(accuracy_figure(curves, references, title, methods, segments, styles, baseline), output_stem)


def accuracy_figure(
    curves: Mapping[str, WindowedAccuracy],
    references: Mapping[str, WindowedAccuracy] | None = None,
    title: str = "",
    methods: Mapping[str, str] | None = None,
    segments: Sequence[DomainSegment] = (),
    styles: Mapping[str, str] | None = None,
    baseline: str | None = None,
) -> Figure:
    """Windowed accuracy (%) against samples seen: one line per curve, references dashed.

    curves, references: legend label → curve; references are non-adapting reference models (the
    source model), drawn dashed. methods: label → method name, which picks the colour
    (``method_colour``; default: the label itself); curves sharing a method differ in line style.
    styles: label → matplotlib line style, overriding those defaults (e.g. one style per stream).
    segments: the stream's domain segments (corruption pairs), shaded alternately and named above
    the axes. The y label states the window size; the legend sits outside the axes. baseline: the
    label of a curve (e.g. "bn") against which a second panel below shows every other curve's
    difference in points, window by window (where a method gains or loses against adapting only
    the normalisation statistics); None or a label not among ``curves``: one panel.
    """
    references = references or {}
    methods = methods or {}
    styles = styles or {}
    compared = baseline is not None and baseline in curves and len(curves) > 1
    figure = Figure(figsize=(9.0, 6.4 if compared else 4.2), layout="constrained")
    FigureCanvasAgg(figure)
    if compared:
        axes, difference_axes = figure.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    else:
        axes, difference_axes = figure.add_subplot(), None
    if segments:
        _shade_segments(axes, segments, max(segment.end_sample for segment in segments))
    seen: dict[str, int] = {}
    entries = [(label, curve, True) for label, curve in references.items()] + [
        (label, curve, False) for label, curve in curves.items()
    ]
    line_styles: dict[str, str] = {}
    for label, curve, is_reference in entries:
        if not curve.accuracy.size:
            continue
        method = methods.get(label, label).split(":", 1)[0]
        repeat = seen.get(method, 0)
        seen[method] = repeat + 1
        style = line_styles[label] = styles.get(
            label, LINE_STYLES[(repeat + (1 if is_reference else 0)) % len(LINE_STYLES)]
        )
        axes.plot(
            curve.sample_end,
            100 * curve.accuracy,
            linestyle=style,
            marker=_marker(curve),
            markersize=4,
            linewidth=1.6 if is_reference else 1.4,
            color=method_colour(method),
            label=label,
        )
    windows = {curve.window for curve in [*curves.values(), *references.values()] if curve.accuracy.size}
    if difference_axes is not None:
        _plot_differences(difference_axes, curves, baseline, methods, line_styles, segments)
        difference_axes.set_xlabel("samples seen")
    else:
        axes.set_xlabel("samples seen")
    sizes = f"{min(windows):,}" if len(windows) == 1 else f"{min(windows):,}–{max(windows):,}"
    # over the shorter upper panel of two, one line would run into the lower panel's label
    separator = "\n" if difference_axes is not None else " "
    axes.set_ylabel(f"accuracy (%){separator}per window of {sizes} samples" if windows else "accuracy (%)")
    axes.xaxis.set_major_formatter(EngFormatter(sep=""))
    axes.set_ylim(0, 100)
    axes.margins(x=0)
    axes.set_xlim(left=0)
    axes.grid(alpha=0.3)
    if title:
        figure.suptitle(title)
    handles, labels = axes.get_legend_handles_labels()
    wrapped = [textwrap.fill(label, LEGEND_LABEL_WIDTH, subsequent_indent="  ") for label in labels]
    figure.legend(handles, wrapped, loc="outside right center", fontsize="small", frameon=False)
    return figure


def _plot_differences(
    axes: Axes,
    curves: Mapping[str, WindowedAccuracy],
    baseline: str,
    methods: Mapping[str, str],
    styles: Mapping[str, str],
    segments: Sequence[DomainSegment],
) -> None:
    """Each curve minus ``baseline``'s (points) over the windows both cover, in the line styles of the
    panel above, the baseline as a zero line."""
    if segments:
        _shade_segments(axes, segments, max(segment.end_sample for segment in segments), named=False)
    reference = curves[baseline]
    base_method = methods.get(baseline, baseline).split(":", 1)[0]
    axes.axhline(0.0, color=method_colour(base_method), linewidth=1.4)
    for label, curve in curves.items():
        if label == baseline or not curve.accuracy.size:
            continue
        length = min(curve.accuracy.size, reference.accuracy.size)
        method = methods.get(label, label).split(":", 1)[0]
        axes.plot(
            curve.sample_end[:length],
            100 * (curve.accuracy[:length] - reference.accuracy[:length]),
            linestyle=styles.get(label, "-"),
            marker=_marker(curve),
            markersize=4,
            linewidth=1.4,
            color=method_colour(method),
        )
    axes.set_ylabel(f"minus {baseline} (points)")
    axes.xaxis.set_major_formatter(EngFormatter(sep=""))
    axes.margins(x=0)
    axes.set_xlim(left=0)
    axes.grid(alpha=0.3)


def _save(figure: Figure, output_stem: Path) -> list[Path]:
    output_stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [output_stem.with_suffix(".png"), output_stem.with_suffix(".svg")]
    figure.savefig(paths[0], dpi=150)
    figure.savefig(paths[1], metadata={"Date": None})
    return paths


def plot_best_method_map(
    best: Mapping[tuple[str, str], tuple[str, float]],
    scenarios: Sequence[str],
    domains: Sequence[str],
    methods: Sequence[str],
    output_stem: Path,
    title: str = "",
) -> list[Path]:
    """``best_method_figure`` written to ``output_stem`` .png and .svg; returns both paths."""
    return _save(best_method_figure(best, scenarios, domains, methods, title), output_stem)


def best_method_figure(
    best: Mapping[tuple[str, str], tuple[str, float]],
    scenarios: Sequence[str],
    domains: Sequence[str],
    methods: Sequence[str],
    title: str = "",
) -> Figure:
    """Heat map of the best method per scenario (columns) and domain (rows), as Tempora's Figure 1.

    best: (scenario, domain) → (method, utility in [0, 1]); each cell is coloured by its method
    (``method_colour``) and shows the utility (%); missing cells stay blank.
    """
    colours = {method: method_colour(method) for method in methods}
    width = max(5.0, 1.1 * len(scenarios) + 3.0)
    height = max(2.5, 0.45 * len(domains) + 1.8)
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    image = np.ones((len(domains), len(scenarios), 3))
    for row, domain in enumerate(domains):
        for column, scenario in enumerate(scenarios):
            if (scenario, domain) in best:
                method, utility = best[(scenario, domain)]
                image[row, column] = to_rgb(colours[method])
                luminance = float(np.dot(image[row, column], (0.299, 0.587, 0.114)))
                text_colour = "black" if luminance > 0.6 else "white"
                axes.text(
                    column, row, f"{100 * utility:.1f}", ha="center", va="center", fontsize="small", color=text_colour
                )
    axes.imshow(image, aspect="auto", interpolation="nearest")
    axes.set_xticks(range(len(scenarios)), scenarios, rotation=35, ha="right", fontsize="small")
    axes.set_yticks(range(len(domains)), domains, fontsize="small")
    used = [method for method in methods if any(value[0] == method for value in best.values())]
    handles = [Patch(color=colours[method], label=method) for method in used]
    figure.legend(handles=handles, loc="outside right upper", fontsize="small", title="best method")
    axes.set_title(title or "best method per scenario (cell: its utility, %)")
    return figure


def plot_utility_curves(
    curves: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    axis_label: str,
    output_stem: Path,
    title: str = "",
    log_x: bool = False,
) -> list[Path]:
    """``utility_figure`` written to ``output_stem`` .png and .svg; returns both paths."""
    return _save(utility_figure(curves, axis_label, title, log_x), output_stem)


def utility_figure(
    curves: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    axis_label: str,
    title: str = "",
    log_x: bool = False,
) -> Figure:
    """Utility (%) against a pressure parameter: one line per method, in its ``method_colour``.

    curves: method → (parameter values, utilities in [0, 1]); axis_label names the parameter and
    its unit; log_x: logarithmic parameter axis.
    """
    figure = Figure(figsize=(6.5, 4.0), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for method, (parameters, utilities) in curves.items():
        order = np.argsort(parameters)
        axes.plot(
            np.asarray(parameters, dtype=float)[order],
            100 * np.asarray(utilities, dtype=float)[order],
            marker="o",
            linewidth=1.2,
            color=method_colour(method),
            label=method,
        )
    if log_x:
        axes.set_xscale("log")
    axes.set_xlabel(axis_label)
    axes.set_ylabel("utility (%)")
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    if title:
        axes.set_title(title)
    figure.legend(loc="outside right upper", fontsize="small", frameon=False)
    return figure
