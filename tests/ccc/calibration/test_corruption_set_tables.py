"""Calibration tables of a corruption set other than ``imagenet``: the preprocessing (whole images at the set's
size, JPEG only where the set's streams store it), the metadata and checksum that name the set, the engine
corrupting with the set's parameters, streams bound to their table's set, and ``ccc-calibrate compute
--corruption-set cifar`` on CIFAR-10 pickle batches with a CIFAR backbone's state_dict file, through to a
``ccc-generate`` stream."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from ccc.calibration import CalibrationTable
from ccc.calibration.compute.backends.torch_render import TorchRenderBackend
from ccc.calibration.compute.engine import RenderContext, image_generators, render_base, render_targets, seed_key
from ccc.calibration.compute.imageset import Preprocessing, select_calibration_images
from ccc.calibration.table_io import CalibrationError
from ccc.cli.calibrate import main as calibrate_main
from ccc.cli.generate import main as generate_main
from ccc.corruptions import corrupt_batch, get_corruption_set
from ccc.models import ModelSpec, load_model
from ccc.render import jpeg_round_trip
from ccc.stream.sources import index_image_folder
from ccc.stream.spec import PlanError, resolve_stream_spec
from tests.builders import cli_user_error, make_calibration_table, make_image_folder
from tests.ccc.datasets.cifar_files import write_cifar_folder


@pytest.fixture(scope="module")
def small_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("small") / "images", images_per_class=2, size=(40, 40))


def test_a_set_is_measured_on_whole_images_at_its_size(small_folder: Path) -> None:
    image = Image.open(next(small_folder.rglob("*.JPEG")))
    cifar = Preprocessing(crop=32, kind="stream", corruption_set="cifar")
    expected = np.asarray(image.convert("RGB").resize((32, 32), Image.Resampling.BILINEAR))
    assert np.array_equal(cifar.apply(image), expected)  # no generator: no random crop, no flip
    assert cifar.to_record() == {"kind": "stream", "crop": 32, "corruption_set": "cifar"}
    assert Preprocessing(crop=224, kind="stream").to_record() == {"kind": "stream", "crop": 224}
    assert "whole image resized to 32x32" in cifar.describe() and "no JPEG step" in cifar.describe()
    images = np.stack([expected, expected[::-1]])
    assert cifar.finish(images) is images  # lossless, as the set's streams store PNG
    tiny = Preprocessing(crop=64, kind="stream", corruption_set="tinyimagenet")
    assert tiny.jpeg_after_corruptions
    assert np.array_equal(tiny.finish(images[:, :, :, :]).shape, (2, 32, 32, 3))
    assert np.array_equal(tiny.finish(images)[0], jpeg_round_trip(images[0]))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"crop": 32, "kind": "centre", "corruption_set": "cifar"}, "centre preprocessing is ImageNet-C's"),
        ({"crop": 64, "kind": "stream", "corruption_set": "cifar"}, "preprocessing crop must be 32x32 pixels"),
        ({"crop": 32, "kind": "stream", "corruption_set": "mnist"}, "mnist"),
    ],
)
def test_what_a_sets_preprocessing_refuses(arguments: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Preprocessing(**arguments)


def test_the_metadata_and_checksum_name_a_set_other_than_imagenet(tmp_path: Path) -> None:
    imagenet, cifar = make_calibration_table(), make_calibration_table(corruption_set="cifar")
    assert (imagenet.corruption_set, cifar.corruption_set) == ("imagenet", "cifar")
    assert np.array_equal(imagenet.accuracy_array, cifar.accuracy_array)
    assert imagenet.checksum() != cifar.checksum()
    assert "corruption_set" not in imagenet.metadata.to_json_dict()  # imagenet files are as before sets existed
    cifar.save(tmp_path / "cifar.npz")
    loaded = CalibrationTable.load(tmp_path / "cifar.npz")
    assert loaded.corruption_set == "cifar" and loaded.checksum() == cifar.checksum()
    fields = cifar.metadata.to_json_dict()
    with pytest.raises(CalibrationError, match="metadata corruption_set must be one of imagenet, cifar"):
        type(cifar.metadata).from_json_dict({**fields, "corruption_set": "mnist"})


def _context(folder: Path, corruption_set: str) -> RenderContext:
    preprocessing = Preprocessing(crop=32, kind="stream", corruption_set=corruption_set)
    if corruption_set == "imagenet":
        preprocessing = Preprocessing(resize=32, crop=32)
    image_set = select_calibration_images(index_image_folder(folder, progress=False), 4, 0, preprocessing)
    return RenderContext(image_set, ("gaussian_noise", "frost"), seed=3, block_size=4)


def test_the_engine_corrupts_with_the_sets_parameters(small_folder: Path) -> None:
    cifar, imagenet = _context(small_folder, "cifar"), _context(small_folder, "imagenet")
    clean = render_base(cifar, -1, 0, 0)
    assert np.array_equal(clean, render_base(imagenet, -1, 0, 0))  # square 40×40 images resized to 32×32 either way
    positions = cifar.block_positions(0)
    frost = image_generators(3, positions, seed_key(cifar, 1, 12), "frost")
    base = render_base(cifar, 1, 12, 0)  # frost at severity 3
    assert np.array_equal(base, corrupt_batch(clean, "frost", 3.0, frost, "cifar"))
    assert not np.array_equal(base, render_base(imagenet, 1, 12, 0))
    noise = image_generators(3, positions, seed_key(cifar, 1, 12, (0, 20)), "gaussian_noise")
    expected = corrupt_batch(base, "gaussian_noise", 5.0, noise, "cifar")
    assert np.array_equal(render_targets(cifar, base, 1, 12, 0, [(0, 20)]), expected)


def test_a_table_makes_streams_of_its_own_set_only() -> None:
    cifar = make_calibration_table(corruption_set="cifar")
    spec = resolve_stream_spec({"difficulty": "medium", "speed": 2, "corruption_set": "cifar"}, cifar, "0" * 64)
    assert (spec.corruption_set, spec.crop, spec.image_encoding) == ("cifar", "whole", "png")
    assert spec.calibration_checksum == cifar.checksum()
    with pytest.raises(PlanError, match="measured on corruption set 'cifar', the stream asks for 'imagenet'"):
        resolve_stream_spec({"difficulty": "medium", "speed": 2}, cifar, "0" * 64)
    with pytest.raises(PlanError, match="or a table made with ccc-calibrate compute --corruption-set cifar"):
        definition = {"difficulty": "medium", "speed": 2, "corruption_set": "cifar"}
        resolve_stream_spec(definition, make_calibration_table(), "0" * 64)


def test_the_torch_backend_refuses_another_set(small_folder: Path) -> None:
    with pytest.raises(ValueError, match="calibration backend 'torch' implements corruption set 'imagenet' only"):
        TorchRenderBackend(_context(small_folder, "cifar"), evaluator=None)


@pytest.fixture(scope="module")
def cifar_user_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """CIFAR-10 as torchvision downloads it (pickle batches; 6 test images) and a WRN-40-2 state_dict file."""
    root = tmp_path_factory.mktemp("user")
    write_cifar_folder(root / "data", images_per_file=6)
    torch.manual_seed(0)
    model = load_model(ModelSpec("cifar10:wrn40_2", weights="none", normalization="none"))
    torch.save(model.state_dict(), root / "wrn40_2.pt")
    return root / "data", root / "wrn40_2.pt"


@pytest.mark.slow
def test_a_users_cifar_files_give_a_table_and_a_stream(
    cifar_user_files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    data, weights = cifar_user_files
    monkeypatch.setenv("CCC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "cifar_wrn40_2.npz"
    argv = ["compute", "--corruption-set", "cifar", "--dataset", f"cifar10:{data}", "--model", "cifar10:wrn40_2"]
    argv += ["--weights", str(weights), "--corruptions", "gaussian_noise,contrast", "--images", "2", "--workers", "0"]
    argv += ["--out", str(out), "--no-progress", "--adaptive", "--targets", "20"]
    assert calibrate_main(argv) == 0
    table = CalibrationTable.load(out)
    assert table.corruption_set == "cifar" and table.metadata.preprocessing_kind == "stream"
    assert "whole image resized to 32x32" in table.metadata.preprocessing
    assert (table.image_counts_array[:, 0, :] == 2).all() and (table.image_counts_array[:, :, 0] == 2).all()
    capsys.readouterr()
    assert calibrate_main(["info", str(out)]) == 0
    assert "corruption set cifar" in capsys.readouterr().out

    stream = ["--corruption-set", "cifar", "--dataset", f"cifar10:{data}", "--calibration", str(out)]
    stream += ["--baseline-accuracy", "10", "--corruptions", "gaussian_noise,contrast", "--speed", "2"]
    assert generate_main([*stream, "--num-images", "4", "--no-progress", "--workers", "1"]) == 0
    run_dirs = list((tmp_path / "shards").iterdir())
    assert [path.name.split("_")[0] for path in run_dirs] == ["cifar"]
    manifest = json.loads((run_dirs[0] / "manifest.json").read_text())
    assert manifest["stream"]["corruption_set"] == "cifar"
    assert manifest["stream"]["calibration_checksum"] == table.checksum()
    imagenet_table = tmp_path / "imagenet.npz"
    make_calibration_table(("gaussian_noise", "contrast")).save(imagenet_table)
    mismatched = [*stream[:-6], "--calibration", str(imagenet_table), *stream[-6:]]
    capsys.readouterr()
    assert generate_main(mismatched) == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error
    assert (
        "error: the calibration table was measured on corruption set 'imagenet', the stream asks for 'cifar'" in error
    )


def test_compute_refuses_the_centre_crop_for_another_set(small_folder: Path, tmp_path: Path, capsys) -> None:
    argv = ["compute", "--corruption-set", "cifar", "--preprocessing", "centre", "--imagenet", str(small_folder)]
    argv += ["--model", "tests.builders:tiny_texture_classifier", "--out", str(tmp_path / "t.npz"), "--workers", "0"]
    assert "centre preprocessing is ImageNet-C's" in cli_user_error(calibrate_main, capsys, argv)
    assert get_corruption_set("cifar").image_size == 32
