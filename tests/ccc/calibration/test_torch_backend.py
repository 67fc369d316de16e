"""The calibration backend ``torch``: the same cells as the CPU backend, exact for the deterministic
corruptions, close for the random ones, reproducible, independent of its batches, resumable, recorded
in the run identity and the table, and reachable from ``ccc-calibrate compute --backend torch``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import ccc.calibration.compute.backends.torch_render as torch_render
from ccc.calibration import CalibrationTable
from ccc.calibration.compute.backends.model import ModelBackend
from ccc.calibration.compute.backends.registry import BackendSetup, get_backend
from ccc.calibration.compute.backends.torch_render import TorchRenderBackend
from ccc.calibration.compute.engine import WorkUnit, image_seeds, seed_key
from ccc.calibration.compute.evaluator import ModelEvaluator
from ccc.calibration.compute.imageset import Preprocessing, select_calibration_images
from ccc.calibration.compute.job import (
    BruteForcePlanner,
    CalibrationJob,
    MemoryResultStore,
    compute_calibration,
    pending_units,
    state_dict_digest,
)
from ccc.calibration.compute.workfolder import WorkFolder, WorkFolderError
from ccc.calibration.run import CalibrationConfig, calibrate
from ccc.calibration.table import CalibrationError
from ccc.cli.calibrate import main
from ccc.execution import SerialExecutor
from ccc.models import ModelSpec
from ccc.stream.sources import index_image_folder
from tests.builders import make_texture_folder, tiny_texture_classifier

SIZE = Preprocessing(resize=72, crop=64)
"""64×64 calibration images: small enough for torch rendering on the CPU in tests."""


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return make_texture_folder(tmp_path_factory.mktemp("textures") / "val", images_per_class=2, size=80)


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return tiny_texture_classifier()


def make_job(folder: Path, model: torch.nn.Module, corruptions: tuple[str, str], images: int = 4) -> CalibrationJob:
    image_set = select_calibration_images(index_image_folder(folder, progress=False), images, 0, SIZE)
    return CalibrationJob(
        image_set, corruptions, "tiny", state_dict_digest(model), BruteForcePlanner(2, -(-images // 2)), block_size=2
    )


def results(job: CalibrationJob, backend) -> dict:  # type: ignore[no-untyped-def]
    store = MemoryResultStore()
    compute_calibration(job, backend, store, created="2026-01-01T00:00:00")
    return store.results


def torch_backend(job: CalibrationJob, model: torch.nn.Module, images_per_batch: int = 250) -> TorchRenderBackend:
    return TorchRenderBackend(job.render_context(), ModelEvaluator(model), images_per_batch)


@pytest.mark.parametrize("corruptions", [("contrast", "brightness"), ("pixelate", "jpeg")])
def test_deterministic_corruptions_give_the_cpu_backends_counts(folder: Path, model, corruptions) -> None:
    job = make_job(folder, model, corruptions)
    cpu = results(job, ModelBackend(SerialExecutor(), job.render_context(), model))
    rendered = results(job, torch_backend(job, model))
    assert len(cpu) == 841 * 2  # every cell of the brute-force grid, on both blocks
    assert rendered == cpu


def test_random_corruptions_are_reproducible_close_to_the_cpu_and_batch_independent(
    folder: Path, model, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = make_job(folder, model, ("gaussian_noise", "contrast"))
    cpu = results(job, ModelBackend(SerialExecutor(), job.render_context(), model))
    first = results(job, torch_backend(job, model))
    assert results(job, torch_backend(job, model)) == first
    monkeypatch.setattr(torch_render, "CACHED_IMAGES", 1)  # every block decoded again for each unit
    assert results(job, torch_backend(job, model, images_per_batch=1)) == first
    assert first.keys() == cpu.keys()
    differences = np.array([first[key] - cpu[key] for key in cpu])
    # Other noise draws move a few images of a few cells (2 images per block): the grid's mean
    # accuracy agrees within 2 points, and most (cell, block) counts are equal.
    assert abs(differences.mean()) / 2 < 0.02
    assert (differences == 0).mean() > 0.8


def test_image_seeds_come_from_the_cpu_engines_seed_sequences(folder: Path, model) -> None:
    context = make_job(folder, model, ("gaussian_noise", "contrast")).render_context()
    key = seed_key(context, 0, 3, (1, 7))
    seeds = image_seeds(5, [2, 0, 1], key)
    expected = [np.random.SeedSequence(5, spawn_key=(k, *key)).generate_state(1, np.uint64)[0] for k in (2, 0, 1)]
    assert seeds.dtype == np.int64 and (seeds >= 0).all() and len(set(seeds.tolist())) == 3
    assert seeds.tolist() == [int(value) & (2**63 - 1) for value in expected]


def test_the_backend_by_name_refuses_what_does_not_apply(folder: Path, model) -> None:
    job = make_job(folder, model, ("contrast", "brightness"))
    backend = get_backend("torch")
    assert not backend.uses_executor and "differ from the CPU path" in backend.description
    with pytest.raises(ValueError, match="unknown option\\(s\\) 'images_per_task' of calibration backend 'torch'"):
        backend.factory(BackendSetup(job.render_context(), SerialExecutor(), model, options={"images_per_task": 3}))
    with pytest.raises(ValueError, match="runs one model in this process: do not pass evaluators"):
        backend.factory(BackendSetup(job.render_context(), SerialExecutor(), model, evaluators=2))
    with pytest.raises(ValueError, match="images_per_batch"):
        backend.factory(BackendSetup(job.render_context(), SerialExecutor(), model, options={"images_per_batch": 0}))


def config(folder: Path, out: Path, **changes) -> CalibrationConfig:
    fields = dict(
        out=out, imagenet=folder, model=ModelSpec("tests.builders:tiny_texture_classifier"),
        corruptions=("gaussian_noise", "contrast"), images=4, block_size=2, preprocessing=SIZE,
        show_progress=False, backend="torch",
    )  # fmt: skip
    return CalibrationConfig(**{**fields, **changes})


def test_a_run_resumes_and_the_backend_is_recorded(folder: Path, model, tmp_path: Path) -> None:
    fresh = calibrate(config(folder, tmp_path / "fresh.npz"))
    assert "computed by calibration backend 'torch'" in fresh.table.metadata.notes
    assert fresh.job.identity()["backend"] == "torch"
    assert "backend" not in make_job(folder, model, ("contrast", "brightness")).identity()

    out = tmp_path / "resumed.npz"
    job = fresh.job
    backend = torch_backend(job, model)
    with WorkFolder.open(config(folder, out).work_folder_path, job.identity()) as work:
        units = [unit for unit in _units(job) if unit.block == 0]
        backend.run(units, work.append)
    resumed = calibrate(config(folder, out))
    assert 0 < resumed.outcome.resumed_images < resumed.outcome.total_images
    assert resumed.table.checksum() == fresh.table.checksum()


def _units(job: CalibrationJob) -> list[WorkUnit]:
    requests = job.planner.next_round({}, {})
    assert requests is not None
    return pending_units(requests, {}, job.block_count)


def test_a_work_folder_of_one_backend_is_not_resumed_with_the_other(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.npz"
    work = config(folder, out).work_folder_path
    job_identity = calibrate(config(folder, tmp_path / "model.npz", backend="model", serial=True)).job.identity()
    WorkFolder.open(work, job_identity).close()
    with pytest.raises(WorkFolderError, match="backend: None there, 'torch' now"):
        calibrate(config(folder, out))


def test_the_torch_backend_runs_in_this_process(folder: Path, tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match="runs in this process on --device: do not combine it with --workers"):
        calibrate(config(folder, tmp_path / "t.npz", workers=2))


def compute_arguments(folder: Path, out: Path, *extra: str) -> list[str]:
    return [
        "compute", "--imagenet", str(folder), "--model", "tests.builders:tiny_texture_classifier",
        "--out", str(out), "--corruptions", "contrast,brightness", "--images", "4", "--block-size", "2",
        "--resize", "72", "--crop", "64", "--no-progress", "--backend", "torch", *extra,
    ]  # fmt: skip


def test_ccc_calibrate_compute_with_the_torch_backend(folder: Path, tmp_path: Path, capsys) -> None:
    assert main(compute_arguments(folder, tmp_path / "cpu.npz", "--backend", "model", "--workers", "0")) == 0
    assert main(compute_arguments(folder, tmp_path / "torch.npz", "--device", "cpu")) == 0
    assert f"wrote {tmp_path / 'torch.npz'}" in capsys.readouterr().out
    cpu, rendered = CalibrationTable.load(tmp_path / "cpu.npz"), CalibrationTable.load(tmp_path / "torch.npz")
    assert rendered.checksum() == cpu.checksum()  # contrast and brightness: the CPU path's bytes
    assert "calibration backend 'torch'" in rendered.metadata.notes
    with pytest.raises(SystemExit):
        main(["compute", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "Its bytes differ from the CPU path's" in help_text and "--backend torch --device cuda" in help_text


def test_the_float32_precision_is_part_of_the_identity_and_only_for_the_torch_backend(
    folder: Path, tmp_path: Path, capsys
) -> None:
    single = calibrate(config(folder, tmp_path / "single.npz", backend_options={"precision": "float32"}))
    assert single.job.identity()["render_precision"] == "float32"
    out = tmp_path / "t.npz"
    assert "render_precision" not in config(folder, out).backend_options
    WorkFolder.open(config(folder, out).work_folder_path, single.job.identity()).close()
    with pytest.raises(WorkFolderError, match="render_precision"):
        calibrate(config(folder, out))
    argv = compute_arguments(folder, tmp_path / "cli.npz", "--device", "cpu", "--render-precision", "float32")
    assert main(argv) == 0
    capsys.readouterr()
    argv = compute_arguments(folder, tmp_path / "m.npz", "--backend", "model", "--render-precision", "float32")
    assert main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "--render-precision applies to the torch rendering backend" in error[0]


def test_cuda_without_a_gpu_is_one_line(folder: Path, tmp_path: Path, capsys) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(compute_arguments(folder, tmp_path / "t.npz", "--device", "cuda")) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "CUDA is not available" in error[0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_deterministic_corruptions_give_the_cpu_backends_counts(folder: Path, model) -> None:
    job = make_job(folder, model, ("contrast", "pixelate"))
    cpu = results(job, ModelBackend(SerialExecutor(), job.render_context(), model))
    rendered = results(job, TorchRenderBackend(job.render_context(), ModelEvaluator(model, "cuda")))
    differences = np.array([rendered[key] - cpu[key] for key in cpu])
    assert (differences == 0).mean() > 0.95  # the same bytes up to float rounding on the GPU
