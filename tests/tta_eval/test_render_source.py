"""The ``ccc-render:`` stream source: CCC streams rendered on the fly, no shards stored; starting at a sample."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch

from ccc.load import render_stream, stream_loader
from tests.builders import make_calibration_table, make_ccc_run, make_image_folder
from tests.tta_eval.tta_helpers import TINY_FACTORY, run_cli
from tta_eval.streams import (
    RenderRequest,
    StreamOptions,
    describe_stream_source,
    open_stream_source,
    parse_render_location,
    register_stream_source,
    stream_length,
)

NUM_IMAGES = 24
SPEED = 4


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A 24-image CCC run folder (shards of 8) over a 12-image folder, and its table as a file."""
    root = tmp_path_factory.mktemp("render")
    folder = make_image_folder(root / "val")
    table = root / "table.npz"
    make_calibration_table().save(table)
    run = make_ccc_run(root, NUM_IMAGES, SPEED, 8, image_folder=folder)
    return {"folder": folder, "table": table, "run": run}


def _batches(stream: object) -> list[tuple[torch.Tensor, torch.Tensor, list[dict]]]:
    return list(stream)  # type: ignore[call-overload]


def _definition(world: dict, *extra: str) -> str:
    return ",".join(
        (
            "difficulty=medium",
            f"speed={SPEED}",
            "seed=43",
            f"imagenet={world['folder']}",
            f"calibration={world['table']}",
            *extra,
        )
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_rendered_batches_equal_the_stored_shards(world: dict, workers: int) -> None:
    options = StreamOptions(batch_size=5, num_workers=workers)
    stored = _batches(open_stream_source(f"ccc:{world['run']}", options))
    rendered = _batches(
        open_stream_source(
            f"ccc-render:{world['run']},imagenet={world['folder']},calibration={world['table']}", options
        )
    )
    assert len(rendered) == len(stored) == 5
    for (images, labels, metadata), (stored_images, stored_labels, stored_metadata) in zip(rendered, stored):
        assert images.dtype == torch.float32 and torch.equal(images, stored_images)
        assert torch.equal(labels, stored_labels)
        assert [entry["pair"] for entry in metadata] == [entry["pair"] for entry in stored_metadata]
        assert [entry["index"] for entry in metadata] == [entry["index"] for entry in stored_metadata]


@pytest.mark.parametrize("workers", [0, 2])
def test_rendered_on_a_device_a_deterministic_stream_equals_the_stored_shards(world: dict, workers: int) -> None:
    options = StreamOptions(batch_size=5, num_workers=workers)
    stored = _batches(open_stream_source(f"ccc:{world['run']}", options))
    text = f"ccc-render:{world['run']},imagenet={world['folder']},calibration={world['table']},device=cpu"
    rendered = _batches(open_stream_source(text, options))
    assert len(rendered) == len(stored) == 5  # the world's table holds brightness, jpeg, pixelate, contrast
    for (images, labels, metadata), (stored_images, stored_labels, stored_metadata) in zip(rendered, stored):
        assert images.dtype == torch.float32 and torch.equal(images, stored_images)
        assert torch.equal(labels, stored_labels)
        assert [entry["pair"] for entry in metadata] == [entry["pair"] for entry in stored_metadata]
    described = describe_stream_source(text, options)
    assert (described.name, described.run_name) == (world["run"].name, world["run"].name + "_rendered_torch")


def test_a_definition_renders_the_stream_ccc_generate_would_store(world: dict) -> None:
    options = StreamOptions(batch_size=8)
    text = f"ccc-render:{_definition(world, f'num_images={NUM_IMAGES}')}"
    described = describe_stream_source(text, options)
    assert (described.name, described.samples, described.world, described.num_classes) == (
        world["run"].name,
        NUM_IMAGES,
        "imagenet",
        None,
    )
    stream = open_stream_source(text, options)
    assert stream_length(stream) == NUM_IMAGES
    stored = torch.cat([images for images, _, _ in open_stream_source(f"ccc:{world['run']}", options)])
    assert torch.equal(torch.cat([images for images, _, _ in stream]), stored)


def test_an_unbounded_definition_has_no_length(world: dict) -> None:
    text = f"ccc-render:{_definition(world)}"
    assert describe_stream_source(text, StreamOptions()).samples is None
    stream = open_stream_source(text, StreamOptions(batch_size=4))
    assert stream_length(stream) is None
    first = next(iter(stream))
    assert first[0].shape == (4, 3, 224, 224)


@pytest.mark.parametrize("workers", [0, 2])
def test_render_stream_started_at_k_gives_the_tail_of_the_full_render(world: dict, workers: int) -> None:
    definition = {"difficulty": "medium", "speed": SPEED, "seed": 43}
    full = [
        sample
        for sample in itertools.islice(
            render_stream(definition, imagenet=world["folder"], calibration=world["table"]), 30
        )
    ]
    for start in (1, 7, 13):
        stream = render_stream(
            definition, imagenet=world["folder"], calibration=world["table"], start=start, limit=30 - start
        )
        tail = [
            (images, labels, metadata)
            for images, labels, metadata in stream_loader(stream, batch_size=4, num_workers=workers)
        ]
        images = torch.cat([batch[0] for batch in tail])
        assert torch.equal(images, torch.stack([sample.image for sample in full[start:]]))
        assert torch.cat([batch[1] for batch in tail]).tolist() == [sample.label for sample in full[start:]]
        assert [entry for batch in tail for entry in batch[2]] == [sample.metadata for sample in full[start:]]


def test_the_source_starts_at_a_sample(world: dict) -> None:
    options = StreamOptions(batch_size=5)
    text = f"ccc-render:{world['run']},imagenet={world['folder']},calibration={world['table']}"
    full = torch.cat([images for images, _, _ in open_stream_source(text, options)])
    started = open_stream_source(text + ",start=7", options)
    assert stream_length(started) == NUM_IMAGES - 7
    assert describe_stream_source(text + ",start=7", options).samples == NUM_IMAGES - 7
    batches = _batches(started)
    assert batches[0][2][0]["index"] == 7
    assert torch.equal(torch.cat([images for images, _, _ in batches]), full[7:])


def test_parse_render_location() -> None:
    request = parse_render_location("demo,difficulty=hard,seed=44,corruptions=fog+snow,start=3")
    assert request.demo and request.start == 3 and request.imagenet is None and request.calibration.endswith("demo.npz")
    assert request.definition == {
        "difficulty": "hard",
        "seed": 44,
        "corruptions": ("fog", "snow"),
        "speed": 100,
        "num_images": 30_000,
    }
    assert parse_render_location("shards/RUN,calibration=t.npz,imagenet=/data/val") == RenderRequest(
        "shards/RUN", "/data/val", "t.npz"
    )
    assert parse_render_location("shards/RUN,calibration=t.npz,device=cpu") == RenderRequest(
        "shards/RUN", None, "t.npz", device="cpu"
    )
    assert parse_render_location("shards/RUN,calibration=t.npz,device=cpu,precision=float32") == RenderRequest(
        "shards/RUN", None, "t.npz", device="cpu", precision="float32"
    )


@pytest.mark.parametrize(
    ("location", "message"),
    [
        ("", "needs a stream definition or one run folder"),
        ("difficulty=medium,speed=4", "needs calibration=PATH"),
        ("difficulty=medium,speed=4,calibration=t.npz,colour=red", "unknown ccc-render option.s. colour"),
        ("demo,imagenet=/data/val", "do not give imagenet= or calibration="),
        (
            "shards/RUN,calibration=t.npz,speed=4",
            "takes its definition from the run folder's manifest; do not add speed",
        ),
        ("a,b,calibration=t.npz", "one run folder"),
        ("demo,start=-1", "start must be"),
        ("demo,device=tpu", "render device: device must be .cpu. or .cuda"),
        ("demo,precision=float32", "precision=float32 applies to the torch backend: add device=cpu.cuda"),
        ("demo,device=cpu,precision=float16", "render precision must be one of float64, float32, got 'float16'"),
    ],
)
def test_parse_render_location_refuses(location: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_render_location(location)


def test_tta_eval_runs_on_a_rendered_stream(world: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "run", "--stream", f"ccc-render:{_definition(world, f'num_images={NUM_IMAGES}')}",
        "--model", TINY_FACTORY, "--method", "tent", "--batch-size", "8", "--out", str(tmp_path), "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    run = tmp_path / (world["run"].name + "_rendered")  # a folder of its own beside the stored shards' run
    summary = json.loads((run / "summary.json").read_text())
    assert json.loads((run / "config.json").read_text())["stream_name"] == world["run"].name  # compare's column
    assert summary["status"] == "complete" and summary["methods"]["tent"]["samples"] == NUM_IMAGES
    assert all("→" in segment["domain"] for segment in summary["domain_segments"])
    code, _, err = run_cli(
        capsys,
        "run",
        "--stream",
        "ccc-render:difficulty=medium,speed=4",
        "--model",
        TINY_FACTORY,
        "--method",
        "tent",
        "--out",
        str(tmp_path),
    )
    assert code == 2 and err.count("\n") == 1 and "needs calibration=PATH" in err


def test_a_rendered_run_is_named_by_its_length_and_renderer() -> None:
    """An on-the-fly run never shares the README's 224×224 demo results folder (its stored 30,000-image demo stream)."""
    default = "demo_baseline_30_transition+speed_100_seed_43"
    for definition, name in (
        ("demo,difficulty=medium,seed=43", f"{default}_rendered"),
        ("demo,difficulty=medium,seed=43,num_images=2000", f"{default}_images_2000_rendered"),
        ("demo,difficulty=medium,seed=43,num_images=2000,device=cpu", f"{default}_images_2000_rendered_torch"),
        ("demo,difficulty=medium,seed=43,device=cpu,precision=float64", f"{default}_rendered_torch"),
        ("demo,difficulty=medium,seed=43,device=cpu,precision=float32", f"{default}_rendered_torch_float32"),
        (
            "demo,difficulty=medium,seed=43,device=cpu,precision=float32,source_decoder=device",
            f"{default}_rendered_torch_float32_device_decoded",
        ),
        ("demo,difficulty=medium,seed=43,device=cpu,source_decoder=device", f"{default}_rendered_torch_device_decoded"),
    ):
        assert describe_stream_source(f"ccc-render:{definition}", StreamOptions()).run_name == name


def test_schemes_may_hold_a_hyphen(scratch_stream_sources) -> None:
    register_stream_source("test-hyphen-scheme", lambda location, options: [])
    with pytest.raises(ValueError, match="lower-case letters, digits, '_' or '-'"):
        register_stream_source("Bad.Scheme", lambda location, options: [])


def test_a_demo_run_folder_renders_from_the_demo_world_without_options(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    import tta_eval.streams.ccc_render
    from ccc.demo import EXPECTED_INDEX_SHA256, demo_calibration_path

    demo_stream = types.SimpleNamespace(kind="ccc", source_index_checksum=EXPECTED_INDEX_SHA256)
    monkeypatch.setattr(tta_eval.streams.ccc_render, "run_folder_stream", lambda location: demo_stream)
    request = parse_render_location("shards/a_demo_run")
    assert request.demo and request.calibration == str(demo_calibration_path())
    other_stream = types.SimpleNamespace(kind="ccc", source_index_checksum="0" * 64)
    monkeypatch.setattr(tta_eval.streams.ccc_render, "run_folder_stream", lambda location: other_stream)
    with pytest.raises(ValueError, match="needs calibration=PATH"):
        parse_render_location("shards/an_imagenet_run")


def test_a_ccc_render_location_takes_the_source_decoder() -> None:
    request = parse_render_location("demo,difficulty=medium,device=cpu,source_decoder=device")
    assert request.device == "cpu" and request.source_decoder == "device"
    assert parse_render_location("demo,difficulty=medium").source_decoder == "pillow"
    with pytest.raises(ValueError, match="source_decoder 'device' needs a render device"):
        parse_render_location("demo,difficulty=medium,source_decoder=device")
