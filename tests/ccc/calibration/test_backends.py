"""ModelBackend's two layouts on one executor interface give the same table: whole units on workers
(CPU, serial) and the split layout (rendering tasks feeding model workers, as on a GPU cluster),
here exercised on the serial executor posing as a distributed one with a GPU."""

from __future__ import annotations

import pytest

import ccc.calibration.compute.backends.model as backends
from ccc.calibration.compute.backends.model import ModelBackend
from ccc.calibration.compute.evaluator import ModelEvaluator
from ccc.calibration.compute.imageset import Preprocessing, select_calibration_images
from ccc.calibration.compute.job import BruteForcePlanner, CalibrationJob, MemoryResultStore, compute_calibration
from ccc.execution import SerialExecutor
from ccc.stream.sources import index_image_folder
from tests.builders import make_texture_folder, tiny_texture_classifier


class OneGpuExecutor(SerialExecutor):
    """The serial executor, reporting itself distributed with one GPU (selects the split layout)."""

    distributed = True

    @property
    def gpus(self) -> int:
        return 1


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> CalibrationJob:
    folder = make_texture_folder(tmp_path_factory.mktemp("textures") / "val", images_per_class=3)
    image_set = select_calibration_images(index_image_folder(folder, progress=False), 6, 0, Preprocessing(36, 32))
    return CalibrationJob(
        image_set, ("gaussian_noise", "contrast"), "tiny", "0" * 64, BruteForcePlanner(2, 2), block_size=3
    )


def test_the_split_layout_gives_the_whole_unit_table(job: CalibrationJob, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_texture_classifier()
    whole_units = compute_calibration(
        job,
        ModelBackend(SerialExecutor(), job.render_context(), model),
        MemoryResultStore(),
        created="2026-01-01T00:00:00",
    )
    # the model workers of the split layout predict on "cuda"; here they run on the CPU
    monkeypatch.setattr(
        backends, "build_evaluator", lambda module, device, batch_size, amp: ModelEvaluator(module, "cpu", batch_size)
    )
    split = ModelBackend(OneGpuExecutor(), job.render_context(), model, device="cuda", batch_size=5, images_per_task=7)
    outcome = compute_calibration(job, split, MemoryResultStore(), created="2026-01-01T00:00:00")
    assert outcome.table.checksum() == whole_units.table.checksum()
    assert outcome.evaluated_images == whole_units.evaluated_images


def test_layout_mistakes_are_named(job: CalibrationJob) -> None:
    model = tiny_texture_classifier()

    class NoGpuExecutor(OneGpuExecutor):
        @property
        def gpus(self) -> int:
            return 0

    with pytest.raises(ValueError, match="device 'cuda' requested but the Ray cluster has no GPU"):
        ModelBackend(NoGpuExecutor(), job.render_context(), model, device="cuda")
    with pytest.raises(ValueError, match="amp\\) needs a CUDA device"):
        ModelBackend(SerialExecutor(), job.render_context(), model, amp=True)
    with pytest.raises(ValueError, match="evaluators must be at most the cluster's 1 CPUs"):
        ModelBackend(OneGpuExecutor(), job.render_context(), model, evaluators=2)
