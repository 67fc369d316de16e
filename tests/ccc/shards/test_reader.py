"""ccc.shards.reader against hostile tar files: crafted headers and a seeded fuzz of a small shard.

Every case must end in a named error (ShardReadError from the reader, StreamError from the stream)
or in correct samples, within a time bound enforced by a SIGALRM timer (no timing asserts).
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
from ccc.shards.reader import BLOCK_BYTES, MAX_MEMBER_BYTES, read_all
from ccc.shards.record import MAX_JSON_BYTES, load_json_member
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
        match=rf"shard pipe:cat {path}: sample a, member input\.jpg of 67,108,865 bytes exceeds the reader's limit of 67,108,864",
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


def test_json_depth_ignores_brackets_inside_strings() -> None:
    text = json.dumps({"path": "[" * 100 + "{" * 100, "nested": [[[1]]]}).encode()
    assert load_json_member(text, "here")["nested"] == [[[1]]]  # type: ignore[index]
    with pytest.raises(ShardReadError, match="^here: json member nested deeper"):
        load_json_member(b'{"a": "\\"' + b'", "b": ' + b"[" * 40 + b"]" * 40 + b"}", "here")


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
