"""The integer JPEG round trip's Triton kernels: the compositions' bytes in Triton's interpreter, at odd sizes
and every quality, and they compile for an H100 (sm_90)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ccc.render_torch import jpeg

from .triton_kernels import compiled_for_hopper, interpreted

kernels = pytest.importorskip("ccc.render_torch._triton.jpeg")

SIZES = [(17, 23), (16, 16), (9, 31), (5, 3), (1, 1), (18, 33)]
"""(height, width): odd sizes within one and across several MCUs, an exact MCU, chroma widths of 2 and 1
(libjpeg-turbo's replicated rather than fancy upsampling), an even height whose chroma rows are padded
(after downsampling: not the padded pixels' chroma)."""


def _images(height: int, width: int, seed: int) -> torch.Tensor:
    """uint8 (4, 3, height, width): uniform noise (the quantisation's extremes at low qualities), a ramp,
    flat colour and stripes; channels-last storage (the kernel reads any strides)."""
    generator = np.random.default_rng(seed)
    noise = generator.integers(0, 256, (height, width, 3))
    rows, columns = np.mgrid[0:height, 0:width]
    ramp = np.stack([columns * 255 // max(width - 1, 1), rows * 255 // max(height - 1, 1), (rows * columns) % 256], -1)
    flat = np.broadcast_to(generator.integers(0, 256, 3), (height, width, 3))
    stripes = np.stack([(columns % 2) * 255, (rows % 3) * 120, np.full_like(rows, 250)], -1)
    images = np.stack([noise, ramp, flat, stripes]).astype(np.uint8)
    return torch.from_numpy(images).permute(0, 3, 1, 2)


@pytest.mark.parametrize("height, width", SIZES)
def test_the_kernels_give_the_compositions_bytes(height: int, width: int) -> None:
    images = _images(height, width, seed=height * width)
    steps = jpeg.quantisation_tables(torch.tensor([1 + height, 7, 50, 100]))
    with interpreted(kernels):
        luma, chroma = kernels.decoded_components(images, steps, jpeg._constants_on(images.device)[:2])
        expected_luma, expected_chroma = jpeg._composed_components(images, steps)
        assert torch.equal(luma, expected_luma) and torch.equal(chroma, expected_chroma)
        rgb = kernels.upsample_to_rgb(luma, chroma)
        assert torch.equal(rgb, jpeg._composed_upsample_to_rgb(luma, chroma))
        # every level at every chroma position, not only what a decoder gives back
        noise = torch.randint(0, 256, chroma.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
        assert torch.equal(kernels.upsample_to_rgb(luma, noise), jpeg._composed_upsample_to_rgb(luma, noise))


def test_every_quality_gives_the_composition_s_decoded_components(monkeypatch: pytest.MonkeyPatch) -> None:
    """Qualities 1..100, one per sample of noise, ramps, flat colours and stripes of one MCU each (10×7), 32 MCUs
    per program (four programs, the last one mostly past the batch: the interpreter's time goes by program)."""
    monkeypatch.setattr(kernels, "_MCUS", 32)
    images = torch.cat([_images(10, 7, seed) for seed in range(25)])
    steps = jpeg.quantisation_tables(torch.arange(1, 101))
    with interpreted(kernels):
        luma, chroma = kernels.decoded_components(images, steps, jpeg._constants_on(images.device)[:2])
    expected_luma, expected_chroma = jpeg._composed_components(images, steps)
    assert torch.equal(luma, expected_luma) and torch.equal(chroma, expected_chroma)


def test_the_kernels_compile_for_an_h100() -> None:
    images = _images(17, 23, seed=0)
    steps = jpeg.quantisation_tables(torch.tensor([85, 7, 30, 100]))
    matrices = jpeg._constants_on(images.device)[:2]
    luma, chroma = jpeg._composed_components(images, steps)
    narrow_luma, narrow_chroma = jpeg._composed_components(images[..., :3], steps)

    def launch() -> None:
        kernels.decoded_components(images, steps, matrices)
        kernels.upsample_to_rgb(luma, chroma)
        kernels.upsample_to_rgb(narrow_luma, narrow_chroma)

    launches = compiled_for_hopper(kernels, launch)
    assert [compiled["name"] for compiled in launches] == [
        "_decoded_components_kernel",
        "_upsample_to_rgb_kernel",
        "_upsample_to_rgb_kernel",
    ]
    for compiled in launches:
        assert compiled["options"]["enable_fp_fusion"] is False
        assert ".target sm_90" in compiled["asm"]["ptx"] and compiled["asm"]["cubin"]


def test_the_operators_on_meta_give_the_shapes_of_their_results() -> None:
    images = torch.empty(5, 3, 17, 23, dtype=torch.uint8, device="meta")
    steps = torch.empty(5, 2, 8, 8, dtype=torch.int32, device="meta")
    luma, chroma = jpeg.decoded_components(images, steps)
    assert (luma.shape, luma.dtype, chroma.shape, chroma.dtype) == (
        (5, 17, 23),
        torch.uint8,
        (5, 2, 9, 12),
        torch.uint8,
    )
    rgb = jpeg.upsample_to_rgb(luma, chroma)
    assert (rgb.shape, rgb.dtype, rgb.device.type) == ((5, 3, 17, 23), torch.uint8, "meta")
