"""The embedded demo world (ccc.demo): images, model, calibration table."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from ccc.calibration import CalibrationTable
from ccc.calibration.table import CalibrationError
from ccc.demo import CLASS_NAMES, DEMO_DIFFICULTY_PRESETS, demo_calibration_path, demo_image_folder, demo_model
from ccc.demo.calibration import DEMO_CALIBRATION_CORRUPTIONS, with_demo_presets
from ccc.demo.evaluate import measure_accuracies, prepare_image
from ccc.demo.folder import (
    DEMO_IMAGES_PER_CLASS,
    EXPECTED_CONTENT_SHA256,
    EXPECTED_INDEX_SHA256,
    RECORD_NAME,
    DemoImagesError,
    DemoImageSpec,
    content_checksum,
    ensure_demo_folder,
    read_record,
    render_demo_file,
    write_demo_folder,
)
from ccc.demo.images import IMAGENET_GEOMETRY, PATTERNS, draw_parameters, periodic_profile, render_demo_image
from ccc.demo.model import (
    DEMO_CIFAR_WEIGHTS_PATH,
    DEMO_CIFAR_WEIGHTS_SHA256,
    DEMO_WEIGHTS_PATH,
    DEMO_WEIGHTS_SHA256,
    DemoNet,
    DemoNetCifar,
    WeightsChecksumError,
    file_sha256,
    load_demo_weights,
)
from ccc.models import ModelSpec, load_model
from ccc.stream.paths import find_path
from ccc.stream.sources import ImageIndex, index_image_folder
from tests.builders import make_calibration_table

SMALL = DemoImageSpec(images_per_class=2)


# ----------------------------------------------------------------------------- images
@pytest.mark.parametrize("class_index", range(len(CLASS_NAMES)))
def test_render_is_a_pure_function_of_the_generator_state(class_index: int) -> None:
    first = render_demo_image(class_index, np.random.default_rng(class_index))
    second = render_demo_image(class_index, np.random.default_rng(class_index))
    assert first.dtype == np.uint8 and first.ndim == 3 and first.shape[2] == 3
    assert (first.shape[1], first.shape[0]) in IMAGENET_GEOMETRY.sizes
    np.testing.assert_array_equal(first, second)
    assert first.std() > 10  # not a flat image


def test_classes_are_colour_times_pattern() -> None:
    assert len(CLASS_NAMES) == 16 and list(CLASS_NAMES) == sorted(CLASS_NAMES)
    assert {name.split("_")[1] for name in CLASS_NAMES} == set(PATTERNS)


@pytest.mark.parametrize("bad", [-1, 16, 2.0, True])
def test_bad_class_index_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match=r"class_index must be an integer (>= 0|in \[0, 15\]), got"):
        draw_parameters(bad, np.random.default_rng(0))  # type: ignore[arg-type]


def test_periodic_profile_follows_the_cosine() -> None:
    turns = np.linspace(-3.0, 3.0, 20001, dtype=np.float32)
    assert np.abs(periodic_profile(turns) - np.cos(2 * np.pi * turns.astype(np.float64))).max() < 0.002


def test_folder_is_byte_reproducible_and_in_imagenet_layout(tmp_path: Path) -> None:
    serial = write_demo_folder(tmp_path / "serial", SMALL, workers=1)
    parallel = write_demo_folder(tmp_path / "parallel", SMALL, workers=2)
    assert content_checksum(serial) == content_checksum(parallel) == read_record(serial)["content_sha256"]
    index = index_image_folder(serial, progress=False)
    assert index.classes == CLASS_NAMES
    assert len(index) == 2 * len(CLASS_NAMES)
    assert index.checksum() == index_image_folder(parallel, progress=False).checksum()
    assert [image.class_index for image in index] == [k // 2 for k in range(len(index))]


def test_splits_and_seeds_give_different_images() -> None:
    reference = render_demo_file(SMALL, 3, 0)
    assert render_demo_file(DemoImageSpec(2, split="train"), 3, 0) != reference
    assert render_demo_file(DemoImageSpec(2, seed=SMALL.seed + 1), 3, 0) != reference
    assert render_demo_file(SMALL, 3, 1) != reference


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"images_per_class": 0}, "images_per_class must be an integer >= 1, got 0"),
        ({"seed": -1}, "seed must be an integer >= 0, got -1"),
        ({"split": "test"}, "split must be one of val, train, got 'test'"),
    ],
)
def test_bad_image_spec_is_refused(arguments: dict, message: str) -> None:
    with pytest.raises(DemoImagesError, match=message):
        DemoImageSpec(**arguments)


def test_existing_folder_is_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    with pytest.raises(DemoImagesError, match="already exists"):
        write_demo_folder(tmp_path / "images", SMALL)


def test_cached_folder_without_record_is_refused(tmp_path: Path) -> None:
    folder = write_demo_folder(tmp_path / "demo" / "images-v1", SMALL)
    (folder / RECORD_NAME).unlink()
    with pytest.raises(DemoImagesError, match="missing or unreadable.*delete"):
        ensure_demo_folder(tmp_path)


@pytest.fixture(scope="session")
def demo_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The full demo image folder, built once per test session in a temporary cache."""
    return demo_image_folder(tmp_path_factory.mktemp("cache"))


@pytest.mark.slow
def test_full_build_matches_the_reference_checksums(demo_folder: Path, tmp_path: Path) -> None:
    index = index_image_folder(demo_folder, progress=False)
    assert len(index) == DEMO_IMAGES_PER_CLASS * len(CLASS_NAMES) >= 2000
    assert index.checksum() == EXPECTED_INDEX_SHA256
    assert read_record(demo_folder)["content_sha256"] == content_checksum(demo_folder) == EXPECTED_CONTENT_SHA256
    assert _image_sizes(index) <= set(IMAGENET_GEOMETRY.sizes)
    # A second call reuses the folder (no rebuild): same path, same record.
    assert demo_image_folder(demo_folder.parents[1]) == demo_folder


def _image_sizes(index: ImageIndex) -> set[tuple[int, int]]:
    """(width, height) of every 40th image of ``index``."""
    sizes = set()
    for position in range(0, len(index), 40):
        with Image.open(index.path(position)) as image:
            sizes.add(image.size)
    return sizes


# ----------------------------------------------------------------------------- model
SHIPPED_WEIGHTS = pytest.mark.parametrize(
    ("model_class", "path", "sha256"),
    [
        (DemoNet, DEMO_WEIGHTS_PATH, DEMO_WEIGHTS_SHA256),
        (DemoNetCifar, DEMO_CIFAR_WEIGHTS_PATH, DEMO_CIFAR_WEIGHTS_SHA256),
    ],
    ids=["imagenet", "cifar"],
)


@SHIPPED_WEIGHTS
def test_weights_file_is_small_and_matches_its_pinned_checksum(model_class: type, path: Path, sha256: str) -> None:
    assert path.stat().st_size < 5 * 2**20
    assert file_sha256(path) == sha256
    assert set(torch.load(path, weights_only=True)) == set(model_class().state_dict())


def test_model_runs_on_a_batch() -> None:
    model = demo_model()
    assert not model.training
    images = torch.rand(3, 3, 224, 224)
    with torch.no_grad():
        logits = model(images)
    assert logits.shape == (3, len(CLASS_NAMES))
    assert torch.isfinite(logits).all()


def test_model_loads_through_the_factory_name() -> None:
    model = load_model(ModelSpec("ccc.demo:demo_model"))
    reference = demo_model()
    images = torch.rand(2, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model(images), reference(images))


@SHIPPED_WEIGHTS
def test_wrong_weights_checksum_is_refused(tmp_path: Path, model_class: type, path: Path, sha256: str) -> None:
    copy = tmp_path / "weights.pt"
    shutil.copyfile(path, copy)
    with pytest.raises(WeightsChecksumError, match="must have sha256 " + "1" * 64 + ", got " + sha256):
        load_demo_weights(model_class(), copy, expected_sha256="1" * 64)
    with copy.open("ab") as handle:
        handle.write(b"\0")
    with pytest.raises(WeightsChecksumError, match="damaged or was replaced"):
        load_demo_weights(model_class(), copy, expected_sha256=sha256)


def test_weights_of_the_other_world_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="do not match the model"):
        load_demo_weights(DemoNetCifar(), DEMO_WEIGHTS_PATH, DEMO_WEIGHTS_SHA256)


def test_missing_weights_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="train them with scripts/train_demo_model.py"):
        load_demo_weights(DemoNet(), tmp_path / "absent.pt")


@pytest.mark.parametrize("model_class", [DemoNet, DemoNetCifar])
def test_bad_class_count_is_refused(model_class: type) -> None:
    with pytest.raises(ValueError, match="num_classes must be an integer >= 2, got 1"):
        model_class(1)


# ----------------------------------------------------------------------------- evaluation helpers
def test_prepare_image_gives_model_sized_inputs() -> None:
    image = Image.fromarray(render_demo_image(0, np.random.default_rng(0)))
    centre = prepare_image(image, "centre", np.random.default_rng(0))
    first = prepare_image(image, "random", np.random.default_rng(5))
    again = prepare_image(image, "random", np.random.default_rng(5))
    assert centre.shape == first.shape == (224, 224, 3)
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(prepare_image(image, "whole", np.random.default_rng(0)), np.asarray(image))
    with pytest.raises(ValueError, match="crop must be one of centre, random, whole, got 'middle'"):
        prepare_image(image, "middle", np.random.default_rng(0))


def test_model_is_accurate_on_clean_images_and_worse_under_noise(tmp_path: Path) -> None:
    folder = write_demo_folder(tmp_path / "images", DemoImageSpec(images_per_class=3))
    index = index_image_folder(folder, progress=False)
    accuracies = measure_accuracies(demo_model(), index, corruptions=("gaussian_noise",), severity=5.0)
    assert set(accuracies) == {"clean", "gaussian_noise"}
    assert accuracies["clean"] >= 85.0
    assert accuracies["gaussian_noise"] < accuracies["clean"]


# ----------------------------------------------------------------------------- calibration
@pytest.fixture(scope="module")
def demo_table() -> CalibrationTable:
    return CalibrationTable.load(demo_calibration_path())


def test_committed_table_carries_the_demo_presets(demo_table: CalibrationTable) -> None:
    assert dict(demo_table.difficulty_presets) == dict(DEMO_DIFFICULTY_PRESETS)
    assert demo_table.corruptions == DEMO_CALIBRATION_CORRUPTIONS
    assert "ccc.demo:demo_model" in demo_table.metadata.model_name
    assert len(demo_table.pairs()) == len(DEMO_CALIBRATION_CORRUPTIONS) * (len(DEMO_CALIBRATION_CORRUPTIONS) - 1)


def test_preset_targets_lie_between_chance_and_clean_accuracy(demo_table: CalibrationTable) -> None:
    first, second = demo_table.pairs()[0]
    clean = demo_table.grid(first, second)[0, 0]
    targets = sorted(preset.target_accuracy for preset in DEMO_DIFFICULTY_PRESETS.values())
    assert 100.0 / len(CLASS_NAMES) < targets[0] < targets[-1] < clean


@pytest.mark.parametrize("difficulty", sorted(DEMO_DIFFICULTY_PRESETS))
def test_every_preset_pair_has_a_severity_path(demo_table: CalibrationTable, difficulty: str) -> None:
    target, corruptions = DEMO_DIFFICULTY_PRESETS[difficulty]
    for first in corruptions:
        for second in corruptions:
            if first != second:
                path = find_path(demo_table.grid(first, second), target, "reference")
                assert len(path) >= 1


@pytest.mark.parametrize("difficulty", sorted(DEMO_DIFFICULTY_PRESETS))
def test_preset_paths_run_on_measured_cells_near_their_target(demo_table: CalibrationTable, difficulty: str) -> None:
    """The table was refined for every preset's target: each pair's severity path crosses only cells
    measured on images (none the adaptive scheme merely predicted), and the paths' calibrated mean
    over the pairs lies within 1.5 points of the target (docs/demo.md, "Difficulty presets")."""
    target, corruptions = DEMO_DIFFICULTY_PRESETS[difficulty]
    path_means = []
    for first, second in itertools.permutations(corruptions, 2):
        grid, counts = demo_table.grid(first, second), demo_table.image_counts(first, second)
        path = find_path(grid, target, "reference")
        assert all(counts[row, column] > 0 for row, column in path), (first, second)
        path_means.append(np.mean([grid[row, column] for row, column in path]))
    assert np.mean(path_means) == pytest.approx(target, abs=1.5)


def test_presets_need_their_corruptions_in_the_table(demo_table: CalibrationTable) -> None:
    with pytest.raises(CalibrationError, match="missing: "):
        with_demo_presets(make_calibration_table(("brightness", "jpeg")))
    assert with_demo_presets(demo_table).checksum() == demo_table.checksum()


# ----------------------------------------------------------------------------- training script
def _training_script():
    from tests.builders import load_script

    return load_script("scripts/train_demo_model.py")


@pytest.mark.parametrize(("world", "model_class"), [("imagenet", DemoNet), ("cifar", DemoNetCifar)])
def test_training_is_deterministic(tmp_path: Path, world: str, model_class: type) -> None:
    script = _training_script()
    arguments = [
        "--world",
        world,
        "--train-images-per-class",
        "4",
        "--epochs",
        "1",
        "--batch-size",
        "32",
        "--workers",
        "1",
        "--monitor-images-per-class",
        "0",
        "--eval-images-per-class",
        "0",
    ]
    threads = torch.get_num_threads()
    try:
        for run in ("first", "second"):
            (tmp_path / run).mkdir()
            assert script.main([*arguments, "--out", str(tmp_path / run / "weights.pt")]) == 0
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(False)
    assert file_sha256(tmp_path / "first" / "weights.pt") == file_sha256(tmp_path / "second" / "weights.pt")
    state = torch.load(tmp_path / "first" / "weights.pt", weights_only=True)
    assert set(state) == set(model_class().state_dict())
