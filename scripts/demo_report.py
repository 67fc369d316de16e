"""Demo-world streams: the source model's realised accuracy against the calibration, and TTA curves.

Reads demo stream run folders (``ccc-generate --demo``) and the ``tta-eval run`` folders made on them,
and writes what ``docs/demo.md`` reports: a JSON file of numbers, a Markdown summary on stdout and
figures.

    python scripts/demo_report.py \\
        --stream medium=shards/demo_baseline_30_transition+speed_2000_seed_43 \\
        --results medium=results/medium_a,results/medium_b  [same for easy and hard] \\
        [--calibration TABLE] --out docs/demo

Per difficulty:

- **realised** accuracy: the ``source`` method's correct predictions over the whole stream (top-1,
  percent), from the first results folder that ran ``source``;
- **calibrated** accuracy: the mean over the same samples of each sample's ``calibrated_accuracy``
  (the calibration table's value at the sample's severities, written into the shard by the
  generator) — what the stream's difficulty promises, on the crops the table was measured with
  (centre crops, or the stream's own with ``--preprocessing stream``); the nominal **target** is the
  preset's baseline accuracy;
- realised − calibrated per window of ``--window`` samples, its mean and the standard error of that
  mean over windows (windows, not images: the stream draws its 2,400 source images many times);
- the same per corruption pair (each batch counted for the pair most of its samples belong to) and
  per kind of calibration cell (measured on how many images, or only predicted by the adaptive
  scheme);
- every method's accuracy over the stream, over its first and last ``--edge`` samples, its lowest
  window and the collapse verdict of ``tta-eval`` (below the source model for 50,000 samples).

Figures: ``realised_vs_calibrated.png`` (one panel per difficulty), ``tta_<difficulty>.png``
(every method's windowed accuracy, the source model dashed) and, when ``bn`` ran,
``tta_<difficulty>_minus_bn.png`` (every adapting method's accuracy minus BN's).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter
from numpy.typing import NDArray

from ccc.calibration import CalibrationTable
from ccc.demo import demo_calibration_path
from ccc.load import open_stream
from tta_eval.metrics import WindowedAccuracy, windowed_accuracy
from tta_eval.plots import plot_accuracy_curves
from tta_eval.records import RecordTable
from tta_eval.run_folder import load_run, records_path

DIFFICULTIES = ("easy", "medium", "hard")

CELL_KINDS = {
    "predicted only (0 images)": (0, 0),
    "measured on 1–49 images": (1, 49),
    "measured on ≥ 50 images": (50, 10**9),
}
"""How the calibration cell of a sample was obtained, by the images evaluated in it (inclusive bounds)."""


@dataclass(frozen=True)
class StreamFacts:
    """Per-sample facts of a stream read from its shards (no image decoded).

    calibrated: calibrated accuracy per sample (percent); pairs: ``n1->n2`` per sample;
    cell_images: images the calibration really evaluated in the sample's cell (0: the adaptive
    scheme's prediction only);
    target: the preset's baseline accuracy (percent); speed: transition speed (images per severity
    step); corruptions: the stream's corruptions.
    """

    calibrated: NDArray[np.float64]
    pairs: NDArray[np.object_]
    cell_images: NDArray[np.int64]
    target: float
    speed: int
    corruptions: list[str]


def read_stream_facts(run_folder: Path, table: CalibrationTable) -> StreamFacts:
    """Calibrated accuracy, corruption pair and calibration cell of every sample of the run folder,
    in stream order; ``table`` must be the one the stream was generated from."""
    manifest = json.loads((run_folder / "manifest.json").read_text())
    if manifest["calibration_checksum"] != table.checksum():
        raise ValueError(f"{run_folder} was generated from another calibration table than the one given")
    pair_index = {pair: index for index, pair in enumerate(table.pairs())}
    counts = table.image_counts_array
    calibrated, pairs, cell_images = [], [], []
    for sample in open_stream(run_folder, image_format="jpeg"):
        metadata = sample.metadata
        calibrated.append(float(metadata["calibrated_accuracy"]))
        pairs.append(f"{metadata['n1']}->{metadata['n2']}")
        row, column = round(4 * metadata["s1"]), round(4 * metadata["s2"])
        cell_images.append(int(counts[pair_index[(metadata["n1"], metadata["n2"])]][row, column]))
    stream = manifest["stream"]
    return StreamFacts(
        np.asarray(calibrated),
        np.asarray(pairs, dtype=object),
        np.asarray(cell_images, dtype=np.int64),
        float(stream["target_accuracy"]),
        int(stream["speed"]),
        list(stream["corruptions"]),
    )


def method_results(results_folders: Sequence[Path]) -> tuple[dict[str, RecordTable], dict[str, str]]:
    """Records and ``tta-eval``'s collapse verdict of every method label in the results folders, in
    run order (a label seen twice keeps its first folder's)."""
    records: dict[str, RecordTable] = {}
    verdicts: dict[str, str] = {}
    for folder in results_folders:
        run = load_run(folder)
        for label, entry in run.summary["methods"].items():
            if label not in records:
                records[label] = RecordTable.read_csv(records_path(folder, label))
                collapse = entry.get("collapse")
                verdicts[label] = (
                    "–"
                    if collapse is None
                    else f"at sample {collapse['sample_index']:,}"
                    if collapse["collapsed"]
                    else "none"
                )
    return records, verdicts


def realised_versus_calibrated(facts: StreamFacts, source: RecordTable, window: int) -> dict[str, object]:
    """Realised source accuracy against the calibrated accuracy of the same samples (percent)."""
    starts, sizes, correct = source.column("sample_start"), source.column("batch_size"), source.column("correct")
    covered = int(sizes.sum())
    if starts[0] != 0 or covered > facts.calibrated.size:
        raise ValueError("the source records do not cover the stream from its first sample")
    batches = [slice(start, start + size) for start, size in zip(starts, sizes)]
    batch_calibrated = np.array([facts.calibrated[batch].mean() for batch in batches])

    def aggregate(rows: NDArray[np.bool_]) -> dict[str, float]:
        samples = int(sizes[rows].sum())
        return {
            "samples": samples,
            "realised": 100.0 * float(correct[rows].sum()) / samples,
            "calibrated": float(batch_calibrated[rows].mean()),
        }

    realised = 100.0 * correct.sum() / covered
    calibrated = float(facts.calibrated[:covered].mean())
    window_of_batch = starts // window
    differences = []
    for index in np.unique(window_of_batch):
        rows = window_of_batch == index
        first, last = int(starts[rows][0]), int(starts[rows][-1] + sizes[rows][-1])
        differences.append(100.0 * correct[rows].sum() / sizes[rows].sum() - facts.calibrated[first:last].mean())
    differences_array = np.asarray(differences)
    batch_pairs = []
    for batch in batches:
        names, counts = np.unique(facts.pairs[batch], return_counts=True)
        batch_pairs.append(names[np.argmax(counts)])
    batch_pairs_array = np.asarray(batch_pairs, dtype=object)
    per_pair = {pair: aggregate(batch_pairs_array == pair) for pair in dict.fromkeys(batch_pairs)}
    per_cell_kind = {}
    for kind, (low, high) in CELL_KINDS.items():
        rows = np.array(
            [np.mean((facts.cell_images[batch] >= low) & (facts.cell_images[batch] <= high)) > 0.5 for batch in batches]
        )
        if rows.any():
            per_cell_kind[kind] = aggregate(rows)
    return {
        "samples": covered,
        "target": facts.target,
        "calibrated": calibrated,
        "realised": realised,
        "difference": realised - calibrated,
        "difference_standard_error": float(differences_array.std(ddof=1) / math.sqrt(differences_array.size)),
        "windows": int(differences_array.size),
        "per_pair": per_pair,
        "per_cell_kind": per_cell_kind,
    }


def method_summary(
    records: dict[str, RecordTable], verdicts: dict[str, str], window: int, edge: int
) -> dict[str, dict[str, object]]:
    """Per method: accuracy overall, over the first and last ``edge`` samples, lowest window (percent)."""
    summary: dict[str, dict[str, object]] = {}
    for label, table in records.items():
        starts, sizes, correct = table.column("sample_start"), table.column("batch_size"), table.column("correct")
        end = int(starts[-1] + sizes[-1])
        first, last = starts < edge, starts >= end - edge
        curve = windowed_accuracy(table, window)
        summary[label] = {
            "accuracy": 100.0 * correct.sum() / sizes.sum(),
            "first": 100.0 * correct[first].sum() / sizes[first].sum(),
            "last": 100.0 * correct[last].sum() / sizes[last].sum(),
            "lowest_window": 100.0 * float(curve.accuracy.min()),
            "collapse": verdicts[label],
        }
    return summary


def plot_realised(
    streams: dict[str, tuple[StreamFacts, RecordTable]], window: int, path: Path, preprocessing_kind: str
) -> None:
    """One panel per difficulty: windowed realised source accuracy, windowed calibrated accuracy (the
    table measured with ``preprocessing_kind``, ``"centre"`` or ``"stream"``), target."""
    calibrated_label = {"centre": "centre crops", "stream": "the stream's crops and JPEG"}[preprocessing_kind]
    figure = Figure(figsize=(8.0, 2.4 * len(streams)), layout="constrained")
    FigureCanvasAgg(figure)
    axes_list = figure.subplots(len(streams), 1, squeeze=False)[:, 0]
    for axes, (difficulty, (facts, source)) in zip(axes_list, streams.items()):
        curve = windowed_accuracy(source, window)
        edges = np.concatenate([[0], curve.sample_end])
        calibrated = [facts.calibrated[a:b].mean() for a, b in zip(edges[:-1], edges[1:])]
        axes.plot(curve.sample_end, 100 * curve.accuracy, linewidth=1.2, label="realised (source model, random crops)")
        axes.plot(curve.sample_end, calibrated, linewidth=1.2, label=f"calibrated (table, {calibrated_label})")
        axes.axhline(facts.target, color="black", linestyle=":", linewidth=1.0, label="target")
        axes.set_ylabel("accuracy (%)")
        axes.set_title(f"{difficulty} (target {facts.target:g} %)", fontsize="medium")
        axes.set_ylim(0, 100)
        axes.grid(alpha=0.3)
        axes.xaxis.set_major_formatter(EngFormatter(sep=""))
    axes_list[-1].set_xlabel("samples seen")
    axes_list[0].legend(fontsize="small", loc="upper right")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=150)


def plot_difference_to_bn(records: dict[str, RecordTable], window: int, path: Path, title: str) -> None:
    """Windowed accuracy of every adapting method minus BN adaptation's (points): on the demo world the
    methods' curves lie within a point or two of BN's, too close to tell apart on the accuracy plot."""
    baseline = windowed_accuracy(records["bn"], window)
    figure = Figure(figsize=(8.0, 3.6), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.axhline(0.0, color="black", linewidth=1.0, label="bn")
    for label, table in records.items():
        if label not in ("source", "bn"):
            curve = windowed_accuracy(table, window)
            length = min(curve.accuracy.size, baseline.accuracy.size)
            axes.plot(
                curve.sample_end[:length],
                100 * (curve.accuracy[:length] - baseline.accuracy[:length]),
                marker="o",
                markersize=3,
                linewidth=1.2,
                label=label,
            )
    axes.set_xlabel("samples seen")
    axes.set_ylabel("accuracy − bn (points)")
    axes.xaxis.set_major_formatter(EngFormatter(sep=""))
    axes.grid(alpha=0.3)
    axes.set_title(f"{title} ({window:,}-image windows)", fontsize="medium")
    figure.legend(loc="outside lower center", fontsize="small", ncols=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=150)


def render_markdown(report: dict[str, dict[str, object]]) -> str:
    """The numbers as Markdown tables."""
    lines = [
        "| difficulty | samples | target | calibrated | realised (source) | realised − calibrated |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for difficulty, entry in report.items():
        facts = entry["stream"]
        lines.append(
            f"| {difficulty} | {facts['samples']:,} | {facts['target']:g} | "
            f"{facts['calibrated']:.1f} | {facts['realised']:.1f} | "
            f"{facts['difference']:+.1f} ± {facts['difference_standard_error']:.1f} |"
        )
    for difficulty, entry in report.items():
        lines += [
            "",
            f"{difficulty}, per pair:",
            "",
            "| pair | samples | calibrated | realised | difference |",
            "|---|---:|---:|---:|---:|",
        ]
        for pair, values in entry["stream"]["per_pair"].items():
            lines.append(
                f"| {pair} | {values['samples']:,} | {values['calibrated']:.1f} | {values['realised']:.1f} | "
                f"{values['realised'] - values['calibrated']:+.1f} |"
            )
    lines += [
        "",
        "By how the sample's calibration cell was obtained:",
        "",
        "| difficulty | cell | samples | calibrated | realised | difference |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for difficulty, entry in report.items():
        for kind, values in entry["stream"]["per_cell_kind"].items():
            lines.append(
                f"| {difficulty} | {kind} | {values['samples']:,} | "
                f"{values['calibrated']:.1f} | {values['realised']:.1f} | "
                f"{values['realised'] - values['calibrated']:+.1f} |"
            )
    for difficulty, entry in report.items():
        lines += [
            "",
            f"{difficulty}, methods:",
            "",
            "| method | accuracy | first | last | lowest window | collapse |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for label, values in entry["methods"].items():
            lines.append(
                f"| {label} | {values['accuracy']:.1f} | {values['first']:.1f} | {values['last']:.1f} | "
                f"{values['lowest_window']:.1f} | {values['collapse']} |"
            )
    return "\n".join(lines)


def _named_paths(entries: Sequence[str], option: str) -> dict[str, list[Path]]:
    named: dict[str, list[Path]] = {}
    for entry in entries:
        name, separator, paths = entry.partition("=")
        if not separator or name not in DIFFICULTIES or not paths:
            raise ValueError(
                f"{option} must be DIFFICULTY=PATH[,PATH…] with DIFFICULTY one of {', '.join(DIFFICULTIES)}, "
                f"got {entry!r}"
            )
        if name in named:
            raise ValueError(
                f"{option} {name} is given twice ({name}={','.join(map(str, named[name]))} and {entry}); give it once"
            )
        named[name] = [Path(path) for path in paths.split(",")]
    return named


def build_parser() -> argparse.ArgumentParser:
    """The script's argument parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stream", action="append", default=[], help="DIFFICULTY=RUN_FOLDER (repeatable)")
    parser.add_argument("--results", action="append", default=[], help="DIFFICULTY=TTA_RUN[,TTA_RUN…] (repeatable)")
    parser.add_argument(
        "--calibration", type=Path, default=None, help="the streams' calibration table (default: the demo table)"
    )
    parser.add_argument("--window", type=int, default=1000, help="samples per window (must equal the runs' --window)")
    parser.add_argument(
        "--difference-window", type=int, default=5000, help="samples per window of the difference-to-BN figure"
    )
    parser.add_argument("--edge", type=int, default=10_000, help="samples of the 'first' and 'last' accuracy columns")
    parser.add_argument("--out", type=Path, default=Path("docs/demo"), help="folder of report.json and the figures")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    arguments = parser.parse_args(argv)
    try:
        streams = {name: paths[0] for name, paths in _named_paths(arguments.stream, "--stream").items()}
        results = _named_paths(arguments.results, "--results")
    except ValueError as error:
        parser.error(str(error))
    if set(streams) != set(results) or not streams:
        parser.error("give --stream and --results for the same difficulties")
    table = CalibrationTable.load(arguments.calibration or demo_calibration_path())
    report: dict[str, dict[str, object]] = {}
    sources: dict[str, tuple[StreamFacts, RecordTable]] = {}
    for difficulty in [name for name in DIFFICULTIES if name in streams]:
        try:
            facts = read_stream_facts(streams[difficulty], table)
            records, verdicts = method_results(results[difficulty])
            if "source" not in records:
                raise ValueError(f"no 'source' records among the {difficulty} results")
            stream_report = realised_versus_calibrated(facts, records["source"], arguments.window)
        except (OSError, ValueError) as error:
            parser.error(str(error))
        sources[difficulty] = (facts, records["source"])
        report[difficulty] = {
            "stream_folder": streams[difficulty].name,
            "corruptions": facts.corruptions,
            "stream": stream_report,
            "methods": method_summary(records, verdicts, arguments.window, arguments.edge),
        }
        curves: dict[str, WindowedAccuracy] = {
            label: windowed_accuracy(table, arguments.window) for label, table in records.items() if label != "source"
        }
        plot_accuracy_curves(
            curves,
            arguments.out / f"tta_{difficulty}",
            references={"source": windowed_accuracy(records["source"], arguments.window)},
            title=f"demo world, {difficulty} (target {facts.target:g} %), speed {facts.speed}",
        )
        if "bn" in records:
            plot_difference_to_bn(
                records,
                arguments.difference_window,
                arguments.out / f"tta_{difficulty}_minus_bn.png",
                f"demo world, {difficulty}: adapting methods against BN adaptation",
            )
    plot_realised(
        sources, arguments.window, arguments.out / "realised_vs_calibrated.png", table.metadata.preprocessing_kind
    )
    (arguments.out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    print(render_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
