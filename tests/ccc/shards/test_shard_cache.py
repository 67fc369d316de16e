"""ccc.shards.shard_cache: remote shards kept on disk once read, a size cap with LRU eviction, and one
download at a time per shard across readers (no timing asserts)."""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from ccc.load import StreamError, open_stream
from ccc.safe_files import UnsafePathError
from ccc.shards.location import open_shard
from ccc.shards.reader import ShardReadError
from ccc.shards.record import shard_name
from ccc.shards.remote import RemoteOptions
from ccc.shards.shard_cache import cache_name, open_cached
from tests.builders import make_ccc_run
from tests.ccc.shards.fault_server import FaultServer

FAST = RemoteOptions(attempts=4, backoff=0.001, max_backoff=0.002, connect_timeout=2.0, read_timeout=2.0)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder of 3 shards × 4 samples."""
    return make_ccc_run(tmp_path_factory.mktemp("cache"), num_images=12, speed=4, shard_size=4)


def served(run: Path) -> dict[str, bytes]:
    return {f"/ccc/{shard_name(index)}": (run / shard_name(index)).read_bytes() for index in range(3)}


def samples(source: object, **options: object) -> list[tuple]:
    return [(label, image) for image, label, _ in open_stream(source, image_format="jpeg", **options)]


def test_a_cached_stream_is_read_again_without_the_server(run: Path, tmp_path: Path) -> None:
    expected = samples(run)
    with FaultServer(served(run)) as server:
        urls = [server.url(f"/ccc/{shard_name(index)}") for index in range(3)]
        server.add_faults("/ccc/serial_00001.tar", ("reset", 9000))
        assert samples(urls, remote=FAST, cache=tmp_path / "cache") == expected
    assert sorted(path.name for path in (tmp_path / "cache").iterdir() if not path.name.startswith(".")) == sorted(
        cache_name(url) for url in urls
    )
    assert samples(urls, remote=FAST, cache=tmp_path / "cache") == expected  # the server is gone
    assert not list((tmp_path / "cache").glob(".*.part"))


def test_the_cap_evicts_the_least_recently_read(run: Path, tmp_path: Path) -> None:
    size = (run / "serial_00000.tar").stat().st_size
    capped = RemoteOptions(attempts=2, backoff=0.001, max_backoff=0.002, cache_max_bytes=2 * size)
    with FaultServer(served(run)) as server:
        urls = [server.url(f"/ccc/{shard_name(index)}") for index in range(3)]
        samples(urls, remote=capped, cache=tmp_path / "cache")
        kept = {path.name for path in (tmp_path / "cache").iterdir() if not path.name.startswith(".")}
        assert kept == {cache_name(urls[1]), cache_name(urls[2])}
        samples(urls[1:2], remote=capped, cache=tmp_path / "cache")  # shard 1 read again: now the most recent
        samples(urls[0:1], remote=capped, cache=tmp_path / "cache")
        kept = {path.name for path in (tmp_path / "cache").iterdir() if not path.name.startswith(".")}
    assert kept == {cache_name(urls[0]), cache_name(urls[1])}


def test_concurrent_readers_download_a_shard_once(run: Path, tmp_path: Path) -> None:
    options = RemoteOptions(attempts=4, backoff=0.001, max_backoff=0.002, read_timeout=5.0, cache=str(tmp_path))
    results: list[bytes] = []
    with FaultServer(served(run)) as server:
        server.add_faults("/ccc/serial_00000.tar", ("stall", 20000, 0.3))  # a slow first download

        def read() -> None:
            with open_shard(server.url("/ccc/serial_00000.tar"), options) as handle:
                results.append(handle.read())

        readers = [threading.Thread(target=read) for _ in range(4)]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join()
        requests = [headers for path, headers in server.requests if path == "/ccc/serial_00000.tar"]
    assert results == [(run / "serial_00000.tar").read_bytes()] * 4
    assert [headers.get("Range") for headers in requests] == [None, "bytes=20000-"]


def test_a_failed_download_caches_nothing(run: Path, tmp_path: Path) -> None:
    with FaultServer(served(run)) as server:
        server.add_faults("/ccc/serial_00000.tar", ("reset", 5000), *[("status", 503, None)] * 4)
        with pytest.raises(StreamError, match="after 4 attempts"):
            samples([server.url("/ccc/serial_00000.tar")], remote=FAST, cache=tmp_path / "cache")
    assert [path.name for path in (tmp_path / "cache").iterdir()] == [".locks"]


def test_the_cap_is_checked() -> None:
    with pytest.raises(ValueError, match="cache_max_bytes"):
        RemoteOptions(cache="x", cache_max_bytes=0)


CACHED = RemoteOptions(attempts=2, backoff=0.001, max_backoff=0.002, read_timeout=5.0)


def test_a_planted_link_is_never_followed(run: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    folder = tmp_path / "cache"
    folder.mkdir()
    with FaultServer(served(run)) as server:
        url = server.url("/ccc/serial_00000.tar")
        entry = folder / cache_name(url)
        (folder / f".{entry.name}.part").symlink_to(victim)  # where the old cache wrote its download
        with open_shard(url, replace(CACHED, cache=str(folder))) as handle:
            assert handle.read() == (run / "serial_00000.tar").read_bytes()
        assert victim.read_bytes() == b"precious" and not entry.is_symlink()
        entry.unlink()
        entry.symlink_to(victim)
        with pytest.raises(UnsafePathError, match=rf"^cache entry {entry} is a symbolic link; refusing"):
            open_shard(url, replace(CACHED, cache=str(folder)))
    assert victim.read_bytes() == b"precious"


BAD_BODIES = {
    "no Content-Length, closed half-way": ("no-length", 9000),
    "an HTML page served with 200": ("html",),
}


@pytest.mark.parametrize("fault", BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_a_body_that_is_not_the_whole_shard_is_not_cached(run: Path, tmp_path: Path, fault: tuple) -> None:
    options = replace(CACHED, cache=str(tmp_path / "cache"))
    with FaultServer(served(run)) as server:
        url = server.url("/ccc/serial_00000.tar")
        server.add_faults("/ccc/serial_00000.tar", fault)
        with pytest.raises(
            ShardReadError, match=rf"^shard {url}: not cached: the downloaded file is unusable \(shard {url}: "
        ):
            open_shard(url, options)
        assert not [path for path in (tmp_path / "cache").iterdir() if path.name != ".locks"]
        with open_shard(url, options) as handle:  # the next read downloads it again
            assert handle.read() == (run / "serial_00000.tar").read_bytes()


def test_an_unusable_entry_is_fetched_again(run: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "cache"
    folder.mkdir()
    local = (run / "serial_00000.tar").read_bytes()
    with FaultServer(served(run)) as server:
        url = server.url("/ccc/serial_00000.tar")
        entry = folder / cache_name(url)
        entry.write_bytes(local[:9000])  # kept whole by an earlier version
        with caplog.at_level(logging.WARNING, logger="ccc.shards.shard_cache"):
            with open_shard(url, replace(CACHED, cache=str(folder))) as handle:
                assert handle.read() == local
    assert entry.read_bytes() == local
    assert [f"cache entry {entry} is unusable" in record.getMessage() for record in caplog.records] == [True]


def test_a_digest_known_to_the_caller_is_checked(run: Path, tmp_path: Path) -> None:
    options = replace(CACHED, cache=str(tmp_path / "cache"))
    local = (run / "serial_00000.tar").read_bytes()
    with FaultServer(served(run)) as server:
        url = server.url("/ccc/serial_00000.tar")
        with pytest.raises(ShardReadError, match=r"unusable \(its sha256 \w{12}… differs from the expected \w{12}…\)$"):
            open_cached(url, options, sha256=hashlib.sha256(local[::-1]).hexdigest())
        assert not [path for path in (tmp_path / "cache").iterdir() if path.name != ".locks"]
        with open_cached(url, options, sha256=hashlib.sha256(local).hexdigest()) as handle:
            assert handle.read() == local


def test_a_killed_download_leaves_nothing_behind(run: Path, tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    folder.mkdir()
    with FaultServer(served(run)) as server:
        url = server.url("/ccc/serial_00000.tar")
        leftover = folder / f".{cache_name(url)}.abcd1234.tmp"  # a download whose process was killed
        leftover.write_bytes(b"x" * 100)
        with open_shard(url, replace(CACHED, cache=str(folder))):
            pass
    assert not leftover.exists()
