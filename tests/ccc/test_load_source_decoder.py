"""``render_stream(..., device=, source_decoder="device")``: the source JPEGs decoded by torchvision on the
render device (here the CPU, libjpeg-turbo), against Pillow's decoding in the workers."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from ccc.load import StreamError, render_stream, stream_loader
from ccc.load.rendered_stream import _worker_source
from ccc.stream.plan import plan_sample, plan_stream
from tests.builders import make_image_folder

RANDOM = {"kind": "cin-c", "severity": 2, "speed": 6, "corruptions": ["gaussian_noise", "impulse_noise"]}
SIZE = (320, 240)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 source images of 320×240 pixels, of which the first class's are grayscale, CMYK, progressive
    and 4:4:4 JPEGs: the ones Pillow decodes in the workers and the ones torchvision decodes."""
    root = make_image_folder(tmp_path_factory.mktemp("decoder") / "val", size=SIZE)
    first, second, third, fourth = sorted((root / "n00000000").glob("*.JPEG"))
    Image.open(first).convert("L").save(first, quality=90)
    Image.open(second).convert("CMYK").save(second, quality=90)
    Image.open(third).save(third, quality=90, progressive=True)
    Image.open(fourth).save(fourth, quality=90, subsampling=0)
    return root


def _stream(folder: Path, **options: object):
    return render_stream(RANDOM, imagenet=folder, device="cpu", image_format="uint8", **options)


def test_the_workers_send_baseline_rgb_and_grayscale_jpegs_as_bytes(folder: Path) -> None:
    spec = plan_sample(plan_stream(RANDOM, None, str(folder)), 0)
    kinds = {}
    for path in sorted((folder / "n00000000").glob("*.JPEG")):
        data = path.read_bytes()
        with Image.open(io.BytesIO(data)) as opened:
            kind = "progressive" if opened.info.get("progressive") else opened.mode
            kind = "4:4:4" if kind == "RGB" and opened.layer[0][1:3] == (1, 1) else kind
        sent = _worker_source(spec, data, "device")
        kinds[kind] = "bytes" if isinstance(sent, torch.Tensor) else "pixels"
        if isinstance(sent, torch.Tensor):
            assert sent.dtype == torch.uint8 and bytes(sent.numpy()) == data
        else:
            assert sent.dtype == np.uint8 and sent.shape == (SIZE[1], SIZE[0], 3)
        assert isinstance(_worker_source(spec, data, "pillow"), np.ndarray)
    assert kinds == {"4:4:4": "bytes", "L": "bytes", "CMYK": "pixels", "progressive": "pixels"}


@pytest.mark.parametrize("workers", [0, 1])
def test_decoding_on_the_device_renders_pillows_images(folder: Path, workers: int) -> None:
    """libjpeg-turbo in torchvision decodes these JPEGs (grayscale and 4:4:4 included) to Pillow's exact
    pixels (``scripts/bench/feed.py`` measures it on more), so the rendered images are equal."""
    reference = torch.stack([sample.image for sample in _stream(folder, limit=12)])
    batches = list(stream_loader(_stream(folder, limit=12, source_decoder="device"), batch_size=5, num_workers=workers))
    assert [len(batch[1]) for batch in batches] == [5, 5, 2]
    assert torch.equal(torch.cat([batch[0] for batch in batches]), reference)
    direct = torch.stack([sample.image for sample in _stream(folder, limit=12, chunk_size=4, source_decoder="device")])
    assert torch.equal(direct, reference)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"source_decoder": "device"}, "source_decoder 'device' needs a render device"),
        ({"device": "cpu", "source_decoder": "nvjpeg"}, "source_decoder must be one of pillow, device, got 'nvjpeg'"),
    ],
)
def test_bad_source_decoders_are_refused_in_one_line(folder: Path, options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as error:
        render_stream(RANDOM, imagenet=folder, **options)
    assert "\n" not in str(error.value)


def test_a_jpeg_torchvision_cannot_decode_stops_the_stream_in_one_line(folder: Path, tmp_path: Path) -> None:
    copy = make_image_folder(tmp_path / "val", size=SIZE)
    stream = _stream(copy, limit=2, source_decoder="device")  # planning refuses unreadable images
    for path in copy.rglob("*.JPEG"):
        data = bytearray(path.read_bytes())
        huffman_table = data.index(b"\xff\xc4")  # Pillow reads a header without it
        data[huffman_table + 5 : huffman_table + 21] = b"\xff" * 16
        path.write_bytes(data)
    with pytest.raises(
        StreamError, match=r"torchvision could not decode .*ILSVRC2012_val_.*Bogus Huffman.*source_decoder='pillow'"
    ) as error:
        list(stream)
    assert "\n" not in str(error.value)
