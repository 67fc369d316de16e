"""Calibration under the stream's own preprocessing (``ccc-calibrate compute --preprocessing stream``):
each image is the stream's random-resized crop and flip of its source, keyed by the run seed and its
position alone; the model sees every cell through the stream's JPEG quality-85 round trip; the table
is the same whatever the blocks, the task sizes, the layout or (for deterministic corruptions) the
backend; the kind is recorded in the table and its checksum; ``ccc-generate`` notes a centre-crop table."""

from __future__ import annotations

import dataclasses
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import ccc.calibration.compute.backends.model as backends
from ccc.calibration import CalibrationTable
from ccc.calibration.compute.backends.model import ModelBackend
from ccc.calibration.compute.backends.torch_render import TorchRenderBackend
from ccc.calibration.compute.engine import WorkUnit, render_base, render_targets
from ccc.calibration.compute.evaluator import ModelEvaluator, execute_unit
from ccc.calibration.compute.imageset import CROP_KEY, Preprocessing, select_calibration_images
from ccc.calibration.compute.job import BruteForcePlanner, CalibrationJob, MemoryResultStore, compute_calibration
from ccc.calibration.table import CalibrationError, CalibrationMetadata
from ccc.cli.calibrate import main as calibrate_main
from ccc.cli.generate import main as generate_main
from ccc.execution import SerialExecutor
from ccc.stream.plan import sample_resized_crop
from ccc.stream.sources import index_image_folder
from tests.builders import (
    cli_user_error,
    make_calibration_table,
    make_image_folder,
    make_texture_folder,
    tiny_texture_classifier,
)

STREAM = Preprocessing(crop=32, kind="stream")
"""32×32 stream-preprocessed inputs (the corruptions' smallest): brute-force grids stay cheap."""

CREATED = "2026-01-01T00:00:00"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return make_texture_folder(tmp_path_factory.mktemp("textures") / "val", images_per_class=2, size=80)


def make_job(folder: Path, preprocessing: Preprocessing = STREAM, block_size: int = 2, corruptions=None):
    image_set = select_calibration_images(index_image_folder(folder, progress=False), 6, 0, preprocessing)
    corruptions = corruptions or ("gaussian_noise", "contrast")
    return CalibrationJob(
        image_set, corruptions, "tiny", "0" * 64, BruteForcePlanner(2, -(-6 // block_size)), block_size=block_size
    )


def pillow_round_trip(image: np.ndarray) -> np.ndarray:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=85)
    with Image.open(io.BytesIO(buffer.getvalue())) as decoded:
        return np.asarray(decoded.convert("RGB"))


def test_an_image_is_the_streams_crop_and_flip_of_its_source_keyed_by_seed_and_position(folder: Path) -> None:
    image_set = make_job(folder).image_set
    images = image_set.load([0, 3, 5], 7)
    flips = []
    for slot, position in enumerate([0, 3, 5]):
        generator = np.random.default_rng(np.random.SeedSequence(7, spawn_key=(position, CROP_KEY)))
        with Image.open(image_set.root / image_set.relative_paths[position]) as source:
            rgb = source.convert("RGB")
        box = sample_resized_crop(generator, *rgb.size)
        flip = bool(generator.random() < 0.5)
        expected = np.asarray(rgb.crop(box).resize((32, 32), Image.Resampling.BILINEAR))
        assert np.array_equal(images[slot], expected[:, ::-1] if flip else expected), position
        flips.append(flip)
    assert np.array_equal(image_set.load([5], 7)[0], images[2]), "an image's crop does not depend on its block"
    assert not np.array_equal(image_set.load([0, 3, 5], 8), images), "another seed draws other crops"
    assert images.shape == (3, 32, 32, 3) and images.dtype == np.uint8


def test_the_model_sees_every_cell_through_the_streams_jpeg_round_trip(folder: Path) -> None:
    job = make_job(folder)
    context = job.render_context()
    seen: list[np.ndarray] = []

    class Recording(ModelEvaluator):
        def predict(self, images):  # type: ignore[no-untyped-def]
            seen.append(np.array(images))
            return super().predict(images)

    unit = WorkUnit(block=1, corruption=0, severity=12, targets=((1, 8), (1, 20)), evaluate_base=True)
    execute_unit(context, unit, Recording(tiny_texture_classifier()))
    base = render_base(context, 0, 12, 1)
    assert np.array_equal(seen[0], np.stack([pillow_round_trip(image) for image in base]))
    centre_context = dataclasses.replace(
        context, image_set=dataclasses.replace(context.image_set, preprocessing=Preprocessing(36, 32))
    )
    unfinished = render_targets(centre_context, base, 0, 12, 1, unit.targets)
    assert np.array_equal(seen[1], np.stack([pillow_round_trip(image) for image in unfinished]))
    assert not np.array_equal(seen[0], base), "the JPEG round trip changes the images"


def test_the_table_is_the_same_whatever_blocks_task_sizes_and_layout(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tiny_texture_classifier()
    tables = []
    for block_size in (2, 3):
        job = make_job(folder, block_size=block_size)
        backend = ModelBackend(SerialExecutor(), job.render_context(), model, images_per_task=4 * block_size)
        tables.append(compute_calibration(job, backend, MemoryResultStore(), created=CREATED).table)

    class OneGpuExecutor(SerialExecutor):
        distributed = True
        gpus = 1

    monkeypatch.setattr(
        backends, "build_evaluator", lambda module, device, batch_size, amp: ModelEvaluator(module, "cpu", batch_size)
    )
    job = make_job(folder, block_size=3)
    split = ModelBackend(OneGpuExecutor(), job.render_context(), model, device="cuda", batch_size=5, images_per_task=7)
    tables.append(compute_calibration(job, split, MemoryResultStore(), created=CREATED).table)
    assert len({table.checksum() for table in tables}) == 1
    assert all(np.array_equal(table.accuracy_array, tables[0].accuracy_array) for table in tables)

    centre = make_job(folder, Preprocessing(36, 32), block_size=3)
    centre_table = compute_calibration(
        centre, ModelBackend(SerialExecutor(), centre.render_context(), model), MemoryResultStore(), created=CREATED
    ).table
    assert not np.array_equal(centre_table.accuracy_array, tables[0].accuracy_array)
    assert tables[0].metadata.preprocessing_kind == "stream" and centre_table.metadata.preprocessing_kind == "centre"
    assert "random-resized crop to 32x32" in tables[0].metadata.preprocessing
    assert job.identity()["preprocessing"] == {"kind": "stream", "crop": 32}
    assert centre.identity()["preprocessing"] == {"resize": 36, "crop": 32}, "centre work folders keep resuming"


def test_the_torch_backend_gives_the_cpu_counts_for_deterministic_corruptions(folder: Path) -> None:
    model = tiny_texture_classifier()
    job = make_job(folder, corruptions=("contrast", "brightness"))
    cpu, rendered = MemoryResultStore(), MemoryResultStore()
    compute_calibration(job, ModelBackend(SerialExecutor(), job.render_context(), model), cpu, created=CREATED)
    torch_backend = TorchRenderBackend(job.render_context(), ModelEvaluator(model), 250)
    compute_calibration(job, torch_backend, rendered, created=CREATED)
    assert rendered.results == cpu.results


def test_the_kind_is_recorded_and_a_table_without_it_is_a_centre_table(tmp_path: Path) -> None:
    centre, stream = make_calibration_table(), make_calibration_table(preprocessing_kind="stream")
    assert np.array_equal(centre.accuracy_array, stream.accuracy_array)
    assert centre.checksum() != stream.checksum(), "the stream kind enters the checksum"
    assert CalibrationTable.from_bytes(stream.to_bytes()).metadata.preprocessing_kind == "stream"

    # a file written before the kind existed: its metadata lacks the field
    path = tmp_path / "old.npz"
    with zipfile.ZipFile(io.BytesIO(centre.to_bytes())) as original, zipfile.ZipFile(path, "w") as rewritten:
        for member in original.infolist():
            data = original.read(member)
            if member.filename == "metadata.json":
                document = json.loads(data)
                del document["metadata"]["preprocessing_kind"]
                data = json.dumps(document).encode()
            rewritten.writestr(member, data)
    old = CalibrationTable.load(path)
    assert old.metadata.preprocessing_kind == "centre" and old.checksum() == centre.checksum()
    with pytest.raises(CalibrationError, match="preprocessing_kind must be one of centre, stream, got 'random'"):
        dataclasses.replace(centre.metadata, preprocessing_kind="random")
    assert isinstance(old.metadata, CalibrationMetadata)


def test_preprocessing_mistakes_are_named() -> None:
    with pytest.raises(ValueError, match="preprocessing must be one of centre, stream, got 'random'"):
        Preprocessing(kind="random")
    assert Preprocessing(resize=256, crop=300, kind="stream").crop == 300, "the stream kind does not resize"
    with pytest.raises(ValueError, match="resize must be >= crop"):
        Preprocessing(resize=256, crop=300)
    with pytest.raises(ValueError, match="stream preprocessing draws its crop and flip: give it a generator"):
        STREAM.apply(Image.new("RGB", (64, 64)))
    images = np.zeros((2, 32, 32, 3), dtype=np.uint8)
    assert Preprocessing().finish(images) is images


def compute_arguments(folder: Path, out: Path, *extra: str) -> list[str]:
    return [
        "compute", "--imagenet", str(folder), "--model", "tests.builders:tiny_texture_classifier",
        "--out", str(out), "--corruptions", "contrast,brightness", "--images", "4", "--block-size", "2",
        "--crop", "40", "--no-progress", "--workers", "0", *extra,
    ]  # fmt: skip


def test_ccc_calibrate_compute_preprocessing_stream(folder: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "stream.npz"
    assert calibrate_main(compute_arguments(folder, out, "--preprocessing", "stream")) == 0
    assert CalibrationTable.load(out).metadata.preprocessing_kind == "stream"
    capsys.readouterr()
    assert calibrate_main(["info", str(out)]) == 0
    assert "preprocessing: stream (RGB, random-resized crop to 40x40" in capsys.readouterr().out
    line = cli_user_error(
        calibrate_main,
        capsys,
        compute_arguments(folder, tmp_path / "x.npz", "--preprocessing", "stream", "--resize", "60"),
    )
    assert "--resize applies to --preprocessing centre" in line


@pytest.mark.parametrize("kind", ["centre", "stream"])
def test_ccc_generate_notes_a_table_measured_on_other_crops(kind: str, tmp_path: Path, capsys) -> None:
    table = tmp_path / "table.npz"
    make_calibration_table(preprocessing_kind=kind).save(table)
    argv = [
        "--calibration", str(table), "--imagenet", str(make_image_folder(tmp_path / "val")), "--difficulty", "medium",
        "--speed", "4", "--num-images", "40", "--out", str(tmp_path / "out"), "--dry-run", "--no-progress",
    ]  # fmt: skip
    assert generate_main(argv) == 0
    notes = [
        line for line in capsys.readouterr().err.splitlines() if "ccc-calibrate compute --preprocessing stream" in line
    ]
    assert len(notes) == (1 if kind == "centre" else 0)
    if notes:
        assert notes[0].startswith("ccc-generate: note: the calibration table measured centre crops")
