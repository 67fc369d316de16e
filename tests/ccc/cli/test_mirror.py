"""ccc-mirror (ccc.shards.mirror, ccc.cli.mirror) against the fault-injecting HTTP server: faults,
interruptions and re-runs end in a mirror that ccc-verify and open_stream(verify="sha256") accept."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ccc.cli import mirror as mirror_cli
from ccc.cli import verify as verify_cli
from ccc.load import StreamError, open_stream
from ccc.shards.errors import ShardReadError
from ccc.shards.mirror import MIRROR_NAME, MirrorError, mirror_stream
from ccc.shards.record import shard_name
from ccc.shards.remote import RemoteOptions
from tests.builders import make_ccc_run
from tests.ccc.shards.fault_server import FaultServer

FAST = RemoteOptions(attempts=4, backoff=0.001, max_backoff=0.002, connect_timeout=5.0, read_timeout=1.0)
FAST_FLAGS = ["--attempts", "4", "--backoff", "0.001", "--max-backoff", "0.002", "--timeout", "1.0", "--no-progress"]
NAME = "baseline_20_transition+speed_2000_seed_43"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder of 3 shards × 4 samples with its manifest."""
    return make_ccc_run(tmp_path_factory.mktemp("mirror"), num_images=12, speed=4, shard_size=4)


def served(run: Path, prefix: str = "/run") -> dict[str, bytes]:
    files = {f"{prefix}/{shard_name(index)}": (run / shard_name(index)).read_bytes() for index in range(3)}
    files[f"{prefix}/manifest.json"] = (run / "manifest.json").read_bytes()
    return files


def samples(source: object, **options: object) -> list[tuple]:
    return [
        (metadata["index"], label, image)
        for image, label, metadata in open_stream(source, image_format="jpeg", **options)
    ]


def test_a_mirror_through_faults_is_a_run_folder(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "copy"
    with FaultServer(served(run)) as server:
        server.add_faults("/run/serial_00001.tar", ("reset", 9000), ("status", 503, None), ("short", 20000))
        server.add_faults("/run/serial_00002.tar", ("no-range",), ("stall", 100, 3.0))
        code = mirror_cli.main([server.url("/run"), str(out), "--connections", "2", *FAST_FLAGS])
    assert code == 0
    assert "3 shards" in capsys.readouterr().out
    assert verify_cli.main([str(out), "--no-progress"]) == 0
    assert samples(out, verify="sha256") == samples(run)
    listed = json.loads((out / MIRROR_NAME).read_text())["shards"]
    assert [(entry["name"], entry["samples"]) for entry in listed] == [(shard_name(i), 4) for i in range(3)]
    assert not list(out.glob(".*.part"))


def test_an_interrupted_mirror_continues_where_it_stopped(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ccc.shards.mirror._CHUNK_BYTES", 4096)  # shards of 40 KB are then written in pieces
    out = tmp_path / "copy"
    received = []

    def interrupt(count: int, total: int | None) -> None:
        received.append(count)
        if sum(received) > 50_000:
            raise KeyboardInterrupt

    with FaultServer(served(run)) as server:
        mirror_stream(server.url("/run"), out, shards=range(0, 1), remote=FAST)
        with pytest.raises(KeyboardInterrupt):
            mirror_stream(server.url("/run"), out, connections=1, remote=FAST, progress=interrupt)
        partial = sorted(out.glob(".serial_*.part"))
        assert partial and all(0 < path.stat().st_size < 40_000 for path in partial)
        resumed_at = {path.name[1:-5]: path.stat().st_size for path in partial}
        server.requests.clear()
        mirror_stream(server.url("/run"), out, connections=3, remote=FAST)
        asked = {path.rpartition("/")[2]: headers.get("Range") for path, headers in server.requests}
    assert "serial_00000.tar" not in asked
    for name, size in resumed_at.items():
        assert asked[name] == f"bytes={size}-"
    assert verify_cli.main([str(out), "--no-progress"]) == 0
    assert samples(out, verify="sha256") == samples(run)


def test_ctrl_c_and_rerun_through_the_command(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "copy"
    with FaultServer(served(run)) as server:
        server.add_faults("/run/serial_00000.tar", *[("status", 503, None)] * 4)
        assert mirror_cli.main([server.url("/run"), str(out), "--connections", "1", *FAST_FLAGS]) == 2
        error = capsys.readouterr().err
        assert error.startswith("ccc-mirror: error: shard http://") and "after 4 attempts" in error
        assert error.count("\n") == 1
        assert mirror_cli.main([server.url("/run"), str(out), *FAST_FLAGS]) == 0
    assert verify_cli.main([str(out), "--no-progress"]) == 0


def test_a_shard_that_differs_from_the_manifest_is_refused(run: Path, tmp_path: Path) -> None:
    files = served(run)
    files["/run/serial_00001.tar"] = files["/run/serial_00000.tar"]
    with FaultServer(files) as server:
        with pytest.raises(MirrorError, match=r"serial_00001.tar: differs from the source manifest"):
            mirror_stream(server.url("/run"), tmp_path / "copy", connections=1, remote=FAST)
    assert not (tmp_path / "copy" / "serial_00001.tar").exists()


def test_a_published_stream_is_mirrored_read_back_and_verified(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    with FaultServer(served(run, prefix=f"/ccc/{NAME}")) as server:
        server.add_faults(f"/ccc/{NAME}/serial_00001.tar", ("reset", 3000))
        arguments = [f"published:{NAME}", str(tmp_path / "mirror"), "--published-url", server.url("/ccc")]
        assert mirror_cli.main([*arguments, "--shards", "0-2", *FAST_FLAGS]) == 0
    listed = json.loads((tmp_path / "mirror" / NAME / MIRROR_NAME).read_text())
    assert listed["source"] == f"published:{NAME}" and len(listed["shards"]) == 3
    local = samples(f"published:{NAME}", published_url=str(tmp_path / "mirror"), limit=12)
    assert [row[1:] for row in local] == [row[1:] for row in samples(run)]
    mirrored = samples(tmp_path / "mirror" / NAME, verify="sha256")
    assert mirrored == local and open_stream(tmp_path / "mirror" / NAME).length == 12
    capsys.readouterr()
    assert verify_cli.main([str(tmp_path / "mirror" / NAME), "--no-progress"]) == 0
    assert "3 of 3 shards intact, 12 samples decoded; a ccc-mirror folder without a manifest" in capsys.readouterr().out
    shard = tmp_path / "mirror" / NAME / "serial_00001.tar"
    shard.write_bytes(shard.read_bytes()[:-1] + b"\1")
    for flags in ([], ["--no-decode"]):
        assert verify_cli.main([str(tmp_path / "mirror" / NAME), "--no-progress", *flags]) == 1
        assert capsys.readouterr().out.startswith("serial_00001.tar: altered")
    with pytest.raises(StreamError, match=r"serial_00001\.tar: altered \(sha256 differs"):
        samples(tmp_path / "mirror" / NAME, verify="sha256")


def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        mirror_cli.main(["published:x", "out", "--shards", "3-1"])
    assert "must be A-B with 0 <= A <= B" in capsys.readouterr().err
    assert mirror_cli.main(["published:nope", "out", "--no-progress"]) == 2
    assert capsys.readouterr().err.startswith("ccc-mirror: error: unknown published CCC stream 'nope'")
    assert mirror_cli.main(["/local/folder", "out", "--no-progress"]) == 2
    assert "source must be published:<name> or an http(s):// URL" in capsys.readouterr().err
    for flag in ("--backoff", "--max-backoff", "--timeout"):
        with pytest.raises(SystemExit):
            mirror_cli.main(["published:x", "out", flag, "1e308"])
        assert f"argument {flag}: must be a number of seconds in (0, 86,400], got '1e308'" in capsys.readouterr().err


def test_a_shard_replaced_between_two_runs_is_downloaded_again_whole(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("ccc.shards.mirror._CHUNK_BYTES", 4096)
    out = tmp_path / "copy"
    pattern = "/run/serial_{00000..00001}.tar"

    def interrupt(count: int, total: int | None) -> None:
        if count == 4096:
            raise KeyboardInterrupt

    with FaultServer(served(run)) as server:
        with pytest.raises(KeyboardInterrupt):
            mirror_stream(server.url(pattern), out, connections=1, remote=FAST, progress=interrupt)
        assert (out / ".serial_00000.tar.part").stat().st_size == 4096
        replacement = (run / "serial_00002.tar").read_bytes()
        server.files["/run/serial_00000.tar"] = replacement
        mirror_stream(server.url(pattern), out, connections=1, remote=FAST)
    assert (out / "serial_00000.tar").read_bytes() == replacement
    assert any("changed on the server" in record.getMessage() for record in caplog.records)
    assert not list(out.glob(".serial_*"))


def test_an_unknown_published_name_is_one_line_before_any_progress(tmp_path, capsys):
    from ccc.cli.mirror import main

    assert main(["published:baseline_21_transition+speed_2000_seed_43", str(tmp_path / "m")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "unknown published CCC stream 'baseline_21_transition+speed_2000_seed_43'" in captured.err
    assert not (tmp_path / "m").exists()


REFUSED_LINKS = {
    ".ccc-mirror.lock": "lock file",
    ".serial_00000.tar.part": "partial download",
    MIRROR_NAME: MIRROR_NAME,
    "serial_00000.tar": "mirrored shard",
}
REPLACED_LINKS = (".serial_00000.tar.part.json", ".mirror.json.partial", ".manifest.json.partial")


@pytest.mark.parametrize("name", [*REFUSED_LINKS, *REPLACED_LINKS])
def test_a_link_planted_in_the_mirror_never_writes_its_target(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture, name: str
) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    out = tmp_path / "copy"
    out.mkdir()
    (out / name).symlink_to(victim)
    with FaultServer(served(run)) as server:
        code = mirror_cli.main([server.url("/run"), str(out), "--connections", "1", *FAST_FLAGS])
    error = capsys.readouterr().err
    assert victim.read_bytes() == b"precious"
    if name in REFUSED_LINKS:
        assert code == 2 and error.count("\n") == 1
        assert error.startswith(f"ccc-mirror: error: {REFUSED_LINKS[name]} {out / name} is a symbolic link")
    else:
        assert code == 0 and error == ""
        assert not any(path.is_symlink() for path in out.iterdir() if path.name != name)
        assert verify_cli.main([str(out), "--no-progress"]) == 0


def test_verify_and_open_stream_refuse_a_mirrored_shard_that_is_a_link(run: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "mirror" / NAME
    with FaultServer(served(run, prefix=f"/ccc/{NAME}")) as server:
        arguments = [f"published:{NAME}", str(tmp_path / "mirror"), "--published-url", server.url("/ccc")]
        assert mirror_cli.main([*arguments, "--shards", "0-2", *FAST_FLAGS]) == 0
    (out / "serial_00001.tar").rename(tmp_path / "elsewhere.tar")
    (out / "serial_00001.tar").symlink_to(tmp_path / "elsewhere.tar")
    capsys.readouterr()
    assert verify_cli.main([str(out), "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"mirrored shard {out / 'serial_00001.tar'} is a symbolic link" in error
    with pytest.raises((StreamError, OSError), match=r"serial_00001\.tar is a symbolic link"):
        samples(out, verify="sha256")


def mirror_published(run: Path, tmp_path: Path) -> Path:
    """A mirror of 3 shards of a published stream (no manifest: mirror.json gives the shards)."""
    with FaultServer(served(run, prefix=f"/ccc/{NAME}")) as server:
        arguments = [f"published:{NAME}", str(tmp_path / "mirror"), "--published-url", server.url("/ccc")]
        assert mirror_cli.main([*arguments, "--shards", "0-2", *FAST_FLAGS]) == 0
    return tmp_path / "mirror" / NAME


@pytest.mark.parametrize("name", ["../outside.tar", "ABSOLUTE", ".serial_00000.tar.part", "", "a/b.tar"])
def test_mirror_json_names_outside_the_folder_are_refused(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture, name: str
) -> None:
    out = mirror_published(run, tmp_path)
    (out.parent / "outside.tar").write_bytes((out / "serial_00000.tar").read_bytes())  # intact, but not the mirror's
    name = str(out.parent / "outside.tar") if name == "ABSOLUTE" else name
    document = json.loads((out / MIRROR_NAME).read_text())
    outside = dict(document["shards"][0], name=name)
    document["shards"].insert(0, outside)
    (out / MIRROR_NAME).write_text(json.dumps(document))
    capsys.readouterr()
    assert verify_cli.main([str(out), "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"shard name {name!r} is not a plain file name" in error
    with pytest.raises(StreamError, match=r"is not a plain file name"):
        samples(out, verify="sha256")


def test_a_shard_range_past_the_end_is_refused(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with FaultServer(served(run)) as server:
        for shards in ("5-9", "1-3"):
            code = mirror_cli.main([server.url("/run"), str(tmp_path / "copy"), "--shards", shards, *FAST_FLAGS])
            error = capsys.readouterr().err
            assert code == 2 and error.count("\n") == 1
            assert f"shards {shards} reach past the end of the stream (3 shards: 0-2)" in error
        assert {path for path, _ in server.requests} == {"/run/manifest.json"}
    assert not (tmp_path / "copy" / "manifest.json").exists()


@pytest.mark.parametrize("name", [".ccc-mirror.lock", ".hidden.tar", MIRROR_NAME, "manifest.json"])
def test_a_pattern_naming_the_mirrors_own_files_is_refused(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture, name: str
) -> None:
    files = served(run)
    files[f"/run/{name}"] = files["/run/serial_00000.tar"]
    out = tmp_path / "copy"
    out.mkdir()
    (out / name).write_bytes(b"kept")
    with FaultServer(files) as server:
        code = mirror_cli.main([server.url(f"/run/{{serial_00001.tar,{name}}}"), str(out), *FAST_FLAGS])
        assert not server.requests
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1 and repr(name) in error
    assert (out / name).read_bytes() == b"kept"


def _limit_file_size() -> None:
    """In the child: files cannot grow beyond 10 kB (EFBIG, as a full disk's ENOSPC, instead of SIGXFSZ)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (10_000, 10_000))


def test_a_write_that_fails_names_the_partial_file(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "copy"
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    with FaultServer(served(run)) as server:
        command = [sys.executable, "-m", "ccc.cli.mirror", server.url("/run"), str(out), "--connections", "1"]
        finished = subprocess.run(
            [*command, *FAST_FLAGS], capture_output=True, text=True, env=environment, preexec_fn=_limit_file_size
        )
    assert finished.returncode == 2 and finished.stderr.count("\n") == 1
    assert finished.stderr.startswith(f"ccc-mirror: error: cannot write {out / '.serial_00000.tar.part'}: ")


def test_a_remote_manifest_beyond_the_cap_is_refused_unread(run: Path, tmp_path: Path, capsys) -> None:
    from ccc.shards.manifest import MAX_MANIFEST_BYTES

    files = served(run)
    files["/run/manifest.json"] = files["/run/manifest.json"].ljust(MAX_MANIFEST_BYTES + 1)  # valid JSON, too long
    with FaultServer(files) as server:
        code = mirror_cli.main([server.url("/run"), str(tmp_path / "copy"), *FAST_FLAGS])
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1
    assert f"manifest.json: larger than {MAX_MANIFEST_BYTES:,} bytes" in error


def test_a_download_waiting_to_retry_stops_at_the_first_fatal_error(run: Path, tmp_path: Path) -> None:
    """Shard 1 answers 503 and waits 20 s to retry; shard 0's 403 a second later ends that wait: shard 1
    is never asked again."""
    with FaultServer(served(run)) as server:
        server.add_faults("/run/serial_00000.tar", ("late", 1.0, 403))
        server.add_faults("/run/serial_00001.tar", *[("status", 503, None)] * 3)
        patient = RemoteOptions(attempts=3, backoff=20.0, max_backoff=20.0, connect_timeout=5.0, read_timeout=5.0)
        with pytest.raises(ShardReadError, match=r"serial_00000\.tar: HTTP 403"):
            mirror_stream(
                server.url("/run/serial_{00000..00001}.tar"), tmp_path / "copy", connections=2, remote=patient
            )
        assert sorted(path for path, _ in server.requests) == ["/run/serial_00000.tar", "/run/serial_00001.tar"]


def test_a_partial_download_without_its_identity_record_starts_again(run: Path, tmp_path: Path) -> None:
    folder = tmp_path / "copy"
    folder.mkdir()
    (folder / ".serial_00000.tar.part").write_bytes(b"not the shard's first bytes")
    (folder / ".serial_00000.tar.part.json").write_text("{not json")
    with FaultServer(served(run)) as server:
        mirror_stream(server.url("/run/serial_{00000..00000}.tar"), folder, connections=1)
        assert [headers.get("Range") for _, headers in server.requests] == [None]
    assert (folder / "serial_00000.tar").read_bytes() == (run / "serial_00000.tar").read_bytes()


def test_no_shard_is_started_after_the_first_fatal_error(run: Path, tmp_path: Path) -> None:
    files = served(run)
    del files["/run/serial_00000.tar"]  # 404: not retried
    with FaultServer(files) as server:
        server.add_faults("/run/serial_00001.tar", *[("status", 503, None)] * 3)
        slow = RemoteOptions(attempts=3, backoff=2.0, max_backoff=2.0, connect_timeout=5.0, read_timeout=5.0)
        with pytest.raises(ShardReadError, match=r"serial_00000\.tar: HTTP 404"):
            mirror_stream(server.url("/run/serial_{00000..00002}.tar"), tmp_path / "copy", connections=1, remote=slow)
        assert [path for path, _ in server.requests] == ["/run/serial_00000.tar"]
