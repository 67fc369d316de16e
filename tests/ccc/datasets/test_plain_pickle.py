"""Pickles of plain values and numpy arrays read by interpreting their opcodes (ccc.datasets.plain_pickle):
what Python 2 and 3 write is read back exactly; anything that would run code, a damaged file and a bomb
are refused in one line, and nothing named by the file runs."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from ccc.datasets.plain_pickle import (
    MAX_PICKLE_FILE_BYTES,
    PlainPickleError,
    read_plain_pickle,
    read_plain_pickle_file,
)
from ccc.pickles import MAX_PICKLE_OPCODES
from tests.ccc.datasets.cifar_files import python2_pickle

PLAIN = {
    "none": None,
    "flags": (True, False),
    "numbers": [0, -1, 255, 65_536, 2**40, -(2**70), 1.5, float("inf")],
    "text": ["", "Zürich", "a" * 300],
    "bytes": [b"", b"\x00\xff", b"b" * 300],
    "nested": {"list": [[1], (2, 3)], 4: {"deep": ()}},
}

ARRAYS = {
    "uint8": np.arange(24, dtype=np.uint8).reshape(2, 3, 4),
    "int64": np.array([-(2**62), 0, 7], dtype=np.int64),
    "big-endian int32": np.array([1, -2, 3], dtype=">i4"),
    "float32": np.linspace(0, 1, 6, dtype=np.float32).reshape(3, 2),
    "float64, Fortran order": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    "bool": np.array([True, False, True]),
    "empty": np.zeros((0, 3), dtype=np.uint8),
    "scalar": np.array(5, dtype=np.uint16),
}


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4])
def test_plain_values_and_arrays_written_by_python_3_are_read_back_exactly(protocol) -> None:
    value = {**PLAIN, "arrays": ARRAYS}
    read = read_plain_pickle(pickle.dumps(value, protocol=protocol), "test file")
    assert {key: read[key] for key in PLAIN} == PLAIN
    for name, array in ARRAYS.items():
        assert read["arrays"][name].dtype == array.dtype, name
        assert read["arrays"][name].shape == array.shape, name
        np.testing.assert_array_equal(read["arrays"][name], array, err_msg=name)


@pytest.mark.parametrize("protocol", [2, 1])
def test_a_pickle_as_python_2_wrote_it_reads_as_with_encoding_bytes(protocol) -> None:
    # Python 2's str are bytes, its numpy names numpy.core.multiarray, its dtype arguments ints.
    rows = np.random.default_rng(0).integers(0, 256, (2, 3072), dtype=np.uint8)
    value = {
        b"data": rows,
        b"labels": list(range(1500)),
        b"filenames": [b"a.png", b"b" * 300],
        b"count": 70_000,
        b"long": -(2**70),
        b"flags": [True, False],
    }
    data = python2_pickle(value, protocol)
    assert b"cnumpy.core.multiarray\n_reconstruct\n" in data and b"T\x00\x18\x00\x00" in data  # BINSTRING of 6,144
    read = read_plain_pickle(data, "test file")
    reference = pickle.loads(data, encoding="bytes")  # our own file: safe to unpickle for comparison
    assert read.keys() == reference.keys() == value.keys()
    assert read[b"data"].dtype == np.uint8 and read[b"data"].shape == (2, 3072)
    np.testing.assert_array_equal(read[b"data"], reference[b"data"])
    np.testing.assert_array_equal(read[b"data"], rows)
    plain_keys = (b"labels", b"filenames", b"count", b"long", b"flags")
    assert (
        [read[key] for key in plain_keys]
        == [reference[key] for key in plain_keys]
        == [value[key] for key in plain_keys]
    )


class SystemCall:
    """Unpickled, runs ``touch MARKER``."""

    def __init__(self, marker) -> None:  # type: ignore[no-untyped-def]
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_naming_another_global_is_refused_and_nothing_runs(tmp_path) -> None:
    marker = tmp_path / "marker"
    data = pickle.dumps({b"data": [SystemCall(marker)]}, protocol=2)
    with pytest.raises(PlainPickleError, match=r"^test file cannot be read: it names the global (posix|nt)\.system;"):
        read_plain_pickle(data, "test file")
    assert not marker.exists()


@pytest.mark.parametrize(
    ("value", "refusal"),
    [
        ({1, 2}, r"names the global __builtin__\.set"),
        (bytearray(b"ab"), r"names the global __builtin__\.bytearray"),
        (np.array(["a"]), "numpy dtype 'U1'; only bool, integer and float dtypes"),
        (np.zeros(2, dtype=[("a", "u1")]), "numpy dtype 'V1'"),
        (np.array([None]), "numpy dtype 'O8'"),
        (np.uint8(3), r"names the global numpy\._?core\.multiarray\.scalar"),
    ],
)
def test_values_other_than_plain_ones_and_numeric_arrays_are_refused(value, refusal) -> None:
    with pytest.raises(PlainPickleError, match=f"^test file cannot be read: .*{refusal}"):
        read_plain_pickle(pickle.dumps(value, protocol=2), "test file")


@pytest.mark.parametrize(
    ("value", "refusal"), [({1, 2}, r"opcode EMPTY_SET at byte \d+"), (frozenset(), r"opcode FROZENSET at byte \d+")]
)
def test_opcodes_of_other_types_are_refused_by_name(value, refusal) -> None:
    with pytest.raises(PlainPickleError, match=f"^test file cannot be read: {refusal}"):
        read_plain_pickle(pickle.dumps(value, protocol=4), "test file")


class ArraysAsCallArguments:
    """Pickled as a recognised call (``_codecs.encode``) whose encoding is an array instead of text."""

    def __reduce__(self):  # type: ignore[no-untyped-def]
        import codecs

        return (codecs.encode, ("text", np.zeros(2)))


def test_a_recognised_call_with_unexpected_arguments_is_refused_by_name() -> None:
    with pytest.raises(PlainPickleError, match=r"a call of _codecs\.encode with arguments other than"):
        read_plain_pickle(pickle.dumps(ArraysAsCallArguments(), protocol=2), "test file")


def test_a_protocol_5_array_is_refused_by_name() -> None:
    with pytest.raises(PlainPickleError, match=r"the global numpy\._?core\.numeric\._frombuffer"):
        read_plain_pickle(pickle.dumps(np.zeros(3), protocol=5), "test file")


def _array_pickle(shape_bytes: bytes, raw: bytes) -> bytes:
    """A Python-3 protocol-2 uint8 array whose shape opcodes and raw bytes are given (to corrupt them)."""
    good = pickle.dumps(np.zeros((2, 3), dtype=np.uint8), protocol=2)
    good_shape = b"K\x02K\x03\x86"
    assert good.count(good_shape) == 1
    data = good.replace(good_shape, shape_bytes)
    raw_opcode = b"X\x06\x00\x00\x00" + b"\x00" * 6
    assert data.count(raw_opcode) == 1
    return data.replace(raw_opcode, b"X" + len(raw).to_bytes(4, "little") + raw)


@pytest.mark.parametrize(
    ("shape_bytes", "raw", "refusal"),
    [
        (b"K\x02K\x04\x86", b"\x00" * 6, r"shape \(2, 4\) and dtype uint8 needs 8 bytes, its state holds 6"),
        (b"K\x02K\x03\x86", b"\x00" * 7, r"shape \(2, 3\) and dtype uint8 needs 6 bytes, its state holds 7"),
        (b"J\xff\xff\xff\xffK\x03\x86", b"\x00" * 6, r"shape is not a tuple of at most 32 sizes in \[0, 2\*\*63\)"),
        (b"\x8a\x09" + b"\x00" * 8 + b"\x01K\x03\x86", b"\x00" * 6, r"shape is not a tuple of at most 32 sizes"),
        (b"J\xff\xff\xff\x7fJ\xff\xff\xff\x7f\x86", b"\x00" * 6, "needs 4,611,686,014,132,420,609 bytes"),
    ],
)
def test_an_array_whose_bytes_do_not_match_its_shape_is_refused(shape_bytes, raw, refusal) -> None:
    with pytest.raises(PlainPickleError, match=refusal):
        read_plain_pickle(_array_pickle(shape_bytes, raw), "test file")


@pytest.mark.parametrize("cut", [1, 2, 50, -2, -1])
def test_a_truncated_pickle_is_refused_in_one_line(cut) -> None:
    data = pickle.dumps({b"data": np.zeros((2, 3), dtype=np.uint8), b"labels": [1, 2]}, protocol=2)
    with pytest.raises(PlainPickleError, match=r"^test file cannot be read: ") as error:
        read_plain_pickle(data[:cut], "test file")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("data", "refusal"),
    [
        (b"", "damaged or truncated pickle"),
        (b"\x80\x02K\x01K\x02.", "it ends with a stack other than one value"),
        (b"\x80\x02K\x01.junk", "4 bytes follow the pickle's end"),
        (b"\x80\x02h\x07.", "memo entry 7, which was never stored"),
        (b"\x80\x02e.", "an opcode needs a mark and there is none"),
        (b"\x80\x02K\x01K\x02a.", r"APPEND on int \(expected a list\)"),
        (b"\x80\x02}(]K\x01u.", "damaged or truncated pickle: unhashable type"),
        (b"\x80\x02\x86.", "more values than the stack holds"),
        (b"\x80\x02cnumpy\ndtype\n.", "it holds numpy.dtype as a value"),
        (b"\x80\x02cnumpy\ndtype\nU\x02u1K\x00K\x01\x87R.", "it holds an unfinished numpy dtype as a value"),
        (b"\x80\x02]K\x01b.", "setting the state of list"),
        (b"\x80\x02c_codecs\nencode\nX\x02\x00\x00\x00\xc4\x80X\x06\x00\x00\x00latin1\x86R.", "beyond latin-1"),
        (b"\x80\x02(K\x01d.", "DICT with a key but no value"),
        (b"\x80\x02(K\x01o.", "opcode OBJ at byte 5"),
    ],
)
def test_damaged_or_unexpected_opcodes_are_refused_in_one_line(data, refusal) -> None:
    with pytest.raises(PlainPickleError, match=f"^test file cannot be read: .*{refusal}") as error:
        read_plain_pickle(data, "test file")
    assert "\n" not in str(error.value)


def test_an_opcode_bomb_is_refused_before_it_is_built() -> None:
    # Each "]" (an empty list) is one byte in the file and about 56 in memory; the bound stops it.
    bomb = b"\x80\x02(" + b"]" * (MAX_PICKLE_OPCODES + 10) + b"l."
    with pytest.raises(PlainPickleError, match=f"more than {MAX_PICKLE_OPCODES:,} opcodes"):
        read_plain_pickle(bomb, "test file")


def test_shared_references_are_visited_once() -> None:
    # 60 levels of [x, x] are 2**60 paths but 60 objects: reading stays linear in the file.
    data = bytearray(b"\x80\x02K\x00")
    for level in range(60):
        data += b"q" + bytes([level]) + b"h" + bytes([level]) + b"\x86"
    read = read_plain_pickle(bytes(data + b"."), "test file")
    assert isinstance(read, tuple) and read[0] is read[1]


def test_a_declared_string_length_beyond_the_file_is_refused_without_allocating_it() -> None:
    with pytest.raises(PlainPickleError, match="damaged or truncated pickle"):
        read_plain_pickle(b"\x80\x02T\xff\xff\xff\xffabc.", "test file")


def test_files_are_read_and_named_in_errors(tmp_path) -> None:
    (tmp_path / "batch").write_bytes(pickle.dumps({b"labels": [3]}, protocol=2))
    assert read_plain_pickle_file(tmp_path / "batch", "CIFAR-10 file") == {b"labels": [3]}
    with pytest.raises(PlainPickleError, match=r"^CIFAR-10 file '.*missing' does not exist or is not a regular file"):
        read_plain_pickle_file(tmp_path / "missing", "CIFAR-10 file")
    with pytest.raises(PlainPickleError, match=r"^CIFAR-10 file '.*' does not exist or is not a regular file"):
        read_plain_pickle_file(tmp_path, "CIFAR-10 file")
    (tmp_path / "broken").write_bytes(b"\x80\x02}")
    with pytest.raises(PlainPickleError, match=r"^CIFAR-10 file '.*broken' cannot be read: damaged or truncated"):
        read_plain_pickle_file(tmp_path / "broken", "CIFAR-10 file")


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path) -> None:
    with open(tmp_path / "huge", "wb") as handle:
        handle.truncate(MAX_PICKLE_FILE_BYTES + 1)  # sparse: no disk space used
    with pytest.raises(
        PlainPickleError,
        match=f"holds {MAX_PICKLE_FILE_BYTES + 1:,} bytes or more, more than the {MAX_PICKLE_FILE_BYTES:,}",
    ):
        read_plain_pickle_file(tmp_path / "huge", "CIFAR-10 file")


def test_damaged_bytes_anywhere_give_a_value_or_the_one_error() -> None:
    # 300 files with 1-3 random bytes changed (mostly in the structure around the array bytes): each is
    # read or refused with PlainPickleError, never another exception from inside the reader.
    rows = np.arange(2 * 3072).astype(np.uint8).reshape(2, 3072)
    content = {b"data": rows, b"labels": [1, 2], b"filenames": [b"a.png", b"b.png"]}
    originals = [python2_pickle(content), pickle.dumps(content, protocol=2), pickle.dumps(content, protocol=4)]
    generator = np.random.default_rng(1)
    refused = 0
    for trial in range(300):
        data = bytearray(originals[trial % 3])
        for _ in range(generator.integers(1, 4)):
            near_start = int(generator.integers(0, 400))
            near_end = len(data) - 1 - int(generator.integers(0, 200))
            data[near_start if generator.random() < 0.5 else near_end] = int(generator.integers(0, 256))
        try:
            read_plain_pickle(bytes(data), "test file")
        except PlainPickleError as error:
            assert str(error).startswith("test file cannot be read: ") and "\n" not in str(error)
            refused += 1
    assert refused > 100
