"""Tests of ccc.generate: byte-identical shards across executors, worker counts, chunk sizes and
runs; resume (kept, missing, damaged shards, stale temporary files); refusal of foreign folders;
a full disk mid-run; Ray task retries; and a real two-node local Ray cluster (slow)."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import ccc.shards.writer
from ccc.execution import RayExecutor, SerialExecutor
from ccc.generate import LOCK_NAME, OutputFolderError, generate_stream
from ccc.shards.manifest import MANIFEST_NAME, load_manifest
from ccc.shards.record import format_info
from ccc.shards.writer import ShardWriteError
from ccc.stream.plan import build_stream_plan, plan_sample
from ccc.stream.sources import index_image_folder, load_source_images
from ccc.stream.spec import StreamSpec
from tests.builders import make_calibration_table, make_image_folder
from tests.ray_cluster import two_node_ray_cluster

NUM_IMAGES = 40
SHARD_SIZE = 16
SPEED = 4


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory):
    """A 40-image stream over a 12-image folder in shards of 16, 16 and 8 samples."""
    folder = make_image_folder(tmp_path_factory.mktemp("images") / "val")
    table = make_calibration_table()
    sources = load_source_images(index_image_folder(folder, progress=False))
    table_path = tmp_path_factory.mktemp("table") / "table.npz"
    table.save(table_path)
    return {"folder": folder, "table": table, "table_path": table_path, "sources": sources}


def make_plan(stream, **overrides):
    fields = dict(
        target_accuracy=30.0,
        corruptions=stream["table"].corruptions,
        speed=SPEED,
        seed=43,
        num_images=NUM_IMAGES,
        calibration_checksum=stream["table"].checksum(),
        source_index_checksum=stream["sources"].index_checksum,
        shard_size=SHARD_SIZE,
    )
    fields.update(overrides)
    return build_stream_plan(StreamSpec(**fields), stream["table"], stream["sources"])


def shard_hashes(run_dir: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(run_dir.glob("serial_*.tar"))}


@pytest.fixture(scope="module")
def reference(stream, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Shard hashes of an uninterrupted serial run."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    summary = generate_stream(make_plan(stream), run_dir, SerialExecutor(), progress=False)
    assert (summary.images_rendered, summary.shards_written, summary.shards_skipped) == (NUM_IMAGES, 3, 0)
    hashes = shard_hashes(run_dir)
    assert list(hashes) == ["serial_00000.tar", "serial_00001.tar", "serial_00002.tar"]
    return hashes


def test_shards_hold_the_planned_samples(stream, reference, tmp_path: Path) -> None:
    plan = make_plan(stream)
    generate_stream(plan, tmp_path, SerialExecutor(), progress=False, chunk_size=7)
    assert shard_hashes(tmp_path) == reference, "chunk size must not change the bytes"
    manifest = load_manifest(tmp_path)
    assert manifest.complete and [entry.sha256 for entry in manifest.shards] == list(reference.values())
    assert [(entry.first_sample, entry.sample_count) for entry in manifest.shards] == [(0, 16), (16, 16), (32, 8)]
    with tarfile.open(tmp_path / "serial_00002.tar") as archive:
        names = archive.getnames()
        assert names[:4] == [
            "000000000032.info",
            "000000000032.input.jpg",
            "000000000032.json",
            "000000000032.output.cls",
        ]
        assert len(names) == 32
        spec = plan_sample(plan, 39)
        record = json.loads(archive.extractfile("000000000039.json").read())  # type: ignore[union-attr]
        assert record == spec.to_json_dict()
        assert archive.extractfile("000000000039.output.cls").read() == str(spec.class_index).encode()  # type: ignore[union-attr]
        assert archive.extractfile("000000000039.info").read().decode() == format_info(spec)  # type: ignore[union-attr]
    assert sorted(path.name for path in tmp_path.iterdir()) == [MANIFEST_NAME, *reference], (
        "the lock file is removed at exit"
    )


def test_resume_keeps_good_shards_and_redoes_the_rest(stream, reference, tmp_path: Path) -> None:
    plan = make_plan(stream)
    generate_stream(plan, tmp_path, SerialExecutor(), progress=False)
    again = generate_stream(plan, tmp_path, SerialExecutor(), progress=False)
    assert (again.images_rendered, again.shards_written, again.shards_skipped) == (0, 0, 3)
    (tmp_path / "serial_00001.tar").unlink()
    damaged = bytearray((tmp_path / "serial_00002.tar").read_bytes())
    damaged[600] ^= 0xFF
    (tmp_path / "serial_00002.tar").write_bytes(bytes(damaged))
    (tmp_path / ".serial_00001.tar.partial").write_bytes(b"half a shard")
    resumed = generate_stream(plan, tmp_path, SerialExecutor(), progress=False)
    assert (resumed.images_rendered, resumed.shards_written, resumed.shards_skipped) == (24, 2, 1)
    assert shard_hashes(tmp_path) == reference
    assert not list(tmp_path.glob("*.partial")) and not list(tmp_path.glob(".*.partial"))


def test_a_resume_with_other_library_versions_is_recorded(
    stream, reference, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plan = make_plan(stream)
    generate_stream(plan, tmp_path, SerialExecutor(), progress=False)
    document = json.loads((tmp_path / MANIFEST_NAME).read_text())
    document["library_versions"]["numpy"] = "1.0.0"
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(document))
    summary = generate_stream(plan, tmp_path, SerialExecutor(), progress=False)
    assert summary.shards_skipped == 3 and "was started with other library versions" in caplog.text
    manifest = load_manifest(tmp_path)
    assert [versions["numpy"] for versions in manifest.previous_library_versions] == ["1.0.0"]
    assert manifest.library_versions["numpy"] != "1.0.0"


def test_a_folder_with_another_stream_is_refused(stream, reference, tmp_path: Path) -> None:
    generate_stream(make_plan(stream, num_images=8, shard_size=8), tmp_path, SerialExecutor(), progress=False)
    with pytest.raises(
        OutputFolderError,
        match=r"holds a different stream \(num_images: 8 -> 40; shard_size: 8 -> 16\); .* --overwrite",
    ):
        generate_stream(make_plan(stream), tmp_path, SerialExecutor(), progress=False)
    generate_stream(make_plan(stream), tmp_path, SerialExecutor(), progress=False, overwrite=True)
    assert shard_hashes(tmp_path) == reference


def test_unknown_shards_and_broken_manifests_are_refused(stream, tmp_path: Path) -> None:
    (tmp_path / "serial_00000.tar").write_bytes(b"x")
    with pytest.raises(OutputFolderError, match=r"holds shards but no manifest.json \(e.g. serial_00000.tar\)"):
        generate_stream(make_plan(stream), tmp_path, SerialExecutor(), progress=False)
    (tmp_path / MANIFEST_NAME).write_text("{")
    with pytest.raises(OutputFolderError, match="not a JSON manifest .* pass --overwrite"):
        generate_stream(make_plan(stream), tmp_path, SerialExecutor(), progress=False)


def test_a_folder_in_use_is_refused(stream, tmp_path: Path) -> None:
    with open(tmp_path / LOCK_NAME, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        with pytest.raises(OutputFolderError, match="is being written by another ccc-generate process"):
            generate_stream(make_plan(stream), tmp_path, SerialExecutor(), progress=False)


def test_deleting_the_lock_file_does_not_free_the_folder(stream, tmp_path: Path) -> None:
    from ccc.folder_lock import FolderLock

    with FolderLock.acquire(tmp_path, LOCK_NAME):
        (tmp_path / LOCK_NAME).unlink()
        with pytest.raises(OutputFolderError, match="is being written by another ccc-generate process"):
            generate_stream(make_plan(stream), tmp_path, SerialExecutor(), progress=False)
    generate_stream(make_plan(stream), tmp_path, SerialExecutor(), progress=False)


def test_a_full_disk_stops_cleanly_and_the_run_resumes(
    stream, reference, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = open

    def open_failing_second_shard(path, mode="r", *args, **kwargs):  # type: ignore[no-untyped-def]
        if "serial_00001" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(ccc.shards.writer, "open", open_failing_second_shard, raising=False)
    with pytest.raises(ShardWriteError, match="No space left on device .*re-run the same command to resume"):
        generate_stream(make_plan(stream), tmp_path, SerialExecutor(), progress=False)
    assert [entry.name for entry in load_manifest(tmp_path).shards] == ["serial_00000.tar"]
    assert sorted(path.name for path in tmp_path.glob("*serial*")) == ["serial_00000.tar"]
    monkeypatch.undo()
    generate_stream(make_plan(stream), tmp_path, SerialExecutor(), progress=False)
    assert shard_hashes(tmp_path) == reference


# ----------------------------------------------------------------------------- Ray


@pytest.fixture(scope="module")
def ray_module():
    """One local Ray cluster (2 CPUs, 100 MB object store) for all Ray tests of this module."""
    pytest.importorskip("ray")
    from ccc.execution import ray_session

    with ray_session(workers=2, object_store_bytes=100 * 2**20) as ray:
        yield ray


@pytest.mark.parametrize("max_in_flight", [1, None], ids=["one-worker", "two-workers"])
def test_ray_gives_the_serial_bytes(stream, reference, ray_module, tmp_path: Path, max_in_flight: int | None) -> None:
    executor = RayExecutor(ray_module, max_in_flight=max_in_flight)
    summary = generate_stream(make_plan(stream), tmp_path, executor, progress=False, chunk_size=5)
    assert summary.images_rendered == NUM_IMAGES
    assert shard_hashes(tmp_path) == reference


def test_ray_retries_a_task_whose_worker_died(ray_module, tmp_path: Path) -> None:
    marker = tmp_path / "crashed-once"

    def square_crashing_once(offset: int, item: int) -> int:
        if item == 3 and not marker.exists():
            marker.touch()
            os._exit(1)  # the worker process dies; Ray must run the task again
        return offset + item * item

    results = list(RayExecutor(ray_module, max_retries=2).map_ordered(square_crashing_once, 100, range(8)))
    assert results == [100 + k * k for k in range(8)]
    assert marker.exists()


def test_ray_task_errors_surface_as_the_original_exception(ray_module) -> None:
    def fail_on_three(offset: int, item: int) -> int:
        if item == 3:
            raise LookupError(f"bad item {item}")
        return offset + item

    with pytest.raises(LookupError, match="^bad item 3$"):
        list(RayExecutor(ray_module).map_ordered(fail_on_three, 0, iter(range(6))))


def test_ray_executor_validates_its_arguments(ray_module) -> None:
    with pytest.raises(ValueError, match="max_in_flight must be an integer >= 1, got 0"):
        RayExecutor(ray_module, max_in_flight=0)
    with pytest.raises(ValueError, match="max_retries must be an integer >= 0, got -1"):
        RayExecutor(ray_module, max_retries=-1)


@pytest.mark.slow
def test_a_two_node_ray_cluster_gives_the_serial_bytes(stream, reference, tmp_path: Path) -> None:
    """`ray start --head` plus `ray start --address` on this machine; ccc-generate --ray-address renders on both."""
    environment = dict(os.environ, RAY_AUTH_MODE="disabled")
    with two_node_ray_cluster(tmp_path, environment) as address:
        out = tmp_path / "shards"
        command = [
            sys.executable, "-m", "ccc.cli.generate", "--calibration", str(stream["table_path"]),
            "--difficulty", "medium", "--speed", str(SPEED), "--seed", "43", "--num-images", str(NUM_IMAGES),
            "--shard-size", str(SHARD_SIZE), "--imagenet", str(stream["folder"]), "--out", str(out), "--name", "run",
            "--ray-address", address, "--no-progress",
        ]  # fmt: skip
        result = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        assert shard_hashes(out / "run") == reference
