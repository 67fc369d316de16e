"""The calibration backends by name: the registered ones, a backend registered by a module of its own
and chosen by ``calibrate(config)``, and the one-line errors of a wrong name or option."""

from __future__ import annotations

from pathlib import Path

import pytest

import ccc.calibration.compute.backends.registry as registry
from ccc.calibration.compute.backends.model import ModelBackend
from ccc.calibration.compute.backends.registry import (
    BackendEntry,
    BackendSetup,
    get_backend,
    list_backends,
    register_backend,
)
from ccc.calibration.compute.imageset import Preprocessing, select_calibration_images
from ccc.calibration.compute.job import BruteForcePlanner, CalibrationJob, MemoryResultStore, compute_calibration
from ccc.calibration.run import CalibrationConfig, calibrate
from ccc.calibration.table import CalibrationError
from ccc.execution import SerialExecutor
from ccc.models import ModelSpec
from ccc.stream.sources import index_image_folder
from tests.builders import make_texture_folder, tiny_texture_classifier


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return make_texture_folder(tmp_path_factory.mktemp("textures") / "val", images_per_class=2)


@pytest.fixture(scope="module")
def job(folder: Path) -> CalibrationJob:
    image_set = select_calibration_images(index_image_folder(folder, progress=False), 5, 0, Preprocessing(36, 32))
    return CalibrationJob(
        image_set, ("gaussian_noise", "contrast"), "tiny", "0" * 64, BruteForcePlanner(2, 3), block_size=2
    )


def config(folder: Path, out: Path, **changes) -> CalibrationConfig:
    fields = dict(
        out=out, imagenet=folder, model=ModelSpec("tests.builders:tiny_texture_classifier"),
        corruptions=("gaussian_noise", "contrast"), images=4, block_size=2, preprocessing=Preprocessing(36, 32),
        serial=True, show_progress=False,
    )  # fmt: skip
    return CalibrationConfig(**{**fields, **changes})


@pytest.fixture
def counting_backend(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A backend "counting_test" (the model backend, counting the units it runs), registered for one
    test in a copy of the registry; returns the count of units per run."""
    list_backends()  # the built-in backends are imported (and registered) before the copy is made
    monkeypatch.setattr(registry, "REGISTRY", registry.REGISTRY.copy())
    runs: list[int] = []

    class CountingBackend:
        def __init__(self, setup: BackendSetup) -> None:
            self.inner = get_backend("model").factory(setup)

        def run(self, units, on_result) -> None:  # type: ignore[no-untyped-def]
            runs.append(len(units))
            self.inner.run(units, on_result)

    register_backend(BackendEntry("counting_test", CountingBackend, "the model backend, counting units"))
    return runs


def test_the_backends_are_listed_by_name_and_an_unknown_one_is_named() -> None:
    assert {"model", "simulation"} <= set(list_backends())
    with pytest.raises(ValueError, match="unknown calibration backend 'gpu'; available: model, "):
        get_backend("gpu")


def test_the_model_backend_by_name_is_the_model_backend(job: CalibrationJob) -> None:
    model = tiny_texture_classifier()
    direct = compute_calibration(
        job,
        ModelBackend(SerialExecutor(), job.render_context(), model),
        MemoryResultStore(),
        created="2026-01-01T00:00:00",
    )
    backend = get_backend("model").factory(
        BackendSetup(job.render_context(), SerialExecutor(), model, options={"images_per_task": 3})
    )
    named = compute_calibration(job, backend, MemoryResultStore(), created="2026-01-01T00:00:00")
    assert named.table.checksum() == direct.table.checksum()


def test_a_backend_option_is_checked_in_one_line(job: CalibrationJob) -> None:
    setup = BackendSetup(job.render_context(), SerialExecutor(), tiny_texture_classifier(), options={"speed": 2})
    with pytest.raises(ValueError, match="unknown option\\(s\\) 'speed' of calibration backend 'model'; valid options"):
        get_backend("model").factory(setup)
    with pytest.raises(ValueError, match="backend 'simulation' needs the option 'accuracies'"):
        get_backend("simulation").factory(
            BackendSetup(job.render_context(), SerialExecutor(), tiny_texture_classifier())
        )
    assert setup.block_sizes() == [2, 2, 1]


def test_calibrate_runs_the_backend_its_config_names(folder: Path, tmp_path: Path, counting_backend: list[int]) -> None:
    default = calibrate(config(folder, tmp_path / "model.npz"))
    assert counting_backend == []
    counted = calibrate(config(folder, tmp_path / "counted.npz", backend="counting_test"))
    assert counting_backend and counted.table.accuracy_array.tolist() == default.table.accuracy_array.tolist()
    with pytest.raises(CalibrationError, match="unknown calibration backend 'nope'; available: .*counting_test"):
        calibrate(config(folder, tmp_path / "nope.npz", backend="nope"))


def test_the_counting_backend_is_gone_after_its_test() -> None:
    assert "counting_test" not in list_backends()
