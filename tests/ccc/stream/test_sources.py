"""The ImageNet-layout folder index: canonical order, checksum, bad folders and bad images."""

from __future__ import annotations

import hashlib

import pytest

from ccc.stream.sources import (
    ImageFolderError,
    imagenet_wnids,
    index_image_folder,
    read_class_list,
    resolve_imagenet_folder,
)
from tests.builders import make_image_folder


def test_order_classes_and_checksum(image_folder):
    index = index_image_folder(image_folder, progress=False)
    assert index.classes == ("n00000000", "n00000001", "n00000002")
    assert len(index) == 12
    assert [image.class_index for image in index] == [0] * 4 + [1] * 4 + [2] * 4
    assert [image.relative_path for image in index] == sorted(image.relative_path for image in index)
    assert index.path(5).is_file()
    assert index.checksum() == index_image_folder(image_folder, check_images=False).checksum()
    (image_folder / "n00000001" / "ILSVRC2012_val_00000006.JPEG").unlink()
    assert index.checksum() != index_image_folder(image_folder, progress=False).checksum()


def test_a_folder_of_class_sub_folders_keeps_the_checksum_of_its_path_list(image_folder):
    # The checksum of every index recorded so far: the sha256 of the ordered "wnid/file" lines.
    index = index_image_folder(image_folder, progress=False)
    lines = "".join(f"{image.relative_path}\n" for image in index)
    assert index.checksum() == hashlib.sha256(lines.encode()).hexdigest()


def test_the_same_folder_elsewhere_has_the_same_checksum(tmp_path):
    first = index_image_folder(make_image_folder(tmp_path / "a"), progress=False)
    second = index_image_folder(make_image_folder(tmp_path / "b" / "val"), progress=False)
    assert first.checksum() == second.checksum()


def test_bad_images_are_named_or_skipped(image_folder):
    truncated = image_folder / "n00000002" / "ILSVRC2012_val_00000010.JPEG"
    truncated.write_bytes(truncated.read_bytes()[:300])
    (image_folder / "n00000000" / "broken.JPEG").write_bytes(b"not a jpeg")
    with pytest.raises(
        ImageFolderError,
        match=r"2 unreadable image\(s\).*n00000000/broken.JPEG.*ILSVRC2012_val_00000010.*--skip-bad-images",
    ):
        index_image_folder(image_folder, progress=False)
    index = index_image_folder(image_folder, skip_bad_images=True, progress=False)
    assert index.excluded == ("n00000000/broken.JPEG", "n00000002/ILSVRC2012_val_00000010.JPEG")
    assert len(index) == 11


@pytest.mark.parametrize(
    "layout, message",
    [
        ("missing", "does not exist"),
        ("flat", "not in ImageNet layout.*found 1 images directly"),
        ("empty", "no class sub-folders"),
        ("no_images", "2 class folders but no images"),
        ("mixed", "mixes images and class sub-folders"),
    ],
)
def test_wrong_layouts(tmp_path, layout, message):
    root = tmp_path / "val"
    if layout != "missing":
        root.mkdir()
    if layout in ("flat", "mixed"):
        (root / "a.JPEG").write_bytes(b"x")
    if layout in ("no_images", "mixed"):
        (root / "n1").mkdir()
        (root / "n2").mkdir()
    with pytest.raises(ImageFolderError, match=message):
        index_image_folder(root, progress=False)


def test_folder_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("CCC_IMAGENET", raising=False)
    with pytest.raises(ImageFolderError, match="--imagenet PATH.*CCC_IMAGENET"):
        resolve_imagenet_folder(None)
    monkeypatch.setenv("CCC_IMAGENET", str(tmp_path))
    assert resolve_imagenet_folder(None) == tmp_path
    assert resolve_imagenet_folder(tmp_path / "x") == tmp_path / "x"


def test_folders_that_are_not_classes_do_not_shift_labels(image_folder, caplog):
    reference = index_image_folder(image_folder, progress=False)
    (image_folder / "lost+found").mkdir()
    (image_folder / "lost+found" / "#1234.JPEG").write_bytes(b"orphan")
    (image_folder / "a_empty_folder").mkdir()
    with caplog.at_level("WARNING", logger="ccc.stream.sources"):
        index = index_image_folder(image_folder, progress=False)
    assert index.classes == reference.classes and index.images == reference.images
    assert index.checksum() == reference.checksum()
    assert "skipped 2 folder(s) that are not classes" in caplog.text and "a_empty_folder, lost+found" in caplog.text


def make_imagenet_layout(root, wnids):
    """Class folders named by ``wnids``, each with one (unchecked) image file."""
    for wnid in wnids:
        (root / wnid).mkdir(parents=True)
        (root / wnid / f"{wnid}_1.JPEG").write_bytes(b"")
    return root


def test_an_imagenet_folder_gets_the_standard_index_whatever_else_it_holds(tmp_path):
    wnids = imagenet_wnids()
    assert len(wnids) == 1000 and wnids[0] == "n01440764" and wnids[-1] == "n15075141"
    root = make_imagenet_layout(tmp_path / "val", wnids)
    (root / "lost+found").mkdir()
    (root / "aaa_empty").mkdir()
    index = index_image_folder(root, check_images=False)
    assert index.classes == wnids
    assert [(image.wnid, image.class_index) for image in index][:2] == [("n01440764", 0), ("n01443537", 1)]
    assert index[999].class_index == 999


def test_an_imagenet_folder_with_extra_or_missing_classes_is_refused(tmp_path):
    wnids = imagenet_wnids()
    root = make_imagenet_layout(tmp_path / "val", wnids[1:])
    with pytest.raises(
        ImageFolderError,
        match=r"looks like ImageNet but has 1 of the 1,000 classes missing or without images: n01440764; "
        r".*--classes FILE",
    ):
        index_image_folder(root, check_images=False)
    make_imagenet_layout(root, ["extra_class"])
    with pytest.raises(
        ImageFolderError, match=r"1 folder\(s\) that are not ImageNet classes: extra_class and 1 of the 1,000"
    ):
        index_image_folder(root, check_images=False)
    # An explicit list: the standard one gives the standard labels to a subset; unlisted folders are skipped.
    listing = tmp_path / "classes.txt"
    listing.write_text("\n".join(wnids) + "\n")
    index = index_image_folder(root, classes=read_class_list(listing), check_images=False)
    assert index.classes == wnids and index[0].wnid == "n01443537" and index[0].class_index == 1
    assert "extra_class" not in {image.wnid for image in index}


def test_an_explicit_class_list_sets_the_labels_and_the_checksum(image_folder, tmp_path):
    listing = tmp_path / "classes.txt"
    listing.write_text("n00000002\nn00000000\nn00000001\n")
    index = index_image_folder(image_folder, classes=read_class_list(listing), progress=False)
    assert [image.class_index for image in index if image.wnid == "n00000002"] == [0] * 4
    assert index.checksum() != index_image_folder(image_folder, progress=False).checksum()
    for text, message in [
        ("", "the class list is empty"),
        ("a\nb\na\n", "each class may be listed once, got duplicates: a"),
    ]:
        listing.write_text(text)
        with pytest.raises(ImageFolderError, match=message):
            read_class_list(listing)
    with pytest.raises(ImageFolderError, match="cannot read the class list"):
        read_class_list(tmp_path / "missing.txt")
