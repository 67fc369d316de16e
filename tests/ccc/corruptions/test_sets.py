"""Corruption sets: the registry, the ``corruption_set`` argument, the tables' layout and severity-0
rule, and the ``imagenet`` set being exactly the behaviour without sets."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from ccc.corruptions import (
    CorruptionSet,
    corrupt,
    corrupt_batch,
    corrupt_pair,
    get_corruption,
    get_corruption_set,
    list_corruption_sets,
    list_corruptions,
)
from ccc.corruptions.assets import frost_textures
from ccc.corruptions.sets import REGISTRY as SET_REGISTRY

ALL = list_corruptions()
SETS = list_corruption_sets()
OTHER_SETS = [name for name in SETS if name != "imagenet"]


def _image(corruption_set: str, seed: int = 0) -> np.ndarray:
    size = get_corruption_set(corruption_set).image_size
    coarse = np.random.default_rng(seed).integers(0, 256, (4, 4, 3), dtype=np.uint8)
    return cv2.resize(coarse, (size, size), interpolation=cv2.INTER_LINEAR)


def test_the_sets_and_their_sizes():
    assert SETS == ["imagenet", "cifar", "tinyimagenet", "imagenet64"]
    assert [get_corruption_set(name).image_size for name in SETS] == [224, 32, 64, 64]
    assert [get_corruption_set(name).any_size for name in SETS] == [True, False, False, False]
    assert list_corruption_sets("imagenet*") == ["imagenet", "imagenet64"]
    assert all(isinstance(entry, CorruptionSet) for entry in SET_REGISTRY)


@pytest.mark.parametrize("name", ALL)
def test_the_imagenet_set_is_the_default(name, golden_images):
    image = golden_images[1]
    np.testing.assert_array_equal(
        corrupt(image, name, 2.6, rng=5, corruption_set="imagenet"), corrupt(image, name, 2.6, rng=5)
    )
    entry = get_corruption(name)
    assert get_corruption_set("imagenet").parameter_table(entry) is entry.parameter_table


def test_the_imagenet_set_keeps_other_sizes():
    image = np.random.default_rng(1).integers(0, 256, (40, 57, 3), dtype=np.uint8)
    assert corrupt(image, "fog", 3.0, rng=1, corruption_set="imagenet").shape == (40, 57, 3)


@pytest.mark.parametrize("corruption_set", OTHER_SETS)
@pytest.mark.parametrize("name", ALL)
def test_a_set_defines_every_corruption_in_the_imagenet_layout(corruption_set, name):
    entry = get_corruption(name)
    table = get_corruption_set(corruption_set).parameter_table(entry)
    assert len(table) == 6
    assert np.shape(table) == np.shape(entry.parameter_table)


@pytest.mark.parametrize("corruption_set", OTHER_SETS)
@pytest.mark.parametrize("name", ALL)
def test_severity_zero_rows_follow_the_imagenet_anchoring_rule(corruption_set, name):
    """A component CCC anchored away from its severity-1 value (it sets the effect's strength) takes
    ImageNet's anchor; one CCC anchored at its severity-1 value (it shapes the effect) takes the set's
    severity-1 value."""
    entry = get_corruption(name)
    imagenet = np.atleast_1d(np.asarray(entry.parameter_table, dtype=np.float64).T).T
    table = np.atleast_1d(np.asarray(get_corruption_set(corruption_set).parameter_table(entry), dtype=np.float64).T).T
    strength = imagenet[0] != imagenet[1]
    np.testing.assert_array_equal(table[0][strength], imagenet[0][strength])
    np.testing.assert_array_equal(table[0][~strength], table[1][~strength])


@pytest.mark.parametrize("corruption_set", OTHER_SETS)
@pytest.mark.parametrize("name", ALL)
def test_severity_zero_is_identity_and_every_severity_runs(corruption_set, name):
    image = _image(corruption_set)
    assert corrupt(image, name, 0.0, rng=2, corruption_set=corruption_set).tobytes() == image.tobytes()
    for severity in (0.01, 0.5, 1.0, 2.25, 5.0):
        output = corrupt(image, name, severity, rng=2, corruption_set=corruption_set)
        assert output.shape == image.shape and output.dtype == np.uint8


@pytest.mark.parametrize("corruption_set", OTHER_SETS)
@pytest.mark.parametrize("name", ALL)
def test_parameters_interpolate_the_set_table(corruption_set, name):
    entry = get_corruption(name)
    chosen = get_corruption_set(corruption_set)
    table = np.asarray(chosen.parameter_table(entry), dtype=np.float64)
    for severity in range(1, 6):
        np.testing.assert_allclose(np.asarray(chosen.parameters(entry, float(severity))), table[severity], rtol=1e-15)
    halfway = np.asarray(chosen.parameters(entry, 2.5))
    expected = (table[2] + table[3]) / 2
    if name == "spatter":
        halfway, expected = halfway[:-1], expected[:-1]
    np.testing.assert_allclose(halfway, expected, rtol=1e-12)


def test_public_script_sets_hand_over_python_floats():
    snow = get_corruption("snow")
    assert all(type(value) is float for value in get_corruption_set("cifar").parameters(snow, 2.5))
    assert type(get_corruption_set("cifar").parameters(get_corruption("contrast"), 2.5)) is float
    assert all(type(value) is np.float64 for value in get_corruption_set("imagenet").parameters(snow, 2.5))


@pytest.mark.parametrize("corruption_set", OTHER_SETS)
def test_pair_and_batch_use_the_set(corruption_set):
    image = _image(corruption_set, seed=3)
    first = corrupt(image, "snow", 1.5, rng=(generator := np.random.default_rng(4)), corruption_set=corruption_set)
    expected = corrupt(first, "frost", 3.5, rng=generator, corruption_set=corruption_set)
    pair = corrupt_pair(image, "snow", 1.5, "frost", 3.5, rng=np.random.default_rng(4), corruption_set=corruption_set)
    np.testing.assert_array_equal(pair, expected)
    images = np.stack([image, _image(corruption_set, seed=5)])
    batch = corrupt_batch(images, "fog", 2.5, [7, 8], corruption_set=corruption_set)
    for image_k, seed, output in zip(images, [7, 8], batch):
        np.testing.assert_array_equal(output, corrupt(image_k, "fog", 2.5, rng=seed, corruption_set=corruption_set))


def test_sets_change_the_output():
    image = _image("cifar")
    for name in ("gaussian_noise", "fog", "frost", "elastic", "pixelate", "jpeg"):
        assert not np.array_equal(
            corrupt(image, name, 3.0, rng=1, corruption_set="cifar"), corrupt(image, name, 3.0, rng=1)
        ), name


def test_structural_constants():
    cifar = get_corruption_set("cifar")
    assert cifar.function_settings(get_corruption("fog")) == {"map_size": 32}
    assert cifar.function_settings(get_corruption("frost")) == {"texture_scale": 0.2}
    assert cifar.function_settings(get_corruption("snow")) == {}
    for scale in (0.2, 0.3):
        for texture, small in zip(frost_textures(), frost_textures(scale)):
            np.testing.assert_array_equal(small, cv2.resize(texture, (0, 0), fx=scale, fy=scale))
            assert not small.flags.writeable
    for name in ("tinyimagenet", "imagenet64"):
        settings = get_corruption_set(name).settings
        assert (settings["fog"], settings["frost"]) == ({"map_size": 64}, {"texture_scale": 0.3})


def test_unknown_set_is_one_line_listing_the_valid_ones():
    image = _image("cifar")
    for call in (
        lambda: corrupt(image, "fog", 1.0, corruption_set="cifar10"),
        lambda: corrupt_pair(image, "fog", 1.0, "snow", 1.0, corruption_set="cifar10"),
        lambda: corrupt_batch(image[np.newaxis][:0], "fog", 1.0, corruption_set="cifar10"),
    ):
        with pytest.raises(ValueError, match=r"^unknown corruption_set 'cifar10'; available: imagenet, cifar") as error:
            call()
        assert "\n" not in str(error.value)


def test_an_image_of_another_size_names_what_the_set_is_defined_for():
    image = np.zeros((64, 48, 3), dtype=np.uint8)
    message = (
        r"^image must be 32x32 pixels for corruption_set 'cifar' \(defined for that size only, by .*\), got 64x48$"
    )
    with pytest.raises(ValueError, match=message):
        corrupt(image, "fog", 1.0, corruption_set="cifar")
    with pytest.raises(ValueError, match="^images\\[0\\] must be 32x32 pixels for corruption_set 'cifar'"):
        corrupt_batch(image[np.newaxis], "fog", 1.0, corruption_set="cifar")


def test_a_set_without_a_table_for_a_corruption_says_so():
    partial = CorruptionSet("partial", 32, False, 99, "a test", parameter_tables={"fog": ((0.0, 2.0),) * 6})
    with pytest.raises(ValueError, match="corruption_set 'partial' has no parameters for 'snow'; it defines: fog"):
        partial.parameter_table(get_corruption("snow"))
