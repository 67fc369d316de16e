"""ccc.shards.published: the 27 published streams' names, shard counts and URLs; open_stream("published:…")."""

from __future__ import annotations

from pathlib import Path

import pytest

from ccc.load import open_stream
from ccc.shards.published import (
    DEFAULT_PUBLISHED_URL,
    PUBLISHED_STREAMS,
    PUBLISHED_URL_VARIABLE,
    get_published,
    published_locations,
    resolve_published,
)
from ccc.shards.record import shard_name
from tests.builders import make_ccc_run
from tests.ccc.shards.fault_server import FaultServer

NAME = "baseline_20_transition+speed_2000_seed_43"


def test_the_27_streams() -> None:
    assert len(PUBLISHED_STREAMS) == 27
    assert {stream.baseline for stream in PUBLISHED_STREAMS.values()} == {0, 20, 40}
    counts = {(stream.speed, stream.shard_samples, stream.num_shards) for stream in PUBLISHED_STREAMS.values()}
    assert counts == {(1000, 25_000, 300), (2000, 26_000, 289), (5000, 25_000, 300)}
    assert all(stream.num_images >= 7_500_000 for stream in PUBLISHED_STREAMS.values())


def test_locations_follow_the_public_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PUBLISHED_URL_VARIABLE, raising=False)
    locations = published_locations(NAME)
    assert len(locations) == 289
    assert locations[0] == f"{DEFAULT_PUBLISHED_URL}/{NAME}/serial_00000.tar"
    assert locations[-1].endswith(f"/{NAME}/serial_00288.tar")
    monkeypatch.setenv(PUBLISHED_URL_VARIABLE, "http://mirror.example/ccc/")
    assert published_locations(NAME)[0] == f"http://mirror.example/ccc/{NAME}/serial_00000.tar"
    assert published_locations(NAME, "/data/ccc")[1] == f"/data/ccc/{NAME}/serial_00001.tar"


def test_resolve_leaves_other_sources_alone() -> None:
    assert resolve_published("/data/run") == "/data/run"
    assert resolve_published(["a.tar", "b.tar"]) == ["a.tar", "b.tar"]
    mixed = resolve_published(["a.tar", f"published:{NAME}"], "http://m")
    assert isinstance(mixed, list) and len(mixed) == 290 and mixed[0] == "a.tar"


def test_an_unknown_name_is_one_line_with_the_pattern() -> None:
    with pytest.raises(ValueError, match=r"unknown published CCC stream 'baseline_30.*b in 0, 20, 40") as caught:
        open_stream("published:baseline_30_transition+speed_2000_seed_43")
    assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="k in 1000, 2000, 5000, s in 43, 44, 45"):
        get_published("hard")


def test_open_stream_reads_a_published_name_from_a_mirror(tmp_path: Path) -> None:
    run = make_ccc_run(tmp_path, num_images=8, speed=4, shard_size=4)
    files = {f"/ccc/{NAME}/{shard_name(index)}": (run / shard_name(index)).read_bytes() for index in range(2)}
    expected = [(label, image) for image, label, _ in open_stream(run, image_format="jpeg")]
    with FaultServer(files) as server:
        stream = open_stream(f"published:{NAME}", published_url=server.url("/ccc"), image_format="jpeg", limit=8)
        assert [(label, image) for image, label, _ in stream] == expected
