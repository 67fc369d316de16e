"""calibrate(config): the library function behind ``ccc-calibrate compute`` gives the command's table."""

from __future__ import annotations

from pathlib import Path

import pytest

from ccc.calibration import CalibrationTable, DifficultyPreset
from ccc.calibration.compute.imageset import Preprocessing
from ccc.calibration.compute.workfolder import default_work_folder
from ccc.calibration.run import CalibrationConfig, calibrate
from ccc.calibration.table import CalibrationError
from ccc.cli.calibrate import main
from ccc.models import ModelSpec
from tests.builders import make_texture_folder


@pytest.fixture(scope="module")
def texture_folder(tmp_path_factory) -> Path:
    return make_texture_folder(tmp_path_factory.mktemp("textures") / "val", images_per_class=1)


def config(folder: Path, out: Path, **changes) -> CalibrationConfig:
    fields = dict(
        out=out, imagenet=folder, model=ModelSpec("tests.builders:tiny_texture_classifier"),
        corruptions=("gaussian_noise", "contrast"), images=4, block_size=2, preprocessing=Preprocessing(36, 32),
        serial=True, show_progress=False,
    )  # fmt: skip
    return CalibrationConfig(**{**fields, **changes})


def test_calibrate_from_python_gives_the_command_line_table(texture_folder: Path, tmp_path: Path) -> None:
    presets = {
        "easy": DifficultyPreset(50.0, ("gaussian_noise", "contrast", "fog")),
        "gone": DifficultyPreset(10.0, ("fog", "snow")),
    }
    run = calibrate(config(texture_folder, tmp_path / "library.npz", presets=presets))
    assert run.written == tmp_path / "library.npz"
    assert not default_work_folder(run.written).exists()
    table = CalibrationTable.load(run.written)
    assert table.checksum() == run.table.checksum()
    # presets are restricted to the table's corruptions; one left with fewer than two is dropped
    assert dict(table.difficulty_presets) == {"easy": DifficultyPreset(50.0, ("gaussian_noise", "contrast"))}
    command = [
        "compute", "--imagenet", str(texture_folder), "--model", "tests.builders:tiny_texture_classifier",
        "--out", str(tmp_path / "command.npz"), "--corruptions", "gaussian_noise,contrast", "--images", "4",
        "--block-size", "2", "--resize", "36", "--crop", "32", "--no-progress", "--workers", "0",
    ]  # fmt: skip
    assert main(command) == 0
    assert CalibrationTable.load(tmp_path / "command.npz").accuracy_array.tolist() == table.accuracy_array.tolist()


def test_calibrate_names_the_option_of_a_mistake(texture_folder: Path, tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match="--out folder .*nowhere does not exist"):
        calibrate(config(texture_folder, tmp_path / "nowhere" / "t.npz"))
    with pytest.raises(CalibrationError, match="--amp needs --device cuda"):
        calibrate(config(texture_folder, tmp_path / "t.npz", amp=True))
