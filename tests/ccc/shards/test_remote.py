"""ccc.shards.remote against a fault-injecting HTTP server on 127.0.0.1: every fault ends in the samples of
a local read of the same shards, in the same order, or in one named error line (no timing asserts)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ccc.load import StreamError, open_stream
from ccc.shards.reader import ShardReadError, read_samples
from ccc.shards.record import shard_name
from ccc.shards.remote import RemoteOptions, ShardChangedError, _retry_after, open_remote
from tests.builders import make_ccc_run
from tests.ccc.shards.fault_server import FaultServer

FAST = RemoteOptions(attempts=4, backoff=0.001, max_backoff=0.002, connect_timeout=5.0, read_timeout=1.0)
"""Tiny waits so that faults cost milliseconds; read_timeout well below the stalls' silence (3 s)."""

SHARDS = 3


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder of 3 shards × 4 samples (real rendered JPEGs, about 20 KB each)."""
    return make_ccc_run(tmp_path_factory.mktemp("remote"), num_images=12, speed=4, shard_size=4)


def shard_files(run: Path) -> dict[str, bytes]:
    return {f"/ccc/{shard_name(index)}": (run / shard_name(index)).read_bytes() for index in range(SHARDS)}


def samples(source: object, **options: object) -> list[tuple]:
    """(index, key, label, JPEG bytes) of every sample of a stream."""
    return [
        (metadata["index"], metadata["key"], label, image)
        for image, label, metadata in open_stream(source, image_format="jpeg", **options)
    ]


def urls(server: FaultServer) -> list[str]:
    return [server.url(f"/ccc/{shard_name(index)}") for index in range(SHARDS)]


FAULTS = {
    "reset mid-member": [("reset", 9000)],
    "reset in the first header": [("reset", 100)],
    "several resets": [("reset", 5000), ("reset", 200), ("reset", 30000)],
    "503 then 429 with Retry-After": [("status", 503, None), ("status", 429, 0)],
    "503 after a reset (on resume)": [("reset", 7000), ("status", 503, None)],
    "stall past the read timeout": [("stall", 12000, 3.0)],
    "body shorter than Content-Length": [("short", 15000)],
    "Range ignored on resume": [("reset", 20000), ("no-range",)],
    "Range ignored twice": [("reset", 20000), ("no-range", 30000), ("no-range",)],
}


@pytest.mark.parametrize("faults", FAULTS.values(), ids=FAULTS.keys())
def test_faults_deliver_the_local_samples(run: Path, faults: list[tuple], caplog: pytest.LogCaptureFixture) -> None:
    expected = samples(run)
    assert len(expected) == 12
    with FaultServer(shard_files(run)) as server:
        server.add_faults("/ccc/serial_00001.tar", *faults)
        with caplog.at_level(logging.WARNING, logger="ccc.shards.remote"):
            assert samples(urls(server), remote=FAST) == expected
    retries = [record.getMessage() for record in caplog.records if "attempt" in record.getMessage()]
    assert all(" at byte " in line and "\n" not in line for line in retries)
    # on a loaded machine another shard may time out too (and be retried): count the faulted shard's
    faulted = [line for line in retries if "serial_00001.tar" in line]
    assert len(faulted) >= sum(fault[0] != "no-range" or len(fault) > 1 for fault in faults)


def test_resume_asks_for_the_next_byte_with_if_range(run: Path) -> None:
    with FaultServer(shard_files(run)) as server:
        server.add_faults("/ccc/serial_00000.tar", ("reset", 9000))
        with open_remote(server.url("/ccc/serial_00000.tar"), FAST) as handle:
            assert handle.read() == (run / "serial_00000.tar").read_bytes()
        ranges = [headers for path, headers in server.requests if "Range" in headers]
    assert len(ranges) == 1
    assert ranges[0]["If-Range"] == server.etag("/ccc/serial_00000.tar")
    resumed_at = int(ranges[0]["Range"].removeprefix("bytes=").rstrip("-"))
    assert 0 < resumed_at <= 9000


def test_every_sample_of_a_dropped_shard_is_read_once(run: Path) -> None:
    local = (run / "serial_00002.tar").read_bytes()
    with FaultServer(shard_files(run)) as server:
        server.add_faults("/ccc/serial_00002.tar", *[("reset", step) for step in (700, 1500, 2600, 40000)])
        url = server.url("/ccc/serial_00002.tar")
        with open_remote(url, FAST) as handle:
            remote_keys = [sample.key for sample in read_samples(handle, url)]
    with open(run / "serial_00002.tar", "rb") as handle:
        assert remote_keys == [sample.key for sample in read_samples(handle, "local")]
    assert len(local) > 40000


@pytest.mark.parametrize("send_etag", [True, False], ids=["etag", "size only"])
def test_a_shard_replaced_between_requests_is_refused(run: Path, send_etag: bool) -> None:
    replacement = (run / "serial_00000.tar").read_bytes() + bytes(10240)
    with FaultServer(shard_files(run), send_etag=send_etag) as server:
        server.add_faults("/ccc/serial_00001.tar", ("reset", 9000), ("replace", replacement))
        with pytest.raises(StreamError, match=r"^shard http://\S+/serial_00001.tar: changed on the server") as caught:
            samples(urls(server), remote=FAST)
    assert "\n" not in str(caught.value)


def test_a_replacement_of_the_same_size_is_refused_by_its_etag(run: Path) -> None:
    original = (run / "serial_00001.tar").read_bytes()
    altered = original[:-1] + b"\1"
    with FaultServer(shard_files(run)) as server:
        server.add_faults("/ccc/serial_00001.tar", ("short", 9000), ("replace", altered))
        url = server.url("/ccc/serial_00001.tar")
        with pytest.raises(ShardChangedError, match="refusing to splice"):
            with open_remote(url, FAST) as handle:
                handle.read()


def test_the_last_attempt_names_shard_attempts_and_cause(run: Path, caplog: pytest.LogCaptureFixture) -> None:
    with FaultServer(shard_files(run)) as server:
        server.add_faults("/ccc/serial_00001.tar", ("reset", 5000), *[("status", 503, None)] * FAST.attempts)
        with caplog.at_level(logging.WARNING, logger="ccc.shards.remote"):
            with pytest.raises(StreamError) as caught:
                samples(urls(server), remote=FAST)
    message = str(caught.value)
    assert message.startswith(f"shard {server.url('/ccc/serial_00001.tar')}: read failed at byte ")
    assert f"after {FAST.attempts} attempts (last cause: HTTP 503)" in message
    assert "\n" not in message
    assert len([record for record in caplog.records if "attempt" in record.getMessage()]) == FAST.attempts - 1


def test_skip_policy_continues_after_a_failed_shard(run: Path) -> None:
    expected = samples(run)
    with FaultServer(shard_files(run)) as server:
        server.add_faults("/ccc/serial_00001.tar", *[("status", 500, None)] * FAST.attempts)
        with pytest.warns(UserWarning, match="skipped"):
            got = samples(urls(server), remote=FAST, on_error="skip")
    # Without a manifest the failed shard's length is unknown: the next shard's indices follow the last delivered.
    assert [row[1:] for row in got] == [row[1:] for row in expected[:4] + expected[8:]]


def test_a_missing_shard_is_one_line_without_retries(run: Path, caplog: pytest.LogCaptureFixture) -> None:
    with FaultServer(shard_files(run)) as server:
        with caplog.at_level(logging.WARNING, logger="ccc.shards.remote"):
            with pytest.raises(ShardReadError, match=r"^shard http://\S+/missing.tar: HTTP 404 Not Found$"):
                open_remote(server.url("/missing.tar"), FAST)
    assert not caplog.records


def test_connection_refused_ends_after_the_attempts() -> None:
    with FaultServer({}) as server:
        url = server.url("/a.tar")
    with pytest.raises(ShardReadError, match=r"after 4 attempts \(last cause: .*(Refused|refused)"):
        open_remote(url, FAST)


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="attempts"):
        RemoteOptions(attempts=0)
    with pytest.raises(ValueError, match="read_timeout must be a number of seconds > 0, got -1"):
        RemoteOptions(read_timeout=-1)
    with pytest.raises(ValueError, match="max_backoff must be >= backoff"):
        RemoteOptions(backoff=5, max_backoff=1)


def test_backoff_doubles_up_to_its_cap() -> None:
    options = RemoteOptions(backoff=1.0, max_backoff=60.0)
    assert [options.delay(retry) for retry in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]


def test_retry_after_forms() -> None:
    assert _retry_after("7") == 7.0
    assert _retry_after(None) is None
    assert _retry_after("soon") is None
    assert _retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


def test_the_proxy_of_the_environment_is_used(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FaultServer(shard_files(run)) as server:
        monkeypatch.setenv("http_proxy", server.base)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        server.add_faults("/ccc/serial_00000.tar", ("reset", 9000))
        with open_remote("http://shards.example.invalid/ccc/serial_00000.tar", FAST) as handle:
            assert handle.read() == (run / "serial_00000.tar").read_bytes()
        assert [path for path, _ in server.requests] == ["/ccc/serial_00000.tar"] * 2  # the host does not exist
