"""ccc.stream.spec and ccc.stream.plan.plan_stream: one way from a stream definition to a spec and a plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from ccc.stream.plan import build_stream_plan, plan_hash, plan_stream
from ccc.stream.schedule import build_schedule
from ccc.stream.sources import index_image_folder, load_source_images
from ccc.stream.spec import (
    DEFAULT_SEED,
    DEFAULT_SHARD_SIZE,
    UNBOUNDED_IMAGES,
    PlanError,
    StreamSpec,
    resolve_difficulty,
    resolve_stream_spec,
)
from tests.builders import make_calibration_table, make_image_folder

CHECKSUM = "0" * 64


@pytest.fixture(scope="module")
def table():
    return make_calibration_table(
        presets={"medium": (30.0, ("brightness", "jpeg", "pixelate")), "hard": (10.0, ("jpeg", "contrast"))}
    )


def test_a_preset_gives_its_target_and_corruptions(table) -> None:
    spec = resolve_stream_spec({"difficulty": "medium", "speed": 7}, table, CHECKSUM)
    assert (spec.target_accuracy, spec.corruptions, spec.difficulty) == (
        30.0,
        ("brightness", "jpeg", "pixelate"),
        "medium",
    )
    assert (spec.seed, spec.num_images, spec.shard_size) == (DEFAULT_SEED, UNBOUNDED_IMAGES, DEFAULT_SHARD_SIZE)
    assert (spec.calibration_checksum, spec.source_index_checksum) == (table.checksum(), CHECKSUM)


@pytest.mark.parametrize(
    ("overrides", "target", "corruptions"),
    [
        ({"baseline_accuracy": 25.0}, 25.0, ("brightness", "jpeg", "pixelate")),
        ({"corruptions": ["contrast", "jpeg"]}, 30.0, ("contrast", "jpeg")),
        ({"corruptions": "contrast, jpeg_compression"}, 30.0, ("contrast", "jpeg")),
    ],
)
def test_overrides_replace_the_preset_and_drop_its_name(
    table, overrides: dict, target: float, corruptions: tuple
) -> None:
    spec = resolve_stream_spec({"difficulty": "medium", "speed": 7, **overrides}, table, CHECKSUM)
    assert (spec.target_accuracy, spec.corruptions, spec.difficulty) == (target, corruptions, None)


def test_explicit_definitions_need_no_preset(table) -> None:
    assert resolve_difficulty(table, None, 12, ("jpeg", "contrast")) == (12.0, ("jpeg", "contrast"), None)
    spec = resolve_stream_spec(
        {
            "baseline_accuracy": 12,
            "corruptions": ("jpeg", "contrast"),
            "speed": 3,
            "seed": 5,
            "num_images": 99,
            "shard_size": 10,
        },
        table,
        CHECKSUM,
    )
    assert (spec.seed, spec.num_images, spec.shard_size, spec.difficulty) == (5, 99, 10, None)


def test_a_spec_is_returned_as_is(table) -> None:
    spec = resolve_stream_spec({"difficulty": "hard", "speed": 2}, table, CHECKSUM)
    assert resolve_stream_spec(spec, table, "1" * 64) is spec


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        (
            {"difficulty": "extreme", "speed": 4},
            r"unknown difficulty 'extreme'; the calibration table defines: medium, hard",
        ),
        (
            {"speed": 4, "baseline_accuracy": 20},
            r"needs a difficulty \(one of: medium, hard\) or both baseline_accuracy and corruptions",
        ),
        ({"difficulty": "medium"}, r"needs speed"),
        ({"difficulty": "medium", "speed": 4, "colour": 1}, r"unknown stream definition key\(s\) colour; valid: "),
        ({"difficulty": "medium", "speed": 4, "corruptions": "jpeg,mist"}, r"mist"),
        ({"difficulty": "medium", "speed": 0}, r"speed must be an integer >= 1, got 0"),
        ({"difficulty": "medium", "speed": 4, "baseline_accuracy": "high"}, r"baseline_accuracy must be a number"),
        (["medium"], r"must be a StreamSpec or a mapping, got list"),
    ],
)
def test_bad_definitions_name_the_problem(table, definition: object, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        resolve_stream_spec(definition, table, CHECKSUM)  # type: ignore[arg-type]


def test_plan_stream_is_table_plus_folder_plus_definition(table, tmp_path: Path) -> None:
    folder = make_image_folder(tmp_path / "images", classes=2, images_per_class=5, size=(64, 48))
    definition = {"difficulty": "medium", "speed": 4, "num_images": 40, "shard_size": 16}
    plan = plan_stream(definition, table, folder)
    sources = load_source_images(index_image_folder(folder, progress=False))
    assert plan.sources == sources
    assert plan.spec == resolve_stream_spec(definition, table, sources.index_checksum)
    assert plan_hash(plan) == plan_hash(build_stream_plan(plan.spec, table, sources))
    assert plan_hash(plan_stream(plan.spec, table, folder)) == plan_hash(plan)


def test_a_precomputed_schedule_is_used_once_and_must_be_the_specs(table, tmp_path: Path) -> None:
    folder = make_image_folder(tmp_path / "images", classes=2, images_per_class=5, size=(64, 48))
    definition = {"difficulty": "medium", "speed": 4, "num_images": 40}
    schedule = build_schedule(table, 30.0, ("brightness", "jpeg", "pixelate"), DEFAULT_SEED)
    plan = plan_stream(definition, table, folder, schedule=schedule)
    assert plan.schedule is schedule
    other = build_schedule(table, 30.0, ("brightness", "jpeg", "pixelate"), DEFAULT_SEED + 1)
    with pytest.raises(PlanError, match="schedule .* must be the spec's"):
        plan_stream(definition, table, folder, schedule=other)


def test_stream_spec_round_trips_through_json(table) -> None:
    spec = resolve_stream_spec({"difficulty": "hard", "speed": 2, "num_images": 10}, table, CHECKSUM)
    assert StreamSpec.from_json_dict(spec.to_json_dict()) == spec
