"""Tests of the pure stream plan (ccc.stream.schedule, ccc.stream.plan): schedule against the reference
order and paths, random access and purity, crop parameters against torchvision's semantics, seeds,
image draws, the plan hash and input validation."""

from __future__ import annotations

import json
import math
import pickle
from collections import Counter

import numpy as np
import pytest
import torch
from scipy import stats
from torchvision.transforms import RandomResizedCrop

from ccc.calibration import RESNET50_DIFFICULTY_PRESETS
from ccc.stream.order import reference_corruption_order
from ccc.stream.paths import find_path
from ccc.stream.plan import build_stream_plan, plan_hash, plan_sample, sample_resized_crop
from ccc.stream.schedule import ScheduleError, build_schedule
from ccc.stream.sources import SourceImages
from ccc.stream.spec import PlanError, StreamSpec, run_name
from tests.builders import GOLDEN, make_calibration_table

GOLDEN_ORDER = json.loads((GOLDEN / "ccc_corruption_order.json").read_text())
ALL_CORRUPTIONS = (
    "gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur", "motion_blur",
    "zoom_blur", "snow", "frost", "fog", "brightness", "contrast", "elastic", "pixelate", "jpeg",
)  # fmt: skip
FAKE_CHECKSUM = "ab" * 32


@pytest.fixture(scope="module")
def table():
    return make_calibration_table()


def make_sources(count: int = 30, sizes: list[tuple[int, int]] | None = None) -> SourceImages:
    sizes = sizes or [(500, 375), (375, 500), (640, 480), (300, 300), (800, 200)]
    return SourceImages(
        root="/nonexistent",
        relative_paths=tuple(f"n{k % 3:08d}/image_{k:04d}.JPEG" for k in range(count)),
        class_indices=tuple(k % 3 for k in range(count)),
        sizes=tuple(sizes[k % len(sizes)] for k in range(count)),
        index_checksum=FAKE_CHECKSUM,
    )


def make_plan(table, sources=None, **overrides):
    sources = sources or make_sources()
    fields = dict(
        target_accuracy=30.0,
        corruptions=table.corruptions,
        speed=5,
        seed=43,
        num_images=400,
        calibration_checksum=table.checksum(),
        source_index_checksum=sources.index_checksum,
        shard_size=64,
    )
    fields.update(overrides)
    return build_stream_plan(StreamSpec(**fields), table, sources)


# ----------------------------------------------------------------------------- schedule


@pytest.fixture(scope="module")
def full_table():
    """A synthetic table over all 15 CCC corruptions with the ResNet-50 presets."""
    return make_calibration_table(ALL_CORRUPTIONS, presets=dict(RESNET50_DIFFICULTY_PRESETS))


@pytest.mark.parametrize("key", sorted(GOLDEN_ORDER))
def test_schedule_visits_the_public_generators_corruption_order(full_table, key: str) -> None:
    _, baseline, _, seed = key.split("_")
    preset = {40: "easy", 20: "medium", 0: "hard"}[int(baseline)]
    target, corruptions = full_table.difficulty_presets[preset]
    schedule = build_schedule(full_table, target, corruptions, int(seed))
    expected = GOLDEN_ORDER[key]
    visited = [schedule.pair_path(p) for p in range(len(expected) - 1)]
    assert [(path.n1, path.n2) for path in visited] == list(zip(expected, expected[1:]))


def test_schedule_walks_each_pairs_path_in_order(table) -> None:
    schedule = build_schedule(table, 30.0, table.corruptions, 7, path_objective="minimax")
    order = reference_corruption_order(table.corruptions, 7, 12)
    step = 0
    for pair_index in range(10):
        n1, n2 = order[pair_index], order[pair_index + 1]
        grid = table.grid(n1, n2)
        path = find_path(grid, 30.0, "minimax")
        for position, (i, j) in enumerate(path):
            scheduled = schedule.step(step)
            assert (scheduled.pair_index, scheduled.path_position, scheduled.cell) == (pair_index, position, (i, j))
            assert (scheduled.n1, scheduled.s1, scheduled.n2, scheduled.s2) == (n1, i / 4, n2, j / 4)
            assert scheduled.calibrated_accuracy == grid[i, j]
            step += 1


def test_schedule_random_access_equals_sequential_access(table) -> None:
    sequential = build_schedule(table, 30.0, table.corruptions, 3)
    steps = [sequential.step(s) for s in range(3000)]
    shuffled = build_schedule(table, 30.0, table.corruptions, 3)
    for s in np.random.default_rng(0).permutation(3000)[:300]:
        assert shuffled.step(int(s)) == steps[s]
    assert pickle.loads(pickle.dumps(sequential)).step(2999) == steps[2999]


def test_schedule_visits_cover_the_requested_steps(table) -> None:
    schedule = build_schedule(table, 30.0, table.corruptions, 3)
    visits = schedule.visits(100)
    assert visits[0].first_step == 0
    assert all(a.first_step + len(a.path.cells) == b.first_step for a, b in zip(visits, visits[1:]))
    assert visits[-1].first_step < 100 <= visits[-1].first_step + len(visits[-1].path.cells)
    assert schedule.visits(0) == []


def test_schedule_reports_missing_pairs_and_bad_arguments(table) -> None:
    grids = {pair: table.grid(*pair) for pair in table.pairs() if pair != ("jpeg", "contrast")}
    from ccc.calibration import CalibrationTable

    partial = CalibrationTable.from_grids(table.corruptions, grids, image_counts=100, metadata=table.metadata)
    with pytest.raises(
        ScheduleError, match=r"lacks 1 of the 12 ordered pairs these corruptions need: \(jpeg, contrast\)"
    ):
        build_schedule(partial, 30.0, table.corruptions, 0)
    with pytest.raises(ScheduleError, match=r"unknown corruption 'fogg'; available: brightness, jpeg"):
        build_schedule(table, 30.0, ("fogg", "jpeg"), 0)
    with pytest.raises(ScheduleError, match=r"target_accuracy must be in \[0, 100\] percent, got 120"):
        build_schedule(table, 120, table.corruptions, 0)
    with pytest.raises(ScheduleError, match="at least 2 distinct names"):
        build_schedule(table, 30.0, ("jpeg", "jpeg"), 0)
    with pytest.raises(ScheduleError, match="schedule must be one of reference, got 'random'"):
        build_schedule(table, 30.0, table.corruptions, 0, schedule="random")
    with pytest.raises(ScheduleError, match="seed must be an integer >= 0, got -1"):
        build_schedule(table, 30.0, table.corruptions, -1)


# ----------------------------------------------------------------------------- crop parameters


def torchvision_boxes(width: int, height: int, count: int) -> np.ndarray:
    torch.manual_seed(0)
    image = torch.empty((3, height, width), dtype=torch.uint8)
    boxes = []
    for _ in range(count):
        top, left, box_height, box_width = RandomResizedCrop.get_params(image, [0.08, 1.0], [3 / 4, 4 / 3])
        boxes.append((left, top, left + box_width, top + box_height))
    return np.array(boxes)


def our_boxes(width: int, height: int, count: int) -> np.ndarray:
    generator = np.random.default_rng(1)
    return np.array([sample_resized_crop(generator, width, height) for _ in range(count)])


@pytest.mark.parametrize("size", [(500, 375), (333, 500), (900, 160), (100, 100)])
def test_crop_boxes_follow_torchvisions_distribution(size: tuple[int, int]) -> None:
    width, height = size
    count = 3000
    ours, theirs = our_boxes(width, height, count), torchvision_boxes(width, height, count)
    for name, column in (("box width", lambda b: b[:, 2] - b[:, 0]), ("box height", lambda b: b[:, 3] - b[:, 1]),
                         ("left", lambda b: b[:, 0]), ("top", lambda b: b[:, 1])):  # fmt: skip
        result = stats.ks_2samp(column(ours), column(theirs))
        assert result.pvalue > 1e-4, f"{name} distribution differs from torchvision (KS p = {result.pvalue:.2e})"
    # The central-crop fallback (10 failed attempts) must be equally frequent.
    fallback = torchvision_fallback_box(width, height)
    our_rate = np.mean((ours == fallback).all(axis=1))
    their_rate = np.mean((theirs == fallback).all(axis=1))
    assert abs(our_rate - their_rate) <= 4 * math.sqrt(max(their_rate, 1 / count) / count)


class TorchDraws:
    """Our crop sampler's generator interface, backed by torch's global generator as torchvision draws."""

    def uniform(self, low: float, high: float) -> float:
        return torch.empty(1).uniform_(low, high).item()

    def integers(self, low: int, high: int) -> int:
        return int(torch.randint(low, high, size=(1,)).item())


@pytest.mark.parametrize("size", [(500, 375), (333, 500), (900, 160), (1000, 50), (37, 400)])
def test_crop_logic_equals_torchvision_on_the_same_draws(size: tuple[int, int]) -> None:
    """Fed torch's random numbers in torchvision's order, the sampler returns torchvision's exact boxes."""
    width, height = size
    torch.manual_seed(3)
    ours = np.array([sample_resized_crop(TorchDraws(), width, height) for _ in range(1000)])  # type: ignore[arg-type]
    torch.manual_seed(3)
    image = torch.empty((3, height, width), dtype=torch.uint8)
    theirs = []
    for _ in range(1000):
        top, left, box_height, box_width = RandomResizedCrop.get_params(image, [0.08, 1.0], [3 / 4, 4 / 3])
        theirs.append((left, top, left + box_width, top + box_height))
    np.testing.assert_array_equal(ours, np.array(theirs))


def torchvision_fallback_box(width: int, height: int) -> tuple[int, int, int, int]:
    """The box torchvision returns when all 10 attempts fail."""
    ratio = width / height
    if ratio < 3 / 4:
        box_width, box_height = width, int(round(width / (3 / 4)))
    elif ratio > 4 / 3:
        box_width, box_height = int(round(height * (4 / 3))), height
    else:
        box_width, box_height = width, height
    left, top = (width - box_width) // 2, (height - box_height) // 2
    return (left, top, left + box_width, top + box_height)


def test_crop_fallback_is_the_central_crop() -> None:
    """A very wide image makes every attempt fail: the result is torchvision's central box."""

    class NeverFits:
        def uniform(self, low: float, high: float) -> float:
            return high  # full area at the widest ratio: too tall for a 1000×50 image

        def integers(self, low: int, high: int) -> int:
            raise AssertionError("no offset is drawn for the fallback")

    assert sample_resized_crop(NeverFits(), 1000, 50) == torchvision_fallback_box(1000, 50)  # type: ignore[arg-type]
    assert torchvision_fallback_box(1000, 50) == (466, 0, 533, 50)


def test_crop_boxes_lie_inside_the_image() -> None:
    generator = np.random.default_rng(5)
    for _ in range(2000):
        width, height = (int(v) for v in generator.integers(1, 1200, 2))
        left, top, right, bottom = sample_resized_crop(generator, width, height)
        assert 0 <= left < right <= width and 0 <= top < bottom <= height


# ----------------------------------------------------------------------------- samples


def test_plan_sample_is_pure_and_random_access(table) -> None:
    plan = make_plan(table)
    sequential = [plan_sample(plan, index) for index in range(plan.spec.num_images)]
    fresh = make_plan(table)
    for index in np.random.default_rng(1).permutation(plan.spec.num_images)[:120]:
        assert plan_sample(fresh, int(index)) == sequential[index]
    clone = pickle.loads(pickle.dumps(plan))
    assert [plan_sample(clone, index) for index in (399, 0, 200)] == [sequential[399], sequential[0], sequential[200]]


def test_samples_follow_the_schedule_and_draw_distinct_images_per_step(table) -> None:
    plan = make_plan(table)
    speed = plan.spec.speed
    samples = [plan_sample(plan, index) for index in range(plan.spec.num_images)]
    for step in range(plan.spec.num_images // speed):
        group = samples[step * speed : (step + 1) * speed]
        scheduled = plan.schedule.step(step)
        assert all(
            s.step == step and (s.n1, s.s1, s.n2, s.s2) == (scheduled.n1, scheduled.s1, scheduled.n2, scheduled.s2)
            for s in group
        )
        assert len({s.source_position for s in group}) == speed
    sample = samples[17]
    assert sample.source_path == plan.sources.relative_paths[sample.source_position]
    assert sample.class_index == plan.sources.class_indices[sample.source_position]
    assert sample.source_size == plan.sources.sizes[sample.source_position]
    assert sample.wnid == sample.source_path.split("/")[0]
    assert len({s.seed for s in samples}) == len(samples)
    assert all(0 <= s.seed < 2**63 for s in samples)


def test_step_image_draws_are_uniform(table) -> None:
    plan = make_plan(table, sources=make_sources(12), speed=4)
    counts = Counter(int(position) for step in range(3000) for position in plan.step_images(step))
    # Every image equally likely: 3000 * 4 / 12 = 1000 expected uses each.
    assert stats.chisquare([counts[k] for k in range(12)]).pvalue > 1e-4


def test_flip_probability_is_one_half(table) -> None:
    plan = make_plan(table, num_images=4000)
    flips = sum(plan_sample(plan, index).flip for index in range(4000))
    assert stats.binomtest(flips, 4000, 0.5).pvalue > 1e-4


def test_a_longer_stream_starts_with_the_shorter_one(table) -> None:
    short, long = make_plan(table, num_images=100), make_plan(table, num_images=10_000_000)
    assert [plan_sample(short, k) for k in range(100)] == [plan_sample(long, k) for k in range(100)]
    deep = plan_sample(long, 9_999_999)
    assert deep.step == 9_999_999 // 5


def test_sample_json_record_round_trips(table) -> None:
    sample = plan_sample(make_plan(table), 42)
    record = json.loads(json.dumps(sample.to_json_dict(), sort_keys=True))
    assert record["index"] == 42 and record["crop_box"] == list(sample.crop_box)
    assert set(record) == {
        "index", "step", "pair_index", "path_position", "path_cell", "n1", "s1", "n2", "s2", "calibrated_accuracy",
        "source_position", "source_path", "class_index", "source_size", "crop_box", "flip", "seed",
    }  # fmt: skip


# ----------------------------------------------------------------------------- spec, hash, validation


def test_plan_hash_identifies_the_plan(table) -> None:
    reference = plan_hash(make_plan(table))
    assert plan_hash(make_plan(table)) == reference
    assert plan_hash(make_plan(table, seed=44)) != reference
    assert plan_hash(make_plan(table, path_objective="minimax")) != reference
    resized = make_sources(sizes=[(500, 375), (375, 500), (640, 480), (300, 300), (800, 201)])
    assert plan_hash(make_plan(table, sources=resized)) != reference


def test_stream_spec_round_trips_and_validates(table) -> None:
    spec = make_plan(table).spec
    assert StreamSpec.from_json_dict(json.loads(json.dumps(spec.to_json_dict()))) == spec
    assert spec.num_shards == 7 and spec.shard_range(6) == range(384, 400)
    base = spec.to_json_dict()
    for name, value, message in [
        ("speed", 0, "speed must be an integer >= 1, got 0"),
        ("num_images", 2.5, "num_images must be an integer >= 1, got 2.5"),
        ("target_accuracy", 101, r"target_accuracy must be a number in \[0, 100\] percent, got 101"),
        ("corruptions", ["fog", "fog"], "corruptions must hold at least 2 distinct names"),
        ("calibration_checksum", "abc", "calibration_checksum must be a sha256 hex digest"),
        ("path_objective", "median", "path_objective must be one of reference, minimax, mean_abs, got 'median'"),
    ]:
        with pytest.raises(PlanError, match=message):
            StreamSpec.from_json_dict({**base, name: value})
    with pytest.raises(PlanError, match="missing \\['seed'\\]"):
        StreamSpec.from_json_dict({key: value for key, value in base.items() if key != "seed"})
    with pytest.raises(PlanError, match=r"shard_index must be an integer in \[0, 6\], got 7"):
        spec.shard_range(7)


def test_plan_rejects_mismatched_inputs(table) -> None:
    sources = make_sources(8)
    with pytest.raises(PlanError, match=r"speed must be at most the number of source images \(8\) .* got 9"):
        make_plan(table, sources=sources, speed=9)
    with pytest.raises(PlanError, match="calibration_checksum .* does not match the table's"):
        make_plan(table, calibration_checksum="cd" * 32)
    with pytest.raises(PlanError, match="source_index_checksum .* does not match the images'"):
        make_plan(table, source_index_checksum="cd" * 32)
    plan = make_plan(table)
    with pytest.raises(PlanError, match=r"index must be an integer in \[0, 399\], got 400"):
        plan_sample(plan, 400)
    with pytest.raises(PlanError, match="one class index and one size per path"):
        SourceImages("/x", ("a/b.JPEG",), (), ((1, 1),), FAKE_CHECKSUM)


def test_run_name_follows_the_public_pattern() -> None:
    assert run_name(20.0, 2000, 43) == "baseline_20_transition+speed_2000_seed_43"
    assert run_name(12.5, 1000, 0) == "baseline_12.5_transition+speed_1000_seed_0"


def test_run_name_names_a_length_other_than_the_default() -> None:
    assert run_name(20.0, 2000, 43, 7_500_000) == "baseline_20_transition+speed_2000_seed_43"
    assert run_name(20.0, 2000, 43, 2**62) == "baseline_20_transition+speed_2000_seed_43"
    assert run_name(20.0, 2000, 43, 64) == "baseline_20_transition+speed_2000_seed_43_images_64"
    assert run_name(30.0, 100, 43, 30_000, default_images=30_000) == "baseline_30_transition+speed_100_seed_43"
    assert run_name(30.0, 100, 43, 500, default_images=30_000) == "baseline_30_transition+speed_100_seed_43_images_500"


def test_schedule_figure_names_the_corruptions_and_pairs(table) -> None:
    from ccc.stream.report import corruption_severities, schedule_figure, trace_schedule

    schedule = build_schedule(table, 30.0, table.corruptions, 0)
    trace = trace_schedule(schedule, 4, 400)
    assert len(trace.visits) >= 2
    figure = schedule_figure(schedule, 4, 400)
    severity_axis, accuracy_axis = figure.axes[:2]
    names = list(corruption_severities(trace))
    assert [text.get_text() for text in severity_axis.get_legend().get_texts()] == names
    assert set(names) <= set(table.corruptions) and len(names) >= 3
    pairs = [label.get_text() for label in severity_axis.child_axes[0].get_xticklabels()]
    assert pairs == [f"{visit.path.n1}\n→ {visit.path.n2}" for visit in trace.visits]
    assert figure.get_suptitle().startswith("CCC schedule: target 30 %, speed 4 images per step")
    assert accuracy_axis.get_ylabel() == "accuracy (%)"
    severities = corruption_severities(trace)
    first = trace.visits[0].path
    assert severities[first.n1][0] == trace.s1[0] and severities[first.n2][0] == trace.s2[0]
    assert np.isnan(severities[names[-1]][0]), "a corruption has no severity before its first pair"


def test_schedule_figure_artists_do_not_grow_with_the_pairs(table) -> None:
    """A dry run of 10^12 images plots the first SUMMARY_MAX_STEPS steps: thousands of pairs, once two
    shading patches and a name tick each (minutes to draw); now one shading collection per panel,
    and names only up to PLOT_MAX_NAMED_PAIRS pairs."""
    from ccc.stream.report import PLOT_MAX_NAMED_PAIRS, SUMMARY_MAX_STEPS, schedule_figure, trace_schedule

    schedule = build_schedule(table, 30.0, table.corruptions, 0)
    few = schedule_figure(schedule, 4, 400)
    assert len(trace_schedule(schedule, 1, SUMMARY_MAX_STEPS).visits) > 10 * PLOT_MAX_NAMED_PAIRS
    many = schedule_figure(schedule, 1, 10**12)
    for figure in (few, many):
        for axis in figure.axes[:2]:
            assert len(axis.patches) <= 1 and len(axis.collections) <= 1  # the accuracy stairs; the shading
    assert len(many.axes[0].child_axes[0].get_xticks()) == 0, "thousands of pair names are not drawn"
    assert len(few.axes[0].child_axes[0].get_xticks()) == len(trace_schedule(schedule, 4, 400).visits)
