"""Lossless streams (``StreamSpec.image_encoding = "png"``): the encoder, the spec and its JSON, the
shard members, the run names, and a generated stream whose shards, on-the-fly rendering and torch
rendering hold the rendered pixels exactly; ``jpeg`` streams keep their manifests and names."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from ccc.cli.generate import main as generate_main
from ccc.execution import SerialExecutor
from ccc.generate import TorchRendering, generate_stream
from ccc.load import open_stream, render_stream
from ccc.render import encode_image, encode_png, render_pixels
from ccc.render_torch import render_batch
from ccc.shards.record import IMAGE_MEMBER, PNG_IMAGE_MEMBER, SampleRecordError, decode_members, encode_members
from ccc.shards.verify import verify_shards
from ccc.stream.plan import build_stream_plan, plan_sample
from ccc.stream.sources import index_image_folder, load_source_images
from ccc.stream.spec import PlanError, StreamSpec, domain_run_name, run_name
from tests.builders import make_calibration_table, make_image_folder

NUM_IMAGES = 12


@pytest.fixture(scope="module")
def png_stream(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A 12-image lossless stream in shards of 5 over a small image folder, generated serially."""
    folder = make_image_folder(tmp_path_factory.mktemp("images") / "val")
    table = make_calibration_table()
    sources = load_source_images(index_image_folder(folder, progress=False))
    spec = StreamSpec(
        target_accuracy=30.0,
        corruptions=table.corruptions,
        speed=3,
        seed=43,
        num_images=NUM_IMAGES,
        calibration_checksum=table.checksum(),
        source_index_checksum=sources.index_checksum,
        shard_size=5,
        image_encoding="png",
    )
    plan = build_stream_plan(spec, table, sources)
    run_dir = tmp_path_factory.mktemp("run") / "run"
    generate_stream(plan, run_dir, SerialExecutor(), progress=False)
    return {"folder": folder, "table": table, "plan": plan, "run_dir": run_dir}


def _pixels(plan, index: int) -> np.ndarray:
    spec = plan_sample(plan, index)
    return render_pixels(spec, (Path(plan.sources.root) / spec.source_path).read_bytes())


def test_png_is_lossless_and_its_bytes_follow_from_the_pixels() -> None:
    image = np.random.default_rng(0).integers(0, 256, (32, 48, 3), dtype=np.uint8)
    encoded = encode_png(image)
    assert encoded == encode_png(image.copy())
    assert encoded[:8] == b"\x89PNG\r\n\x1a\n"
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(encoded))), image)
    assert 3 * 32 * 48 < len(encoded) < 3 * 32 * 48 + 400, "stored deflate: the pixels plus headers"
    assert encode_image(image, "png") == encoded
    assert encode_image(image, "jpeg")[:2] == b"\xff\xd8"
    with pytest.raises(ValueError, match="image_encoding must be one of jpeg, png, got 'webp'"):
        encode_image(image, "webp")


def test_the_spec_records_png_and_leaves_jpeg_out_of_its_json(png_stream) -> None:
    spec = png_stream["plan"].spec
    document = spec.to_json_dict()
    assert document["image_encoding"] == "png"
    assert StreamSpec.from_json_dict(document) == spec
    jpeg = StreamSpec.from_json_dict({key: value for key, value in document.items() if key != "image_encoding"})
    assert jpeg.image_encoding == "jpeg" and "image_encoding" not in jpeg.to_json_dict()
    with pytest.raises(PlanError, match="image_encoding must be one of jpeg, png, got 'gif'"):
        StreamSpec.from_json_dict({**document, "image_encoding": "gif"})


def test_run_names_tell_the_encodings_apart() -> None:
    assert run_name(30, 100, 43) == "baseline_30_transition+speed_100_seed_43"
    assert run_name(30, 100, 43, image_encoding="png") == "baseline_30_transition+speed_100_seed_43_png"
    assert run_name(30, 100, 43, 500, image_encoding="png").endswith("_images_500_png")
    assert domain_run_name("gradual", None, 10, "random", 43, "png") == "gradual_images_10_crop_random_seed_43_png"


def test_shards_hold_png_members_with_the_rendered_pixels(png_stream) -> None:
    plan, run_dir = png_stream["plan"], png_stream["run_dir"]
    with tarfile.open(run_dir / "serial_00000.tar") as archive:
        names = archive.getnames()
    assert names[:4] == [f"000000000000.{member}" for member in ("info", PNG_IMAGE_MEMBER, "json", "output.cls")]
    assert not any(name.endswith(IMAGE_MEMBER) for name in names)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["stream"]["image_encoding"] == "png"
    samples = list(open_stream(run_dir, image_format="uint8"))
    assert len(samples) == NUM_IMAGES
    for sample in samples:
        pixels = _pixels(plan, sample.metadata["index"])
        assert np.array_equal(sample.image.permute(1, 2, 0).numpy(), pixels)
    assert verify_shards(run_dir).ok


def test_rendering_on_the_fly_gives_the_shards_pixels(png_stream) -> None:
    plan, run_dir = png_stream["plan"], png_stream["run_dir"]
    stored = [sample.image for sample in open_stream(run_dir, image_format="uint8")]
    inputs = {"imagenet": png_stream["folder"], "calibration": png_stream["table"]}
    rendered = [sample.image for sample in render_stream(run_dir, image_format="uint8", **inputs)]
    assert all(torch.equal(a, b) for a, b in zip(stored, rendered, strict=True))
    encoded = next(iter(render_stream(run_dir, image_format="jpeg", **inputs)))
    assert encoded.image == encode_png(_pixels(plan, 0))


def test_the_torch_path_stores_its_pixels_without_a_jpeg_step(png_stream, tmp_path: Path) -> None:
    plan = png_stream["plan"]
    generate_stream(plan, tmp_path, SerialExecutor(), progress=False, rendering=TorchRendering("cpu", batch_size=4))
    specs = [plan_sample(plan, index) for index in range(4)]
    sources = [np.asarray(Image.open(Path(plan.sources.root) / spec.source_path).convert("RGB")) for spec in specs]
    expected = render_batch(specs, sources, "cpu", jpeg=False)
    stored = [sample.image for sample in open_stream(tmp_path, image_format="uint8", limit=4)]
    assert torch.equal(torch.stack(stored), expected)
    inputs = {"imagenet": png_stream["folder"], "calibration": png_stream["table"]}
    on_the_fly = render_stream(plan.spec, device="cpu", chunk_size=4, limit=4, image_format="uint8", **inputs)
    assert torch.equal(torch.stack([sample.image for sample in on_the_fly]), expected)


def test_a_sample_holds_exactly_one_image_member() -> None:
    members = {"input.jpg": b"a", "input.png": b"b", "output.cls": b"3", "json": b'{"index": 0}'}
    with pytest.raises(SampleRecordError, match="has two images"):
        decode_members(members, 0, "here")
    del members["input.jpg"], members["input.png"]
    with pytest.raises(SampleRecordError, match="has no input.jpg or input.png"):
        decode_members(members, 0, "here")


def test_encode_members_names_the_image_by_its_encoding(png_stream) -> None:
    spec = plan_sample(png_stream["plan"], 0)
    names = [name for name, _ in encode_members(spec, b"image", "png")]
    assert names[1] == "000000000000.input.png"
    record = decode_members(
        {name.split(".", 1)[1]: content for name, content in encode_members(spec, b"x", "png")}, 0, ""
    )
    assert (record.image, record.image_member) == (b"x", PNG_IMAGE_MEMBER)


def test_ccc_generate_writes_a_png_run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    status = generate_main(
        ["--demo", "--difficulty", "medium", "--num-images", "6", "--image-encoding", "png", "--no-progress"]
    )
    assert status == 0
    run_dir = tmp_path / "shards" / "demo_baseline_30_transition+speed_100_seed_43_images_6_png"
    assert json.loads((run_dir / "manifest.json").read_text())["stream"]["image_encoding"] == "png"
    assert "_png" in capsys.readouterr().out
