"""The integer tensor JPEG round trip against Pillow's encode and decode (the CPU path's codec): equal bytes;
and ``jpeg_round_trip``, which runs libjpeg itself on the CPU, equal to it."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from numpy.typing import NDArray
from PIL import Image

from ccc.corruptions import get_corruption
from ccc.render_torch.jpeg import FINAL_QUALITY, integer_jpeg_round_trip, jpeg_round_trip, quantisation_tables
from tests.ccc.render_torch.images import demo_images

SIZES = [(1, 1), (2, 9), (9, 2), (4, 5), (5, 4), (7, 9), (8, 8), (16, 16), (17, 33), (33, 17), (223, 225), (224, 224)]
"""(height, width): single pixels, the codec's box-upsampling widths (≤ 4), odd sizes, block and MCU
multiples, the stream's 224 and its odd neighbours."""


def corruption_qualities() -> list[int]:
    """Every quality the ``jpeg`` corruption uses at a severity in (0, 5] (``round`` of its interpolated
    table; a fine grid reaches every integer between the table's values), plus the final quality 85."""
    entry = get_corruption("jpeg")
    severities = np.linspace(0, 5, 5001)[1:]
    return sorted({round(float(entry.parameters(float(s)))) for s in severities} | {FINAL_QUALITY})


def pillow_round_trip(image: NDArray[np.uint8], quality: int) -> NDArray[np.uint8]:
    """Pillow's JPEG encode at ``quality`` and decode, as ``ccc.corruptions.digital.jpeg`` does it."""
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, "JPEG", quality=quality)
    buffer.seek(0)
    return np.asarray(Image.open(buffer).convert("RGB"))


def tensor_round_trip(images: NDArray[np.uint8], qualities: list[int]) -> NDArray[np.uint8]:
    """``integer_jpeg_round_trip`` of uint8 (B, H, W, 3) images with one quality per image, on the CPU."""
    batch = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2)
    output = integer_jpeg_round_trip(batch, torch.tensor(qualities, dtype=torch.int32))
    return output.permute(0, 2, 3, 1).numpy()


def sample_images(height: int, width: int, seed: int = 0) -> NDArray[np.uint8]:
    """Four demo crops, uniform noise, a flat colour, a gradient and stripes: uint8 (8, height, width, 3),
    height and width in [1, 240] (the demo images' shorter side)."""
    generator = np.random.default_rng(seed)
    side = max(height, width, 32)
    natural = demo_images(4, side, seed)[:, :height, :width]
    noise = generator.integers(0, 256, (1, height, width, 3), dtype=np.uint8)
    flat = np.broadcast_to(generator.integers(0, 256, 3, dtype=np.uint8), (1, height, width, 3))
    rows, columns = np.mgrid[0:height, 0:width]
    ramp = np.stack([columns * 255 // max(width - 1, 1), rows * 255 // max(height - 1, 1), (rows + columns) % 256], -1)
    stripes = np.stack([(columns % 2) * 255, (rows % 3) * 120, np.full_like(rows, 7)], -1)
    return np.concatenate([natural, noise, flat, ramp[None], stripes[None]]).astype(np.uint8)


def test_the_corruption_uses_qualities_7_to_85():
    assert corruption_qualities() == list(range(7, 86))


@pytest.mark.parametrize("height, width", SIZES)
def test_bytes_equal_pillows_at_every_size(height: int, width: int):
    """Each image of a mixed-quality batch at the corruption's extreme, middle and final qualities."""
    images = np.concatenate([sample_images(height, width)] * 2)
    qualities = [7, 10, 15, 18, 25, 50, 85, 100] * 2
    expected = np.stack([pillow_round_trip(image, q) for image, q in zip(images, qualities)])
    np.testing.assert_array_equal(tensor_round_trip(images, qualities), expected)


def test_bytes_equal_pillows_at_every_quality_of_the_corruption():
    """Demo images at 224×224 and 223×225, every quality 7..85, one batch each."""
    qualities = corruption_qualities()
    for height, width in ((224, 224), (223, 225)):
        images = demo_images(len(qualities), 225, seed=1)[:, :height, :width]
        expected = np.stack([pillow_round_trip(image, q) for image, q in zip(images, qualities)])
        np.testing.assert_array_equal(tensor_round_trip(images, qualities), expected)


@pytest.mark.slow
def test_bytes_equal_pillows_on_random_sizes_and_all_qualities():
    """Qualities 1..100 on the sample images of 24 random sizes up to 240×240."""
    generator = np.random.default_rng(11)
    for height, width in generator.integers(1, 241, (24, 2)):
        images = sample_images(int(height), int(width), seed=int(height))
        qualities = [int(q) for q in generator.integers(1, 101, len(images))]
        expected = np.stack([pillow_round_trip(image, q) for image, q in zip(images, qualities)])
        np.testing.assert_array_equal(tensor_round_trip(images, qualities), expected)
    images = demo_images(100, 224, seed=2)
    expected = np.stack([pillow_round_trip(image, q) for image, q in zip(images, range(1, 101))])
    np.testing.assert_array_equal(tensor_round_trip(images, list(range(1, 101))), expected)


def test_a_batch_of_mixed_qualities_equals_each_sample_alone():
    images = sample_images(40, 56)
    qualities = [7, 85, 25, 7, 12, 85, 60, 30]
    whole = tensor_round_trip(images, qualities)
    for k, quality in enumerate(qualities):
        np.testing.assert_array_equal(whole[k : k + 1], tensor_round_trip(images[k : k + 1], [quality]))
    batch = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2)
    np.testing.assert_array_equal(integer_jpeg_round_trip(batch[1:2], 85).permute(0, 2, 3, 1).numpy(), whole[1:2])


@pytest.mark.parametrize("height, width", [(1, 1), (7, 9), (223, 225), (224, 224)])
def test_libjpeg_on_the_cpu_gives_the_integer_round_trip_s_bytes(height: int, width: int):
    images = torch.from_numpy(np.ascontiguousarray(sample_images(height, width, seed=3))).permute(0, 3, 1, 2)
    qualities = torch.tensor([7, 85, 25, 7, 100, 85, 1, 30], dtype=torch.int32)
    assert torch.equal(jpeg_round_trip(images, qualities), integer_jpeg_round_trip(images, qualities))


def test_quantisation_tables_equal_the_tables_pillow_writes():
    qualities = list(range(1, 101))
    tables = quantisation_tables(torch.tensor(qualities)).reshape(len(qualities), 2, 64)
    image = np.zeros((8, 8, 3), dtype=np.uint8)
    for quality, table in zip(qualities, tables.tolist()):
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, "JPEG", quality=quality)
        written = Image.open(buffer).quantization
        assert [list(written[0]), list(written[1])] == table, quality


def test_libjpeg_reciprocal_quantisation_equals_rounded_division():
    """libjpeg-turbo's ``compute_reciprocal`` / ``quantize`` (reciprocal, correction, shift) give
    ``(|t| + d / 2) // d`` for every divisor ``d = 8 · Q``, Q in [1, 255], and every |t| < 2¹⁵."""
    magnitudes = np.arange(1 << 15, dtype=np.int64)
    for step in range(1, 256):
        divisor = 8 * step
        shift = 16 + divisor.bit_length() - 1
        reciprocal, remainder = divmod(1 << shift, divisor)
        correction = divisor // 2
        if remainder == 0:
            reciprocal, shift = reciprocal >> 1, shift - 1
        elif remainder <= divisor // 2:
            correction += 1
        else:
            reciprocal += 1
        quotients = ((magnitudes + correction) * reciprocal) >> shift
        np.testing.assert_array_equal(quotients, (magnitudes + divisor // 2) // divisor, err_msg=f"Q={step}")


def test_the_round_trip_runs_on_the_meta_device():
    """No host read of device data and no CPU-only codec: the meta device holds no data."""
    images = torch.empty(5, 3, 223, 225, dtype=torch.uint8, device="meta")
    for quality in (FINAL_QUALITY, torch.full((5,), 30, dtype=torch.int32, device="meta")):
        output = integer_jpeg_round_trip(images, quality)
        assert (output.shape, output.dtype, output.device.type) == ((5, 3, 223, 225), torch.uint8, "meta")
    small = torch.empty(2, 3, 3, 4, dtype=torch.uint8, device="meta")
    assert jpeg_round_trip(small).shape == (2, 3, 3, 4)


@pytest.mark.parametrize("round_trip", [jpeg_round_trip, integer_jpeg_round_trip])
def test_an_empty_batch_is_returned_as_is(round_trip):
    assert round_trip(torch.zeros(0, 3, 8, 8, dtype=torch.uint8)).shape == (0, 3, 8, 8)


def test_invalid_arguments_name_the_parameter_and_value():
    images = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"images must be uint8 \(B, 3, H, W\).*float32 \(2, 3, 8, 8\)"):
        jpeg_round_trip(images.float())
    with pytest.raises(ValueError, match=r"quality must be an int in \[1, 100\] or a tensor, got 0"):
        jpeg_round_trip(images, 0)
    with pytest.raises(ValueError, match=r"quality must be an integer tensor \(2,\) on cpu, got torch.float32"):
        jpeg_round_trip(images, torch.tensor([85.0, 85.0]))
