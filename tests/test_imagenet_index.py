"""The ImageNet-layout folder index: canonical order, checksum, bad folders and bad images."""

from __future__ import annotations

import pytest

from conftest import make_image_folder
from ccc.imagenet import ImageFolderError, index_image_folder, resolve_imagenet_folder


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


def test_the_same_folder_elsewhere_has_the_same_checksum(tmp_path):
    first = index_image_folder(make_image_folder(tmp_path / "a"), progress=False)
    second = index_image_folder(make_image_folder(tmp_path / "b" / "val"), progress=False)
    assert first.checksum() == second.checksum()


def test_bad_images_are_named_or_skipped(image_folder):
    truncated = image_folder / "n00000002" / "ILSVRC2012_val_00000010.JPEG"
    truncated.write_bytes(truncated.read_bytes()[:300])
    (image_folder / "n00000000" / "broken.JPEG").write_bytes(b"not a jpeg")
    with pytest.raises(ImageFolderError, match=r"2 unreadable image\(s\).*n00000000/broken.JPEG.*ILSVRC2012_val_00000010.*--skip-bad-images"):
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
