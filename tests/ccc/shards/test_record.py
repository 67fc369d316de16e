"""ccc.shards.record, the sample schema: names, members and the info text written and read back by one module."""

from __future__ import annotations

import json

import pytest

from ccc.shards.errors import ShardReadError
from ccc.shards.record import (
    IMAGE_MEMBER,
    INFO_MEMBER,
    JSON_MEMBER,
    LABEL_MEMBER,
    MEMBER_ORDER,
    SHARD_FILE,
    SampleRecordError,
    decode_members,
    encode_members,
    format_info,
    load_json_member,
    parse_info,
    sample_key,
    sample_place,
    shard_name,
    shard_pattern,
    temporary_shard_name,
)
from ccc.stream.spec import SampleSpec


def make_spec(index: int = 7) -> SampleSpec:
    return SampleSpec(
        index=index, step=1, pair_index=0, path_position=1, path_cell=(1, 0), n1="fog", s1=0.25, n2="jpeg", s2=0.0,
        calibrated_accuracy=41.5, source_position=3, source_path="n01440764/ILSVRC2012_val_00000293.JPEG",
        class_index=12, source_size=(500, 375), crop_box=(0, 0, 375, 375), flip=True, seed=99,
    )  # fmt: skip


def members_of(spec: SampleSpec, jpeg: bytes = b"\xff\xd8jpeg") -> dict[str, bytes]:
    return {name.split(".", 1)[1]: content for name, content in encode_members(spec, jpeg)}


def test_members_are_written_in_order_under_the_sample_key() -> None:
    names = [name for name, _ in encode_members(make_spec(7), b"jpeg")]
    assert names == [f"{sample_key(7)}.{member}" for member in MEMBER_ORDER]
    assert (
        MEMBER_ORDER
        == (INFO_MEMBER, IMAGE_MEMBER, JSON_MEMBER, LABEL_MEMBER)
        == ("info", "input.jpg", "json", "output.cls")
    )
    assert sample_key(7) == "000000000007"


def test_what_is_written_is_read_back() -> None:
    spec = make_spec()
    record = decode_members(members_of(spec, b"image bytes"), spec.index, "here")
    assert (record.image, record.label) == (b"image bytes", spec.class_index)
    assert record.record == json.loads(json.dumps(spec.to_json_dict()))
    assert record.metadata == {
        "index": 7, "n1": "fog", "s1": 0.25, "n2": "jpeg", "s2": 0.0, "path_step": 1,
        "source_path": spec.source_path, "calibrated_accuracy": 41.5,
    }  # fmt: skip


def test_published_samples_are_read_from_the_info_text() -> None:
    spec = make_spec()
    members = members_of(spec)
    del members[JSON_MEMBER]
    record = decode_members(members, 3, "here")
    assert record.record is None
    assert record.metadata["path_step"] is None and record.metadata["calibrated_accuracy"] is None
    assert parse_info(format_info(spec)).source_path == spec.source_path == record.metadata["source_path"]


@pytest.mark.parametrize(
    ("remove", "replace", "message"),
    [
        (IMAGE_MEMBER, None, "here has no input.jpg"),
        (LABEL_MEMBER, None, "here has no output.cls"),
        (None, {LABEL_MEMBER: b"cat"}, "output.cls must hold a class index"),
        (None, {JSON_MEMBER: b"[1]"}, "json member must hold an object"),
        (None, {JSON_MEMBER: b"{}"}, "malformed metadata"),
        (None, {INFO_MEMBER: b"nonsense", JSON_MEMBER: None}, "info must look like"),
        (None, {INFO_MEMBER: None, JSON_MEMBER: None}, "neither json nor info"),
    ],
)
def test_bad_members_are_named(remove: str | None, replace: dict | None, message: str) -> None:
    members = members_of(make_spec())
    if remove:
        del members[remove]
    for name, content in (replace or {}).items():
        if content is None:
            del members[name]
        else:
            members[name] = content
    with pytest.raises(SampleRecordError, match=message):
        decode_members(members, 7, "here")


def test_shard_names_and_their_pattern_agree() -> None:
    assert [shard_name(index) for index in (0, 1, 299)] == ["serial_00000.tar", "serial_00001.tar", "serial_00299.tar"]
    assert all(int(SHARD_FILE.fullmatch(shard_name(index)).group(1)) == index for index in (0, 12, 123456))  # type: ignore[union-attr]
    assert SHARD_FILE.fullmatch(temporary_shard_name(3)) is None and temporary_shard_name(3).startswith(".")
    assert shard_pattern(300) == "serial_{00000..00299}.tar"
    assert (
        sample_place("serial_00000.tar", sample_key(7), 7)
        == "shard serial_00000.tar: sample 000000000007 (stream index 7)"
    )


def test_json_depth_ignores_brackets_inside_strings() -> None:
    text = json.dumps({"path": "[" * 100 + "{" * 100, "nested": [[[1]]]}).encode()
    assert load_json_member(text, "here")["nested"] == [[[1]]]  # type: ignore[index]
    with pytest.raises(ShardReadError, match="^here: json member nested deeper"):
        load_json_member(b'{"a": "\\"' + b'", "b": ' + b"[" * 40 + b"]" * 40 + b"}", "here")
