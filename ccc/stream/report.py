"""What ``ccc-generate --dry-run`` shows: the schedule as text and as a plot (no pixels rendered).

The plot follows the paper's Figure 8b: each corruption's severity over the stream (top) and the
calibrated accuracy of every path step against the target (bottom), the pairs shaded and named.

Both cover at most :data:`SUMMARY_MAX_STEPS` path steps (the whole stream for the paper's lengths),
so their time and memory do not grow with ``--num-images``: a dry run of 10^15 images costs what
one of 10^6 costs, and says which prefix it describes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from ccc.stream.paths import SEVERITY_STEP
from ccc.stream.schedule import PairVisit, StreamSchedule
from ccc.stream.spec import StreamSpec
from ccc.validation import check_positive_int

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "SUMMARY_MAX_STEPS",
    "ScheduleTrace",
    "corruption_severities",
    "describe_domains",
    "describe_schedule",
    "plot_schedule",
    "png_destination",
    "schedule_figure",
    "summarised_images",
    "trace_schedule",
]

SUMMARY_MAX_STEPS = 100_000
"""Path steps the text summary and the plot cover at most (7.5M images at speed 100 is 75,000 steps)."""

PLOT_MAX_NAMED_PAIRS = 100
"""The plot names its pairs above the axes when it shows at most this many (more names overlap into
an unreadable band, and each costs a tick to lay out and draw)."""


@dataclass(frozen=True)
class ScheduleTrace:
    """Per path step of a stream prefix: first image, severities and calibrated accuracy.

    Attributes:
        visits: the pairs touched, in order.
        first_images: index of the first image of each step.
        s1, s2: severities in [0, 5] of each step.
        accuracies: calibrated accuracy (percent) of each step.
        images_per_step: images of each step (``speed``, fewer for a cut-off last step).
    """

    visits: list[PairVisit]
    first_images: NDArray[np.int64]
    s1: NDArray[np.float64]
    s2: NDArray[np.float64]
    accuracies: NDArray[np.float64]
    images_per_step: NDArray[np.int64]


def trace_schedule(schedule: StreamSchedule, speed: int, num_images: int) -> ScheduleTrace:
    """The steps covering images 0 … ``num_images - 1`` (speed, num_images >= 1)."""
    check_positive_int("speed", speed)
    check_positive_int("num_images", num_images)
    num_steps = -(-num_images // speed)
    visits = schedule.visits(num_steps)
    cells = np.concatenate([np.asarray(visit.path.cells, dtype=np.int64) for visit in visits])[:num_steps]
    accuracies = np.concatenate([np.asarray(visit.path.accuracies, dtype=np.float64) for visit in visits])[:num_steps]
    first_images = np.arange(num_steps, dtype=np.int64) * speed
    images_per_step = np.minimum(first_images + speed, num_images) - first_images
    return ScheduleTrace(
        visits, first_images, cells[:, 0] * SEVERITY_STEP, cells[:, 1] * SEVERITY_STEP, accuracies, images_per_step
    )


def summarised_images(speed: int, num_images: int) -> int:
    """Images the summary and the plot cover: ``num_images``, at most :data:`SUMMARY_MAX_STEPS` × ``speed``."""
    return min(num_images, SUMMARY_MAX_STEPS * speed)


def describe_schedule(
    schedule: StreamSchedule, speed: int, num_images: int, num_shards: int, shard_name: Callable[[int], str]
) -> str:
    """A multi-line text description: settings, each pair with its path cells and accuracies, the shards.

    Covers the first :func:`summarised_images` images (all of them unless the stream has more than
    :data:`SUMMARY_MAX_STEPS` steps; the text then says so). ``num_shards``: shards of the run, >= 1;
    ``shard_name``: the file name of shard ``k`` (:func:`ccc.shards.record.shard_name`; the plan stage
    does not know the shard format).
    """
    shown = summarised_images(speed, num_images)
    trace = trace_schedule(schedule, speed, shown)
    num_steps = len(trace.first_images)
    deviation = np.abs(trace.accuracies - schedule.target_accuracy)
    weights = trace.images_per_step / trace.images_per_step.sum()
    total_steps = -(-num_images // speed)
    scope = "the stream" if shown == num_images else f"the first {shown:,} images"
    lines = [
        f"target accuracy: {schedule.target_accuracy:g} %   path objective: {schedule.path_objective}   "
        f"schedule: {schedule.schedule}   seed: {schedule.seed}",
        f"corruptions ({len(schedule.corruptions)}): {', '.join(schedule.corruptions)}",
        f"images: {num_images:,}   speed: {speed:,} images per step   steps: {total_steps:,}   "
        + (
            f"pairs: {len(trace.visits):,}"
            if shown == num_images
            else f"pairs in the first {num_steps:,} steps: {len(trace.visits):,}"
        ),
        f"calibrated accuracy over {scope}: mean {float(weights @ trace.accuracies):.2f} %; "
        f"its path steps miss the {schedule.target_accuracy:g} % target by {float(weights @ deviation):.2f} points "
        f"on average (weighted by images), {float(deviation.max()):.2f} at worst",
    ]
    if shown < num_images:
        lines.append(
            f"(summary and plot cover the first {SUMMARY_MAX_STEPS:,} steps; "
            "later pairs follow the same paths in the seeded order)"
        )
    lines += ["", "pairs (each cell: s1/s2 = calibrated accuracy %):"]
    for visit in trace.visits:
        first = visit.first_step
        last = min(first + len(visit.path.cells), num_steps) - 1
        first_image = int(trace.first_images[first])
        last_image = int(trace.first_images[last] + trace.images_per_step[last] - 1)
        cut = (
            f" ({'stream' if shown == num_images else 'summary'} ends inside this path)"
            if last < first + len(visit.path.cells) - 1
            else ""
        )
        lines.append(
            f"  pair {visit.pair_index}: {visit.path.n1} -> {visit.path.n2}, steps {first}-{last}, "
            f"images {first_image:,}-{last_image:,}{cut}"
        )
        cells = visit.path.cells[: last - first + 1]
        accuracies = visit.path.accuracies[: last - first + 1]
        lines.append(
            "    "
            + ", ".join(
                f"{i * SEVERITY_STEP:g}/{j * SEVERITY_STEP:g} = {accuracy:.1f}"
                for (i, j), accuracy in zip(cells, accuracies)
            )
        )
    names = (
        ", ".join(shard_name(index) for index in range(num_shards))
        if num_shards <= 6
        else f"{shard_name(0)} … {shard_name(num_shards - 1)}"
    )
    lines += ["", f"shards to write ({num_shards:,}): {names}"]
    return "\n".join(lines)


def describe_domains(spec: StreamSpec, shard_name: Callable[[int], str]) -> str:
    """The domain sequence of a ``cin-c`` or ``gradual`` stream as text: one line per domain of the
    first pass (image range, corruption, severity), then the repetition, if the stream is longer."""
    levels = spec.domain_levels
    crop = "random-resized crops and flips" if spec.crop == "random" else "ImageNet-C centre crops"
    lines = [
        f"{spec.kind} stream: {len(levels)} domains × {spec.speed:,} images = "
        f"{len(levels) * spec.speed:,} images per pass, "
        f"{crop}, seed {spec.seed}; {spec.num_images:,} images in "
        f"{spec.num_shards:,} shard{'s' if spec.num_shards != 1 else ''} "
        f"({shard_name(0)} … {shard_name(spec.num_shards - 1)})",
        "",
        f"{'images':>25}  corruption          severity",
    ]
    for position, (name, severity) in enumerate(levels):
        first = position * spec.speed
        if first >= spec.num_images:
            break
        last = min(first + spec.speed, spec.num_images) - 1
        lines.append(f"{first:>12,} – {last:>10,}  {name:<18}  {severity}")
    passes = spec.num_images / (len(levels) * spec.speed)
    if passes > 1:
        lines.append(f"… then the sequence repeats from its start ({passes:,.2f} passes in all)")
    return "\n".join(lines)


def png_destination(path: str | Path, default_name: str) -> Path:
    """Where a PNG asked for at ``path`` is written: ``path/default_name`` for an existing folder,
    ``path`` + ".png" when it does not end in .png (what matplotlib would write), else ``path``."""
    output = Path(path)
    if output.is_dir():
        return output / default_name
    return output if output.suffix.lower() == ".png" else output.with_name(output.name + ".png")


def corruption_severities(trace: ScheduleTrace) -> dict[str, NDArray[np.float64]]:
    """Severity in [0, 5] of each corruption at each step of ``trace`` (NaN where it is not in the
    current pair), in order of first appearance: a corruption's line runs through the pairs it is in."""
    num_steps = len(trace.first_images)
    severities: dict[str, NDArray[np.float64]] = {}
    for visit in trace.visits:
        steps = slice(visit.first_step, min(visit.first_step + len(visit.path.cells), num_steps))
        for name, values in ((visit.path.n1, trace.s1), (visit.path.n2, trace.s2)):
            line = severities.setdefault(name, np.full(num_steps, np.nan))
            line[steps] = values[steps]
    return severities


def plot_schedule(schedule: StreamSchedule, speed: int, num_images: int, path: str | Path) -> Path:
    """Write ``schedule_figure`` as a PNG to ``path`` (see :func:`png_destination`: a folder gets
    ``schedule.png``; its folder is created); return the path written."""
    output = png_destination(path, "schedule.png")
    output.parent.mkdir(parents=True, exist_ok=True)
    schedule_figure(schedule, speed, num_images).savefig(output, dpi=120, format="png")
    return output


def schedule_figure(schedule: StreamSchedule, speed: int, num_images: int) -> Figure:
    """Each corruption's severity (top, legend: the corruption names) and the calibrated accuracy
    against the target (bottom) over images 0 … ``num_images - 1`` (at most its first
    :func:`summarised_images`), the pairs shaded alternately and, up to
    :data:`PLOT_MAX_NAMED_PAIRS` pairs, named above. Its artists do not grow with the number of
    pairs (the shading is one collection per panel), so any length plots in seconds. matplotlib is
    imported here, not with the module."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    shown = summarised_images(speed, num_images)
    trace = trace_schedule(schedule, speed, shown)
    edges = np.append(trace.first_images, shown)
    figure = Figure(figsize=(10, 5.5), layout="constrained")
    FigureCanvasAgg(figure)
    severity_axis, accuracy_axis = figure.subplots(2, 1, sharex=True)
    bounds = [
        (
            int(edges[visit.first_step]),
            int(edges[min(visit.first_step + len(visit.path.cells), len(trace.first_images))]),
        )
        for visit in trace.visits
    ]
    for axis in (severity_axis, accuracy_axis):
        # every other pair shaded over the panel's height (x in data units, y in axes units)
        spans = [[(first, 0), (last, 0), (last, 1), (first, 1)] for first, last in bounds[1::2]]
        axis.add_collection(
            PolyCollection(
                spans, facecolors="black", alpha=0.06, linewidths=0, zorder=0, transform=axis.get_xaxis_transform()
            ),
            autolim=False,
        )
    top = severity_axis.secondary_xaxis("top")
    named = len(trace.visits) <= PLOT_MAX_NAMED_PAIRS
    if named:
        centres = [(first + last) / 2 for first, last in bounds]
        top.set_xticks(centres, [f"{visit.path.n1}\n→ {visit.path.n2}" for visit in trace.visits], fontsize="x-small")
    else:
        top.set_xticks([])
    top.tick_params(length=0)
    if len(trace.visits) > 6:
        top.tick_params(labelrotation=60)
    palette = [f"C{index}" for index in range(10)]
    for index, (name, severity) in enumerate(corruption_severities(trace).items()):
        # a step plot holding each step's value until the next edge; NaN leaves the gaps between visits
        severity_axis.step(
            edges,
            np.append(severity, severity[-1]),
            where="post",
            color=palette[index % len(palette)],
            linewidth=1.5,
            label=name,
        )
    severity_axis.set_ylabel("severity")
    severity_axis.set_ylim(-0.1, 5.1)
    # black and grey: the corruption colours of the panel above mean nothing here
    accuracy_axis.stairs(
        trace.accuracies, edges, baseline=None, color="black", linewidth=1.3, label="calibrated accuracy"
    )
    accuracy_axis.axhline(
        schedule.target_accuracy,
        color="0.45",
        linestyle="--",
        linewidth=1.2,
        label=f"target {schedule.target_accuracy:g} %",
    )
    accuracy_axis.set_ylabel("accuracy (%)")
    accuracy_axis.set_xlabel("image index")
    accuracy_axis.xaxis.set_major_formatter(EngFormatter(sep=""))
    accuracy_axis.margins(x=0)
    for axis in (severity_axis, accuracy_axis):
        axis.grid(alpha=0.3)
        axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False, borderaxespad=0)
    scope = "" if shown == num_images else f"\n(the first {shown:,} of {num_images:,} images)"
    figure.suptitle(
        f"CCC schedule: target {schedule.target_accuracy:g} %, speed {speed:,} images per step, seed {schedule.seed}, "
        f"path objective {schedule.path_objective}{scope}"
    )
    return figure
