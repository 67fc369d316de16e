"""ccc-calibrate compute and plot: end to end, the Ray backend, and one-line errors for bad input."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from ccc.calibration import CalibrationTable
from ccc.calibration.compute.workfolder import default_work_folder
from ccc.cli.calibrate import main
from tests.builders import REPOSITORY, make_calibration_table, make_texture_folder


def not_a_model():
    return "a string"


@pytest.fixture(scope="module")
def texture_folder(tmp_path_factory) -> Path:
    return make_texture_folder(tmp_path_factory.mktemp("textures") / "val", images_per_class=1)


def arguments(folder: Path, out: Path, *extra: str, corruptions: str = "gaussian_noise,contrast") -> list[str]:
    return [
        "compute", "--imagenet", str(folder), "--model", "tests.builders:tiny_texture_classifier",
        "--out", str(out), "--corruptions", corruptions, "--images", "4", "--block-size", "2",
        "--resize", "36", "--crop", "32", "--no-progress", *extra,
    ]  # fmt: skip


def assert_one_line_error(capsys, expected_fragment: str) -> None:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert lines, captured
    assert lines[-1].startswith("ccc-calibrate: error: "), captured.err
    assert expected_fragment in lines[-1], lines[-1]
    assert "Traceback" not in captured.err + captured.out


def test_an_adaptive_setting_given_twice_is_refused(texture_folder: Path, tmp_path: Path, capsys) -> None:
    extra = ("--workers", "0", "--adaptive", "--adaptive-setting", "growth=2", "--adaptive-setting", "growth=3")
    assert main(arguments(texture_folder, tmp_path / "t.npz", *extra)) == 2
    assert_one_line_error(capsys, "--adaptive-setting growth is given twice (growth=2.0 and growth=3.0); give it once")
    assert not default_work_folder(tmp_path / "t.npz").exists()


@pytest.fixture(scope="module")
def serial_table(texture_folder: Path, tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("serial") / "tiny.npz"
    assert main(arguments(texture_folder, out, "--workers", "0")) == 0
    return out, CalibrationTable.load(out).checksum()


def test_compute_writes_a_table_and_a_summary(serial_table, capsys) -> None:
    out, _ = serial_table
    table = CalibrationTable.load(out)
    assert table.pairs() == (("gaussian_noise", "contrast"), ("contrast", "gaussian_noise"))
    assert table.metadata.model_name == "factory tests.builders:tiny_texture_classifier"
    assert (table.image_counts_array == 4).all()
    assert not default_work_folder(out).exists()
    assert main(["info", str(out)]) == 0
    assert "pairs:         2 of 2 ordered pairs" in capsys.readouterr().out


def test_compute_summary_reports_images_and_rate(texture_folder: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "adaptive.npz"
    assert main(arguments(texture_folder, out, "--workers", "0", "--adaptive", "--targets", "75,60")) == 0
    output = capsys.readouterr().out
    assert f"wrote {out}: 2 pairs of 2 corruptions" in output
    assert "images/s)" in output and "evaluated " in output
    assert "the brute-force grid needs 3,364" in output
    table = CalibrationTable.load(out)
    assert "adaptive" in table.metadata.notes
    assert (table.image_counts_array[:, 0, :] == 4).all() and (table.image_counts_array[:, :, 0] == 4).all()
    assert (table.image_counts_array[:, 1:, 1:] < 4).any()  # pair cells on a subset of the images


def test_adaptive_settings_from_the_command_line_are_used_and_recorded(
    texture_folder: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "tuned.npz"
    extra = (
        "--workers",
        "0",
        "--adaptive",
        "--targets",
        "75,60",
        "--adaptive-setting",
        "growth=2",
        "--adaptive-setting",
        "path_fraction=2/2",
    )
    assert main(arguments(texture_folder, out, *extra)) == 0
    notes = CalibrationTable.load(out).metadata.notes
    assert "; path_fraction=1.0; growth=2.0" in notes
    assert "pair cells measured on 2-4 images" in notes  # path cells may reach both blocks (by default 1)
    capsys.readouterr()
    assert (
        main(arguments(texture_folder, tmp_path / "t.npz", "--workers", "0", "--adaptive-setting", "growth=1.5")) == 2
    )
    assert_one_line_error(capsys, "--adaptive-setting only applies with --adaptive")
    assert (
        main(
            arguments(
                texture_folder,
                tmp_path / "t.npz",
                "--workers",
                "0",
                "--adaptive",
                "--adaptive-setting",
                "explore_fraction=0",
            )
        )
        == 2
    )
    assert_one_line_error(capsys, "explore_fraction must be in (0, 1], got 0.0")
    assert not default_work_folder(tmp_path / "t.npz").exists()
    with pytest.raises(SystemExit) as exit_info:
        main(arguments(texture_folder, tmp_path / "t.npz", "--adaptive", "--adaptive-setting", "speed=2"))
    assert exit_info.value.code == 2
    assert "expected NAME=VALUE with NAME one of band, z," in capsys.readouterr().err


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster (2 CPUs, 100 MB object store) whose workers can import the test modules."""
    pytest.importorskip("ray")
    from ccc.execution import ray_session

    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY), previous]))
    try:
        with ray_session(workers=2, object_store_bytes=100 * 2**20) as ray:
            yield ray
    finally:
        if previous is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = previous


@pytest.mark.slow
def test_ray_backend_gives_the_serial_table(ray_cluster, serial_table, texture_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "ray.npz"
    assert main(arguments(texture_folder, out, "--workers", "2")) == 0
    assert CalibrationTable.load(out).checksum() == serial_table[1]


# ----------------------------------------------------------------------------- bad input
def test_missing_folder(tmp_path: Path, capsys) -> None:
    assert main(arguments(tmp_path / "nowhere", tmp_path / "t.npz", "--workers", "0")) == 2
    assert_one_line_error(capsys, "does not exist")


def test_folder_not_in_imagenet_layout(tmp_path: Path, capsys) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "a.JPEG").write_bytes(b"")
    assert main(arguments(flat, tmp_path / "t.npz", "--workers", "0")) == 2
    assert_one_line_error(capsys, "not in ImageNet layout")


def test_unreadable_images_are_named_or_skipped(texture_folder: Path, tmp_path: Path, capsys) -> None:
    folder = make_texture_folder(tmp_path / "val", images_per_class=2)
    (folder / "n00000001" / "img_0001.JPEG").write_bytes(b"not a jpeg")
    assert main(arguments(folder, tmp_path / "t.npz", "--workers", "0")) == 2
    assert_one_line_error(capsys, "n00000001/img_0001.JPEG")
    out = tmp_path / "skipped.npz"
    assert main(arguments(folder, out, "--workers", "0", "--skip-bad-images", "--corruptions", "contrast,jpeg")) == 0
    table = CalibrationTable.load(out)
    assert table.metadata.image_count == 4


def test_unknown_model(texture_folder: Path, tmp_path: Path, capsys) -> None:
    command = arguments(texture_folder, tmp_path / "t.npz", "--workers", "0")
    command[command.index("--model") + 1] = "resnet5O"
    assert main(command) == 2
    assert_one_line_error(capsys, "unknown model 'resnet5O'")


def test_factory_that_returns_no_module(texture_folder: Path, tmp_path: Path, capsys) -> None:
    command = arguments(texture_folder, tmp_path / "t.npz", "--workers", "0")
    command[command.index("--model") + 1] = "tests.ccc.cli.test_calibrate_compute:not_a_model"
    assert main(command) == 2
    assert_one_line_error(capsys, "must return a torch.nn.Module")


def test_weights_that_do_not_load(texture_folder: Path, tmp_path: Path, capsys) -> None:
    garbage = tmp_path / "weights.pt"
    garbage.write_bytes(b"definitely not a state dict")
    assert main(arguments(texture_folder, tmp_path / "t.npz", "--workers", "0", "--weights", str(garbage))) == 2
    assert_one_line_error(capsys, "cannot be read: it is not a file written by torch.save")
    mismatched = tmp_path / "other.pt"
    torch.save(torch.nn.Linear(3, 2).state_dict(), mismatched)
    assert main(arguments(texture_folder, tmp_path / "t.npz", "--workers", "0", "--weights", str(mismatched))) == 2
    assert_one_line_error(capsys, "does not match the model")


def test_a_work_folder_of_another_corruption_list_is_kept(texture_folder: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "t.npz"
    folder = default_work_folder(out)
    from ccc.calibration.compute.workfolder import WorkFolder

    with WorkFolder.open(folder, {"format": "ccc-calibration-run", "corruptions": ["fog", "snow"]}):
        pass
    assert main(arguments(texture_folder, out, "--workers", "0")) == 2
    assert_one_line_error(capsys, "corruptions: ['fog', 'snow'] there, ['gaussian_noise', 'contrast'] now")
    assert folder.exists()


def test_unknown_corruption_and_bad_options(texture_folder: Path, tmp_path: Path, capsys) -> None:
    assert main(arguments(texture_folder, tmp_path / "t.npz", "--workers", "0", corruptions="fog,smog")) == 2
    assert_one_line_error(capsys, "unknown corruption 'smog'")
    assert main(arguments(texture_folder, tmp_path / "t.npz", "--workers", "0", "--amp")) == 2
    assert_one_line_error(capsys, "--amp needs --device cuda")
    assert main(arguments(texture_folder, tmp_path / "t.npz", "--workers", "0", "--device", "cuda")) == 2
    assert_one_line_error(capsys, "CUDA is not available")
    assert main(arguments(texture_folder, tmp_path / "t.npz", "--workers", "0", "--images", "9")) == 2
    assert_one_line_error(capsys, "images must be an integer in [1, 4]")
    assert main(arguments(texture_folder, tmp_path / "t.npz", "--workers", "0", "--targets", "40")) == 2
    assert_one_line_error(capsys, "--targets only applies with --adaptive")
    assert main(arguments(texture_folder, tmp_path / "missing" / "t.npz", "--workers", "0")) == 2
    assert_one_line_error(capsys, "does not exist")
    assert main(arguments(texture_folder, tmp_path / "t.npz", "--workers", "0", "--batch-size", "100000000000")) == 2
    assert_one_line_error(capsys, "--batch-size must be an integer in [1, 65,536], got 100,000,000,000")
    assert main(arguments(texture_folder, tmp_path / "t.npz", "--workers", "0", "--resize", "100000000000")) == 2
    assert_one_line_error(capsys, "preprocessing resize must be at most 16,384 pixels, got 100,000,000,000")
    assert (
        main(
            [
                *arguments(texture_folder, tmp_path / "t.npz", "--workers", "0"),
                "--crop",
                "100000000",
                "--resize",
                "100000000",
            ]
        )
        == 2
    )
    assert_one_line_error(capsys, "preprocessing resize must be at most 16,384 pixels, got 100,000,000")


def test_an_existing_table_is_not_overwritten_by_accident(serial_table, texture_folder: Path, capsys) -> None:
    out, checksum = serial_table
    assert main(arguments(texture_folder, out, "--workers", "0")) == 2
    assert_one_line_error(capsys, "already exists; pass --overwrite")
    assert CalibrationTable.load(out).checksum() == checksum


# ----------------------------------------------------------------------------- plot
def test_plot_writes_a_png_with_paths(tmp_path: Path, capsys) -> None:
    table_path = tmp_path / "synthetic.npz"
    make_calibration_table().save(table_path)
    png = tmp_path / "grids.png"
    assert (
        main(
            [
                "plot",
                str(table_path),
                "--out",
                str(png),
                "--pairs",
                "jpeg:contrast,pixelate:brightness",
                "--target",
                "30",
            ]
        )
        == 0
    )
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {png}" in capsys.readouterr().out
    everything = tmp_path / "all.png"
    assert main(["plot", str(table_path), "--out", str(everything), "--max-pairs", "4", "--contours", "20,40"]) == 0
    assert everything.stat().st_size > 0


def test_plot_into_a_folder_or_without_suffix_prints_the_file_written(tmp_path: Path, capsys) -> None:
    table_path = tmp_path / "synthetic.npz"
    make_calibration_table().save(table_path)
    (tmp_path / "plots").mkdir()
    for out, written in [
        (tmp_path / "plots", tmp_path / "plots" / "calibration.png"),
        (tmp_path / "grid", tmp_path / "grid.png"),
    ]:
        assert main(["plot", str(table_path), "--out", str(out), "--max-pairs", "2"]) == 0
        assert capsys.readouterr().out.strip() == f"wrote {written}"
        assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_of_a_computed_table(serial_table, tmp_path: Path) -> None:
    table = CalibrationTable.load(serial_table[0])
    png = tmp_path / "tiny.png"
    assert main(["plot", str(serial_table[0]), "--out", str(png), "--target", "70", "--objective", "minimax"]) == 0
    assert png.stat().st_size > 0
    assert np.isfinite(table.accuracy_array).all()


def test_plot_errors(tmp_path: Path, capsys) -> None:
    table_path = tmp_path / "synthetic.npz"
    make_calibration_table().save(table_path)
    assert main(["plot", str(table_path), "--out", str(tmp_path / "x.png"), "--pairs", "jpeg:fog"]) == 2
    assert_one_line_error(capsys, "unknown corruption 'fog'")
    assert main(["plot", str(table_path), "--out", str(tmp_path / "x.png"), "--pairs", "jpeg"]) == 2
    assert_one_line_error(capsys, "--pairs entries must look like n1:n2, got 'jpeg'")
    assert main(["plot", str(table_path), "--out", str(tmp_path / "x.png"), "--target", "120"]) == 2
    assert_one_line_error(capsys, "target must be an accuracy in [0, 100] percent, got 120")
    assert main(["plot", str(tmp_path / "none.npz"), "--out", str(tmp_path / "x.png")]) == 2
    assert_one_line_error(capsys, "none.npz")
