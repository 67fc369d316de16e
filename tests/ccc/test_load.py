"""ccc.load: reading shards (ours and the published format) and rendering on the fly; ccc-verify."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from ccc.check_run import verify_run
from ccc.cli.verify import main as verify_main
from ccc.execution import SerialExecutor
from ccc.generate import generate_stream
from ccc.load import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    StreamError,
    StreamWarning,
    collate_samples,
    open_stream,
    render_stream,
    stream_loader,
)
from ccc.shards.errors import ShardReadError
from ccc.shards.location import open_shard, read_all
from ccc.shards.reader import read_samples
from ccc.shards.record import parse_info
from ccc.stream.plan import plan_sample
from ccc.stream.sources import index_image_folder, load_source_images
from tests.builders import REPOSITORY, make_calibration_table, make_ccc_plan, make_image_folder
from tta_eval.streams import StreamOptions, open_stream_source

NUM_IMAGES = 40
SHARD_SIZE = 16


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A 40-image stream (shards of 16, 16, 8) over a 12-image folder, written once."""
    folder = make_image_folder(tmp_path_factory.mktemp("images") / "val")
    table = make_calibration_table()
    table_path = tmp_path_factory.mktemp("table") / "table.npz"
    table.save(table_path)
    plan = make_ccc_plan(
        table, load_source_images(index_image_folder(folder, progress=False)), NUM_IMAGES, 4, SHARD_SIZE
    )
    run = tmp_path_factory.mktemp("run") / "run"
    generate_stream(plan, run, SerialExecutor(), progress=False)
    return {"folder": folder, "table": table, "table_path": table_path, "plan": plan, "run": run}


@pytest.fixture
def run_copy(world: dict, tmp_path: Path) -> Path:
    """A copy of the run folder the test may damage."""
    return Path(shutil.copytree(world["run"], tmp_path / "run"))


def indices(stream) -> list[int]:
    return [sample.metadata["index"] for sample in stream]


# ----------------------------------------------------------------------------- reading in order
def test_reads_every_sample_in_order_with_the_plan_metadata(world: dict) -> None:
    samples = list(open_stream(world["run"]))
    assert [sample.metadata["index"] for sample in samples] == list(range(NUM_IMAGES))
    for sample in samples:
        spec = plan_sample(world["plan"], sample.metadata["index"])
        assert sample.label == spec.class_index
        assert (sample.metadata["n1"], sample.metadata["s1"], sample.metadata["n2"], sample.metadata["s2"]) == (
            spec.n1,
            spec.s1,
            spec.n2,
            spec.s2,
        )
        assert sample.metadata["path_step"] == spec.step
        assert sample.metadata["source_path"] == spec.source_path
        assert sample.image.dtype == torch.uint8 and tuple(sample.image.shape) == (3, 224, 224)


def test_image_formats_agree(world: dict) -> None:
    first = {
        name: next(iter(open_stream(world["run"], image_format=name, limit=1))).image
        for name in ("uint8", "float", "normalized", "pil", "jpeg")
    }
    pixels = np.array(Image.open(io.BytesIO(first["jpeg"])).convert("RGB"))
    assert torch.equal(first["uint8"], torch.from_numpy(pixels).permute(2, 0, 1))
    assert np.array_equal(np.asarray(first["pil"]), pixels)
    assert torch.allclose(first["float"], first["uint8"].float() / 255)
    expected = (first["float"] - torch.tensor(IMAGENET_MEAN).view(3, 1, 1)) / torch.tensor(IMAGENET_STD).view(3, 1, 1)
    assert torch.allclose(first["normalized"], expected)


@pytest.mark.parametrize(("start", "limit"), [(0, 5), (13, 7), (16, 16), (30, None), (39, 1), (5, 1000)])
def test_start_and_limit(world: dict, start: int, limit: int | None) -> None:
    stop = NUM_IMAGES if limit is None else min(start + limit, NUM_IMAGES)
    assert indices(open_stream(world["run"], start=start, limit=limit)) == list(range(start, stop))


def test_start_skips_whole_shards_without_opening_them(world: dict, run_copy: Path) -> None:
    (run_copy / "serial_00000.tar").unlink()
    assert indices(open_stream(run_copy, start=16, limit=20)) == list(range(16, 36))
    with pytest.raises(StreamError, match=r"serial_00000\.tar"):
        list(open_stream(run_copy, start=15, limit=2))


def test_limit_stops_before_later_shards(world: dict, run_copy: Path) -> None:
    (run_copy / "serial_00002.tar").unlink()
    assert indices(open_stream(run_copy, limit=32)) == list(range(32))


@pytest.mark.parametrize("num_workers", [0, 1, 2])
@pytest.mark.parametrize("batch_size", [1, 5, 16, 64])
def test_loader_keeps_stream_order(world: dict, num_workers: int, batch_size: int) -> None:
    batches = list(stream_loader(open_stream(world["run"]), batch_size=batch_size, num_workers=num_workers))
    order = [entry["index"] for _, _, metadata in batches for entry in metadata]
    assert order == list(range(NUM_IMAGES))
    assert all(images.shape[0] == batch_size for images, _, _ in batches[:-1])
    assert torch.equal(
        torch.cat([labels for _, labels, _ in batches]),
        torch.tensor([plan_sample(world["plan"], i).class_index for i in range(NUM_IMAGES)]),
    )


def test_fewer_shards_than_workers(world: dict, run_copy: Path) -> None:
    order = [
        entry["index"]
        for _, _, metadata in stream_loader(open_stream(run_copy, limit=10), batch_size=4, num_workers=2)
        for entry in metadata
    ]
    assert order == list(range(10))
    one_shard = [str(run_copy / "serial_00002.tar")]
    assert (
        len([m for _, _, batch in stream_loader(open_stream(one_shard), batch_size=8, num_workers=2) for m in batch])
        == 8
    )


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("rank_split", ["interleaved", "contiguous"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_ranks_split_without_loss_or_duplicates(
    world: dict, world_size: int, rank_split: str, num_workers: int
) -> None:
    start, limit, batch_size = 3, 35, 4
    per_rank = []
    for rank in range(world_size):
        stream = open_stream(
            world["run"], start=start, limit=limit, rank=rank, world_size=world_size, rank_split=rank_split
        )
        per_rank.append(
            [
                m["index"]
                for _, _, batch in stream_loader(stream, batch_size=batch_size, num_workers=num_workers)
                for m in batch
            ]
        )
    assert sorted(itertools.chain(*per_rank)) == list(range(start, start + limit))
    for rank, seen in enumerate(per_rank):
        assert seen == sorted(seen)
        if rank_split == "contiguous":
            low = start + rank * limit // world_size
            assert seen == list(range(low, start + (rank + 1) * limit // world_size))
        else:
            chunks = {(index - start) // batch_size for index in seen}
            assert all(chunk % world_size == rank for chunk in chunks)


def test_rank_comes_from_the_environment(world: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    stream = open_stream(world["run"], chunk_size=10)
    assert (stream.rank, stream.world_size) == (1, 2)
    assert indices(stream) == list(range(10, 20)) + list(range(30, 40))
    monkeypatch.setenv("RANK", "two")
    with pytest.raises(ValueError, match="RANK"):
        open_stream(world["run"])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"start": 40}, "start must be below"),
        ({"start": -1}, "start must be"),
        ({"limit": 0}, "limit must be"),
        ({"image_format": "png"}, "image_format must be one of"),
        ({"rank": 2, "world_size": 2}, "rank must be in"),
        ({"on_error": "ignore"}, "on_error must be one of"),
        ({"rank_split": "blocks"}, "rank_split must be one of"),
        ({"chunk_size": 0}, "chunk_size must be"),
    ],
)
def test_bad_arguments(world: dict, options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        open_stream(world["run"], **options)


def test_contiguous_split_needs_a_known_length(world: dict) -> None:
    paths = sorted(str(path) for path in world["run"].glob("serial_*.tar"))
    with pytest.raises(ValueError, match="known length"):
        open_stream(paths, rank_split="contiguous")
    assert len(list(open_stream(paths, rank_split="contiguous", limit=20, rank=1, world_size=2))) == 10


# ----------------------------------------------------------------------------- other sources
def test_brace_patterns_lists_and_pipes(world: dict) -> None:
    pattern = f"{world['run']}/serial_{{00000..00002}}.tar"
    assert indices(open_stream(pattern)) == list(range(NUM_IMAGES))
    assert indices(open_stream([world["run"] / "serial_00000.tar", world["run"] / "serial_00001.tar"])) == list(
        range(32)
    )
    assert indices(open_stream(f"pipe:cat {world['run']}/serial_00001.tar", start=3, limit=4)) == [3, 4, 5, 6]
    assert indices(open_stream(world["run"] / "manifest.json", limit=3)) == [0, 1, 2]


def write_published_shard(path: Path, samples: list[tuple[bytes, int, str]], writer: str = "tarfile") -> None:
    """A shard in the published CCC layout: keys sample_<i>, members info, input.jpg, output.cls only."""
    members = [
        (f"sample_{number}.{extension}", content)
        for number, (jpeg, label, info) in enumerate(samples)
        for extension, content in (("info", info.encode()), ("input.jpg", jpeg), ("output.cls", str(label).encode()))
    ]
    if writer == "webdataset":
        import webdataset

        with webdataset.TarWriter(str(path), mtime=0) as sink:
            for number, (jpeg, label, info) in enumerate(samples):
                sink.write(
                    {
                        "__key__": f"sample_{number}",
                        "info": info.encode(),
                        "input.jpg": jpeg,
                        "output.cls": str(label).encode(),
                    }
                )
        return
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as archive:
        for name, content in members:
            header = tarfile.TarInfo(name)
            header.size = len(content)
            archive.addfile(header, io.BytesIO(content))


@pytest.mark.parametrize("writer", ["tarfile", "webdataset"])
def test_published_format(world: dict, tmp_path: Path, writer: str) -> None:
    ours = list(open_stream(world["run"], image_format="jpeg", limit=6))
    rows = [
        (
            sample.image,
            sample.label,
            f"++dir++n0144076{k}++name++ILSVRC2012_val_0000029{k}.JPEG"
            f"++n1++gaussian_noise++s1++1.25++n2++fog++s2++{k * 0.25}",
        )
        for k, sample in enumerate(ours)
    ]
    write_published_shard(tmp_path / "serial_00000.tar", rows[:4], writer)
    write_published_shard(tmp_path / "serial_00001.tar", rows[4:], writer)
    read = list(open_stream(f"{tmp_path}/serial_{{00000..00001}}.tar", image_format="jpeg"))
    assert [sample.image for sample in read] == [row[0] for row in rows]
    assert [sample.label for sample in read] == [row[1] for row in rows]
    assert [sample.metadata["index"] for sample in read] == list(range(6))
    assert read[5].metadata["source_path"] == "n01440765/ILSVRC2012_val_00000295.JPEG"
    assert (read[5].metadata["n1"], read[5].metadata["s1"], read[5].metadata["n2"], read[5].metadata["s2"]) == (
        "gaussian_noise",
        1.25,
        "fog",
        1.25,
    )
    assert read[5].metadata["path_step"] is None and read[5].metadata["key"] == "sample_1"
    assert [s.metadata["index"] for s in open_stream(f"{tmp_path}/serial_{{00000..00001}}.tar", start=3)] == [3, 4, 5]


def test_parse_info_rejects_other_layouts() -> None:
    assert parse_info("++dir++n1++name++a.JPEG++n1++fog++s1++0.0++n2++snow++s2++5.0").s2 == 5.0
    for text in (
        "dir=n1",
        "++dir++n1++name++a++n1++fog++s1++x++n2++snow++s2++1",
        "++name++a++dir++n1++n1++fog++s1++1++n2++snow++s2++1",
    ):
        with pytest.raises(ValueError, match="info"):
            parse_info(text)


# ----------------------------------------------------------------------------- rendering on the fly
def test_render_stream_equals_the_shards(world: dict) -> None:
    shard_bytes = [sample.image for sample in open_stream(world["run"], image_format="jpeg")]
    rendered = render_stream(
        world["run"], imagenet=world["folder"], calibration=world["table_path"], image_format="jpeg"
    )
    assert [sample.image for sample in rendered] == shard_bytes
    loader = stream_loader(
        render_stream(world["run"], imagenet=world["folder"], calibration=world["table"], start=10, limit=12),
        batch_size=5,
        num_workers=2,
    )
    images = torch.cat([batch[0] for batch in loader])
    assert torch.equal(images, torch.stack([sample.image for sample in open_stream(world["run"], start=10, limit=12)]))


def test_render_stream_uncompressed_and_unbounded(world: dict) -> None:
    definition = {"difficulty": "medium", "speed": 4, "seed": 43}
    stream = render_stream(definition, imagenet=world["folder"], calibration=world["table"], compress=False, start=38)
    assert stream.length is not None and stream.length > 10**15
    samples = list(itertools.islice(stream, 5))
    assert [sample.metadata["index"] for sample in samples] == [38, 39, 40, 41, 42]
    compressed = next(iter(open_stream(world["run"], start=38, limit=1)))
    difference = (samples[0].image.int() - compressed.image.int()).abs()
    assert 0 < difference.float().mean() < 8
    with pytest.raises(ValueError, match="compress"):
        render_stream(
            definition, imagenet=world["folder"], calibration=world["table"], compress=False, image_format="jpeg"
        )


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        ({"difficulty": "impossible", "speed": 4}, "unknown difficulty .impossible."),
        ({"difficulty": "medium"}, "needs speed"),
        ({"difficulty": "medium", "speed": 4, "colour": 1}, "unknown stream definition key"),
        ({"difficulty": "medium", "speed": 400}, "speed must be at most"),
        (42, "StreamSpec, a run folder or a mapping"),
    ],
)
def test_render_stream_bad_definitions(world: dict, definition: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        render_stream(definition, imagenet=world["folder"], calibration=world["table"])


# ----------------------------------------------------------------------------- damaged input
def test_truncated_shard_names_the_shard_and_sample(world: dict, run_copy: Path) -> None:
    path = run_copy / "serial_00001.tar"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(
        StreamError, match=r"serial_00001\.tar: truncated \([\d,]+ bytes, the manifest records [\d,]+\)"
    ):
        list(open_stream(run_copy))
    with pytest.warns(StreamWarning, match=r"skipped 16 samples"):
        assert indices(open_stream(run_copy, on_error="skip")) == list(range(16)) + list(range(32, 40))
    with pytest.raises(StreamError, match=r"serial_00001\.tar.*truncated.*sample 0000000000\d\d"):
        list(open_stream(str(path)))
    with pytest.warns(StreamWarning, match=r"skipped samples in 1 place"):
        read = indices(open_stream(str(path), on_error="skip"))
    assert 0 < len(read) < SHARD_SIZE


def test_missing_shard_in_the_middle(world: dict, run_copy: Path) -> None:
    (run_copy / "serial_00001.tar").unlink()
    with pytest.raises(StreamError, match=r"serial_00001\.tar: cannot open"):
        list(open_stream(run_copy))
    with pytest.warns(StreamWarning, match="skipped 16 samples"):
        assert indices(open_stream(run_copy, on_error="skip")) == list(range(16)) + list(range(32, 40))


def edit_manifest_entry(run: Path, index: int, path: Path) -> None:
    """Record ``path``'s size and sha256 for shard ``index``, as if the manifest had been written for it."""
    manifest = json.loads((run / "manifest.json").read_text())
    entry = next(entry for entry in manifest["shards"] if entry["index"] == index)
    entry["bytes"] = path.stat().st_size
    entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (run / "manifest.json").write_text(json.dumps(manifest))


def write_tar(path: Path, samples: list) -> None:  # type: ignore[type-arg]
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as archive:
        for sample in samples:
            for extension, content in sample.members.items():
                header = tarfile.TarInfo(f"{sample.key}.{extension}")
                header.size = len(content)
                archive.addfile(header, io.BytesIO(content))


def test_a_shard_replaced_by_another_valid_shard_is_refused(run_copy: Path) -> None:
    shutil.copyfile(run_copy / "serial_00000.tar", run_copy / "serial_00001.tar")
    edit_manifest_entry(run_copy, 1, run_copy / "serial_00001.tar")
    with pytest.raises(
        StreamError, match=r"serial_00001\.tar: altered .*key 000000000000, expected 000000000016 for stream index 16"
    ):
        list(open_stream(run_copy))
    with pytest.warns(StreamWarning, match="skipped 16 samples in 1 place"):
        assert indices(open_stream(run_copy, on_error="skip")) == list(range(16)) + list(range(32, 40))


def test_an_oversized_shard_never_duplicates_an_index(run_copy: Path) -> None:
    write_tar(
        run_copy / "big.tar",
        read_all(str(run_copy / "serial_00000.tar")) + read_all(str(run_copy / "serial_00001.tar")),
    )
    (run_copy / "big.tar").replace(run_copy / "serial_00000.tar")
    edit_manifest_entry(run_copy, 0, run_copy / "serial_00000.tar")
    with pytest.raises(StreamError, match=r"serial_00000\.tar: altered \(holds more than the 16 samples"):
        list(open_stream(run_copy))
    with pytest.warns(StreamWarning, match="skipped samples in 1 place.*holds more than"):
        assert indices(open_stream(run_copy, on_error="skip")) == list(range(NUM_IMAGES))


def test_after_a_damaged_shard_the_next_ones_are_read_and_skips_are_counted_once(run_copy: Path) -> None:
    path = run_copy / "serial_00000.tar"
    data = bytearray(path.read_bytes())
    data[data.find(b"000000000005.input.jpg") + 3] ^= 0x01
    path.write_bytes(bytes(data))
    for world_size in (1, 2, 3):
        read, skipped = [], 0
        for rank in range(world_size):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                read += indices(open_stream(run_copy, on_error="skip", rank=rank, world_size=world_size, chunk_size=3))
            counts = [re.search(r"skipped (\d+) samples", str(warning.message)) for warning in caught]
            skipped += sum(int(match.group(1)) for match in counts if match)
        assert len(read) == len(set(read)) and set(range(16, NUM_IMAGES)) <= set(read)
        assert len(read) + skipped == NUM_IMAGES and 0 < skipped < 16


def test_a_flipped_jpeg_byte_is_caught_by_the_sha256_option(run_copy: Path) -> None:
    path = run_copy / "serial_00001.tar"
    data = bytearray(path.read_bytes())
    jpeg = read_all(str(path))[3].members["input.jpg"]
    data[data.find(jpeg) + len(jpeg) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    assert len(list(open_stream(run_copy))) == NUM_IMAGES
    with pytest.raises(StreamError, match=r"serial_00001\.tar: altered \(sha256 differs from the manifest's"):
        list(open_stream(run_copy, verify="sha256"))
    with pytest.warns(StreamWarning, match="skipped 16 samples"):
        assert indices(open_stream(run_copy, verify="sha256", on_error="skip")) == list(range(16)) + list(range(32, 40))
    assert indices(open_stream(run_copy, verify="sha256", start=32)) == list(range(32, 40))
    with pytest.raises(ValueError, match="verify='sha256' needs a run folder with a manifest"):
        open_stream(str(path), verify="sha256")
    with pytest.raises(ValueError, match="verify must be None or 'sha256', got 'md5'"):
        open_stream(run_copy, verify="md5")


def test_unfinished_shard_is_an_error_not_the_end(world: dict, run_copy: Path) -> None:
    manifest = json.loads((run_copy / "manifest.json").read_text())
    manifest["shards"] = [entry for entry in manifest["shards"] if entry["index"] != 2]
    manifest["complete"] = False
    (run_copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(StreamError, match=r"serial_00002\.tar.*not finished.*ccc-generate"):
        list(open_stream(run_copy))


def test_sample_without_label_and_undecodable_image(world: dict, tmp_path: Path) -> None:
    good = next(iter(open_stream(world["run"], image_format="jpeg", limit=1))).image
    info = "++dir++n01++name++a.JPEG++n1++fog++s1++1.0++n2++snow++s2++0.0"
    with tarfile.open(tmp_path / "bad.tar", "w") as archive:
        for name, content in (
            ("a.info", info.encode()),
            ("a.input.jpg", good),
            ("b.info", info.encode()),
            ("b.input.jpg", good),
            ("b.output.cls", b"3"),
            ("c.info", info.encode()),
            ("c.input.jpg", b"not a jpeg"),
            ("c.output.cls", b"4"),
        ):
            header = tarfile.TarInfo(name)
            header.size = len(content)
            archive.addfile(header, io.BytesIO(content))
    with pytest.raises(StreamError, match=r"bad\.tar: sample a .* no output\.cls"):
        list(open_stream(str(tmp_path / "bad.tar")))
    with pytest.warns(StreamWarning, match="skipped 2 samples"):
        kept = list(open_stream(str(tmp_path / "bad.tar"), on_error="skip"))
    assert [(sample.metadata["key"], sample.label) for sample in kept] == [("b", 3)]


def test_folder_without_manifest(world: dict, run_copy: Path) -> None:
    (run_copy / "manifest.json").unlink()
    with pytest.raises(StreamError, match="no manifest.json.*pass the shard files"):
        open_stream(run_copy)


def test_tar_reader_catches_header_damage_and_missing_end(world: dict, tmp_path: Path) -> None:
    data = bytearray((world["run"] / "serial_00002.tar").read_bytes())
    assert len(read_all(str(world["run"] / "serial_00002.tar"))) == 8
    damaged = bytearray(data)
    damaged[100] ^= 0x01
    (tmp_path / "damaged.tar").write_bytes(bytes(damaged))
    with pytest.raises(ShardReadError, match="damaged tar header"):
        read_all(str(tmp_path / "damaged.tar"))
    samples = read_all(str(world["run"] / "serial_00002.tar"))
    end_of_members = len(data) - len(data.rstrip(b"\0"))
    assert end_of_members >= 1024
    (tmp_path / "no_end.tar").write_bytes(bytes(data.rstrip(b"\0")) + bytes(-len(data.rstrip(b"\0")) % 512))
    with pytest.raises(ShardReadError, match="end-of-archive"):
        read_all(str(tmp_path / "no_end.tar"))
    with open_shard(str(world["run"] / "serial_00002.tar")) as handle:
        skipped = [
            sample.members is None for sample in read_samples(handle, "x", wanted=lambda position: position % 2 == 0)
        ]
    assert skipped == [False, True] * 4 and samples[0].key == "000000000032"


# ----------------------------------------------------------------------------- ccc-verify
def test_verify_accepts_an_intact_run_and_checks_the_plan_hash(
    world: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = verify_run(world["run"], calibration=world["table_path"], imagenet=world["folder"])
    assert report.ok and report.plan_hash == "matches" and report.samples_decoded == NUM_IMAGES
    code = verify_main([str(world["run"]), "--no-progress", "--json", str(tmp_path / "report.json")])
    assert code == 0 and "3 of 3 shards intact" in capsys.readouterr().out
    assert json.loads((tmp_path / "report.json").read_text())["ok"] is True


def test_verify_checks_the_plan_hash_when_it_finds_the_table_and_images_else_says_which_flags(
    world: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CCC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CCC_IMAGENET", raising=False)
    assert verify_main([str(world["run"]), "--no-progress", "--no-decode"]) == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.endswith(
        f"plan hash not checked (to check the plan hash, pass --calibration FILE (the table with checksum "
        f"{world['table'].checksum()[:16]}…) and --imagenet PATH (or CCC_IMAGENET; images with index checksum "
        f"{world['plan'].spec.source_index_checksum[:16]}…))"
    )
    (tmp_path / "calibration").mkdir()
    (tmp_path / "calibration" / "resnet50.npz").write_bytes(world["table_path"].read_bytes())
    monkeypatch.setenv("CCC_IMAGENET", str(world["folder"]))
    assert verify_main([str(world["run"]), "--no-progress", "--no-decode"]) == 0
    assert capsys.readouterr().out.strip().endswith("plan hash matches")
    assert verify_main([str(world["run"]), "--no-progress", "--no-decode", "--demo"]) == 2
    assert "is not a demo-world stream" in capsys.readouterr().err


def test_verify_finds_a_flipped_byte_a_truncation_and_a_missing_shard(
    run_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = run_copy / "serial_00000.tar"
    data = bytearray(first.read_bytes())
    data[5000] ^= 0x10
    first.write_bytes(bytes(data))
    second = run_copy / "serial_00001.tar"
    second.write_bytes(second.read_bytes()[:-3000])
    (run_copy / "serial_00002.tar").unlink()
    statuses = [check.status for check in verify_run(run_copy).shards]
    assert statuses == ["altered", "truncated", "missing"]
    assert verify_main([str(run_copy), "--no-progress"]) == 1
    output = capsys.readouterr().out
    assert (
        "serial_00000.tar: altered" in output
        and "serial_00001.tar: truncated" in output
        and "0 of 3 shards intact" in output
    )


def test_verify_finds_an_undecodable_shard_with_matching_records(run_copy: Path) -> None:
    manifest = json.loads((run_copy / "manifest.json").read_text())
    path = run_copy / "serial_00002.tar"
    data = bytearray(path.read_bytes())
    data[data.index(b"\xff\xd8\xff") + 1] ^= 0xFF
    path.write_bytes(bytes(data))

    manifest["shards"][2]["sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    (run_copy / "manifest.json").write_text(json.dumps(manifest))
    assert [check.status for check in verify_run(run_copy).shards] == ["ok", "ok", "undecodable"]
    assert [check.status for check in verify_run(run_copy, decode=False).shards] == ["ok", "ok", "ok"]


def test_verify_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert verify_main([str(tmp_path / "absent"), "--no-progress"]) == 2
    assert verify_main([str(tmp_path), "--no-progress"]) == 2
    assert "no manifest.json" in capsys.readouterr().err
    assert verify_main([str(tmp_path), "--calibration", "x.npz"]) == 2


# ----------------------------------------------------------------------------- integration
def test_a_manifest_claiming_10_15_images_costs_what_its_recorded_shards_cost(
    world: dict, run_copy: Path, tmp_path: Path
) -> None:
    manifest = json.loads((run_copy / "manifest.json").read_text())
    manifest["stream"]["num_images"] = manifest["num_images"] = 10**15
    manifest["num_shards"] = 10**15 // SHARD_SIZE
    manifest["shards"] = [entry for entry in manifest["shards"] if entry["index"] < 2]
    (run_copy / "manifest.json").write_text(json.dumps(manifest))
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    command = [
        sys.executable,
        "-m",
        "ccc.cli.verify",
        str(run_copy),
        "--no-progress",
        "--json",
        str(tmp_path / "report.json"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=environment)
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines()[0] == (
        "serial_00002.tar … serial_62499999999999.tar: unfinished — 62,499,999,999,998 shards not recorded as finished "
        "(an unrecorded file exists: serial_00002.tar)"
    )
    assert (
        "2 of 62,500,000,000,000 shards intact (1,000,000,000,000,000 images in the stream, 32 samples decoded)"
        in result.stdout
    )
    assert [check["count"] for check in json.loads((tmp_path / "report.json").read_text())["shards"]] == [
        1,
        1,
        10**15 // SHARD_SIZE - 2,
    ]
    command = [
        sys.executable,
        "-m",
        "ccc.cli.verify",
        str(run_copy),
        "--calibration",
        str(world["table_path"]),
        "--imagenet",
        str(world["folder"]),
        "--no-progress",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=environment)
    assert (
        result.returncode == 2
        and result.stderr.count("\n") == 1
        and "is not recomputed (limit 10,000,000)" in result.stderr
    )
    read = []
    with pytest.raises(StreamError, match=r"serial_00002\.tar \(samples 32–47\) is not finished"):
        for images, _, metadata in open_stream_source(f"ccc:{run_copy}", StreamOptions(batch_size=16, num_workers=0)):
            read += [entry["index"] for entry in metadata]
    assert read == list(range(32))
    with pytest.warns(StreamWarning, match="skipped 3 samples in 1 place"):
        assert indices(open_stream(run_copy, start=10**15 - 3, on_error="skip")) == []
    assert indices(open_stream(run_copy, start=10**14, limit=2, world_size=2, rank=1, on_error="skip")) == []


def test_tta_eval_reads_ccc_streams(world: dict) -> None:
    batches = list(open_stream_source(f"ccc:{world['run']}", StreamOptions(batch_size=16, num_workers=0)))
    assert [images.shape[0] for images, _, _ in batches] == [16, 16, 8]
    assert batches[0][0].dtype == torch.float32 and float(batches[0][0].max()) <= 1.0
    assert [entry["index"] for entry in batches[2][2]] == list(range(32, 40))


def test_collate_keeps_pil_and_bytes_as_lists(world: dict) -> None:
    samples = list(open_stream(world["run"], image_format="pil", limit=3))
    images, labels, metadata = collate_samples(samples)
    assert isinstance(images, list) and labels.dtype == torch.int64 and len(metadata) == 3


def test_a_stream_error_from_a_dataloader_worker_keeps_its_message_only() -> None:
    marker = f"{StreamError.__module__}.{StreamError.__qualname__}"
    relayed = (
        "Caught StreamError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
        f'  File "x.py", line 1, in <module>\n{marker}: shard serial_00001.tar: truncated (10 bytes)\n'
    )
    assert str(StreamError(relayed)) == "shard serial_00001.tar: truncated (10 bytes)"
    assert str(StreamError("shard a.tar: cannot open")) == "shard a.tar: cannot open"


def test_a_worker_count_past_the_limit_is_refused_before_any_worker_starts(world: dict, monkeypatch) -> None:
    """``num_workers=1_000_000`` forked about 1,450 processes (21 GB) before anything stopped it."""
    from ccc.validation import max_loader_workers

    def no_loader(*arguments, **options):  # type: ignore[no-untyped-def]
        raise AssertionError("a DataLoader was made")

    monkeypatch.setattr(torch.utils.data, "DataLoader", no_loader)
    limit = max_loader_workers()
    assert limit >= 16
    with pytest.raises(ValueError, match=rf"^num_workers must be an integer in \[0, {limit:,}\] .*got 1,000,000$"):
        stream_loader(open_stream(world["run"]), batch_size=4, num_workers=1_000_000)


def test_render_stream_without_a_table_says_where_the_demo_worlds_are() -> None:
    """A demo run folder needs ccc.demo's table and images: the error names how to get them."""
    from ccc.load import render_stream

    with pytest.raises(ValueError, match="calibration must be a CalibrationTable") as caught:
        render_stream({"difficulty": "medium", "speed": 4})
    message = str(caught.value)
    assert "calibration=ccc.demo.demo_calibration_path()" in message
    assert "imagenet=ccc.demo.demo_image_folder()" in message
