"""The typed stream definition of ``ccc-generate`` (ccc.cli.generate_definition): built once from the
parsed arguments for every kind (the demo world's settings included, the namespace untouched), one
field per meaning (images per domain is not the speed), one-line errors for options that do not go
together, and the one conversion into the library's definition mapping."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import re

import pytest

from ccc.cli.common import UsageError
from ccc.cli.generate import build_parser
from ccc.cli.generate_definition import StreamDefinition, definition_from_arguments
from ccc.demo.demonstration import DEMO_DOMAIN_IMAGES, DEMO_NUM_IMAGES, DEMO_SPEED
from ccc.stream.spec import DEFINITION_KEYS, PAPER_NUM_IMAGES, resolve_stream_spec

CHECKSUM = "0" * 64


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def build(*argv: str) -> tuple[StreamDefinition, list[str], argparse.Namespace]:
    """The definition of ``argv``, the notes it told, and the namespace (checked unchanged)."""
    arguments = parse(*argv)
    before = copy.deepcopy(vars(arguments))
    notes: list[str] = []
    definition = definition_from_arguments(arguments, note=notes.append)
    assert vars(arguments) == before
    return definition, notes, arguments


def test_a_ccc_definition_takes_the_arguments_and_the_ccc_defaults() -> None:
    definition, notes, _ = build("--difficulty", "medium", "--speed", "2000", "--seed", "44", "--imagenet", "/val")
    assert definition == StreamDefinition(
        kind="ccc",
        seed=44,
        num_images=PAPER_NUM_IMAGES,
        shard_size=25_000,
        image_folder="/val",
        difficulty="medium",
        speed=2000,
        schedule="reference",
        path_objective="reference",
    )
    assert notes == []
    mapping = definition.spec_mapping()
    assert set(mapping) == set(DEFINITION_KEYS)
    assert mapping["speed"] == 2000


@pytest.mark.parametrize("kind", ["cin-c", "gradual"])
def test_images_per_domain_is_its_own_field_and_becomes_the_libraries_speed_only_in_the_mapping(kind) -> None:
    definition, _, _ = build("--kind", kind, "--images-per-domain", "7", "--crop", "center", "--corruptions", "fog")
    assert definition.images_per_domain == 7
    assert definition.speed is None
    assert definition.schedule is None and definition.path_objective is None
    assert definition.num_images is None  # one pass of the domains
    assert definition.spec_mapping()["speed"] == 7
    spec = resolve_stream_spec(definition.spec_mapping(), None, CHECKSUM)
    assert (spec.kind, spec.speed, spec.crop, spec.corruptions) == (kind, 7, "center", ("fog",))


def test_a_cin_c_definition_keeps_its_severity_and_leaves_the_defaults_to_the_library() -> None:
    definition, _, _ = build("--kind", "cin-c", "--severity", "3")
    assert (definition.severity, definition.images_per_domain, definition.crop) == (3, None, None)
    spec = resolve_stream_spec(definition.spec_mapping(), None, CHECKSUM, source_count=12)
    assert (spec.severity, spec.speed, spec.crop, spec.num_images) == (3, 12, "random", 15 * 12)


def test_the_demo_fills_in_a_ccc_streams_table_speed_and_length_and_says_so() -> None:
    definition, notes, arguments = build("--demo", "--difficulty", "easy", "--dry-run")
    assert arguments.speed is None and arguments.calibration is None and arguments.num_images is None
    assert (definition.speed, definition.num_images, definition.demo) == (DEMO_SPEED, DEMO_NUM_IMAGES, True)
    assert definition.calibration is not None and definition.calibration.endswith(".npz")
    assert definition.image_folder is None  # a dry run reads no image
    assert notes == [
        f"demo world settings (the demo's, not the paper's; docs/demo.md): --speed {DEMO_SPEED}, "
        f"--num-images {DEMO_NUM_IMAGES:,} — its corruption pairs last 1,400–4,100 images"
    ]


def test_the_demo_keeps_what_the_user_gave() -> None:
    definition, notes, _ = build("--demo", "--difficulty", "easy", "--speed", "7", "--num-images", "70", "--dry-run")
    assert (definition.speed, definition.num_images) == (7, 70)
    assert notes == []


def test_the_demo_gives_a_gradual_stream_its_images_per_level() -> None:
    definition, notes, _ = build("--demo", "--kind", "gradual", "--dry-run")
    assert (definition.images_per_domain, definition.speed, definition.calibration) == (DEMO_DOMAIN_IMAGES, None, None)
    assert notes == [f"demo world settings (docs/demo.md): --images-per-domain {DEMO_DOMAIN_IMAGES}"]
    definition, notes, _ = build("--demo", "--kind", "cin-c", "--dry-run")
    assert (definition.images_per_domain, notes) == (None, [])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--difficulty", "easy"], "--speed K is required: images per severity step"),
        (["--speed", "3", "--severity", "2"], "--severity does not apply to --kind ccc (the default)"),
        (["--speed", "3", "--images-per-domain", "2", "--crop", "center"], "--images-per-domain does not apply"),
        (["--kind", "cin-c", "--speed", "3"], "--speed does not apply to --kind cin-c: it needs no calibration"),
        (["--kind", "gradual", "--difficulty", "easy", "--plot", "p.png"], "--difficulty, --plot do not apply"),
        (["--kind", "gradual", "--severity", "2"], "its severities are 1 2 3 4 5 4 3 2 1 per corruption"),
        (["--kind", "cin-c", "--schedule", "reference"], "--schedule does not apply to --kind cin-c"),
        (["--demo", "--imagenet", "/val", "--difficulty", "easy"], "--demo uses the demo world's own images"),
        (["--demo", "--kind", "gradual", "--imagenet", "/val"], "--demo uses the demo world's own images"),
    ],
)
def test_options_that_do_not_go_together_are_one_line(argv, expected) -> None:
    notes: list[str] = []
    with pytest.raises(UsageError, match=re.escape(expected)) as caught:
        definition_from_arguments(parse(*argv, "--dry-run"), note=notes.append)
    assert "\n" not in str(caught.value)
    assert notes == []  # the demo's settings are told only for a definition that holds


def test_the_constructor_validates_a_definition_made_in_python() -> None:
    with pytest.raises(UsageError, match="--kind must be one of ccc, cin-c, gradual, got 'ccd'"):
        StreamDefinition(kind="ccd", seed=0, num_images=None, shard_size=1)
    definition = StreamDefinition(kind="gradual", seed=0, num_images=None, shard_size=1, images_per_domain=3)
    with pytest.raises(UsageError, match="--speed does not apply to --kind gradual"):
        dataclasses.replace(definition, speed=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        definition.seed = 1  # type: ignore[misc]


def test_the_demo_says_it_prepares_its_images_only_when_it_does(monkeypatch, tmp_path) -> None:
    import ccc.demo

    monkeypatch.setenv("CCC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ccc.demo, "demo_image_folder", lambda corruption_set: tmp_path / "demo" / "images-v1")
    preparing = "demo world (not ImageNet): preparing its images"
    _, notes, _ = build("--demo", "--difficulty", "easy")
    assert any(note.startswith(preparing) for note in notes), notes
    (tmp_path / "demo" / "images-v1").mkdir(parents=True)  # prepared by an earlier run
    _, notes, _ = build("--demo", "--difficulty", "easy")
    assert not any(note.startswith(preparing) for note in notes), notes
