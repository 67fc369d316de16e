"""CalibrationTable: construction, lookups, confidence intervals, the .npz format and its validation."""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ccc.calibration import (
    CCC_CORRUPTIONS,
    RESNET50_DIFFICULTY_PRESETS,
    SEVERITIES,
    CalibrationError,
    CalibrationMetadata,
    CalibrationTable,
    DifficultyPreset,
)
from ccc.calibration.table_io import MAX_METADATA_BYTES

NAMES = ("fog", "snow", "jpeg")


def make_metadata(**changes) -> CalibrationMetadata:
    fields = dict(
        model_name="tiny test model",
        preprocessing="to tensor, normalise",
        image_set_description="first 100 test images",
        image_count=100,
        created="2024-05-01T12:00:00+00:00",
    )
    fields.update(changes)
    return CalibrationMetadata(**fields)


def coded_grid(first: int, second: int) -> np.ndarray:
    """A grid whose cell [i, j] encodes the pair and the position (all values within [0, 100])."""
    i, j = np.meshgrid(np.arange(21), np.arange(21), indexing="ij")
    return first * 10 + second + i + j / 100.0


def make_table(names=NAMES, presets=None, image_counts=100, **metadata_changes) -> CalibrationTable:
    grids = {(a, b): coded_grid(ia, ib) for ia, a in enumerate(names) for ib, b in enumerate(names) if a != b}
    return CalibrationTable.from_grids(
        names,
        grids,
        image_counts=image_counts,
        metadata=make_metadata(**metadata_changes),
        difficulty_presets=presets,
    )


# ----------------------------------------------------------------------------- construction
def test_grid_orientation_and_pairs():
    table = make_table()
    assert table.corruptions == NAMES
    assert table.pairs() == (
        ("fog", "snow"),
        ("fog", "jpeg"),
        ("snow", "fog"),
        ("snow", "jpeg"),
        ("jpeg", "fog"),
        ("jpeg", "snow"),
    )
    grid = table.grid("snow", "jpeg")
    assert grid.shape == (21, 21)
    # [i, j] is s1 = i / 4 (first corruption), s2 = j / 4 (second corruption).
    assert grid[8, 0] == pytest.approx(1 * 10 + 2 + 8)
    assert grid[0, 4] == pytest.approx(1 * 10 + 2 + 0.04)
    assert SEVERITIES[8] == 2.0 and SEVERITIES[-1] == 5.0
    assert table.image_counts("snow", "jpeg").dtype == np.int64
    assert (table.image_counts("snow", "jpeg") == 100).all()


def test_pair_order_is_canonical_and_checksum_ignores_insertion_order():
    table = make_table()
    grids = {pair: table.grid(*pair) for pair in reversed(table.pairs())}
    rebuilt = CalibrationTable.from_grids(NAMES, grids, image_counts=100, metadata=make_metadata())
    assert rebuilt.pairs() == table.pairs()
    assert rebuilt.checksum() == table.checksum()


def test_partial_table_and_missing_pair_error():
    table = CalibrationTable.from_grids(
        NAMES, {("fog", "snow"): coded_grid(0, 1)}, image_counts=100, metadata=make_metadata()
    )
    assert table.pairs() == (("fog", "snow"),)
    assert table.has_pair("fog", "snow") and not table.has_pair("snow", "fog")
    with pytest.raises(CalibrationError, match=r"pair \(snow, fog\) is not in the table"):
        table.grid("snow", "fog")


def test_arrays_are_read_only_and_independent_of_inputs():
    grid = coded_grid(0, 1)
    table = CalibrationTable.from_grids(NAMES, {("fog", "snow"): grid}, image_counts=100, metadata=make_metadata())
    grid[0, 0] = 99.0
    assert table.grid("fog", "snow")[0, 0] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="read-only"):
        table.grid("fog", "snow")[0, 0] = 5.0
    with pytest.raises(ValueError, match="read-only"):
        table.image_counts("fog", "snow")[0, 0] = 5


@pytest.mark.parametrize(
    ("table_names", "query", "expected"),
    [
        (("fog", "jpeg", "elastic"), "jpeg_compression", "jpeg"),
        (("fog", "jpeg", "elastic"), "elastic_transform", "elastic"),
        (("fog", "jpeg_compression", "elastic_transform"), "jpeg", "jpeg_compression"),
        (("fog", "jpeg_compression", "elastic_transform"), "elastic", "elastic_transform"),
    ],
)
def test_corruption_aliases(table_names, query, expected):
    table = make_table(names=table_names)
    assert table.resolve_corruption(query) == expected
    np.testing.assert_array_equal(table.grid(query, "fog"), table.grid(expected, "fog"))


def test_unknown_corruption_lists_available_names():
    with pytest.raises(CalibrationError, match=r"unknown corruption 'fogg'; available: fog, snow, jpeg"):
        make_table().grid("fogg", "snow")


def test_alias_duplicates_are_rejected():
    with pytest.raises(CalibrationError, match="distinct"):
        make_table(names=("fog", "jpeg", "jpeg_compression"))


def test_image_counts_as_mapping():
    counts = {("fog", "snow"): np.full((21, 21), 7), ("snow", "fog"): np.arange(441).reshape(21, 21) % 50}
    table = CalibrationTable.from_grids(
        NAMES,
        {("fog", "snow"): coded_grid(0, 1), ("snow", "fog"): coded_grid(1, 0)},
        image_counts=counts,
        metadata=make_metadata(),
    )
    assert table.image_counts("snow", "fog")[1, 0] == 21 % 50
    assert (table.image_counts("fog", "snow") == 7).all()
    with pytest.raises(CalibrationError, match="exactly the pairs of grids"):
        CalibrationTable.from_grids(
            NAMES, {("fog", "snow"): coded_grid(0, 1)}, image_counts=counts, metadata=make_metadata()
        )


@pytest.mark.parametrize(
    ("grid", "counts", "match"),
    [
        (np.zeros((21, 20)), 100, r"must be 21×21, got shape \[21, 20\]"),
        (np.full((21, 21), 100.5), 100, r"in \[0, 100\] percent, got 100\.5"),
        (np.full((21, 21), -0.1), 100, r"in \[0, 100\] percent, got -0\.1"),
        (np.where(np.eye(21, dtype=bool), np.nan, 1.0), 100, r"finite .* got nan at s1=0\.0, s2=0\.0"),
        (np.zeros((21, 21)), -1, r"image_counts of pair \(fog, snow\) must be >= 0, got -1"),
        (np.zeros((21, 21)), 101, r"must be <= metadata image_count 100, got 101"),
    ],
)
def test_invalid_grids_are_rejected(grid, counts, match):
    with pytest.raises(CalibrationError, match=match):
        CalibrationTable.from_grids(NAMES, {("fog", "snow"): grid}, image_counts=counts, metadata=make_metadata())


def test_invalid_pairs_are_rejected():
    with pytest.raises(CalibrationError, match=r"two distinct corruptions, got \(fog, fog\)"):
        CalibrationTable.from_grids(NAMES, {("fog", "fog"): coded_grid(0, 0)}, image_counts=1, metadata=make_metadata())
    with pytest.raises(CalibrationError, match=r"\(jpeg, fog\) more than once"):
        CalibrationTable.from_grids(
            NAMES,
            {("jpeg", "fog"): coded_grid(2, 0), ("jpeg_compression", "fog"): coded_grid(2, 0)},
            image_counts=1,
            metadata=make_metadata(),
        )
    with pytest.raises(CalibrationError, match="unknown corruption 'rain'; available: fog, snow, jpeg"):
        CalibrationTable.from_grids(
            NAMES, {("rain", "fog"): coded_grid(0, 0)}, image_counts=1, metadata=make_metadata()
        )


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"image_count": 0}, "image_count must be an integer >= 1, got 0"),
        ({"model_name": " "}, "model_name must be a non-empty string"),
        ({"model_weights_sha256": "abc"}, "model_weights_sha256 must be None or 64 lowercase hex"),
        ({"created": "yesterday"}, "created must be an ISO 8601 date/time, got 'yesterday'"),
    ],
)
def test_invalid_metadata(changes, match):
    with pytest.raises(CalibrationError, match=match):
        make_metadata(**changes)


def test_metadata_corruptions_must_match():
    metadata = make_metadata(corruptions=("fog", "snow"))
    with pytest.raises(CalibrationError, match="differ from corruptions"):
        CalibrationTable.from_grids(NAMES, {("fog", "snow"): coded_grid(0, 1)}, image_counts=1, metadata=metadata)


def test_pickle_and_deepcopy_keep_the_table_intact():
    import copy

    table = make_table(presets={"p": (np.int64(10), ("fog", "snow"))})
    for clone in (pickle.loads(pickle.dumps(table)), copy.deepcopy(table)):
        assert clone.checksum() == table.checksum()
        assert clone.metadata == table.metadata
        assert not clone.grid("fog", "snow").flags.writeable


# ----------------------------------------------------------------------------- presets
def test_resnet50_presets_are_the_public_generator_ones():
    easy, medium, hard = (RESNET50_DIFFICULTY_PRESETS[name] for name in ("easy", "medium", "hard"))
    assert easy == (40.0, tuple(name for name in CCC_CORRUPTIONS if name != "brightness"))
    assert medium.target_accuracy == 20.0
    assert medium.corruptions == tuple(name for name in CCC_CORRUPTIONS if name not in ("brightness", "jpeg"))
    assert hard == DifficultyPreset(0.0, ("gaussian_noise", "shot_noise", "impulse_noise", "contrast"))
    target, names = easy
    assert target == 40.0 and len(names) == 14


def test_presets_resolve_aliases_and_are_validated():
    table = make_table(presets={"mine": (30, ("fog", "jpeg_compression"))})
    assert table.difficulty_presets["mine"] == DifficultyPreset(30.0, ("fog", "jpeg"))
    with pytest.raises(TypeError):
        table.difficulty_presets["new"] = DifficultyPreset(1.0, ("fog", "snow"))
    with pytest.raises(CalibrationError, match="unknown corruption 'rain'"):
        make_table(presets={"bad": (30, ("fog", "rain"))})
    with pytest.raises(CalibrationError, match=r"target accuracy must be in \[0, 100\] percent, got 130"):
        make_table(presets={"bad": (130, ("fog", "snow"))})
    with pytest.raises(CalibrationError, match="at least 2 distinct corruptions"):
        make_table(presets={"bad": (30, ("fog",))})


# ----------------------------------------------------------------------------- statistics
def test_wilson_interval_matches_known_values():
    grid = np.full((21, 21), 50.0)
    grid[1, 1] = 0.0
    counts = np.full((21, 21), 100)
    counts[2, 2] = 0
    table = CalibrationTable.from_grids(
        NAMES, {("fog", "snow"): grid}, image_counts={("fog", "snow"): counts}, metadata=make_metadata()
    )
    lower, upper = table.confidence_interval("fog", "snow", level=0.95)
    # Wilson score interval for 50 successes in 100 trials at 95 %: [0.4038, 0.5962].
    assert lower[0, 0] == pytest.approx(40.38, abs=0.01)
    assert upper[0, 0] == pytest.approx(59.62, abs=0.01)
    # 0 of 100: lower bound exactly 0, upper 3.70 %.
    assert lower[1, 1] == 0.0 and upper[1, 1] == pytest.approx(3.70, abs=0.01)
    assert (lower[2, 2], upper[2, 2]) == (0.0, 100.0)
    narrow_lower, narrow_upper = table.confidence_interval("fog", "snow", level=0.5)
    assert narrow_upper[0, 0] - narrow_lower[0, 0] < upper[0, 0] - lower[0, 0]
    with pytest.raises(CalibrationError, match=r"level must be in \(0, 1\), got 95"):
        table.confidence_interval("fog", "snow", level=95)


def test_single_corruption_accuracy_averages_rows_and_columns():
    table = make_table()
    curve = table.single_corruption_accuracy("snow")
    # snow is n1 in (snow, fog), (snow, jpeg): column 0 = 10 + b + i; n2 in (fog, snow), (jpeg, snow): row 0.
    expected = np.mean(
        [10 + 0 + np.arange(21), 10 + 2 + np.arange(21), 0 + 1 + np.arange(21) / 100, 20 + 1 + np.arange(21) / 100],
        axis=0,
    )
    np.testing.assert_allclose(curve, expected)


# ----------------------------------------------------------------------------- file format
def test_save_load_round_trip(tmp_path):
    table = make_table(presets={"b": (10.0, ("fog", "snow")), "a": (20.0, NAMES)}, notes="ünïcode ok")
    path = table.save(tmp_path / "table.npz")
    loaded = CalibrationTable.load(path)
    assert loaded.checksum() == table.checksum()
    assert loaded.metadata == table.metadata
    assert list(loaded.difficulty_presets) == ["b", "a"]
    assert loaded.difficulty_presets == table.difficulty_presets
    np.testing.assert_array_equal(loaded.accuracy_array, table.accuracy_array)
    np.testing.assert_array_equal(loaded.image_counts_array, table.image_counts_array)
    assert loaded.pairs() == table.pairs()
    assert [p.name for p in tmp_path.iterdir()] == ["table.npz"]


def test_save_is_byte_stable_across_time(tmp_path, monkeypatch):
    table = make_table()
    first = table.save(tmp_path / "first.npz").read_bytes()
    later = time.time() + 10 * 24 * 3600
    monkeypatch.setattr(time, "time", lambda: later)
    second = table.save(tmp_path / "second.npz").read_bytes()
    assert first == second
    resaved = CalibrationTable.load(tmp_path / "second.npz").save(tmp_path / "third.npz").read_bytes()
    assert resaved == first


def test_save_overwrites_atomically_and_reports_missing_folder(tmp_path):
    path = tmp_path / "table.npz"
    path.write_bytes(b"old content")
    make_table().save(path)
    assert CalibrationTable.load(path).pairs()
    with pytest.raises(FileNotFoundError, match="folder does not exist"):
        make_table().save(tmp_path / "missing" / "table.npz")


def test_checksum_covers_numbers_not_description():
    table = make_table()
    assert make_table(notes="other notes", created="2030-01-01T00:00:00").checksum() == table.checksum()
    changed_grid = {pair: np.array(table.grid(*pair)) for pair in table.pairs()}
    changed_grid[("fog", "snow")][3, 3] += 0.001
    changed = CalibrationTable.from_grids(NAMES, changed_grid, image_counts=100, metadata=make_metadata())
    assert changed.checksum() != table.checksum()
    assert make_table(image_counts=99).checksum() != table.checksum()
    assert make_table(presets={"x": (5, ("fog", "snow"))}).checksum() != table.checksum()


@pytest.mark.parametrize("kind", ["centre", "stream"])
def test_readable_with_plain_numpy_and_json(tmp_path, kind):
    """The recipe of docs/calibration_format.md: read values and recompute the checksum without ccc."""
    table = make_table(presets={"easy": (40, ("fog", "snow"))}, preprocessing_kind=kind)
    path = table.save(tmp_path / "table.npz")
    with np.load(path, allow_pickle=False) as archive:
        accuracy, counts, pairs = archive["accuracy"], archive["image_counts"], archive["pairs"]
        document = json.loads(archive["metadata.json"])
    names = document["metadata"]["corruptions"]
    row = [k for k, (a, b) in enumerate(pairs) if (names[a], names[b]) == ("snow", "jpeg")][0]
    np.testing.assert_array_equal(accuracy[row], table.grid("snow", "jpeg"))
    assert accuracy.dtype == np.float64 and counts.dtype == np.int64 and pairs.shape == (6, 2)
    content = {
        "format": document["format"],
        "format_version": document["format_version"],
        "corruptions": names,
        "pairs": pairs.tolist(),
        "difficulty_presets": document["difficulty_presets"],
    }
    if document["metadata"].get("preprocessing_kind", "centre") != "centre":
        content["preprocessing_kind"] = document["metadata"]["preprocessing_kind"]
    digest = hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode("utf-8"))
    digest.update(b"\n")
    digest.update(accuracy.astype("<f8").tobytes())
    digest.update(counts.astype("<i8").tobytes())
    assert digest.hexdigest() == table.checksum()


# ----------------------------------------------------------------------------- load validation
def npy(array: np.ndarray, allow_pickle: bool = False) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def rewrite(source: bytes, destination: Path, **members) -> Path:
    """Copy a table file, replacing members (``accuracy=bytes``), deleting (None) or adding them."""
    replacements = {name.replace("__", "."): data for name, data in members.items()}
    with zipfile.ZipFile(io.BytesIO(source)) as original:
        contents = {name: original.read(name) for name in original.namelist()}
    for short_name, data in replacements.items():
        name = short_name if "." in short_name else f"{short_name}.npy"
        if data is None:
            contents.pop(name)
        else:
            contents[name] = data
    with zipfile.ZipFile(destination, "w") as archive:
        for name, data in contents.items():
            archive.writestr(name, data)
    return destination


def edited_document(source: bytes, edit) -> bytes:
    with zipfile.ZipFile(io.BytesIO(source)) as archive:
        document = json.loads(archive.read("metadata.json"))
    edit(document)
    return json.dumps(document).encode("utf-8")


class Exploit:
    """Pickles to a call that creates a file: loading it must never run."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def bad_files(good: bytes, tmp_path: Path):
    table = CalibrationTable.from_bytes(good)
    acc = np.array(table.accuracy_array)
    counts = np.array(table.image_counts_array)
    pairs = np.array(table.pair_indices)
    marker = tmp_path / "exploited"

    def with_value(array, index, value):
        copy = np.array(array)
        copy[index] = value
        return copy

    def remove_field(field):
        return lambda document: document["metadata"].pop(field)

    return {
        "not_zip": (b"hello, not a zip", "not a .npz \\(zip\\) file"),
        "pickle_file": (pickle.dumps({"a": 1}), "looks like the published CCC pickle"),
        "truncated_zip": (good[: len(good) // 2], "damaged|missing member"),
        "missing_member": (dict(image_counts=None), "missing member\\(s\\) image_counts.npy"),
        "extra_member": (dict(extra=npy(np.zeros(2))), "unexpected or repeated member\\(s\\): extra.npy"),
        "accuracy_shape": (dict(accuracy=npy(acc[:, :20])), "accuracy must have shape \\[6, 21, 21\\]"),
        "accuracy_above_100": (dict(accuracy=npy(with_value(acc, (2, 3, 4), 101.0))), "got 101.0 at s1=0.75, s2=1.0"),
        "accuracy_nan": (dict(accuracy=npy(with_value(acc, (0, 0, 0), np.nan))), "finite and in \\[0, 100\\]"),
        "accuracy_int": (dict(accuracy=npy(acc.astype(np.int64))), "accuracy.npy must be float64, got int64"),
        "negative_counts": (dict(image_counts=npy(with_value(counts, (1, 0, 0), -3))), "must be >= 0, got -3"),
        "pairs_unknown": (dict(pairs=npy(with_value(pairs, (0, 1), 7))), "pairs must index the 3 corruptions"),
        "pairs_duplicated": (dict(pairs=npy(with_value(pairs, 1, pairs[0]))), "more than once"),
        "pairs_same": (dict(pairs=npy(with_value(pairs, (0, 1), pairs[0, 0]))), "two distinct corruptions"),
        "pairs_float": (dict(pairs=npy(pairs.astype(np.float64))), "pairs.npy must be int64, got float64"),
        "object_array": (
            dict(accuracy=npy(np.array([Exploit(marker)], dtype=object), allow_pickle=True)),
            "holds pickled Python objects",
        ),
        "raw_pickle_member": (dict(accuracy=pickle.dumps(Exploit(marker))), "accuracy.npy is a pickle"),
        "invalid_json": (dict(metadata__json=b"{not json"), "metadata.json is not valid JSON"),
        "format_version": (
            dict(metadata__json=edited_document(good, lambda d: d.update(format_version=2))),
            "unsupported format_version 2; this ccc reads version 1",
        ),
        "format_name": (
            dict(metadata__json=edited_document(good, lambda d: d.update(format="other"))),
            "format must be 'ccc-calibration-table'",
        ),
        "missing_metadata_field": (
            dict(metadata__json=edited_document(good, remove_field("model_name"))),
            "metadata is missing field\\(s\\): model_name",
        ),
        "unexpected_metadata_field": (
            dict(metadata__json=edited_document(good, lambda d: d["metadata"].update(colour="red"))),
            "unexpected field\\(s\\): colour",
        ),
        "bad_created": (
            dict(metadata__json=edited_document(good, lambda d: d["metadata"].update(created="soon"))),
            "created must be an ISO 8601",
        ),
        "preset_unknown_corruption": (
            dict(
                metadata__json=edited_document(
                    good,
                    lambda d: d.update(
                        difficulty_presets=[{"name": "x", "target_accuracy": 1, "corruptions": ["fog", "rain"]}]
                    ),
                )
            ),
            "unknown corruption 'rain'",
        ),
        "missing_presets_key": (
            dict(metadata__json=edited_document(good, lambda d: d.pop("difficulty_presets"))),
            "missing \\['difficulty_presets'\\]",
        ),
    }


BAD_FILE_NAMES = [
    "not_zip",
    "pickle_file",
    "truncated_zip",
    "missing_member",
    "extra_member",
    "accuracy_shape",
    "accuracy_above_100",
    "accuracy_nan",
    "accuracy_int",
    "negative_counts",
    "pairs_unknown",
    "pairs_duplicated",
    "pairs_same",
    "pairs_float",
    "object_array",
    "raw_pickle_member",
    "invalid_json",
    "format_version",
    "format_name",
    "missing_metadata_field",
    "unexpected_metadata_field",
    "bad_created",
    "preset_unknown_corruption",
    "missing_presets_key",
]


@pytest.mark.parametrize("case", BAD_FILE_NAMES)
def test_load_rejects_invalid_files(case, tmp_path):
    good = make_table(presets={"p": (10, ("fog", "snow"))}).to_bytes()
    cases = bad_files(good, tmp_path)
    assert set(cases) == set(BAD_FILE_NAMES)
    content, match = cases[case]
    path = tmp_path / f"{case}.npz"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        rewrite(good, path, **content)
    with pytest.raises(CalibrationError, match=match) as raised:
        CalibrationTable.load(path)
    assert str(raised.value).startswith(f"{path}: ")
    assert not (tmp_path / "exploited").exists()


def test_load_missing_file_names_it(tmp_path):
    path = tmp_path / "absent.npz"
    with pytest.raises(CalibrationError, match=f"{path}: cannot read calibration table"):
        CalibrationTable.load(path)


def test_with_difficulty_presets_replaces_only_the_presets(tmp_path: Path) -> None:
    table = make_table()
    changed = table.with_difficulty_presets({"tiny": (12.5, NAMES[:2])})
    assert dict(changed.difficulty_presets) == {"tiny": (12.5, tuple(NAMES[:2]))}
    assert np.array_equal(changed.accuracy_array, table.accuracy_array) and changed.metadata == table.metadata
    assert changed.checksum() != table.checksum()
    assert CalibrationTable.load(changed.save(tmp_path / "t.npz")).difficulty_presets == changed.difficulty_presets
    with pytest.raises(CalibrationError, match="unknown corruption"):
        table.with_difficulty_presets({"bad": (10.0, ("no_such_corruption", NAMES[0]))})


# ----------------------------------------------------------------------------- bounded imports (issue 19)
def npy_header_only(shape: tuple[int, ...]) -> bytes:
    """A .npy file whose header declares ``shape`` (float64) but holds 8 bytes of data."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f8", "fortran_order": False, "shape": shape})
    return buffer.getvalue() + bytes(8)


def test_a_npy_header_declaring_a_huge_array_is_refused_before_allocating(tmp_path: Path) -> None:
    good = make_table().to_bytes()
    path = rewrite(good, tmp_path / "huge.npz", accuracy=npy_header_only((10**12, 21, 21)))
    with pytest.raises(
        CalibrationError,
        match=r"huge\.npz: member accuracy\.npy declares a 1000000000000×21×21 float64 array "
        r"\(3,528,000,000,000,000 bytes\) but holds 8 bytes",
    ):
        CalibrationTable.load(path)


def test_a_member_inflating_beyond_its_limit_is_refused_before_reading(tmp_path: Path) -> None:
    good = make_table().to_bytes()
    with zipfile.ZipFile(io.BytesIO(good)) as original:
        contents = {name: original.read(name) for name in original.namelist()}
    contents["metadata.json"] = contents["metadata.json"] + b" " * MAX_METADATA_BYTES
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in contents.items():
            archive.writestr(name, data)
    assert path.stat().st_size < MAX_METADATA_BYTES // 100
    with pytest.raises(
        CalibrationError,
        match=r"bomb\.npz: member metadata\.json inflates to more than 4,194,304 bytes, the limit",
    ):
        CalibrationTable.load(path)


def test_a_member_whose_header_understates_its_size_is_refused_as_it_inflates(tmp_path, monkeypatch):
    """A member is read in pieces: the zip below says 100 bytes and inflates to 64 MiB, which reading it
    whole inflates at once (before zipfile cuts it to its header's 100 bytes and its checksum fails)."""
    import struct
    import tracemalloc

    from ccc.calibration import table_io

    monkeypatch.setattr(table_io, "MAX_ARRAY_MEMBER_BYTES", 2**20)
    with zipfile.ZipFile(io.BytesIO(make_table().to_bytes())) as original:
        contents = {name: original.read(name) for name in original.namelist()}
    contents["accuracy.npy"] = b"\0" * 2**26
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, member in contents.items():
            archive.writestr(name, member)
    data = bytearray(buffer.getvalue())
    local = zipfile.ZipFile(buffer).getinfo("accuracy.npy").header_offset
    central = data.rfind(b"accuracy.npy") - 46
    struct.pack_into("<I", data, local + 22, 100)  # the uncompressed size, in both headers
    struct.pack_into("<I", data, central + 24, 100)
    path = tmp_path / "liar.npz"
    path.write_bytes(bytes(data))
    assert path.stat().st_size < 2**20
    tracemalloc.start()
    try:
        with pytest.raises(
            CalibrationError, match=r"liar\.npz: damaged \.npz \(zip\) file \(Bad CRC-32 for file 'accuracy\.npy'\)"
        ):
            CalibrationTable.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**24
