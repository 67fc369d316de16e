"""Run summaries (summary.json) and cross-run comparisons (markdown table + overlay plot), from records."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tta_eval.metrics import (
    WindowedAccuracy,
    detect_collapse,
    overall_accuracy,
    per_domain_accuracy,
    windowed_accuracy,
)
from tta_eval.plots import plot_accuracy_curves
from tta_eval.records import RecordTable

SUMMARY_FILE = "summary.json"
CONFIG_FILE = "config.json"
RECORDS_FOLDER = "records"
PLOT_STEM = "accuracy"
SOURCE_METHOD = "source"


def summarise_method(
    table: RecordTable,
    method_name: str,
    window: int,
    reference: WindowedAccuracy | float | None,
    reference_name: str,
    collapse_span: int,
) -> dict[str, Any]:
    """Summary of one method's records: accuracy, windows, domains, collapse, resets, adaptation, time."""
    curve = windowed_accuracy(table, window)
    samples = table.total_samples
    adapted = int(table.column("samples_adapted").sum())
    seconds = table.column("seconds")
    summary: dict[str, Any] = {
        "method": method_name,
        "accuracy": overall_accuracy(table),
        "samples": samples,
        "batches": len(table),
        "resets": int(table.column("reset").sum()),
        "adapted_fraction": adapted / samples if samples else math.nan,
        "nonfinite_losses": int(table.column("nonfinite_loss").sum()),
        "seconds": float(seconds.sum()),
        "seconds_per_batch": float(seconds.mean()) if seconds.size else math.nan,
        "windowed_accuracy": curve.to_json(),
        "per_domain_accuracy": {
            domain: {"accuracy": value.accuracy, "samples": value.samples, "first_sample": value.first_sample}
            for domain, value in per_domain_accuracy(table).items()
        },
    }
    if reference is not None:
        summary["collapse"] = detect_collapse(curve, reference, collapse_span, reference_name).to_json()
    return summary


def summarise_run(
    tables: Mapping[str, RecordTable],
    method_names: Mapping[str, str],
    window: int,
    collapse_reference: str | float | None,
    collapse_span: int,
) -> dict[str, Any]:
    """Summaries of all methods of a run; the collapse reference is the curve of the method labelled
    ``collapse_reference`` (e.g. "source"), a fixed accuracy, or None (no collapse detection)."""
    reference: WindowedAccuracy | float | None
    if isinstance(collapse_reference, str):
        if collapse_reference not in tables:
            raise ValueError(
                f"collapse reference {collapse_reference!r} is not a method of the run; methods: {', '.join(tables)}"
            )
        reference = windowed_accuracy(tables[collapse_reference], window)
        reference_name = collapse_reference
    else:
        reference = collapse_reference
        reference_name = "" if collapse_reference is None else f"{collapse_reference:g}"
    methods = {
        label: summarise_method(
            table,
            method_names[label],
            window,
            None if label == collapse_reference else reference,
            reference_name,
            collapse_span,
        )
        for label, table in tables.items()
    }
    first = next(iter(tables.values()))
    return {
        "samples": first.total_samples,
        "batches": len(first),
        "window": window,
        "collapse_reference": collapse_reference,
        "collapse_span": collapse_span,
        "methods": methods,
    }


def plot_run(summary: Mapping[str, Any], run_dir: Path, title: str = "") -> list[Path]:
    """accuracy.png/.svg of a run: every method's windowed accuracy, the source model dashed."""
    curves = {label: WindowedAccuracy.from_json(method["windowed_accuracy"]) for label, method in summary["methods"].items()}
    references = {SOURCE_METHOD: curves.pop(SOURCE_METHOD)} if SOURCE_METHOD in curves else {}
    return plot_accuracy_curves(curves, run_dir / PLOT_STEM, references, title)


@dataclass(frozen=True)
class RunResult:
    """A finished run folder: its name, resolved config and summary."""

    name: str
    path: Path
    config: dict[str, Any]
    summary: dict[str, Any]


def load_run(run_dir: Path) -> RunResult:
    """Read config.json and summary.json of a run folder; ValueError if it is not one."""
    summary_path = run_dir / SUMMARY_FILE
    if not summary_path.is_file():
        raise ValueError(f"{str(run_dir)!r} is not a tta-eval run folder (no {SUMMARY_FILE})")
    config_path = run_dir / CONFIG_FILE
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    return RunResult(run_dir.name, run_dir, config, json.loads(summary_path.read_text()))


def _percent(value: float | None) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}"


def comparison_table(runs: Sequence[RunResult]) -> str:
    """Markdown tables: top-1 accuracy (%) per method (rows) and run (columns), with the mean over runs
    when there are several (like the CCC paper's Table 2); then where each method collapsed."""
    if not runs:
        raise ValueError("comparison needs at least one run folder, got none")
    labels = list(dict.fromkeys(label for run in runs for label in run.summary["methods"]))
    names = [run.name for run in runs]
    with_mean = len(runs) > 1
    header = ["method", *names, *(["mean"] if with_mean else [])]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for label in labels:
        values = [run.summary["methods"].get(label, {}).get("accuracy") for run in runs]
        cells = [_percent(value) for value in values]
        if with_mean:
            present = [value for value in values if value is not None]
            cells.append(_percent(sum(present) / len(present)) if len(present) == len(values) else "–")
        lines.append("| " + " | ".join([label, *cells]) + " |")
    lines += ["", "Collapse (first sample after which windowed accuracy stayed below the reference):", ""]
    lines += ["| method | " + " | ".join(names) + " |", "|" + "|".join(["---"] * (len(names) + 1)) + "|"]
    for label in labels:
        cells = []
        for run in runs:
            collapse = run.summary["methods"].get(label, {}).get("collapse")
            if collapse is None:
                cells.append("–")
            elif collapse["collapsed"]:
                cells.append(f"{collapse['sample_index']:,}")
            else:
                cells.append("none")
        lines.append("| " + " | ".join([label, *cells]) + " |")
    return "\n".join(lines) + "\n"


def plot_comparison(runs: Sequence[RunResult], output_stem: Path) -> list[Path]:
    """Overlay of every run's method curves ("run/method" labels when several runs), sources dashed."""
    curves: dict[str, WindowedAccuracy] = {}
    references: dict[str, WindowedAccuracy] = {}
    for run in runs:
        for label, method in run.summary["methods"].items():
            name = f"{run.name}/{label}" if len(runs) > 1 else label
            target = references if label == SOURCE_METHOD else curves
            target[name] = WindowedAccuracy.from_json(method["windowed_accuracy"])
    return plot_accuracy_curves(curves, output_stem, references)


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON (NaN written as null)."""
    path.write_text(json.dumps(_replace_nan(data), indent=2) + "\n")


def _replace_nan(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _replace_nan(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_replace_nan(item) for item in value]
    return value
