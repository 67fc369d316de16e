"""Tests of ccc.shards (record, writer, manifest): tar layout and fixed headers, WebDataset compatibility, atomic writes
(aborts, full disk), and the manifest's round trip and validation."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

import ccc.shards.writer
from ccc.render import RenderedSample
from ccc.shards.manifest import MANIFEST_NAME, Manifest, ManifestError, load_manifest, save_manifest
from ccc.shards.record import format_info, sample_key, shard_name
from ccc.shards.writer import ShardWriteError, ShardWriter
from ccc.stream.spec import SampleSpec, StreamSpec

CHECKSUM = "ab" * 32


def make_sample(index: int) -> RenderedSample:
    spec = SampleSpec(
        index=index, step=index // 2, pair_index=0, path_position=index // 2, path_cell=(4, 0), n1="fog", s1=1.0,
        n2="snow", s2=0.0, calibrated_accuracy=31.5, source_position=index % 3,
        source_path=f"n0000000{index % 3}/ILSVRC2012_val_{index:08d}.JPEG", class_index=index % 3,
        source_size=(500, 375), crop_box=(1, 2, 300, 280), flip=bool(index % 2), seed=1000 + index,
    )  # fmt: skip
    return RenderedSample(spec, f"fake jpeg {index}".encode() * (index + 1))


def write(directory: Path, shard_index: int, first: int, count: int):
    with ShardWriter(directory, shard_index, first) as writer:
        for index in range(first, first + count):
            writer.write(make_sample(index))
        return writer.commit()


def test_shard_layout_and_fixed_headers(tmp_path: Path) -> None:
    info = write(tmp_path, 3, 30, 4)
    path = tmp_path / "serial_00003.tar"
    assert info.name == path.name == shard_name(3)
    assert (info.index, info.first_sample, info.sample_count) == (3, 30, 4)
    assert info.bytes == path.stat().st_size
    assert info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    with tarfile.open(path) as archive:
        members = archive.getmembers()
        assert [m.name for m in members[:4]] == [
            "000000000030.info", "000000000030.input.jpg", "000000000030.json", "000000000030.output.cls",
        ]  # fmt: skip
        assert len(members) == 16
        assert {(m.mtime, m.mode, m.uid, m.gid, m.uname, m.gname, m.type) for m in members} == {
            (0, 0o444, 0, 0, "ccc", "ccc", tarfile.REGTYPE)
        }
        sample = make_sample(31)
        assert archive.extractfile("000000000031.input.jpg").read() == sample.image  # type: ignore[union-attr]
        assert archive.extractfile("000000000031.output.cls").read() == b"1"  # type: ignore[union-attr]
        assert archive.extractfile("000000000031.info").read().decode() == format_info(sample.spec)  # type: ignore[union-attr]
        record = archive.extractfile("000000000031.json").read().decode()  # type: ignore[union-attr]
    assert json.loads(record) == sample.spec.to_json_dict()
    assert record == json.dumps(sample.spec.to_json_dict(), sort_keys=True, separators=(",", ":"))


def test_equal_samples_give_identical_bytes(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert write(tmp_path / "a", 0, 0, 5) == write(tmp_path / "b", 0, 0, 5)
    assert (tmp_path / "a" / "serial_00000.tar").read_bytes() == (tmp_path / "b" / "serial_00000.tar").read_bytes()


def test_webdataset_groups_the_members_into_samples(tmp_path: Path) -> None:
    """WebDataset's own tar iteration and key grouping (what ``WebDataset(urls)`` runs) yields our samples."""
    tariterators = pytest.importorskip("webdataset.tariterators")
    write(tmp_path, 0, 0, 3)
    write(tmp_path, 1, 3, 2)
    samples = []
    for shard_index in range(2):
        path = tmp_path / shard_name(shard_index)
        with open(path, "rb") as handle:
            files = tariterators.tar_file_expander([{"url": str(path), "stream": handle}])
            samples += list(tariterators.group_by_keys(files))
    assert [s["__key__"] for s in samples] == [sample_key(k) for k in range(5)]
    assert samples[4]["input.jpg"] == make_sample(4).image
    assert int(samples[4]["output.cls"]) == 1
    assert set(samples[0]) >= {"info", "input.jpg", "json", "output.cls"}


def test_an_aborted_shard_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="render failed"):
        with ShardWriter(tmp_path, 0, 0) as writer:
            writer.write(make_sample(0))
            raise RuntimeError("render failed")
    assert list(tmp_path.iterdir()) == []
    with ShardWriter(tmp_path, 0, 0) as writer:
        with pytest.raises(ValueError, match="sample index must be 0 \\(samples in order\\), got 1"):
            writer.write(make_sample(1))
    assert list(tmp_path.iterdir()) == []


class FullDisk(io.FileIO):
    """A file that fails with ENOSPC once more than ``limit`` bytes were written."""

    limit = 3000

    def write(self, data) -> int:  # type: ignore[no-untyped-def, override]
        if self.tell() + len(data) > self.limit:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


def test_a_full_disk_gives_a_clear_error_and_no_shard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        ccc.shards.writer, "open", lambda path, mode="rb", **kw: FullDisk(path, mode.replace("b", "")), raising=False
    )
    with pytest.raises(
        ShardWriteError,
        match=r"could not write shard .*serial_00000.tar: No space left on device "
        r"\(no space left on device: free space, then re-run",
    ):
        write(tmp_path, 0, 0, 20)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_behind_a_buffer_leaves_no_partial_file_and_no_raw_errno(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As with open(path, "wb"): closing the buffered handle in abort() hits the full disk again.
    monkeypatch.setattr(
        ccc.shards.writer,
        "open",
        lambda path, mode="rb", **kw: io.BufferedWriter(FullDisk(path, "w"), 1024),
        raising=False,
    )
    with pytest.raises(ShardWriteError) as raised:
        write(tmp_path, 0, 0, 20)
    assert str(raised.value).startswith("could not write shard ") and "[Errno" not in str(raised.value)
    assert raised.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []


def make_stream(**overrides: object) -> StreamSpec:
    fields = dict(
        target_accuracy=20.0, corruptions=("fog", "snow"), speed=2, seed=43, num_images=10,
        calibration_checksum=CHECKSUM, source_index_checksum=CHECKSUM, shard_size=4,
    )  # fmt: skip
    fields.update(overrides)
    return StreamSpec(**fields)  # type: ignore[arg-type]


def test_manifest_round_trip(tmp_path: Path) -> None:
    manifest = Manifest(make_stream(), "cd" * 32, {"numpy": "2.4.6"})
    manifest = manifest.with_shard(write(tmp_path, 1, 4, 4)).with_shard(write(tmp_path, 0, 0, 4))
    assert [entry.index for entry in manifest.shards] == [0, 1] and not manifest.complete
    manifest = manifest.with_shard(write(tmp_path, 2, 8, 2))
    assert manifest.complete
    save_manifest(manifest, tmp_path)
    assert load_manifest(tmp_path) == manifest
    document = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert document["calibration_checksum"] == CHECKSUM and document["num_shards"] == 3 and document["complete"]
    assert document["rendering"]["jpeg_quality"] == 85
    assert not list(tmp_path.glob(".*"))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: "not json", "not a JSON manifest"),
        (
            lambda d: {**d, "format_version": 9},
            "format must be 'ccc-stream-manifest' version 1, got 'ccc-stream-manifest' version 9",
        ),
        (lambda d: {**d, "stream": {**d["stream"], "speed": 0}}, "speed must be an integer >= 1, got 0"),
        (
            lambda d: {**d, "shards": [{**d["shards"][0], "sample_count": 3}]},
            "does not match the stream's shard layout",
        ),
        (lambda d: {**d, "shards": [d["shards"][0], d["shards"][0]]}, "listed more than once"),
        (lambda d: {**d, "plan_hash": 5}, "field 'plan_hash' must be str, got 5"),
    ],
)
def test_invalid_manifests_are_named(tmp_path: Path, edit, message: str) -> None:  # type: ignore[no-untyped-def]
    save_manifest(Manifest(make_stream(), "cd" * 32, {}).with_shard(write(tmp_path, 0, 0, 4)), tmp_path)
    path = tmp_path / MANIFEST_NAME
    edited = edit(json.loads(path.read_text()))
    path.write_text(edited if isinstance(edited, str) else json.dumps(edited))
    with pytest.raises(ManifestError, match=message):
        load_manifest(tmp_path)
