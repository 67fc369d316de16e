"""``render_stream(..., device=)``: the torch backend renders a stream on a device (here the CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ccc.load import StreamError, render_stream, stream_loader
from ccc.load.decode import tensor_to_format
from tests.builders import make_image_folder

DETERMINISTIC = {"kind": "cin-c", "severity": 3, "speed": 3, "corruptions": ["contrast", "pixelate", "brightness"]}
RANDOM = {"kind": "cin-c", "severity": 2, "speed": 4, "corruptions": ["gaussian_noise", "impulse_noise"]}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 source images (3 classes of 4) of 320×240 pixels."""
    return make_image_folder(tmp_path_factory.mktemp("device") / "val", size=(320, 240))


def _images(stream: object) -> torch.Tensor:
    return torch.stack([sample.image for sample in stream])  # type: ignore[attr-defined]


def test_deterministic_corruptions_give_the_cpu_paths_bytes(folder: Path) -> None:
    reference = _images(render_stream(DETERMINISTIC, imagenet=folder, limit=9))
    on_device = render_stream(DETERMINISTIC, imagenet=folder, limit=9, device="cpu", chunk_size=4)
    samples = list(on_device)
    assert torch.equal(torch.stack([sample.image for sample in samples]), reference)
    assert [sample.metadata["index"] for sample in samples] == list(range(9))
    assert samples[0].metadata["n1"] == "contrast" and samples[0].image.device.type == "cpu"


def test_a_random_stream_is_the_same_whatever_the_batches_workers_and_ranks(folder: Path) -> None:
    def stream(**options: object):
        return render_stream(RANDOM, imagenet=folder, limit=8, device="cpu", image_format="uint8", **options)

    whole = _images(stream(chunk_size=8))
    assert torch.equal(_images(stream(chunk_size=3)), whole)
    assert torch.equal(_images(stream(chunk_size=8)), whole)
    for workers in (0, 2):
        batches = list(stream_loader(stream(), batch_size=3, num_workers=workers))
        assert [len(batch[1]) for batch in batches] == [3, 3, 2]
        assert torch.equal(torch.cat([batch[0] for batch in batches]), whole)
        assert [entry["index"] for batch in batches for entry in batch[2]] == list(range(8))
    ranks = [_images(stream(chunk_size=2, rank=rank, world_size=2)) for rank in (0, 1)]
    interleaved = torch.stack([ranks[(k // 2) % 2][2 * (k // 4) + k % 2] for k in range(8)])
    assert torch.equal(interleaved, whole)


def test_a_gpu_renders_larger_batches_than_the_loader_hands_out(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU the stream renders the smallest multiple of the loader's batch of at least 512 samples at once
    (the CPU here, made to render 3 batches at once as a GPU would); the loader's batches stay the same."""
    from ccc.load.rendered_stream import GPU_RENDER_BATCH

    def stream():
        return render_stream(RANDOM, imagenet=folder, limit=7, device="cpu", image_format="uint8")

    assert stream().finishing_batch_size(64) == 64  # the CPU renders the loader's batches
    expected = list(stream_loader(stream(), batch_size=2, num_workers=0))
    rendered: list[int] = []
    original = type(stream()).finish_batch

    def finish(self, batch):
        rendered.append(len(batch[1]))
        return original(self, batch)

    monkeypatch.setattr(type(stream()), "finish_batch", finish)
    monkeypatch.setattr(type(stream()), "finishing_batch_size", lambda self, size: 3 * size)
    for workers in (0, 2):
        rendered.clear()
        batches = list(stream_loader(stream(), batch_size=2, num_workers=workers))
        assert rendered == [6, 1]
        assert [len(batch[1]) for batch in batches] == [len(batch[1]) for batch in expected] == [2, 2, 2, 1]
        for ours, theirs in zip(batches, expected):
            assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1]) and ours[2] == theirs[2]
    monkeypatch.undo()
    on_gpu = stream()
    on_gpu.device = torch.device("cuda")  # the rule alone: nothing is rendered
    assert [on_gpu.finishing_batch_size(size) for size in (64, 100, 512, 600)] == [512, 600, 512, 600]
    assert GPU_RENDER_BATCH == 512
    on_gpu.world_size = 2
    assert on_gpu.finishing_batch_size(64) == 64  # ranks split the loader's chunks, as for shards


def test_a_random_corruption_differs_from_the_cpu_path_but_keeps_its_statistics(folder: Path) -> None:
    reference = _images(render_stream(RANDOM, imagenet=folder, limit=8)).double()
    rendered = _images(render_stream(RANDOM, imagenet=folder, limit=8, device="cpu")).double()
    assert not torch.equal(rendered, reference)
    assert abs(rendered.mean() - reference.mean()) < 1.0
    assert abs(rendered.std() - reference.std()) < 1.0


@pytest.mark.parametrize("image_format", ["float", "normalized"])
def test_tensor_formats_are_those_of_the_cpu_path(folder: Path, image_format: str) -> None:
    pixels = _images(render_stream(DETERMINISTIC, imagenet=folder, limit=3, device="cpu"))
    formatted = _images(render_stream(DETERMINISTIC, imagenet=folder, limit=3, device="cpu", image_format=image_format))
    assert formatted.dtype == torch.float32 and torch.equal(formatted, tensor_to_format(pixels, image_format))
    reference = _images(render_stream(DETERMINISTIC, imagenet=folder, limit=3, image_format=image_format))
    assert torch.equal(formatted, reference)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"device": "tpu"}, "render device: device must be .cpu. or .cuda"),
        ({"device": "cpu", "image_format": "pil"}, "image_format must be one of uint8, float, normalized"),
        ({"precision": "float32"}, "precision='float32' applies to the torch backend: pass device='cpu' or 'cuda'"),
        ({"device": "cpu", "precision": "bf16"}, "render precision must be one of float64, float32, got 'bf16'"),
    ],
)
def test_bad_device_options_are_refused_in_one_line(folder: Path, options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as error:
        render_stream(DETERMINISTIC, imagenet=folder, **options)
    assert "\n" not in str(error.value)


def test_the_float32_precision_renders_the_same_samples_nearly(folder: Path) -> None:
    """Same draws, a float32 Box–Muller: the bytes (uint8) move by a level at a few values at most."""

    def images(precision: str) -> torch.Tensor:
        stream = render_stream(RANDOM, imagenet=folder, limit=4, device="cpu", precision=precision, compress=False)
        return _images(stream).double()

    exact, single = images("float64"), images("float32")
    assert exact.shape == single.shape == (4, 3, 224, 224)
    assert float((exact - single).abs().mean()) < 0.05


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_is_refused(folder: Path) -> None:
    with pytest.raises(ValueError, match="render device: .* CUDA is not available"):
        render_stream(DETERMINISTIC, imagenet=folder, device="cuda")


def test_a_changed_source_image_stops_the_stream(folder: Path, tmp_path: Path) -> None:
    copy = make_image_folder(tmp_path / "val", size=(320, 240))
    stream = render_stream(DETERMINISTIC, imagenet=copy, limit=3, device="cpu")
    first = sorted(copy.rglob("*.JPEG"))[0]
    from PIL import Image

    Image.new("RGB", (100, 100)).save(first)
    with pytest.raises((StreamError, ValueError), match="must be 320x240 pixels"):
        list(stream)
