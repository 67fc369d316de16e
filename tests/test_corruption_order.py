"""Tests of ccc.plan: difficulty presets and the public generator's corruption order."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest

from ccc.plan import DIFFICULTY_PRESETS, DifficultyPreset, get_difficulty_preset, reference_corruption_order

GOLDEN = json.loads((Path(__file__).parent / "golden" / "ccc_corruption_order.json").read_text())
PRESET_BY_BASELINE = {40: "easy", 20: "medium", 0: "hard"}
ALL_CORRUPTIONS = (
    "gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur", "motion_blur",
    "zoom_blur", "snow", "frost", "fog", "brightness", "contrast", "elastic", "pixelate", "jpeg",
)  # fmt: skip


@pytest.mark.parametrize("key", sorted(GOLDEN))
def test_matches_golden(key: str) -> None:
    _, baseline, _, seed = key.split("_")
    preset = DIFFICULTY_PRESETS[PRESET_BY_BASELINE[int(baseline)]]
    expected = GOLDEN[key]
    assert preset.target_accuracy == float(baseline)
    assert reference_corruption_order(preset.corruptions, int(seed), len(expected)) == expected


def test_presets_follow_the_specification() -> None:
    assert set(DIFFICULTY_PRESETS) == {"easy", "medium", "hard"}
    easy, medium, hard = (DIFFICULTY_PRESETS[name] for name in ("easy", "medium", "hard"))
    assert easy.corruptions == tuple(name for name in ALL_CORRUPTIONS if name != "brightness")
    assert medium.corruptions == tuple(name for name in ALL_CORRUPTIONS if name not in ("brightness", "jpeg"))
    assert hard.corruptions == ("gaussian_noise", "shot_noise", "impulse_noise", "contrast")
    assert (easy.target_accuracy, medium.target_accuracy, hard.target_accuracy) == (40.0, 20.0, 0.0)
    assert all(preset.name == name for name, preset in DIFFICULTY_PRESETS.items())


def test_presets_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        DIFFICULTY_PRESETS["easy"].target_accuracy = 10.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        DIFFICULTY_PRESETS["extreme"] = DifficultyPreset("extreme", 5.0, ("fog", "snow"))  # type: ignore[index]


def test_get_difficulty_preset() -> None:
    assert get_difficulty_preset("medium") is DIFFICULTY_PRESETS["medium"]
    with pytest.raises(ValueError, match=r"unknown difficulty 'extreme'; available: easy, medium, hard"):
        get_difficulty_preset("extreme")


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
    assert reference_corruption_order(corruptions[::-1], 43, 40) != GOLDEN["baseline_40_seed_43"]


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
        ((["fog", "snow"], -1, 5), r"seed must be a non-negative integer, got -1"),
        ((["fog", "snow"], 4.5, 5), r"seed must be a non-negative integer, got 4.5"),
        ((["fog", "snow"], True, 5), r"seed must be a non-negative integer, got True"),
        ((["fog", "snow"], 43, -2), r"count must be a non-negative integer, got -2"),
        ((["fog", "snow"], 43, "10"), r"count must be a non-negative integer, got '10'"),
    ],
)
def test_invalid_arguments(arguments: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        reference_corruption_order(*arguments)
