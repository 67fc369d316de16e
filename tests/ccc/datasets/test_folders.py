"""``--dataset NAME[/SPLIT]:PATH``: CIFAR pickle batches and Tiny-ImageNet folders written once into the cache
as class folders that the stream plan reads with the published labels and pixels, and ``ccc-generate`` on them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ccc.cli.generate import main as generate_main
from ccc.cli.verify import main as verify_main
from ccc.datasets.folders import CLASS_LIST_NAME, DatasetLocationError, dataset_image_folder, parse_dataset
from ccc.load import open_stream
from ccc.stream.sources import index_image_folder
from tests.builders import cli_user_error
from tests.ccc.datasets.cifar_files import write_cifar_folder
from tests.ccc.datasets.test_tiny_imagenet import VAL_LABELS, make_tiny_imagenet


def _images_by_position(folder: Path) -> dict[int, tuple[np.ndarray, int]]:
    classes = (folder / CLASS_LIST_NAME).read_text().split()
    index = index_image_folder(folder, classes=classes, progress=False)
    return {
        int(Path(image.relative_path).stem): (np.asarray(Image.open(folder / image.relative_path)), image.class_index)
        for image in index.images
    }


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_a_cifar_split_becomes_class_folders_with_its_pixels_and_labels(tmp_path: Path, name: str) -> None:
    expected = write_cifar_folder(tmp_path / "data", name)
    folder = dataset_image_folder(f"{name}:{tmp_path / 'data'}", cache_dir=tmp_path / "cache")
    assert folder.parent == tmp_path / "cache" / "datasets" and folder.name.startswith(f"{name}-test-")
    images, labels = expected["test"]
    found = _images_by_position(folder)
    assert sorted(found) == list(range(len(labels)))
    for position, (pixels, label) in found.items():
        assert np.array_equal(pixels, images[position]) and label == labels[position]
    record = json.loads((folder / "dataset.json").read_text())
    assert (record["dataset"], record["split"]) == (name, "test")
    if name == "cifar100":  # class_0, class_1, class_10, ... do not sort in label order: labels prefix them
        assert record["classes"][:2] == ["00_class_0", "01_class_1"]


def test_the_folder_is_written_once_and_named_by_its_content(tmp_path: Path) -> None:
    write_cifar_folder(tmp_path / "a", "cifar10")
    write_cifar_folder(tmp_path / "b", "cifar10", seed=1)
    first = dataset_image_folder(f"cifar10:{tmp_path / 'a'}", cache_dir=tmp_path / "cache")
    stamp = (first / "dataset.json").stat().st_mtime_ns
    assert dataset_image_folder(f"cifar10:{tmp_path / 'a' / 'cifar-10-batches-py'}", tmp_path / "cache") == first
    assert (first / "dataset.json").stat().st_mtime_ns == stamp
    other = dataset_image_folder(f"cifar10:{tmp_path / 'b'}", cache_dir=tmp_path / "cache")
    assert other != first
    train = dataset_image_folder(f"cifar10/train:{tmp_path / 'a'}", cache_dir=tmp_path / "cache")
    assert train.name.startswith("cifar10-train-") and len(_images_by_position(train)) == 15
    assert not list((tmp_path / "cache" / "datasets").glob(".*partial"))


def test_tiny_imagenet_val_images_are_copied_into_their_classes(tmp_path: Path) -> None:
    tiny = make_tiny_imagenet(tmp_path / "data")
    folder = dataset_image_folder(f"tinyimagenet:{tiny}", cache_dir=tmp_path / "cache")
    classes = (folder / CLASS_LIST_NAME).read_text().split()
    assert classes == sorted((tiny / "wnids.txt").read_text().split())
    index = index_image_folder(folder, classes=classes, progress=False)
    assert {image.relative_path for image in index.images} == {f"{wnid}/{file}" for file, wnid in VAL_LABELS.items()}
    for file, wnid in VAL_LABELS.items():
        assert (folder / wnid / file).read_bytes() == (tiny / "val" / "images" / file).read_bytes()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "mnist:/data",
            "NAME one of cifar10 \\(test/train\\), cifar100 \\(test/train\\), tinyimagenet \\(val/train\\)",
        ),
        ("cifar10", "--dataset must be NAME\\[/SPLIT\\]:PATH"),
        ("cifar10/val:/data", "--dataset cifar10 has the splits test, train, got 'val'"),
    ],
)
def test_bad_locations_are_one_line(text: str, message: str) -> None:
    with pytest.raises(DatasetLocationError, match=message):
        parse_dataset(text)


def test_ccc_generate_renders_a_cifar_stream_from_the_pickles(tmp_path: Path, monkeypatch, capsys) -> None:
    expected = write_cifar_folder(tmp_path / "data", "cifar10", images_per_file=6)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CCC_CACHE_DIR", str(tmp_path / "cache"))
    argv = ["--kind", "cin-c", "--corruption-set", "cifar", "--dataset", f"cifar10:{tmp_path / 'data'}"]
    assert generate_main([*argv, "--corruptions", "fog,contrast", "--no-progress"]) == 0
    run_dir = tmp_path / "shards" / "cifar_cin-c_severity_5_images_6_crop_whole_seed_43"
    _, labels = expected["test"]
    samples = list(open_stream(run_dir, image_format="pil"))
    assert len(samples) == 12 and all(sample.image.size == (32, 32) for sample in samples)
    assert all(sample.label == labels[int(Path(sample.metadata["source_path"]).stem)] for sample in samples)
    assert "its images as class folders in the cache" in capsys.readouterr().err
    assert verify_main([str(run_dir), "--dataset", f"cifar10:{tmp_path / 'data'}", "--no-progress"]) == 0
    assert "plan hash matches" in capsys.readouterr().out
    both = [*argv, "--imagenet", str(tmp_path)]
    assert "do not combine it with --imagenet or --classes" in cli_user_error(generate_main, capsys, both)
