"""ccc-calibrate: import and info subcommands, one-line errors with exit code 2."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from ccc.calibration import CCC_CORRUPTIONS, CalibrationTable
from ccc.cli.calibrate import SUBCOMMANDS, build_parser, main


@pytest.fixture(scope="module")
def published_pickle(tmp_path_factory):
    rng = np.random.default_rng(3)
    matrices = {
        f"n1_{a}_n2_{b}": rng.uniform(5.0, 75.0, (21, 21)) for a in CCC_CORRUPTIONS for b in CCC_CORRUPTIONS if a != b
    }
    matrices["n1_fog_n2_snow"][0, 0] = 80.0
    matrices["n1_snow_n2_fog"][20, 20] = 1.0
    path = tmp_path_factory.mktemp("published") / "ccc_accuracy_matrix.pickle"
    path.write_bytes(pickle.dumps(matrices, protocol=4))
    return path, matrices


def test_import_then_info(tmp_path, published_pickle, capsys):
    source, matrices = published_pickle
    out = tmp_path / "resnet50.npz"
    assert main(["import", str(source), "--out", str(out), "--no-progress"]) == 0
    table = CalibrationTable.load(out)
    np.testing.assert_array_equal(table.grid("fog", "snow"), matrices["n1_fog_n2_snow"])
    assert f"checksum {table.checksum()}" in capsys.readouterr().out

    assert main(["info", str(out)]) == 0
    output = capsys.readouterr().out
    assert "torchvision resnet50 IMAGENET1K_V1 (published CCC calibration)" in output
    assert "pairs:         210 of 210 ordered pairs" in output
    assert "min 1.00 %, max 80.00 %" in output
    assert "images/cell:   min 5000, max 5000" in output
    fog_line = next(line for line in output.splitlines() if line.strip().startswith("fog "))
    expected_fog = table.single_corruption_accuracy("fog")[[0, 4, 8, 12, 16, 20]]
    assert [float(value) for value in fog_line.split()[1:]] == pytest.approx(expected_fog, abs=0.005)
    assert "easy: target 40 %, 14 corruptions" in output
    assert "medium: target 20 %, 13 corruptions" in output
    assert "hard: target 0 %, 4 corruptions: gaussian_noise, shot_noise, impulse_noise, contrast" in output


def assert_one_line_error(capsys, expected_fragment: str) -> None:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("ccc-calibrate: error: ")
    assert expected_fragment in lines[0]
    assert "Traceback" not in captured.err + captured.out


def test_info_of_missing_file(tmp_path, capsys):
    assert main(["info", str(tmp_path / "absent.npz")]) == 2
    assert_one_line_error(capsys, "absent.npz: cannot read calibration table")


def test_info_of_a_pickle_suggests_import(tmp_path, published_pickle, capsys):
    source, _ = published_pickle
    assert main(["info", str(source)]) == 2
    assert_one_line_error(capsys, "it looks like the published CCC pickle: pass it to ccc-generate --calibration")


def test_import_of_hostile_pickle(tmp_path, capsys):
    marker = tmp_path / "pwned"

    class Hostile:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    source = tmp_path / "evil.pickle"
    source.write_bytes(pickle.dumps(Hostile()))
    out = tmp_path / "table.npz"
    assert main(["import", str(source), "--out", str(out)]) == 2
    assert_one_line_error(capsys, "refusing to unpickle global")
    assert not marker.exists() and not out.exists()


def test_import_into_missing_folder(tmp_path, published_pickle, capsys):
    source, _ = published_pickle
    assert main(["import", str(source), "--out", str(tmp_path / "no" / "t.npz"), "--no-progress"]) == 2
    assert_one_line_error(capsys, "folder does not exist")


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as raised:
        main([])
    assert raised.value.code == 2
    with pytest.raises(SystemExit) as raised:
        main(["import", "x.pickle"])
    assert raised.value.code == 2
    assert "--out" in capsys.readouterr().err


def test_help_lists_registered_subcommands(capsys):
    with pytest.raises(SystemExit) as raised:
        main(["--help"])
    assert raised.value.code == 0
    help_text = capsys.readouterr().out
    for subcommand in SUBCOMMANDS:
        assert subcommand.name in help_text
    assert [subcommand.name for subcommand in SUBCOMMANDS] == ["import", "info", "compute", "plot"]


def test_extension_point_adds_a_subcommand(capsys):
    from ccc.cli.calibrate import Subcommand

    def add_arguments(parser):
        parser.add_argument("--value", type=int, required=True)

    def run(arguments):
        print(f"value={arguments.value}")
        return 0

    parser = build_parser((*SUBCOMMANDS, Subcommand("echo", "test command", add_arguments, run)))
    arguments = parser.parse_args(["echo", "--value", "4"])
    assert arguments.run(arguments) == 0
    assert capsys.readouterr().out == "value=4\n"
