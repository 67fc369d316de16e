"""Calibration computation: image set, per-image seeds, work sharing, serial engine, table output."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.transforms as transforms
from PIL import Image

import ccc.calibration.compute.engine as engine
from ccc.calibration.compute.backends.model import ModelBackend
from ccc.calibration.compute.engine import (
    CLEAN_CELL,
    Cell,
    RenderContext,
    corruption_identifier,
    grid_cell,
    render_base,
    render_targets,
)
from ccc.calibration.compute.evaluator import ModelEvaluator
from ccc.calibration.compute.imageset import Preprocessing, select_calibration_images
from ccc.calibration.compute.job import (
    BruteForcePlanner,
    CalibrationJob,
    MemoryResultStore,
    cell_blocks,
    compute_calibration,
    pending_units,
    state_dict_digest,
)
from ccc.corruptions import corrupt
from ccc.execution import SerialExecutor
from ccc.stream.sources import index_image_folder
from tests.builders import make_image_folder, make_texture_folder, tiny_texture_classifier

SMALL = Preprocessing(resize=36, crop=32)


@pytest.fixture(scope="module")
def texture_folder(tmp_path_factory) -> Path:
    return make_texture_folder(tmp_path_factory.mktemp("textures") / "val", images_per_class=3)


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return tiny_texture_classifier()


def make_job(
    folder: Path, model: torch.nn.Module, corruptions=("gaussian_noise", "contrast"), images=4, block_size=2, seed=0
) -> CalibrationJob:
    index = index_image_folder(folder, progress=False)
    image_set = select_calibration_images(index, images, 0, SMALL)
    blocks = -(-images // block_size)
    return CalibrationJob(
        image_set, corruptions, "test tiny texture classifier", state_dict_digest(model),
        BruteForcePlanner(len(corruptions), blocks), seed=seed, block_size=block_size,
    )  # fmt: skip


# ----------------------------------------------------------------------------- image set
@pytest.mark.parametrize("size", [(500, 375), (375, 500), (300, 300)])
def test_preprocessing_equals_torchvision_resize_and_centre_crop(tmp_path: Path, size) -> None:
    image = Image.fromarray(np.random.default_rng(1).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
    expected = np.asarray(transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224)])(image))
    np.testing.assert_array_equal(Preprocessing().apply(image), expected)


def test_preprocessing_validates_sizes() -> None:
    with pytest.raises(ValueError, match="crop must be >= 32 pixels, got 16"):
        Preprocessing(resize=20, crop=16)
    with pytest.raises(ValueError, match=r"resize must be >= crop \(64\) pixels, got 50"):
        Preprocessing(resize=50, crop=64)


def test_selection_is_class_balanced_deterministic_and_sorted(tmp_path: Path) -> None:
    index = index_image_folder(
        make_image_folder(tmp_path / "val", classes=4, images_per_class=6, size=(40, 40)), progress=False
    )
    chosen = select_calibration_images(index, 8, seed=3)
    assert sorted(chosen.labels) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert list(chosen.relative_paths) == sorted(chosen.relative_paths)
    assert select_calibration_images(index, 8, seed=3) == chosen
    other = select_calibration_images(index, 8, seed=4)
    assert other.relative_paths != chosen.relative_paths
    assert other.checksum() != chosen.checksum()
    assert select_calibration_images(index, 24, seed=3).relative_paths == tuple(image.relative_path for image in index)
    odd = select_calibration_images(index, 6, seed=3)
    assert sorted(np.bincount(odd.labels, minlength=4)) == [1, 1, 2, 2]
    assert sorted(chosen.evaluation_order()) == list(range(8))
    assert "8 images" in chosen.describe() and "seed 3" in chosen.describe()


def test_selection_rejects_bad_counts(tmp_path: Path) -> None:
    index = index_image_folder(
        make_image_folder(tmp_path / "val", classes=2, images_per_class=2, size=(40, 40)), progress=False
    )
    with pytest.raises(ValueError, match=r"images must be an integer in \[1, 4\].*got 5"):
        select_calibration_images(index, 5)
    with pytest.raises(ValueError, match="seed must be an integer >= 0, got -1"):
        select_calibration_images(index, 2, seed=-1)


# ----------------------------------------------------------------------------- rendering and seeds
def test_rendering_follows_the_documented_per_image_seeds(texture_folder: Path, model) -> None:
    context = make_job(
        texture_folder, model, ("gaussian_noise", "fog"), images=6, block_size=3, seed=11
    ).render_context()
    positions = context.block_positions(1)
    clean = context.image_set.load(positions)
    base = render_base(context, 0, 7, 1)
    targets = render_targets(context, base, 0, 7, 1, [(1, 3), (1, 20)])
    noise, fog = corruption_identifier("gaussian_noise"), corruption_identifier("fog")
    for slot, k in enumerate(positions):
        expected_base = corrupt(
            clean[slot],
            "gaussian_noise",
            1.75,
            np.random.default_rng(np.random.SeedSequence(11, spawn_key=(k, noise, 7))),
        )
        np.testing.assert_array_equal(base[slot], expected_base)
        for t, (severity_index, severity) in enumerate([(3, 0.75), (20, 5.0)]):
            seed = np.random.SeedSequence(11, spawn_key=(k, noise, 7, fog, severity_index))
            expected = corrupt(expected_base, "fog", severity, np.random.default_rng(seed))
            np.testing.assert_array_equal(targets[t * len(positions) + slot], expected)


def test_results_do_not_depend_on_block_partition(texture_folder: Path, model) -> None:
    """The same image gets the same corrupted pixels whichever block (and worker) renders it."""
    small_blocks = make_job(texture_folder, model, images=6, block_size=2).render_context()
    one_block = make_job(texture_folder, model, images=6, block_size=6).render_context()
    whole = render_targets(one_block, render_base(one_block, 1, 5, 0), 1, 5, 0, [(0, 9)])
    by_position = dict(zip(one_block.block_positions(0), whole))
    for block in range(3):
        rendered = render_targets(small_blocks, render_base(small_blocks, 1, 5, block), 1, 5, block, [(0, 9)])
        for k, image in zip(small_blocks.block_positions(block), rendered):
            np.testing.assert_array_equal(image, by_position[k])


def test_cells_of_grid_share_single_and_clean_cells() -> None:
    assert grid_cell(2, 5, 0, 0) == CLEAN_CELL
    assert grid_cell(2, 5, 4, 0) == grid_cell(2, 7, 4, 0) == Cell(2, 4, -1, 0)
    assert grid_cell(2, 5, 0, 9) == grid_cell(5, 1, 9, 0) == Cell(5, 9, -1, 0)
    assert grid_cell(2, 5, 3, 9) == Cell(2, 3, 5, 9)


def test_pending_units_group_targets_by_base_and_skip_done_work() -> None:
    requests = {CLEAN_CELL: 2, Cell(0, 3, -1, 0): 2, Cell(0, 3, 1, 4): 2, Cell(0, 3, 1, 5): 1, Cell(1, 2, 0, 1): 1}
    done = (Cell(0, 3, 1, 4), cell_blocks(Cell(0, 3, 1, 4), 2, 4)[0])
    units = pending_units(requests, done={done}, block_count=4)
    keys = [(unit.corruption, unit.severity, unit.block) for unit in units]
    assert keys == sorted(set(keys))
    assert [key for key, unit in zip(keys, units) if unit.evaluate_base] == [
        (-1, 0, 0),
        (-1, 0, 1),
        (0, 3, 0),
        (0, 3, 1),
    ]
    covered = sorted(
        (Cell(unit.corruption, unit.severity, n2, s2), unit.block) for unit in units for n2, s2 in unit.targets
    )
    wanted = sorted(
        (cell, block)
        for cell, count in requests.items()
        if not (cell.is_clean or cell.is_single)
        for block in cell_blocks(cell, count, 4)
        if (cell, block) != done
    )
    assert covered == wanted and len(wanted) == 3
    assert all(unit.targets or unit.evaluate_base for unit in units)


def test_cell_blocks_are_nested_windows_and_pair_cells_start_apart() -> None:
    """Singles and the clean cell use the first blocks; pair cells start at their own offsets (so
    few-block cells see different images), wrap around, keep their earlier blocks when they grow,
    and cover every block at the full count."""
    assert cell_blocks(CLEAN_CELL, 3, 10) == [0, 1, 2] and cell_blocks(Cell(2, 7, -1, 0), 2, 10) == [0, 1]
    pairs = [Cell(0, i, 1, j) for i in range(1, 21) for j in range(1, 21)]
    for cell in pairs[:50]:
        blocks = cell_blocks(cell, 100, 100)
        assert sorted(blocks) == list(range(100))
        assert cell_blocks(cell, 7, 100) == blocks[:7]
        assert blocks[1] == (blocks[0] + 1) % 100
    starts = {cell_blocks(cell, 1, 100)[0] for cell in pairs}
    assert len(starts) > 90
    with pytest.raises(ValueError, match=r"count must be in \[0, 10\], got 11"):
        cell_blocks(CLEAN_CELL, 11, 10)


# ----------------------------------------------------------------------------- work sharing
def test_brute_force_corrupts_each_base_once_and_each_cell_once(texture_folder: Path, model, monkeypatch) -> None:
    """C corruptions: per image 20·C base corruptions (shared by all pairs) + 400·C·(C−1) second stages."""
    calls: list[tuple[str, float, int]] = []
    original = engine.corrupt_batch

    def counting(images, name, severity, rngs=None, corruption_set="imagenet"):
        calls.append((name, severity, len(images)))
        return original(images, name, severity, rngs, corruption_set)

    monkeypatch.setattr(engine, "corrupt_batch", counting)
    corruptions = ("gaussian_noise", "contrast", "pixelate")
    job = make_job(texture_folder, model, corruptions, images=2, block_size=2)
    outcome = compute_calibration(job, ModelBackend(SerialExecutor(), job.render_context(), model), MemoryResultStore())
    images = 2
    corrupted = sum(count for _, _, count in calls)
    assert corrupted == (20 * 3 + 400 * 3 * 2) * images == outcome.corrupted_images
    assert outcome.evaluated_images == (1 + 20 * 3 + 400 * 6) * images == outcome.total_images
    first_stage = [call for call in calls if call[0] == "gaussian_noise"]
    # gaussian_noise appears as a base (20 severities) and as a second stage after the 2 others
    # (2 × 400 / 20 per severity).
    assert len(first_stage) == 20 + 2 * 20 * 20
    assert len({(name, severity) for name, severity, _ in calls}) == 3 * 20


# ----------------------------------------------------------------------------- serial engine → table
def test_serial_brute_force_table_holds_the_measured_accuracies(texture_folder: Path, model) -> None:
    job = make_job(texture_folder, model, images=4, block_size=3)
    outcome = compute_calibration(
        job, ModelBackend(SerialExecutor(), job.render_context(), model, batch_size=7), MemoryResultStore()
    )
    table = outcome.table
    assert table.pairs() == (("gaussian_noise", "contrast"), ("contrast", "gaussian_noise"))
    assert (table.image_counts_array == 4).all()
    context = job.render_context()
    labels = np.concatenate([context.block_labels(b) for b in range(context.block_count)])
    predictions = []
    for block in range(context.block_count):
        base = render_base(context, 0, 8, block)
        predictions.append(ModelEvaluator(model).predict(render_targets(context, base, 0, 8, block, [(1, 4)])))
    expected = 100.0 * (np.concatenate(predictions) == labels).mean()
    assert table.grid("gaussian_noise", "contrast")[8, 4] == expected
    grid = table.grid("contrast", "gaussian_noise")
    assert grid[0, 0] == 100.0
    np.testing.assert_array_equal(grid[0, :], table.grid("gaussian_noise", "contrast")[:, 0])
    assert grid.min() < grid[0, 0]
    metadata = table.metadata
    assert metadata.image_count == 4
    assert metadata.image_set_sha256 == job.image_set.checksum()
    assert metadata.model_weights_sha256 == state_dict_digest(model)
    assert metadata.model_name == "test tiny texture classifier"
    assert "brute force" in metadata.notes
    assert "centre crop 32x32" in metadata.preprocessing
    assert table.difficulty_presets == {}


def test_results_do_not_depend_on_batch_size_or_unit_order(texture_folder: Path, model) -> None:
    job = make_job(texture_folder, model, images=4, block_size=2)
    first = compute_calibration(
        job, ModelBackend(SerialExecutor(), job.render_context(), model, batch_size=64), MemoryResultStore()
    )

    class ReversedBackend(ModelBackend):
        def run(self, units, on_result):
            super().run(list(reversed(units)), on_result)

    second = compute_calibration(
        job,
        ReversedBackend(SerialExecutor(), job.render_context(), model, batch_size=5, images_per_task=7),
        MemoryResultStore(),
    )
    assert second.table.checksum() == first.table.checksum()


def test_seed_changes_the_noise(texture_folder: Path, model) -> None:
    context = make_job(texture_folder, model, images=2, block_size=2).render_context()
    other = dataclasses.replace(make_job(texture_folder, model, images=2, block_size=2, seed=1).render_context())
    assert not np.array_equal(render_base(context, 0, 10, 0), render_base(other, 0, 10, 0))
    np.testing.assert_array_equal(
        render_base(context, 1, 10, 0), render_base(other, 1, 10, 0)
    )  # contrast is deterministic


def test_job_and_evaluator_validate_their_inputs(texture_folder: Path, model) -> None:
    with pytest.raises(ValueError, match="unknown corruption 'fogg'"):
        make_job(texture_folder, model, ("fogg", "snow"))
    with pytest.raises(ValueError, match=r"corruptions must be distinct, got \['jpeg'\]"):
        make_job(texture_folder, model, ("jpeg", "jpeg_compression"))
    with pytest.raises(ValueError, match="at least 2 corruptions"):
        make_job(texture_folder, model, ("jpeg",))
    with pytest.raises(ValueError, match="block_size must be an integer >= 1, got 0"):
        RenderContext(make_job(texture_folder, model).image_set, ("fog", "snow"), 0, 0)
    with pytest.raises(ValueError, match="amp.*needs a CUDA device"):
        ModelEvaluator(model, "cpu", amp=True)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        ModelEvaluator(model, "cpu", batch_size=0)
