"""The index of a Tiny-ImageNet folder (ccc.datasets.tiny_imagenet): classes are the sorted WordNet ids,
val labels come from val_annotations.txt, the order and checksum are fixed, and every departure from the
published layout is a one-line error naming the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ccc.datasets.tiny_imagenet import (
    TinyImageNetError,
    find_tiny_imagenet_folder,
    index_tiny_imagenet,
    read_tiny_imagenet_class_names,
)
from ccc.stream.sources import ImageFolderError

WNIDS = ("n09999999", "n01443537", "n02124075")
"""wnids.txt's order, as published: not sorted."""

NAMES = {"n01443537": "goldfish, Carassius auratus", "n02124075": "Egyptian cat", "n09999999": "test class"}

VAL_LABELS = {
    "val_0.JPEG": "n02124075",
    "val_1.JPEG": "n01443537",
    "val_2.JPEG": "n09999999",
    "val_10.JPEG": "n01443537",
}


def _jpeg(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, quality=90)


def make_tiny_imagenet(root: Path, train_per_class: int = 2) -> Path:
    """Write ``root/tiny-imagenet-200`` with the classes of WNIDS, ``train_per_class`` train images each, the
    val images of VAL_LABELS and one test image; returns the tiny-imagenet-200 folder."""
    folder = root / "tiny-imagenet-200"
    folder.mkdir(parents=True)
    (folder / "wnids.txt").write_text("".join(f"{wnid}\n" for wnid in WNIDS))
    words = {"n00001740": "entity", **NAMES}
    (folder / "words.txt").write_text("".join(f"{wnid}\t{name}\n" for wnid, name in words.items()))
    seed = 0
    for wnid in WNIDS:
        (folder / "train" / wnid).mkdir(parents=True)
        (folder / "train" / wnid / f"{wnid}_boxes.txt").write_text("")
        for number in range(train_per_class):
            seed += 1
            _jpeg(folder / "train" / wnid / "images" / f"{wnid}_{number}.JPEG", seed)
    for name in VAL_LABELS:
        seed += 1
        _jpeg(folder / "val" / "images" / name, seed)
    lines = [f"{name}\t{wnid}\t0\t3\t60\t62\n" for name, wnid in VAL_LABELS.items()]
    (folder / "val" / "val_annotations.txt").write_text("".join(lines))
    _jpeg(folder / "test" / "images" / "test_0.JPEG", 99)
    return folder


def test_the_val_index_takes_labels_from_the_annotations_in_class_order(tmp_path) -> None:
    folder = make_tiny_imagenet(tmp_path)
    index = index_tiny_imagenet(tmp_path, "val")
    assert index.root == folder
    assert index.classes == ("n01443537", "n02124075", "n09999999")
    assert [(image.relative_path, image.wnid, image.class_index) for image in index] == [
        ("val/images/val_1.JPEG", "n01443537", 0),
        ("val/images/val_10.JPEG", "n01443537", 0),
        ("val/images/val_0.JPEG", "n02124075", 1),
        ("val/images/val_2.JPEG", "n09999999", 2),
    ]
    assert all(index.path(position).is_file() for position in range(len(index)))


def test_the_train_index_lists_each_class_folder(tmp_path) -> None:
    make_tiny_imagenet(tmp_path, train_per_class=2)
    index = index_tiny_imagenet(tmp_path / "tiny-imagenet-200", "train")
    assert len(index) == 6
    assert [image.class_index for image in index] == [0, 0, 1, 1, 2, 2]
    assert index[2].relative_path == "train/n02124075/images/n02124075_0.JPEG" and index[2].wnid == "n02124075"
    assert all(index.path(position).is_file() for position in range(len(index)))


def test_the_checksum_is_fixed_by_the_ordered_list(tmp_path) -> None:
    make_tiny_imagenet(tmp_path / "a")
    make_tiny_imagenet(tmp_path / "b")
    checksums = {index_tiny_imagenet(tmp_path / copy, split).checksum() for copy in ("a", "b") for split in ("val",)}
    assert len(checksums) == 1
    assert index_tiny_imagenet(tmp_path / "a", "train").checksum() != checksums.pop()


def test_the_checksum_covers_val_labels_that_leave_the_order_unchanged(tmp_path) -> None:
    folder = make_tiny_imagenet(tmp_path)
    _jpeg(folder / "val" / "images" / "val_3.JPEG", 50)
    labels = {**VAL_LABELS, "val_3.JPEG": "n09999999"}
    _break_annotations(folder, "".join(f"{name}\t{wnid}\n" for name, wnid in labels.items()))
    before = index_tiny_imagenet(tmp_path)
    # val_2 moves from the last class to the middle one: the same image order, the same classes present.
    _break_annotations(
        folder, "".join(f"{name}\t{wnid}\n" for name, wnid in {**labels, "val_2.JPEG": "n02124075"}.items())
    )
    after = index_tiny_imagenet(tmp_path)
    assert [image.relative_path for image in after] == [image.relative_path for image in before]
    assert [image.class_index for image in after] != [image.class_index for image in before]
    assert after.checksum() != before.checksum()


def test_class_names_come_from_words_txt_in_class_order(tmp_path) -> None:
    folder = make_tiny_imagenet(tmp_path)
    assert read_tiny_imagenet_class_names(folder) == ("goldfish, Carassius auratus", "Egyptian cat", "test class")
    (folder / "words.txt").write_text("n01443537\tgoldfish\n")
    with pytest.raises(TinyImageNetError, match=r"words.txt has no name for 2 WordNet id\(s\) of wnids.txt: n02124075"):
        read_tiny_imagenet_class_names(folder)


def test_a_byte_that_is_not_utf8_in_words_txt_spoils_only_its_own_name(tmp_path) -> None:
    folder = make_tiny_imagenet(tmp_path)
    words = (folder / "words.txt").read_bytes().replace(b"test class", b"caf\xe9")
    (folder / "words.txt").write_bytes(words)
    assert read_tiny_imagenet_class_names(folder) == ("goldfish, Carassius auratus", "Egyptian cat", "caf\ufffd")


def test_the_folder_is_found_or_named(tmp_path) -> None:
    folder = make_tiny_imagenet(tmp_path)
    assert find_tiny_imagenet_folder(tmp_path) == find_tiny_imagenet_folder(folder) == folder
    with pytest.raises(TinyImageNetError, match=r"^Tiny-ImageNet folder not found: neither '.*tiny-imagenet-200' nor"):
        find_tiny_imagenet_folder(tmp_path / "elsewhere")


def test_the_test_split_is_refused_as_unlabelled(tmp_path) -> None:
    make_tiny_imagenet(tmp_path)
    with pytest.raises(TinyImageNetError, match=r"split must be one of train, val; got 'test' \(.*has no labels\)"):
        index_tiny_imagenet(tmp_path, "test")


def _break_annotations(folder: Path, text: str) -> None:
    (folder / "val" / "val_annotations.txt").write_text(text)


def _annotations(**overrides: str) -> str:
    labels = {**VAL_LABELS, **overrides}
    return "".join(f"{name}\t{wnid}\t0\t3\t60\t62\n" for name, wnid in labels.items())


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        (
            lambda f: (f / "val" / "images" / "val_7.JPEG").write_bytes(b"x"),
            r"1 image\(s\) of .* have no line in .*: val_7",
        ),
        (
            lambda f: (f / "val" / "images" / "val_2.JPEG").unlink(),
            r"annotates 1 image\(s\) missing from .*: val_2.JPEG",
        ),
        (
            lambda f: _break_annotations(f, _annotations(**{"val_1.JPEG": "n00000001"})),
            r"line 2 names 'n00000001', which",
        ),
        (
            lambda f: _break_annotations(f, _annotations() + "val_0.JPEG\tn01443537\n"),
            r"line 5 annotates val_0.JPEG a second",
        ),
        (lambda f: _break_annotations(f, "val_0.JPEG n02124075\n"), r"line 1 must be file <tab> wnid <tab> box"),
        (lambda f: (f / "val" / "val_annotations.txt").unlink(), r"val_annotations.txt does not exist"),
        (lambda f: (f / "val" / "val_annotations.txt").write_bytes(b"\xff\xfe"), r"val_annotations.txt cannot be read"),
        (lambda f: (f / "wnids.txt").write_text(""), r"wnids.txt is empty"),
        (lambda f: (f / "wnids.txt").write_text("n01443537\nn01443537\n"), r"listed once, got duplicates: n01443537"),
        (lambda f: (f / "wnids.txt").write_text("n01443537 goldfish\n"), r"line 1 must be one WordNet id, got"),
    ],
)
def test_a_malformed_val_layout_is_refused_naming_the_file(tmp_path, change, refusal) -> None:
    folder = make_tiny_imagenet(tmp_path)
    change(folder)
    with pytest.raises(TinyImageNetError, match=refusal) as error:
        index_tiny_imagenet(tmp_path, "val")
    assert "\n" not in str(error.value) and isinstance(error.value, ImageFolderError)


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        (lambda f: (f / "train" / "n02999999").mkdir(), r"has folder\(s\) not listed in wnids.txt: n02999999"),
        (
            lambda f: [path.unlink() for path in (f / "train" / "n01443537" / "images").iterdir()],
            r"n01443537.images holds no images",
        ),
        (
            lambda f: (f / "train" / "n01443537" / "images").rename(f / "y"),
            r"n01443537.images does not exist or is not a folder",
        ),
    ],
)
def test_a_malformed_train_layout_is_refused_naming_the_folder(tmp_path, change, refusal) -> None:
    folder = make_tiny_imagenet(tmp_path)
    change(folder)
    with pytest.raises(TinyImageNetError, match=refusal):
        index_tiny_imagenet(tmp_path, "train")
