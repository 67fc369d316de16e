"""Tests of ccc.stream.order: the public generator's corruption order for the ResNet-50 difficulty presets."""

from __future__ import annotations

import json
import random

import pytest

from ccc.calibration import RESNET50_DIFFICULTY_PRESETS as DIFFICULTY_PRESETS
from ccc.stream.order import reference_corruption_order
from tests.builders import GOLDEN

GOLDEN_ORDER = json.loads((GOLDEN / "ccc_corruption_order.json").read_text())
PRESET_BY_BASELINE = {40: "easy", 20: "medium", 0: "hard"}


@pytest.mark.parametrize("key", sorted(GOLDEN_ORDER))
def test_matches_golden(key: str) -> None:
    _, baseline, _, seed = key.split("_")
    preset = DIFFICULTY_PRESETS[PRESET_BY_BASELINE[int(baseline)]]
    expected = GOLDEN_ORDER[key]
    assert preset.target_accuracy == float(baseline)
    assert reference_corruption_order(preset.corruptions, int(seed), len(expected)) == expected


@pytest.mark.parametrize("preset_name", sorted(DIFFICULTY_PRESETS))
def test_consecutive_names_differ_and_come_from_the_list(preset_name: str) -> None:
    corruptions = DIFFICULTY_PRESETS[preset_name].corruptions
    order = reference_corruption_order(corruptions, 1234, 500)
    assert len(order) == 500
    assert set(order) <= set(corruptions)
    assert all(first != second for first, second in zip(order, order[1:]))
    assert set(order) == set(corruptions)  # 500 draws visit every name


def test_longer_orders_extend_shorter_ones_and_seeds_differ() -> None:
    corruptions = DIFFICULTY_PRESETS["easy"].corruptions
    long_order = reference_corruption_order(corruptions, 43, 100)
    assert [reference_corruption_order(corruptions, 43, count) for count in (0, 1, 2, 37)] == [
        long_order[:count] for count in (0, 1, 2, 37)
    ]
    assert reference_corruption_order(corruptions, 44, 100) != long_order


def test_list_order_matters() -> None:
    corruptions = DIFFICULTY_PRESETS["easy"].corruptions
    assert reference_corruption_order(corruptions[::-1], 43, 40) != GOLDEN_ORDER["baseline_40_seed_43"]


def test_global_random_state_is_untouched() -> None:
    random.seed(2024)
    state = random.getstate()
    reference_corruption_order(DIFFICULTY_PRESETS["easy"].corruptions, 43, 200)
    assert random.getstate() == state


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((["fog"], 43, 5), r"corruptions must hold at least 2 distinct names, got \['fog'\]"),
        (((), 43, 5), r"corruptions must hold at least 2 distinct names, got \[\]"),
        ((["fog", "snow", "fog"], 43, 5), r"corruptions must not repeat names, got 'fog' more than once"),
        (("fog", 43, 5), r"corruptions must be a sequence of corruption names, got 'fog'"),
        ((["fog", 3], 43, 5), r"corruptions must be a sequence of corruption names, got \['fog', 3\]"),
        ((["fog", "snow"], -1, 5), r"seed must be an integer >= 0, got -1"),
        ((["fog", "snow"], 4.5, 5), r"seed must be an integer >= 0, got 4.5"),
        ((["fog", "snow"], True, 5), r"seed must be an integer >= 0, got True"),
        ((["fog", "snow"], 43, -2), r"count must be an integer >= 0, got -2"),
        ((["fog", "snow"], 43, "10"), r"count must be an integer >= 0, got '10'"),
    ],
)
def test_invalid_arguments(arguments: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        reference_corruption_order(*arguments)
