"""ccc.shards.remote against a fault-injecting HTTP server on 127.0.0.1: every fault ends in the samples of
a local read of the same shards, in the same order, or in one named error line (no timing asserts)."""

from __future__ import annotations

import logging
import socket
import threading
import time
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
    "408 Request Timeout": [("status", 408, None)],
    "503 with an HTML page, then a reused connection": [("status", 503, None, b"<html>busy</html>" * 50)],
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
    with pytest.raises(ValueError, match=r"read_timeout must be a number of seconds in \(0, 86400\], got -1"):
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


def test_a_refused_answer_leaves_no_unread_body_in_the_pool(run: Path, caplog: pytest.LogCaptureFixture) -> None:
    page = b"<html><body>" + b"no such shard " * 100 + b"</body></html>"
    with FaultServer(shard_files(run)) as server:
        server.files["/gone.tar"] = b"x"
        server.add_faults("/gone.tar", ("status", 404, None, page))
        with pytest.raises(ShardReadError, match="HTTP 404"):
            open_remote(server.url("/gone.tar"), FAST)
        with caplog.at_level(logging.WARNING, logger="ccc.shards.remote"):
            with open_remote(server.url("/ccc/serial_00000.tar"), FAST) as handle:
                assert handle.read() == (run / "serial_00000.tar").read_bytes()
    assert not caplog.records  # the next request on the pooled connection read no leftover body


def _unresolvable(monkeypatch: pytest.MonkeyPatch) -> str:
    """An URL whose host name does not resolve (offline), without asking any resolver."""
    resolve = socket.getaddrinfo

    def getaddrinfo(host: str, *arguments: object, **options: object) -> object:
        if host == "shards.example.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return resolve(host, *arguments, **options)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return "http://shards.example.invalid/a.tar"


PERMANENT = {
    "redirect loop": ("/loop.tar", ("redirect", "/loop.tar"), "too many redirects"),
    "redirect to file://": ("/file.tar", ("redirect", "file:///etc/passwd"), "LocationValueError"),
    "403": ("/ccc/serial_00000.tar", ("status", 403, None, b"<html>no</html>"), "HTTP 403"),
    "gzip-encoded body": ("/ccc/serial_00000.tar", ("gzip",), "Content-Encoding gzip"),
}


@pytest.mark.parametrize("case", PERMANENT.values(), ids=PERMANENT.keys())
def test_permanent_errors_fail_at_once(run: Path, case: tuple, caplog: pytest.LogCaptureFixture) -> None:
    path, fault, cause = case
    with FaultServer(shard_files(run)) as server:
        server.always[path] = fault
        with caplog.at_level(logging.WARNING, logger="ccc.shards.remote"):
            with pytest.raises(ShardReadError, match=cause) as caught:
                with open_remote(server.url(path), FAST) as handle:
                    handle.read()
    assert str(caught.value).startswith(f"shard {server.url(path)}: ") and "\n" not in str(caught.value)
    assert not caplog.records


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/a.tar", "http://[::1/a.tar", "unresolvable"])
def test_a_location_that_cannot_be_reached_fails_at_once(
    url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    if url == "unresolvable":
        url = _unresolvable(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="ccc.shards.remote"):
        with pytest.raises(ShardReadError, match=r"^shard \S+: cannot be read \(") as caught:
            open_remote(url, FAST)
    assert "\n" not in str(caught.value) and "attempts" not in str(caught.value)
    assert not caplog.records


PATIENT = dict(attempts=1000, backoff=0.01, max_backoff=0.05, connect_timeout=5.0)
"""Many tries: only the deadline can end these reads."""


def test_a_server_silent_before_its_headers_ends_at_the_deadline(run: Path) -> None:
    options = RemoteOptions(**PATIENT, read_timeout=0.2, deadline=1.0)
    with FaultServer(shard_files(run)) as server:
        server.always["/ccc/serial_00000.tar"] = ("silent", 30.0)
        with pytest.raises(
            ShardReadError, match=r"s without useful progress \(deadline 1 s at 10,000 B/s\) \(last cause: "
        ) as caught:
            open_remote(server.url("/ccc/serial_00000.tar"), options)
    assert "\n" not in str(caught.value)


def test_a_trickling_server_ends_at_the_deadline(run: Path, caplog: pytest.LogCaptureFixture) -> None:
    options = RemoteOptions(**PATIENT, read_timeout=0.3, deadline=1.0, min_rate=1000)
    with FaultServer(shard_files(run)) as server:
        server.always["/ccc/serial_00000.tar"] = ("trickle", 0.02)
        with caplog.at_level(logging.WARNING, logger="ccc.shards.remote"):
            with pytest.raises(ShardReadError, match=r"s without useful progress \(deadline 1 s at 1,000 B/s\)"):
                with open_remote(server.url("/ccc/serial_00000.tar"), options) as handle:
                    handle.read()
    assert "slower than 1,000 B/s" in caplog.records[0].getMessage()  # bytes arrive, too slowly to count


def test_a_slow_consumer_does_not_spend_the_deadline(run: Path) -> None:
    options = RemoteOptions(**PATIENT, read_timeout=1.0, deadline=2.0, min_rate=10**6)  # never reached here
    with FaultServer(shard_files(run)) as server:
        with open_remote(server.url("/ccc/serial_00000.tar"), options) as handle:
            first = handle.read(1000)
            time.sleep(2.5)  # the consumer (a model) is slow, not the server
            rest = handle.read()
    assert first + rest == (run / "serial_00000.tar").read_bytes()


INVALID_IDENTITIES = {"a list": [], "a string": "x", "a numeric ETag": {"ETag": 5}, "a negative size": {"size": -1}}


@pytest.mark.parametrize("identity", INVALID_IDENTITIES.values(), ids=INVALID_IDENTITIES.keys())
def test_an_invalid_identity_is_refused_in_one_line(run: Path, identity: object) -> None:
    with FaultServer(shard_files(run)) as server:
        url = server.url("/ccc/serial_00000.tar")
        with pytest.raises(ShardChangedError, match=r"^shard \S+: the identity recorded for its first 100 bytes"):
            open_remote(url, FAST, start=100, identity=identity)  # type: ignore[arg-type]
        assert not server.requests


def test_durations_are_bounded() -> None:
    for name in ("backoff", "max_backoff", "connect_timeout", "read_timeout", "deadline"):
        with pytest.raises(ValueError, match=rf"^{name} must be a number of seconds in \(0, 86400\], got 1e\+308$"):
            RemoteOptions(**{"backoff": 1e308, "max_backoff": 1e308} if name == "backoff" else {name: 1e308})
    with pytest.raises(ValueError, match=r"min_rate must be a number of bytes per second >= 0"):
        RemoteOptions(min_rate=-1)
    assert RemoteOptions(attempts=5000).delay(5000) == 60.0


def test_a_stop_event_ends_a_back_off_wait(run: Path) -> None:
    options = RemoteOptions(backoff=60.0, max_backoff=60.0, deadline=600.0)
    stop = threading.Event()
    with FaultServer(shard_files(run)) as server:
        server.always["/ccc/serial_00000.tar"] = ("status", 503, None)
        threading.Timer(0.2, stop.set).start()  # another download failed: ccc-mirror stops every download
        with pytest.raises(ShardReadError, match=r"read stopped at byte 0 while waiting to retry \(last cause: HTTP"):
            open_remote(server.url("/ccc/serial_00000.tar"), options, stop=stop)
