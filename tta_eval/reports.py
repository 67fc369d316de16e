"""Run summaries (summary.json), cross-run comparisons (markdown table + overlay plot), protocol score
tables, rescoring of saved traces, and sweep result tables; all from records and summaries. Files
are read and written through ``tta_eval.run_folder``; protocol specifics come from the protocol
registry (``tta_eval.protocols``)."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tta_eval.metrics import (
    DomainSegment,
    WindowedAccuracy,
    detect_collapse,
    domain_segments,
    overall_accuracy,
    per_domain_accuracy,
    windowed_accuracy,
)
from tta_eval.plots import LINE_STYLES, plot_accuracy_curves
from tta_eval.protocols import (
    EpisodeSettings,
    OfflineProtocol,
    ScoreColumn,
    continuous_scores,
    get_protocol,
    protocol_entries,
    protocol_scores,
)
from tta_eval.records import RecordTable
from tta_eval.run_folder import PLOT_STEM, RunResult, load_run, records_path

SOURCE_METHOD = "source"
BN_METHOD = "bn"
"""The label whose curve the run plot's lower panel subtracts (adapting normalisation statistics only)."""


def _adapts_every_batch(summary: Mapping[str, Any]) -> bool:
    """Whether the run of ``summary`` used a protocol under which every batch is predicted and adapted on."""
    return get_protocol(summary.get("protocol", {}).get("name", OfflineProtocol.name)).adapts_every_batch


def _every_batch_protocols() -> str:
    return " or ".join(entry.name for entry in protocol_entries() if entry.adapts_every_batch)


def summarise_method(
    table: RecordTable,
    method_name: str,
    window: int,
    reference: WindowedAccuracy | float | None,
    reference_name: str,
    collapse_span: int,
    protocol: EpisodeSettings = OfflineProtocol(),
    baseline_latency: float | None = None,
) -> dict[str, Any]:
    """Summary of one method's records: accuracy, windows, domains, collapse, resets, adaptation, time,
    and the protocol's scores (``protocol_scores``; baseline_latency λ in seconds where needed)."""
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
        "protocol_scores": protocol_scores(table, protocol, baseline_latency),
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
    protocol: EpisodeSettings = OfflineProtocol(),
    baseline_latency: float | None = None,
) -> dict[str, Any]:
    """Summaries of all methods of a run; the collapse reference is the curve of the method labelled
    ``collapse_reference`` (e.g. "source"), a fixed accuracy, or None (no collapse detection);
    protocol and baseline_latency (λ, seconds) determine the protocol scores."""
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
            protocol,
            baseline_latency,
        )
        for label, table in tables.items()
    }
    first = next(iter(tables.values()))
    return {
        "protocol": protocol.to_json(),
        "samples": first.total_samples,
        "batches": len(first),
        "domain_segments": [segment.to_json() for segment in domain_segments(first)],
        "window": window,
        "collapse_reference": collapse_reference,
        "collapse_span": collapse_span,
        "methods": methods,
    }


def plot_run(summary: Mapping[str, Any], run_dir: Path, title: str = "") -> list[Path]:
    """accuracy.png/.svg of a run: every method's windowed accuracy, the source model dashed, the
    stream's domain segments (corruption pairs) shaded and named; when BN adaptation is one of the
    methods, a second panel shows every other method's difference to it."""
    curves = {
        label: WindowedAccuracy.from_json(method["windowed_accuracy"]) for label, method in summary["methods"].items()
    }
    references = {SOURCE_METHOD: curves.pop(SOURCE_METHOD)} if SOURCE_METHOD in curves else {}
    methods = {label: method["method"] for label, method in summary["methods"].items()}
    segments = [DomainSegment.from_json(segment) for segment in summary.get("domain_segments", [])]
    return plot_accuracy_curves(curves, run_dir / PLOT_STEM, references, title, methods, segments, baseline=BN_METHOD)


RARE_ADAPTATION_FRACTION = 0.01
"""A learning method that adapted on fewer than this fraction of the samples gets a note after a run."""

FEW_CLASS_REDUNDANCY_MARGIN = 0.4
"""The redundancy margin the note suggests for models with 10–16 classes (public CIFAR-10 configurations;
about the ImageNet ratio 1.58/√C, docs/methods.md)."""


def adaptation_notes(run: RunResult) -> list[str]:
    """One line per learning method (its config has a ``learning_rate``) of ``run`` that adapted on
    fewer than 1 % of the samples: its sample filters kept (almost) nothing, so it behaved like BN
    adaptation. Thresholds tuned for ImageNet's 1,000 classes are the usual cause on models with
    few classes (see docs/methods.md, "Filters on models with few classes"). Only under the
    protocols that adapt on every batch (offline, continuous): elsewhere the protocol skips batches."""
    if not _adapts_every_batch(run.summary):
        return []
    notes = []
    configs = run.config.get("methods", {})
    for label, entry in run.summary.get("methods", {}).items():
        fraction = entry.get("adapted_fraction")
        config = configs.get(label, {}).get("config", {})
        if (
            "learning_rate" in config
            and fraction is not None
            and not math.isnan(fraction)
            and fraction < RARE_ADAPTATION_FRACTION
        ):
            fix = ""
            if "redundancy_margin" in config:
                separator = "," if ":" in label else ":"
                fix = (
                    f"; with few classes try --method {label}{separator}redundancy_margin={FEW_CLASS_REDUNDANCY_MARGIN}"
                )
            notes.append(
                f"note: {label} adapted on {100 * fraction:.2g} % of the samples: its filters kept almost none{fix} "
                "(thresholds tuned for 1,000 classes? see docs/methods.md, 'Filters on models with few classes')"
            )
    return notes


def _percent(value: float | None) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}"


def run_stream_name(run: RunResult) -> str:
    """The name of the stream a run evaluated: the one recorded in its config (the run folder of CCC
    shards), else the last component of its stream text, else the run folder's name."""
    recorded = run.config.get("stream_name")
    if recorded:
        return str(recorded)
    return stream_name(str(run.config.get("stream", ""))) or run.name


@dataclass(frozen=True)
class ComparisonCell:
    """One method's result on one stream: the row (method label, with the model when runs differ in it),
    the column (stream name), and the run it comes from."""

    row: str
    stream: str
    run: RunResult
    label: str


def comparison_columns(runs: Sequence[RunResult]) -> list[str]:
    """The column of each run of ``runs`` (in order): its stream's name (``run_stream_name``), so that runs
    of one stream share a column (a stored and a rendered run of it, say); where runs of one method on
    streams at several locations share that name (a CPU- and a torch-rendered copy of one run folder),
    their stream's location as each run recorded it (``ccc:shards_torch/RUN``) instead, so that they stand
    side by side rather than in one cell."""
    names = [run_stream_name(run) for run in runs]
    locations = [str(run.config.get("stream") or name) for run, name in zip(runs, names)]
    held: dict[tuple[str, str], set[str]] = {}
    for run, name, location in zip(runs, names, locations):
        for label in run.summary["methods"]:
            held.setdefault((name, label), set()).add(location)
    split = {name for (name, _), places in held.items() if len(places) > 1}
    return [location if name in split else name for name, location in zip(names, locations)]


def comparison_cells(runs: Sequence[RunResult]) -> list[ComparisonCell]:
    """Every (method, stream) result of ``runs``, keyed by method label and stream column
    (``comparison_columns``), so that different streams never share a column; rows carry the model's
    name when the runs evaluated several models. Raises ValueError when two runs hold the same method
    on the same stream (their results would be mixed), naming both run folders."""
    if not runs:
        raise ValueError("comparison needs at least one run folder, got none")
    models = {json.dumps(run.config.get("model"), sort_keys=True) for run in runs}
    cells: dict[tuple[str, str], ComparisonCell] = {}
    for run, stream in zip(runs, comparison_columns(runs)):
        model = (run.config.get("model") or {}).get("name", "?")
        for label in run.summary["methods"]:
            row = f"{label} ({model})" if len(models) > 1 else label
            if (row, stream) in cells:
                other = cells[(row, stream)].run.path
                raise ValueError(
                    f"runs {str(other)!r} and {str(run.path)!r} both hold method {row!r} on stream {stream!r}; "
                    "name the run folders to compare, one run per method and stream "
                    "(their results would be mixed in one cell)"
                )
            cells[(row, stream)] = ComparisonCell(row, stream, run, label)
    return list(cells.values())


def comparison_table(runs: Sequence[RunResult]) -> str:
    """Markdown tables: top-1 accuracy (%) per method (rows) and stream (columns), with the mean over
    streams when there are several (like the CCC paper's Table 2); then where each method collapsed.
    Runs of the same stream with different methods share its column; see ``comparison_cells``."""
    cells = {(cell.row, cell.stream): cell for cell in comparison_cells(runs)}
    rows = list(dict.fromkeys(row for row, _ in cells))
    streams = list(dict.fromkeys(stream for _, stream in cells))
    with_mean = len(streams) > 1

    def method_summary(row: str, stream: str) -> dict[str, Any] | None:
        cell = cells.get((row, stream))
        return None if cell is None else cell.run.summary["methods"][cell.label]

    header = ["method", *streams, *(["mean"] if with_mean else [])]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for row in rows:
        values = [(method_summary(row, stream) or {}).get("accuracy") for stream in streams]
        texts = [_percent(value) for value in values]
        if with_mean:
            present = [value for value in values if value is not None]
            texts.append(_percent(sum(present) / len(present)) if len(present) == len(values) else "–")
        lines.append("| " + " | ".join([row, *texts]) + " |")
    lines += ["", "Collapse (first sample after which windowed accuracy stayed below the reference):", ""]
    lines += ["| method | " + " | ".join(streams) + " |", "|" + "|".join(["---"] * (len(streams) + 1)) + "|"]
    for row in rows:
        texts = []
        for stream in streams:
            summary = method_summary(row, stream)
            collapse = None if summary is None else summary.get("collapse")
            if collapse is None:
                texts.append("–")
            elif collapse["collapsed"]:
                texts.append(f"{collapse['sample_index']:,}")
            else:
                texts.append("none")
        lines.append("| " + " | ".join([row, *texts]) + " |")
    return "\n".join(lines) + "\n"


def stream_name(stream: str) -> str:
    """A stream's short name: the last part of its location ("ccc:shards/RUN" → "RUN"); "" if none."""
    location = stream.partition(":")[2] if ":" in stream else stream
    return Path(location.rstrip("/")).name


def run_title(stream: str, protocol: str = OfflineProtocol.name) -> str:
    """The accuracy plot's title of a run on ``stream`` (its recorded name, or its location) under ``protocol``."""
    name = stream_name(stream) or stream
    return f"top-1 accuracy on {name}" + ("" if protocol == OfflineProtocol.name else f" ({protocol} protocol)")


def _name_fields(name: str) -> list[str]:
    """The fields of a run name, from its '_'-separated parts: a number with the word before it (the last
    '+'-separated one: ``transition+speed_100`` → "speed 100", ``images_10000`` → "images 10000"), any
    other part alone ("demo", "torch")."""
    fields: list[str] = []
    previous = ""
    for part in name.split("_"):
        if part.replace(".", "").isdigit() and previous and not previous.replace(".", "").isdigit():
            fields[-1] = f"{previous.split('+')[-1]} {part}"
        else:
            fields.append(part)
        previous = part
    return fields


def short_stream_tags(names: Sequence[str]) -> list[str]:
    """Short tags telling the streams apart: the fields of each name (``_name_fields``) that not all names
    share, e.g. "seed 43" and "seed 44" of two otherwise equal CCC run names, "speed 200, images 10000"
    beside "speed 100"; "default" for a name holding only shared fields (beside "torch", say); the names
    themselves for fewer than two distinct names."""
    if len(set(names)) < 2:
        return list(names)
    fields = [_name_fields(name) for name in names]
    shared = set(fields[0]).intersection(*fields[1:])
    return [", ".join(field for field in each if field not in shared) or "default" for each in fields]


def plot_comparison(runs: Sequence[RunResult], output_stem: Path, title: str = "") -> list[Path]:
    """Overlay of every (method, stream) curve of ``runs`` (``comparison_cells``), sources dashed:
    labelled by method, with a short stream tag when the runs cover several streams (one colour per
    method, one line style per stream); the corruption pairs are shaded, and every method's difference
    to BN is shown in a second panel, when all runs share one stream."""
    cells = comparison_cells(runs)
    rows = list(dict.fromkeys(cell.row for cell in cells))
    distinct = list(dict.fromkeys(cell.stream for cell in cells))
    tags = dict(zip(distinct, short_stream_tags(distinct)))
    curves: dict[str, WindowedAccuracy] = {}
    references: dict[str, WindowedAccuracy] = {}
    methods: dict[str, str] = {}
    styles: dict[str, str] = {}
    for cell in sorted(cells, key=lambda cell: (rows.index(cell.row), distinct.index(cell.stream))):
        method = cell.run.summary["methods"][cell.label]
        name = f"{cell.row} ({tags[cell.stream]})" if len(distinct) > 1 else cell.row
        target = references if cell.label == SOURCE_METHOD else curves
        target[name] = WindowedAccuracy.from_json(method["windowed_accuracy"])
        methods[name] = method.get("method", cell.label)
        if len(distinct) > 1:
            styles[name] = LINE_STYLES[distinct.index(cell.stream) % len(LINE_STYLES)]
    segments = (
        [DomainSegment.from_json(segment) for segment in cells[0].run.summary.get("domain_segments", [])]
        if len(distinct) == 1
        else []
    )
    default_title = (
        f"top-1 accuracy on {distinct[0]}" if len(distinct) == 1 else f"top-1 accuracy on {len(distinct)} streams"
    )
    baseline = BN_METHOD if len(distinct) == 1 else None
    return plot_accuracy_curves(
        curves, output_stem, references, title or default_title, methods, segments, styles, baseline
    )


# --- protocol scores ----------------------------------------------------------------------------------


def _render(column: ScoreColumn, value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return _percent(float(value)) if column.percent else f"{float(value):.{column.digits}f}"


def scores_table(method_scores: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """Markdown tables of protocol scores, one per scenario: a row per method with the utility and its
    decomposition. method_scores: label → list of score dicts (``protocol_scores``); "" if none."""
    scenarios: dict[str, dict[str, Mapping[str, Any]]] = {}
    for label, scores in method_scores.items():
        for score in scores:
            scenarios.setdefault(score["scenario"], {})[label] = score
    sections = []
    for scenario, rows in scenarios.items():
        columns = get_protocol(next(iter(rows.values()))["protocol"]).score_columns
        lines = [
            f"{scenario}:",
            "",
            "| method | " + " | ".join(column.header for column in columns) + " |",
            "|---|" + "|".join("---:" for _ in columns) + "|",
        ]
        for label, score in rows.items():
            lines.append(
                "| " + " | ".join([label, *(_render(column, score.get(column.key)) for column in columns)]) + " |"
            )
        sections.append("\n".join(lines) + "\n")
    return "\n".join(sections)


def run_scores(run: RunResult) -> dict[str, list[dict[str, Any]]]:
    """label → protocol scores of a run folder's summary."""
    return {label: method.get("protocol_scores", []) for label, method in run.summary["methods"].items()}


def run_baseline_latency(run: RunResult) -> float | None:
    """λ (seconds) a run used, or None if it did not need one."""
    return run.summary.get("timing", {}).get("baseline_latency_seconds")


def rescore_run(run_dir: Path, thresholds: Sequence[float], baseline_latency: float | None = None) -> dict[str, Any]:
    """Tempora's continuous utility of a saved run for each threshold T (seconds), from its traces.

    baseline_latency: λ in seconds; None uses the λ stored with the run. Returns {"run",
    "baseline_latency_seconds", "thresholds_seconds", "methods": label → list of scores}. ValueError
    for a folder that is not a run, a run in which not every batch was predicted and adapted on
    (protocols other than offline and continuous), a missing λ, or a threshold not above λ.
    """
    run = load_run(Path(run_dir))
    protocol = run.summary.get("protocol", {}).get("name", OfflineProtocol.name)
    if not _adapts_every_batch(run.summary):
        raise ValueError(
            "continuous utility can only be recomputed for a run in which every batch was predicted and "
            f"adapted on (protocol {_every_batch_protocols()}); run {run.name!r} used protocol {protocol!r}"
        )
    latency = baseline_latency if baseline_latency is not None else run_baseline_latency(run)
    if latency is None:
        raise ValueError(
            f"run {run.name!r} has no stored baseline latency λ (protocol {protocol!r}); "
            "give one with --baseline-latency-ms"
        )
    if not thresholds:
        raise ValueError("rescoring needs at least one threshold, got none")
    methods = {}
    for label in run.summary["methods"]:
        path = records_path(run.path, label)
        if not path.is_file():
            raise ValueError(f"run {run.name!r} has no records for method {label!r} (expected {str(path)!r})")
        methods[label] = continuous_scores(RecordTable.read_csv(path), latency, tuple(thresholds), label)
    return {
        "run": run.name,
        "baseline_latency_seconds": latency,
        "thresholds_seconds": list(thresholds),
        "methods": methods,
    }


# --- sweeps -------------------------------------------------------------------------------------------

ALL_DOMAINS = "all"
OFFLINE_SCENARIO = "offline"
SWEEP_COLUMNS = ("scenario", "protocol", "parameter", "domain", "method", "utility")


def sweep_rows(runs: Sequence[RunResult]) -> list[dict[str, Any]]:
    """One row per scenario, domain ("all" and each domain) and method, from scenario runs' summaries.

    Row keys: scenario, protocol, parameter (the pressure parameter's value), domain, method,
    utility, and the decomposition of that protocol's utility. A run in which every batch was
    predicted and adapted on (offline, continuous) also gives the "offline" scenario, whose
    utility is the accuracy over all samples.
    """
    rows = []
    for run in runs:
        if _adapts_every_batch(run.summary):
            for label, method in run.summary["methods"].items():
                common = {"scenario": OFFLINE_SCENARIO, "protocol": "offline", "parameter": None}
                rows.append({**common, "domain": ALL_DOMAINS, "method": label, "utility": method["accuracy"]})
                for domain, values in method.get("per_domain_accuracy", {}).items():
                    rows.append({**common, "domain": domain, "method": label, "utility": values["accuracy"]})
        for label, scores in run_scores(run).items():
            for score in scores:
                axis = get_protocol(score["protocol"]).sweep
                key = axis.score_key if axis is not None else None
                details = {
                    name: value for name, value in score.items() if name not in ("scenario", "protocol", "per_domain")
                }
                common = {
                    "scenario": score["scenario"],
                    "protocol": score["protocol"],
                    "parameter": score.get(key) if key else None,
                }
                rows.append({**common, "domain": ALL_DOMAINS, "method": label, **details})
                for domain, values in score.get("per_domain", {}).items():
                    rows.append({**common, "domain": domain, "method": label, **values})
    return rows


def best_methods(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], tuple[str, float]]:
    """(scenario, domain) → (method with the highest utility, its utility); ties go to the first listed."""
    best: dict[tuple[str, str], tuple[str, float]] = {}
    for row in rows:
        utility = row.get("utility")
        if utility is None or (isinstance(utility, float) and math.isnan(utility)):
            continue
        key = (row["scenario"], row["domain"])
        if key not in best or utility > best[key][1]:
            best[key] = (row["method"], float(utility))
    return best


def sweep_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown table of the utility (%) per method (rows) and scenario (columns), over all domains,
    the best method of each scenario in bold."""
    overall = [row for row in rows if row["domain"] == ALL_DOMAINS]
    scenarios = list(dict.fromkeys(row["scenario"] for row in overall))
    methods = list(dict.fromkeys(row["method"] for row in overall))
    values = {(row["scenario"], row["method"]): row["utility"] for row in overall}
    best = best_methods(overall)
    lines = ["| method | " + " | ".join(scenarios) + " |", "|---|" + "|".join("---:" for _ in scenarios) + "|"]
    for method in methods:
        cells = []
        for scenario in scenarios:
            cell = _percent(values.get((scenario, method)))
            cells.append(f"**{cell}**" if best.get((scenario, ALL_DOMAINS), ("",))[0] == method else cell)
        lines.append("| " + " | ".join([method, *cells]) + " |")
    return "\n".join(lines) + "\n"


def write_rows_csv(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Write sweep rows as CSV: the SWEEP_COLUMNS first, then every other key in order of appearance."""
    extra = list(dict.fromkeys(key for row in rows for key in row if key not in SWEEP_COLUMNS))
    columns = [*SWEEP_COLUMNS, *extra]
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for row in rows:
            writer.writerow(["" if row.get(column) is None else row.get(column) for column in columns])
