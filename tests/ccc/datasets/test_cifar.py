"""CIFAR-10 and CIFAR-100 read from torchvision's on-disk format (ccc.datasets.cifar): pixels, labels and
class names come back exactly from files written as Python 2 wrote the published ones and as Python 3
writes them again; the folder or its parent may be given; every damaged or foreign file is refused in one
line naming it, and nothing in it runs."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from ccc.datasets.cifar import CIFAR_FORMATS, CifarError, cifar_checksum, find_cifar_folder, read_cifar
from tests.ccc.datasets.cifar_files import batch_content, meta_content, python2_pickle, write_cifar_folder


@pytest.mark.parametrize("python2", [True, False], ids=["python2-pickles", "python3-pickles"])
@pytest.mark.parametrize("name", list(CIFAR_FORMATS))
def test_both_splits_round_trip_pixels_labels_and_class_names(tmp_path, name, python2) -> None:
    expected = write_cifar_folder(tmp_path, name, images_per_file=3, python2=python2)
    cifar = CIFAR_FORMATS[name]
    for split in ("train", "test"):
        read = read_cifar(tmp_path, name, split)
        images, labels = expected[split]
        assert read.images.dtype == np.uint8 and read.images.shape == (3 * len(cifar.split_files[split]), 32, 32, 3)
        np.testing.assert_array_equal(read.images, images)
        assert read.labels.dtype == np.int64
        np.testing.assert_array_equal(read.labels, labels)
        assert read.class_names == tuple(f"class_{index}" for index in range(cifar.class_count))
        assert (read.name, read.split, len(read)) == (name, split, len(labels))
        folder = tmp_path / cifar.folder
        assert read.source_files == tuple(folder / file for file in (*cifar.split_files[split], cifar.meta_file))
        assert read.checksum == cifar_checksum(images, labels, read.class_names)
        assert not read.images.flags.writeable and not read.labels.flags.writeable


def test_the_pixel_layout_is_the_published_one(tmp_path) -> None:
    # A row holds the 1,024 red values, then green, then blue, each 32 rows of 32 pixels.
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    row = np.zeros(3072, dtype=np.uint8)
    row[0 * 1024 + 1 * 32 + 2] = 200  # red at row 1, column 2
    row[2 * 1024 + 31 * 32 + 0] = 100  # blue at row 31, column 0
    (folder / "test_batch").write_bytes(python2_pickle(batch_content("cifar10", row[None], [7])))
    (folder / "batches.meta").write_bytes(python2_pickle(meta_content("cifar10")))
    image = read_cifar(folder, "cifar10", "test").images[0]
    assert image[1, 2, 0] == 200 and image[31, 0, 2] == 100 and int(image.sum()) == 300


def test_the_checksum_depends_on_content_not_on_the_pickle_encoding(tmp_path) -> None:
    write_cifar_folder(tmp_path / "python2", python2=True, seed=3)
    write_cifar_folder(tmp_path / "python3", python2=False, seed=3)
    write_cifar_folder(tmp_path / "other", python2=True, seed=4)
    checksums = [read_cifar(tmp_path / folder).checksum for folder in ("python2", "python3", "other")]
    assert checksums[0] == checksums[1] != checksums[2]


def test_the_folder_itself_or_torchvisions_root_may_be_given(tmp_path) -> None:
    write_cifar_folder(tmp_path, "cifar100")
    assert find_cifar_folder(tmp_path, "cifar100") == tmp_path / "cifar-100-python"
    assert find_cifar_folder(tmp_path / "cifar-100-python", "cifar100") == tmp_path / "cifar-100-python"
    assert read_cifar(tmp_path, "cifar100").checksum == read_cifar(tmp_path / "cifar-100-python", "cifar100").checksum
    with pytest.raises(
        CifarError, match=r"^CIFAR-10 folder not found: neither '.*cifar-10-batches-py' nor .*batches\.meta"
    ):
        read_cifar(tmp_path, "cifar10")


def test_arguments_are_checked_by_name(tmp_path) -> None:
    write_cifar_folder(tmp_path)
    with pytest.raises(CifarError, match="name must be one of cifar10, cifar100; got 'cifar1000'"):
        read_cifar(tmp_path, "cifar1000")
    with pytest.raises(CifarError, match="split must be one of test, train; got 'val'"):
        read_cifar(tmp_path, "cifar10", "val")


class SystemCall:
    """Unpickled, runs ``touch MARKER``."""

    def __init__(self, marker) -> None:  # type: ignore[no-untyped-def]
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def test_a_batch_naming_another_global_is_refused_and_nothing_runs(tmp_path) -> None:
    write_cifar_folder(tmp_path)
    marker = tmp_path / "marker"
    batch = tmp_path / "cifar-10-batches-py" / "test_batch"
    content = pickle.loads(batch.read_bytes(), encoding="bytes")  # our own file
    content[b"filenames"][0] = SystemCall(marker)
    batch.write_bytes(pickle.dumps(content, protocol=2))
    with pytest.raises(CifarError, match=r"^CIFAR-10 file '.*test_batch' cannot be read: it names the global .*system"):
        read_cifar(tmp_path)
    assert not marker.exists()


def _rewrite_batch(tmp_path, **changes) -> None:  # type: ignore[no-untyped-def]
    batch = tmp_path / "cifar-10-batches-py" / "test_batch"
    content = pickle.loads(batch.read_bytes(), encoding="bytes")  # our own file
    for key, value in changes.items():
        if value is None:
            del content[key.encode()]
        else:
            content[key.encode()] = value
    batch.write_bytes(python2_pickle(content))


@pytest.mark.parametrize(
    ("changes", "refusal"),
    [
        ({"data": np.zeros((3, 3071), dtype=np.uint8)}, "'data' must have 3,072 values per row"),
        (
            {"data": np.zeros((3, 32, 32, 3), dtype=np.uint8)},
            r"'data' must be a uint8 array N×3072, got an array of dtype uint8 and shape \(3, 32, 32, 3\)",
        ),
        (
            {"data": np.zeros((3, 3072), dtype=np.int16)},
            r"'data' must be a uint8 array N×3072, got an array of dtype int16 and shape \(3, 3072\)",
        ),
        ({"data": [1, 2]}, "'data' must be a uint8 array N×3072, got a list"),
        ({"data": None}, r"has no 'data' entry \(its keys: b'batch_label', b'filenames', b'labels'\)"),
        ({"labels": [1, 2]}, r"2 'labels' for 3 images"),
        ({"labels": [1, 2, 10]}, r"'labels' must be in \[0, 10\), got 10 \(1 outside\)"),
        ({"labels": [1, 2, b"3"]}, "'labels' must be a list of class indices"),
        ({"labels": [1, 2, 10**5000]}, r"'labels' must be in \[0, 10\), got an integer of 16,610 bits"),
    ],
)
def test_a_batch_of_the_wrong_structure_is_refused_naming_the_file(tmp_path, changes, refusal) -> None:
    write_cifar_folder(tmp_path)
    _rewrite_batch(tmp_path, **changes)
    with pytest.raises(CifarError, match=f"^CIFAR-10 file '.*test_batch':? {refusal}"):
        read_cifar(tmp_path)


def test_a_truncated_batch_is_refused_in_one_line(tmp_path) -> None:
    write_cifar_folder(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "test_batch"
    batch.write_bytes(batch.read_bytes()[:5000])
    with pytest.raises(
        CifarError, match=r"^CIFAR-10 file '.*test_batch' cannot be read: damaged or truncated pickle"
    ) as error:
        read_cifar(tmp_path)
    assert "\n" not in str(error.value)


def test_a_missing_batch_is_named(tmp_path) -> None:
    write_cifar_folder(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_4").unlink()
    with pytest.raises(CifarError, match=r"^CIFAR-10 file '.*data_batch_4' does not exist"):
        read_cifar(tmp_path, split="train")


@pytest.mark.parametrize(
    ("content", "refusal"),
    [
        ([b"airplane"], r"holds a list, expected a dict"),
        ({b"label_names": [b"a"] * 9}, r"'label_names' must be a list of 10 names, got a 9 list"),
        ({b"label_names": [b"a"] * 9 + [3]}, r"'label_names' must hold text \(UTF-8 bytes or str\), got 3"),
        ({b"label_names": [b"a"] * 9 + [b"\xff"]}, r"must hold text \(UTF-8 bytes or str\), got b'\\xff'"),
    ],
)
def test_a_damaged_meta_file_is_refused_naming_it(tmp_path, content, refusal) -> None:
    write_cifar_folder(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "batches.meta").write_bytes(pickle.dumps(content, protocol=2))
    with pytest.raises(CifarError, match=f"^CIFAR-10 file '.*batches.meta'.*{refusal}"):
        read_cifar(tmp_path)


def test_text_keys_and_names_of_a_file_saved_again_from_python_3_are_read(tmp_path) -> None:
    expected = write_cifar_folder(tmp_path)
    folder = tmp_path / "cifar-10-batches-py"
    for file_name in ("test_batch", "batches.meta"):
        # torchvision's own reading decodes with encoding="latin1": text keys and names.
        content = pickle.loads((folder / file_name).read_bytes(), encoding="latin1")  # our own file
        (folder / file_name).write_bytes(pickle.dumps(content, protocol=4))
    read = read_cifar(tmp_path)
    np.testing.assert_array_equal(read.images, expected["test"][0])
    assert read.class_names[:2] == ("class_0", "class_1")
