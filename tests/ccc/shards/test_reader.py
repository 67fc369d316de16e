"""ccc.shards.reader: its steps alone (header parsing, members, grouping), then against hostile tar
files: crafted headers and a seeded fuzz of a small shard.

Every hostile case must end in a named error (ShardReadError from the reader, StreamError from the
stream) or in correct samples, within a time bound enforced by a SIGALRM timer (no timing asserts).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import signal
import tarfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ccc.load import StreamError, StreamWarning, open_stream
from ccc.shards.errors import ShardReadError
from ccc.shards.location import read_all
from ccc.shards.reader import (
    BLOCK_BYTES,
    MAX_MEMBER_BYTES,
    TarHeader,
    TarMember,
    TarSample,
    group_samples,
    parse_header,
    read_members,
    split_member_name,
)
from ccc.shards.record import MAX_JSON_BYTES
from tests.builders import make_ccc_run, make_image_folder

CASE_SECONDS = 20
"""Bound per case; a reader that loops forever is stopped by the timer and the test fails."""


@contextlib.contextmanager
def time_bound(seconds: int = CASE_SECONDS) -> Iterator[None]:
    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"the reader did not finish within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def header(name: bytes, size_field: bytes, kind: bytes = b"0") -> bytes:
    """A ustar header block with any name bytes and raw size field, and a correct checksum."""
    block = bytearray(BLOCK_BYTES)
    block[: len(name)] = name
    block[100:108] = b"0000444\0"
    block[108:116] = block[116:124] = b"0000000\0"
    block[124:136] = size_field.ljust(12, b"\0")[:12]
    block[136:148] = b"00000000000\0"
    block[156:157] = kind
    block[257:263] = b"ustar\0"
    block[263:265] = b"00"
    block[148:156] = b" " * 8
    block[148:156] = f"{sum(block):06o}\0 ".encode()
    return bytes(block)


def member(name: bytes, content: bytes, kind: bytes = b"0") -> bytes:
    return header(name, f"{len(content):011o}".encode(), kind) + content + bytes(-len(content) % BLOCK_BYTES)


END = bytes(2 * BLOCK_BYTES)


def read_bounded(source: Path | str, **options: object) -> list:  # type: ignore[type-arg]
    """Every sample of the stream at ``source``, within :data:`CASE_SECONDS`."""
    with time_bound():
        return list(open_stream(source, **options))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- the steps alone
def test_a_header_block_is_parsed_into_its_fields() -> None:
    parsed = parse_header(header(b"000000000007.input.jpg", b"00000001001"), "s.tar", "at the start")
    assert parsed == TarHeader(kind=b"0", size=513, name=b"000000000007.input.jpg", prefix=b"", ustar=True)
    assert parsed.padded_size == 2 * BLOCK_BYTES
    huge = parse_header(header(b"a.jpg", b"\x80" + (2**40).to_bytes(11, "big")), "s.tar", "at the start")
    assert huge is not None and huge.size == 2**40
    empty = parse_header(header(b"a.cls", b"00000000000"), "s.tar", "at the start")
    assert empty is not None and empty.size == 0 and empty.padded_size == 0


def test_a_zero_block_ends_the_archive() -> None:
    assert parse_header(bytes(BLOCK_BYTES), "s.tar", "at the start") is None


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (b"", "shard s.tar: truncated after sample k (the tar ends without its end-of-archive marker)"),
        (
            b"x" * 100,
            "shard s.tar: truncated after sample k (the tar ends without its end-of-archive marker; "
            "a 100-byte partial header)",
        ),
        (
            header(b"a.jpg", b"00000000001")[:-1] + b"x",
            "shard s.tar: damaged tar header after sample k (checksum mismatch)",
        ),
        (
            header(b"a.jpg", b"-0000000001"),
            "shard s.tar: damaged tar header after sample k (size field b'-0000000001\\x00')",
        ),
    ],
    ids=["empty", "partial", "checksum", "size"],
)
def test_a_bad_header_block_is_named(block: bytes, message: str) -> None:
    with pytest.raises(ShardReadError) as caught:
        parse_header(block, "s.tar", "after sample k")
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("name", "key", "extension"),
    [
        ("000000001234.input.jpg", "000000001234", "input.jpg"),
        ("sample_3.output.cls", "sample_3", "output.cls"),
        ("run.v2/000000000001.json", "run.v2/000000000001", "json"),
        ("README", "README", ""),
    ],
)
def test_a_member_name_splits_at_the_first_dot_of_its_file_name(name: str, key: str, extension: str) -> None:
    assert split_member_name(name) == (key, extension)


def pax_record(keyword: str, value: str) -> bytes:
    """One PAX extended header record, ``"<length> <keyword>=<value>\\n"`` (the length counts itself)."""
    body = f" {keyword}={value}\n".encode()
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length += 1
    return str(length).encode() + body


def test_members_take_their_names_from_pax_and_gnu_headers_and_skip_directories() -> None:
    pax_name = "d" * 140 + "/a.input.jpg"
    gnu_name = "g" * 120 + ".json"
    data = (
        header(b"d", b"00000000000", b"5")
        + member(b"pax", pax_record("mtime", "0") + pax_record("path", pax_name), b"x")
        + member(b"truncated-name", b"jpeg")
        + member(b"././@LongLink", gnu_name.encode() + b"\0", b"L")
        + member(b"g", b"{}")
        + member(b"a.output.cls", b"7")
        + END
    )
    members = []
    for found in read_members(io.BytesIO(data), "s.tar"):
        members.append((found.name, found.size, found.read("member")))
    assert members == [(pax_name, 4, b"jpeg"), (gnu_name, 2, b"{}"), ("a.output.cls", 1, b"7")]


def test_members_end_at_the_end_of_archive_marker() -> None:
    data = member(b"a.cls", b"1") + END + member(b"b.cls", b"2")
    names = []
    for found in read_members(io.BytesIO(data), "s.tar"):
        found.skip("member")
        names.append(found.name)
    assert names == ["a.cls"]


class RecordingSource:
    """A member source holding one member's bytes and recording what was asked of it."""

    def __init__(self, content: bytes) -> None:
        self.content = content
        self.calls: list[tuple[str, int, str]] = []

    def read(self, size: int, what: str) -> bytes:
        self.calls.append(("read", size, what))
        return self.content[:size]

    def skip(self, size: int, what: str) -> None:
        self.calls.append(("skip", size, what))


def fake_members(*names: str) -> list[TarMember]:
    return [TarMember(name, len(name), RecordingSource(name.encode())) for name in names]


def test_consecutive_members_sharing_a_key_form_one_sample() -> None:
    members = fake_members("a.input.jpg", "a.output.cls", "b.input.jpg", "c.json")
    assert list(group_samples(members, "s.tar")) == [
        TarSample(0, "a", {"input.jpg": b"a.input.jpg", "output.cls": b"a.output.cls"}),
        TarSample(1, "b", {"input.jpg": b"b.input.jpg"}),
        TarSample(2, "c", {"json": b"c.json"}),
    ]
    assert list(group_samples([], "s.tar")) == []


def test_unwanted_samples_are_skipped_without_reading_their_data() -> None:
    members = fake_members("a.input.jpg", "a.output.cls", "b.input.jpg", "c.input.jpg")
    asked: list[int] = []
    samples = list(group_samples(members, "s.tar", lambda position: asked.append(position) or position == 1))
    assert asked == [0, 1, 2]
    assert [(sample.key, sample.members) for sample in samples] == [
        ("a", None),
        ("b", {"input.jpg": b"b.input.jpg"}),
        ("c", None),
    ]
    assert [member.source.calls for member in members] == [  # type: ignore[attr-defined]
        [("skip", BLOCK_BYTES, "sample a, member input.jpg")],
        [("skip", BLOCK_BYTES, "sample a, member output.cls")],
        [("read", 11, "sample b, member input.jpg")],
        [("skip", BLOCK_BYTES, "sample c, member input.jpg")],
    ]


def test_members_of_a_sample_that_are_not_consecutive_are_refused() -> None:
    samples = group_samples(fake_members("a.input.jpg", "b.input.jpg", "a.output.cls"), "s.tar")
    assert next(samples).key == "a"
    assert next(samples).key == "b"
    with pytest.raises(ShardReadError, match=r"^shard s\.tar: members of sample a are not consecutive$"):
        next(samples)


# ----------------------------------------------------------------------------- hostile files
@pytest.mark.parametrize(
    ("content", "message"),
    [
        (member(b"pax", b"0 path=a\n", b"x") + END, r"damaged PAX extended header at the start \(record length b'0'"),
        (member(b"pax", b"-5 path=a\n", b"x") + END, r"damaged PAX extended header.*b'-5'"),
        (member(b"pax", b"99 path=a\n", b"x") + END, r"damaged PAX extended header.*b'99'"),
        (
            member(b"pax", b"11 path=\xff\xfe\n", b"x") + member(b"a.cls", b"1") + END,
            r"PAX path at the start is not UTF-8",
        ),
        (header(b"a.input.jpg", b"-0000000001") + END, r"damaged tar header at the start \(size field"),
        (
            header(b"a.input.jpg", b"\x80" + (2**40).to_bytes(11, "big")) + END,
            r"truncated \(sample a, member input\.jpg: expected 1099511627776 bytes",
        ),
        (
            member(b"a.output.cls", b"1") + header(b"a.input.jpg", b"\x80" + (2**40).to_bytes(11, "big")) + END,
            r"truncated \(sample a, member input\.jpg",
        ),
        (member(b"\xff\xfe.input.jpg", b"x") + END, r"member name at the start is not UTF-8"),
        (member(b"././@LongLink", b"\xff\xfe.jpg\0", b"L") + END, r"GNU long name at the start is not UTF-8"),
    ],
    ids=[
        "pax-length-0",
        "pax-negative",
        "pax-beyond",
        "pax-not-utf8",
        "negative-size",
        "size-2^40",
        "size-2^40-second",
        "name-not-utf8",
        "long-name-not-utf8",
    ],
)
def test_crafted_headers_end_in_one_named_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "crafted.tar"
    path.write_bytes(content)
    with time_bound(), pytest.raises(ShardReadError, match=rf"^shard {path}: .*{message}"):
        read_all(str(path))
    with pytest.raises(StreamError, match=rf"^shard {path}: .*{message}"):
        read_bounded(str(path))
    with pytest.warns(StreamWarning, match="skipped samples in 1 place"):
        assert read_bounded(str(path), on_error="skip") == []


def test_a_huge_member_from_a_pipe_is_refused_without_allocating_it(tmp_path: Path) -> None:
    path = tmp_path / "crafted.tar"
    path.write_bytes(
        header(b"a.input.jpg", f"{MAX_MEMBER_BYTES + 1:011o}".encode()) + bytes(MAX_MEMBER_BYTES + BLOCK_BYTES) + END
    )
    with pytest.raises(
        StreamError,
        match=rf"shard pipe:cat {path}: sample a, member input\.jpg of 67,108,865 bytes "
        r"exceeds the reader's limit of 67,108,864",
    ):
        read_bounded(f"pipe:cat {path}")


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than the reader's limit of 32 levels"),
        (
            b'{"a": "' + b"x" * MAX_JSON_BYTES + b'"}',
            "json member of 1,048,585 bytes exceeds the reader's limit of 1,048,576",
        ),
        (b"{not json", "json member is not JSON"),
        (b"[1, 2]", "json member must hold an object, got list"),
    ],
    ids=["deep", "large", "not-json", "not-object"],
)
def test_json_members_have_a_size_and_depth_limit(tmp_path: Path, record: bytes, message: str) -> None:
    path = tmp_path / "crafted.tar"
    jpeg = io.BytesIO()
    from PIL import Image

    Image.new("RGB", (8, 8)).save(jpeg, "JPEG")
    path.write_bytes(
        member(b"a.input.jpg", jpeg.getvalue()) + member(b"a.json", record) + member(b"a.output.cls", b"1") + END
    )
    with pytest.raises(StreamError, match=rf"^shard {path}: sample a \(stream index 0\).*{message}"):
        read_bounded(str(path))


# ----------------------------------------------------------------------------- fuzz
@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 3-sample run folder (one shard of 3) over tiny source images."""
    root = tmp_path_factory.mktemp("run")
    folder = make_image_folder(root / "val", classes=2, images_per_class=2, size=(64, 48))
    return make_ccc_run(root, num_images=3, speed=2, shard_size=3, image_folder=folder)


def damaged_copies(data: bytes, seed: int, flips: int, truncations: int) -> Iterator[tuple[str, bytes]]:
    """Seeded damage: byte changes (half of them inside header blocks) and truncations."""
    generator = np.random.default_rng(seed)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        headers = [info.offset for info in archive.getmembers()]
    for case in range(flips):
        damaged = bytearray(data)
        if case % 2:
            position = int(generator.choice(headers)) + int(generator.integers(BLOCK_BYTES))
        else:
            position = int(generator.integers(len(data)))
        damaged[position] = (damaged[position] + int(generator.integers(1, 256))) % 256
        yield f"byte {position} changed", bytes(damaged)
    for _ in range(truncations):
        cut = int(generator.integers(len(data)))
        yield f"cut at byte {cut}", data[:cut]


def pax_copy(data: bytes) -> bytes:
    """The same shard rewritten in PAX format with an explicit path record per member."""
    output = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(data)) as source,
        tarfile.open(fileobj=output, mode="w", format=tarfile.PAX_FORMAT) as target,
    ):
        for info in source.getmembers():
            content = source.extractfile(info).read()  # type: ignore[union-attr]
            info.pax_headers = {"path": info.name}
            target.addfile(info, io.BytesIO(content))
    return output.getvalue()


@pytest.mark.parametrize("layout", ["ustar", "pax"])
def test_fuzzed_shards_end_in_a_named_error_or_correct_samples(small_run: Path, tmp_path: Path, layout: str) -> None:
    original = (small_run / "serial_00000.tar").read_bytes()
    data = original if layout == "ustar" else pax_copy(original)
    path = tmp_path / "serial_00000.tar"
    path.write_bytes(data)
    assert len(read_bounded(str(path), image_format="jpeg")) == 3
    outcomes = {"error": 0, "read": 0}
    for case, damaged in damaged_copies(data, seed=19, flips=200, truncations=100):
        path.write_bytes(damaged)
        try:
            samples = read_bounded(str(path), image_format="jpeg")
        except StreamError as error:
            assert str(error).startswith("shard ") and str(path) in str(error), case
            outcomes["error"] += 1
            continue
        assert [sample.metadata["index"] for sample in samples] == [0, 1, 2], case
        outcomes["read"] += 1
    assert outcomes["error"] > 100 and outcomes["read"] > 0


def test_fuzzed_shards_under_the_manifest_with_sha256_give_only_correct_samples(
    small_run: Path, tmp_path: Path
) -> None:
    run = Path(shutil.copytree(small_run, tmp_path / "run"))
    path = run / "serial_00000.tar"
    data = path.read_bytes()
    expected = [(sample.image, sample.label) for sample in open_stream(run, image_format="jpeg")]
    manifest = json.loads((run / "manifest.json").read_text())
    for case, damaged in damaged_copies(data, seed=20, flips=100, truncations=50):
        path.write_bytes(damaged)
        with pytest.raises(StreamError, match=rf"^shard {path}: (truncated|altered)"):
            read_bounded(run, image_format="jpeg", verify="sha256")
        manifest["shards"][0]["bytes"] = len(damaged)
        (run / "manifest.json").write_text(json.dumps(manifest))
        try:
            samples = read_bounded(run, image_format="jpeg")
        except StreamError as error:
            assert str(error).startswith("shard "), case
        else:
            assert [sample.metadata["index"] for sample in samples] == [0, 1, 2], case
            assert [sample.metadata["key"] for sample in samples] == ["000000000000", "000000000001", "000000000002"], (
                case
            )
        manifest["shards"][0]["bytes"] = len(data)
    path.write_bytes(data)
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert [
        (sample.image, sample.label) for sample in read_bounded(run, image_format="jpeg", verify="sha256")
    ] == expected
    assert hashlib.sha256(data).hexdigest() == manifest["shards"][0]["sha256"]
