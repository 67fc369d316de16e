"""Figures a paper can use (checked on the matplotlib objects, not pixels): one colour per method in every
plot, titles, legends outside the axes, the window stated, corruption pairs shaded and named, short
compare labels; domain segments; the stream length that gives progress bars their total."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.colors import to_rgba

from tests.tta_eval.tta_helpers import SMALL_STREAM, TINY_FACTORY
from tta_eval.cli import main
from tta_eval.methods import get_method, list_methods
from tta_eval.metrics import DomainSegment, WindowedAccuracy, domain_segments
from tta_eval.plots import accuracy_figure, best_method_figure, method_colour, utility_figure
from tta_eval.protocols import _execution as execution
from tta_eval.records import BatchRecord, RecordTable
from tta_eval.reports import plot_comparison, short_stream_tags
from tta_eval.run_folder import RunResult
from tta_eval.streams import SizedStream, default_domain_key, limit_samples, stream_length


def curve(level: float, count: int = 30, window: int = 300) -> WindowedAccuracy:
    values = np.full(count, level)
    return WindowedAccuracy(window, np.arange(1, count + 1) * window, np.full(count, window), values)


def line_colours(figure) -> dict[str, tuple[float, ...]]:  # type: ignore[no-untyped-def]
    return {line.get_label(): to_rgba(line.get_color()) for axes in figure.axes for line in axes.get_lines()}


def test_every_registered_method_has_its_own_colour() -> None:
    names = list_methods()
    colours = {name: to_rgba(method_colour(name)) for name in names}
    shared = sorted(name for name in names if list(colours.values()).count(colours[name]) > 1)
    assert not shared, f"methods sharing a colour: {shared}; give each a colour= in its MethodEntry"
    assert method_colour("tent") == get_method("tent").colour
    assert method_colour("tent:learning_rate=0.01") == method_colour("tent")
    assert method_colour("my_method") == method_colour("my_method") == method_colour("my_method:x=1")


def test_a_method_has_the_same_colour_in_every_plot() -> None:
    accuracy = accuracy_figure({"tent": curve(0.6), "eta": curve(0.7)}, {"source": curve(0.3)})
    utility = utility_figure({"eta": ([1, 0.5], [0.7, 0.6]), "tent": ([1, 0.5], [0.6, 0.5])}, "stream speed η")
    best = best_method_figure(
        {("s1", "all"): ("tent", 0.6), ("s2", "all"): ("eta", 0.7)}, ["s1", "s2"], ["all"], ["eta", "tent"]
    )
    first, second = line_colours(accuracy), line_colours(utility)
    for method in ("tent", "eta"):
        assert first[method] == second[method] == to_rgba(method_colour(method))
    patches = {
        handle.get_label(): handle.get_facecolor() for legend in best.legends for handle in legend.legend_handles
    }
    assert patches["tent"] == to_rgba(method_colour("tent")) and patches["eta"] == to_rgba(method_colour("eta"))
    assert first["source"] == to_rgba("black")
    variants = accuracy_figure({"tent:learning_rate=0.01": curve(0.6), "tent:learning_rate=0.001": curve(0.7)})
    lines = variants.axes[0].get_lines()
    assert lines[0].get_color() == lines[1].get_color() == method_colour("tent")
    assert lines[0].get_linestyle() != lines[1].get_linestyle(), "options of one method differ in line style"


def test_accuracy_figure_has_title_window_outside_legend_and_named_pairs() -> None:
    segments = [DomainSegment("gaussian_noise→frost", 0, 4000), DomainSegment("frost→contrast", 4000, 9000)]
    figure = accuracy_figure(
        {"bn": curve(0.7)}, {"source": curve(0.3)}, "top-1 accuracy on RUN", {"bn": "bn"}, segments
    )
    axes = figure.axes[0]
    assert figure.get_suptitle() == "top-1 accuracy on RUN"
    assert "300 samples" in axes.get_ylabel() and axes.get_xlabel() == "samples seen"
    assert axes.get_legend() is None and [text.get_text() for text in figure.legends[0].get_texts()] == ["source", "bn"]
    assert len(axes.child_axes) == 1
    assert [label.get_text() for label in axes.child_axes[0].get_xticklabels()] == [
        "gaussian_noise\n→ frost",
        "frost\n→ contrast",
    ]


def pair_names(figure) -> list[list[str]]:  # type: ignore[no-untyped-def]
    return [[label.get_text() for label in top.get_xticklabels()] for top in figure.axes[0].child_axes]


def test_a_second_panel_shows_every_method_minus_the_baseline() -> None:
    figure = accuracy_figure(
        {"bn": curve(0.7), "tent": curve(0.6), "rdumb": curve(0.75)}, {"source": curve(0.3)}, baseline="bn"
    )
    accuracy_axes, difference_axes = figure.axes[:2]
    assert difference_axes.get_ylabel() == "minus bn (points)" and difference_axes.get_xlabel() == "samples seen"
    by_colour = {
        line.get_color(): np.asarray(line.get_ydata()) for line in difference_axes.lines if len(line.get_ydata()) > 2
    }
    assert set(by_colour) == {method_colour("tent"), method_colour("rdumb")}
    assert by_colour[method_colour("tent")] == pytest.approx(
        np.asarray(100 * (curve(0.6).accuracy - curve(0.7).accuracy))
    )
    assert len(accuracy_figure({"tent": curve(0.6)}, baseline="bn").axes) == 1, (
        "no baseline among the curves: one panel"
    )


def test_names_of_narrow_pairs_alternate_between_two_rows_or_turn() -> None:
    widths = [4000, 4000, 500, 4000]
    starts = np.cumsum([0, *widths])
    segments = [
        DomainSegment(f"c{index}→c{index + 1}", int(start), int(start + width))
        for index, (start, width) in enumerate(zip(starts, widths))
    ]
    assert pair_names(accuracy_figure({"bn": curve(0.7)}, segments=segments)) == [
        ["c0\n→ c1", "c2\n→ c3"],
        ["c1\n→ c2", "c3\n→ c4"],
    ]
    many = [DomainSegment(f"c{index}→c{index + 1}", 1000 * index, 1000 * (index + 1)) for index in range(12)]
    names = pair_names(accuracy_figure({"bn": curve(0.7)}, segments=many))
    assert names == [[f"c{index} → c{index + 1}" for index in range(12)]]
    hundreds = [DomainSegment(f"c{index}→c{index + 1}", 100 * index, 100 * (index + 1)) for index in range(90)]
    figure = accuracy_figure({"bn": curve(0.7)}, segments=hundreds)
    assert pair_names(figure) == [], "too many to name: only shaded"
    assert len(figure.axes[0].patches) == 90
    long_horizon = [DomainSegment(f"c{index}→c{index + 1}", 10 * index, 10 * (index + 1)) for index in range(300)]
    figure = accuracy_figure({"bn": curve(0.7)}, segments=long_horizon)
    assert not figure.axes[0].patches and len(figure.axes[0].get_lines()) == 1, "stripes thinner than a pixel"


def test_compare_labels_runs_by_method_and_a_short_stream_tag(tmp_path: Path) -> None:
    runs = []
    for seed in (43, 44):
        name = f"demo_baseline_30_transition+speed_200_seed_{seed}"
        summary = {
            "methods": {
                "source": {"method": "source", "windowed_accuracy": curve(0.3).to_json()},
                "bn": {"method": "bn", "windowed_accuracy": curve(0.7).to_json()},
            }
        }
        runs.append(RunResult(f"ccc__shards_{name}", tmp_path, {"stream": f"ccc:shards/{name}"}, summary))
    paths = plot_comparison(runs, tmp_path / "cmp")
    assert [path.name for path in paths] == ["cmp.png", "cmp.svg"]
    assert "bn (seed 44)" in (tmp_path / "cmp.svg").read_text()
    mixed = accuracy_figure({"bn": curve(0.7, window=250)}, {"source": curve(0.3, window=300)})
    assert mixed.axes[0].get_ylabel() == "accuracy (%) per window of 250–300 samples"
    assert short_stream_tags(["a_b_seed_43", "a_b_seed_44"]) == ["seed 43", "seed 44"]
    assert short_stream_tags(["baseline_20_transition+speed_2000", "baseline_20_transition+speed_1000"]) == [
        "speed 2000",
        "speed 1000",
    ]
    assert short_stream_tags(["only"]) == ["only"]


def table_of(domains: list[str], size: int = 10) -> RecordTable:
    table = RecordTable()
    for index, domain in enumerate(domains):
        table.append(BatchRecord("m", index, index * size, size, 5, 0, math.nan, False, False, 0.01, domain))
    return table


def test_domain_segments_follow_the_stream_and_split_a_domain_that_returns() -> None:
    segments = domain_segments(table_of(["a→b", "a→b", "b→c", "a→b"]))
    assert segments == [DomainSegment("a→b", 0, 20), DomainSegment("b→c", 20, 30), DomainSegment("a→b", 30, 40)]
    assert DomainSegment.from_json(segments[1].to_json()) == segments[1]
    assert domain_segments(table_of(["", ""])) == []


def test_a_run_records_its_domain_segments_for_the_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arguments = ["run", "--stream", SMALL_STREAM, "--model", TINY_FACTORY, "--method", "bn", "--domain-key", "domain"]
    assert main([*arguments, "--window", "16", "--out", str(tmp_path), "--name", "r", "--no-progress"]) == 0, (
        capsys.readouterr().err
    )
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert [segment["first_sample"] for segment in summary["domain_segments"]] == [0, 32, 64]
    assert (tmp_path / "r" / "accuracy.png").stat().st_size > 1000


def test_ccc_streams_record_their_corruption_pair_as_the_domain() -> None:
    assert default_domain_key("ccc:shards/RUN") == "pair"
    assert default_domain_key("synthetic:num_batches=2") is None and default_domain_key("some/folder") is None


def batches(count: int, size: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.rand(size, 3, 8, 8), torch.zeros(size, dtype=torch.int64)) for _ in range(count)]


def test_stream_length_is_known_from_a_sized_stream_or_max_samples() -> None:
    assert stream_length(batches(2)) is None
    assert stream_length(limit_samples(batches(4), 20)) == 20
    assert stream_length(limit_samples(SizedStream(batches(2), 16), 20)) == 16
    assert sum(len(item[1]) for item in limit_samples(batches(4), 20)) == 20


def test_the_progress_bar_gets_the_stream_length_as_its_total(monkeypatch: pytest.MonkeyPatch) -> None:
    totals = []
    real_tqdm = execution.tqdm

    def recording_tqdm(*args, **kwargs):  # type: ignore[no-untyped-def]
        totals.append(kwargs.get("total"))
        return real_tqdm(*args, **{**kwargs, "disable": True})

    monkeypatch.setattr(execution, "tqdm", recording_tqdm)
    for stream in (SizedStream(batches(3), 24), batches(3)):
        list(execution.stream_batches({}, stream, torch.device("cpu"), None, progress=True))
    assert totals == [24, None]


def test_the_last_pair_name_stays_above_the_axes() -> None:
    """Ten pairs, as the README's 224×224 demo stream, the last one cut by the stream's end: every name ends within
    the axes' width (none runs into the figure's right edge)."""
    names = ["gaussian_noise", "frost", "impulse_noise", "contrast", "pixelate", "glass_blur", "snow", "fog"]
    names += ["motion_blur", "elastic_transform", "jpeg_compression"]
    starts = np.cumsum([0, 3100, 2400, 4100, 2000, 3300, 2600, 3900, 2200, 3000, 3400])
    segments = [
        DomainSegment(f"{names[index]}→{names[index + 1]}", int(start), int(min(starts[index + 1], 30_000)))
        for index, start in enumerate(starts[:-1])
    ]
    figure = accuracy_figure({"bn": curve(0.7, 30, 1000)}, {"source": curve(0.3, 30, 1000)}, segments=segments)
    renderer = figure.canvas.get_renderer()
    figure.draw(renderer)
    right = figure.axes[0].get_window_extent(renderer).x1
    labels = [label for top in figure.axes[0].child_axes for label in top.get_xticklabels() if label.get_text()]
    assert len(labels) == 10
    assert max(label.get_window_extent(renderer).x1 for label in labels) <= right + 2
    two_rows = [*segments[:4], DomainSegment("pixelate→elastic_transform", 12_000, 29_000)]
    two_rows.append(DomainSegment("elastic_transform→jpeg_compression", 29_000, 30_000))
    figure = accuracy_figure({"bn": curve(0.7, 30, 1000)}, segments=two_rows)
    figure.draw(renderer := figure.canvas.get_renderer())
    right = figure.axes[0].get_window_extent(renderer).x1
    labels = [label for top in figure.axes[0].child_axes for label in top.get_xticklabels() if label.get_text()]
    assert len(labels) == 6 and max(label.get_window_extent(renderer).x1 for label in labels) <= right + 2


def test_a_comparison_of_two_streams_keeps_its_legend_narrow() -> None:
    default = "demo_baseline_30_transition+speed_100_seed_43"
    shorter = "demo_baseline_30_transition+speed_200_seed_43_images_10000"
    assert short_stream_tags([default, shorter]) == ["speed 100", "speed 200, images 10000"]
    assert short_stream_tags([default, f"{default}_torch"]) == ["default", "torch"]
    assert short_stream_tags([f"ccc:shards/{default}", f"ccc:torch/{default}"]) == [
        "ccc:shards/demo",
        "ccc:torch/demo",
    ]
    long_labels = {f"{method} ({shorter})": curve(0.6) for method in ("bn", "tent", "eta", "rdumb")}
    figure = accuracy_figure(long_labels)
    renderer = figure.canvas.get_renderer()
    figure.draw(renderer)
    assert figure.legends[0].get_window_extent(renderer).width <= 0.3 * figure.bbox.width
