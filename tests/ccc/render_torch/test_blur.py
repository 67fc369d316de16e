"""The torch blur corruptions (and snow) against the CPU path: bytes where exact, statistics where random.

The random corruptions are checked twice: exactly, by handing the CPU path a generator that replays
the torch draws (so every step after the draws must agree bit for bit), and in distribution over many
seeds (slow).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ccc.corruptions import corrupt
from ccc.corruptions._kernels import copy_displaced_pixels
from ccc.corruptions.motion import motion_blur_imagemagick
from ccc.render_torch import blur, numerics, torch_corruptions
from ccc.render_torch.random import SampleRandom
from tests.ccc.render_torch.doubles import MirroredDraws, corrupt_mirrored
from tests.ccc.render_torch.image_statistics import paired_comparison, sample_statistics
from tests.ccc.render_torch.images import demo_images, to_bytes, to_tensor

SEVERITIES = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0)
ALL_CORRUPTIONS = {**torch_corruptions("blur"), "snow": torch_corruptions()["snow"]}


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return demo_images(len(SEVERITIES))


@pytest.mark.parametrize("name", ["defocus_blur", "zoom_blur", "gaussian_blur"])
def test_deterministic_blurs_equal_the_cpu_path_byte_for_byte(images: np.ndarray, name: str) -> None:
    severities = torch.tensor(SEVERITIES, dtype=torch.float64)
    output = torch_corruptions("blur")[name](to_tensor(images), severities, SampleRandom(torch.arange(len(images))))
    assert output.dtype == torch.float32 and output.shape == (len(images), 3, 224, 224)
    expected = np.stack([corrupt(image, name, severity) for image, severity in zip(images, SEVERITIES)])
    np.testing.assert_array_equal(to_bytes(output), expected)


@pytest.mark.parametrize("zooms_per_call", [3, 1000])
def test_zoom_blur_gives_the_same_bytes_with_several_zooms_per_call(
    images: np.ndarray, zooms_per_call: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Zoom blur's zooms made three at a time, or all at once (a GPU's way), give the bytes of one at a time."""
    severities = torch.tensor(SEVERITIES, dtype=torch.float64)
    one_at_a_time = blur.zoom_blur(to_tensor(images), severities, SampleRandom(torch.arange(len(images))))
    elements = zooms_per_call * len(images) * 3 * 224 * 224
    monkeypatch.setattr(blur, "gather_elements", lambda device: elements)
    several = blur.zoom_blur(to_tensor(images), severities, SampleRandom(torch.arange(len(images))))
    assert torch.equal(several.view(torch.int32), one_at_a_time.view(torch.int32))


def test_motion_blur_equals_the_cpu_path_given_the_same_angle(images: np.ndarray) -> None:
    severities = torch.tensor(SEVERITIES, dtype=torch.float64)
    seeds = torch.arange(len(images)) + 100
    output = blur.motion_blur(to_tensor(images), severities, SampleRandom(seeds))
    expected = [
        corrupt_mirrored(image, "motion_blur", severity, MirroredDraws(int(seed)))
        for image, severity, seed in zip(images, SEVERITIES, seeds)
    ]
    np.testing.assert_array_equal(to_bytes(output), np.stack(expected))


@pytest.mark.parametrize("taps_per_gather", [None, 3, 1000])
def test_imagemagick_motion_blur_equals_the_cpu_reimplementation_at_any_angle(
    images: np.ndarray, taps_per_gather: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At any angle, whether the taps are gathered one by one (the CPU's default), three at a time or all at
    once (a GPU's at this size)."""
    if taps_per_gather is not None:
        elements = taps_per_gather * 4 * 3 * 224 * 224
        monkeypatch.setattr(numerics, "gather_elements", lambda device: elements)
    generator = np.random.default_rng(3)
    radii, sigmas = generator.uniform(0.5, 20, 4).tolist(), generator.uniform(0.5, 15, 4).tolist()
    angles = generator.uniform(-180, 180, 4).tolist()
    levels = torch.from_numpy(images[:4]).permute(0, 3, 1, 2).to(torch.float64)
    output = numerics.imagemagick_motion_blur(levels, radii, sigmas, angles).permute(0, 2, 3, 1).numpy()
    expected = [motion_blur_imagemagick(*arguments) for arguments in zip(images[:4], radii, sigmas, angles)]
    np.testing.assert_array_equal(output.astype(np.uint8), np.stack(expected))


def glass_offsets_for_cpu(uniforms: torch.Tensor, severity: float, height: int, width: int) -> np.ndarray:
    """The torch offsets of one sample laid out as the CPU loop reads them (iterations, rows, columns, 2)."""
    parameters = blur.per_sample_parameters("glass_blur", torch.tensor([severity], dtype=torch.float64))[0]
    margin, iterations = round(max(float(parameters[1]), 1.0)), round(float(parameters[2]))
    offsets = torch.minimum((uniforms.to(torch.float64) * 2 * margin).floor(), torch.tensor(2 * margin - 1.0))
    offsets = (offsets - margin).to(torch.int64).numpy()
    visited = offsets[:iterations, margin + 1 : height - margin + 1, margin + 1 : width - margin + 1]
    return np.ascontiguousarray(visited[:, ::-1, ::-1])


def cpu_glass_blur_given_torch_offsets(images: np.ndarray, severities, seeds: torch.Tensor) -> np.ndarray:
    """The CPU path's glass blur of each image (uint8 N×H×W×3) with the offsets ``SampleRandom(seeds)`` draws."""
    height, width = images.shape[1:3]
    uniforms = SampleRandom(seeds).uniform(3, height, width, 2)
    return np.stack(
        [
            corrupt_mirrored(
                image,
                "glass_blur",
                severity,
                MirroredDraws(0, integers=glass_offsets_for_cpu(draws, severity, height, width)),
            )
            for image, severity, draws in zip(images, severities, uniforms)
        ]
    )


def test_glass_blur_equals_the_sequential_cpu_loop_given_the_same_offsets(images: np.ndarray) -> None:
    severities = torch.tensor(SEVERITIES, dtype=torch.float64)
    seeds = torch.arange(len(images)) + 200
    output = blur.glass_blur(to_tensor(images), severities, SampleRandom(seeds))
    np.testing.assert_array_equal(to_bytes(output), cpu_glass_blur_given_torch_offsets(images, SEVERITIES, seeds))


def test_glass_pointer_jumping_resolves_the_longest_chain_in_its_fixed_rounds() -> None:
    """Offsets (dx, dy) = (1, 0) along each visited row and (-margin, 1) at its end chain every visited
    pixel from the block's first one: the bound of ``_glass_jumps`` is reached, its rounds give the
    sequential loop's result and one round fewer does not."""
    height, width, margin = 16, 21, 3
    offsets = torch.zeros(1, height, width, 2, dtype=torch.int64)
    offsets[..., 0] = 1
    offsets[:, :, width - margin, :] = torch.tensor([-margin, 1])
    jumps = blur._glass_jumps(height, width, margin)
    assert jumps == ((width - 2 * margin - 1) + (margin + 1) * (height - 2 * margin - 1)).bit_length() == 6
    values = np.arange(height * width, dtype=np.float64).reshape(height, width, 1)
    expected = values.copy()
    visited = offsets[0, margin + 1 : height - margin + 1, margin + 1 : width - margin + 1].numpy()
    copy_displaced_pixels(expected, np.ascontiguousarray(visited[None, ::-1, ::-1]), margin)
    margins, active = torch.tensor([margin]), torch.tensor([True])
    for rounds, equal in ((jumps, True), (jumps - 1, False)):
        sources = blur._composed_glass_sources(offsets, margins, active, rounds)
        assert np.array_equal(values.reshape(-1)[sources[0].numpy()], expected.reshape(-1)) == equal


def test_snow_equals_the_cpu_path_given_the_same_draws(images: np.ndarray) -> None:
    severities = torch.tensor(SEVERITIES, dtype=torch.float64)
    seeds = torch.arange(len(images)) + 300
    output = torch_corruptions()["snow"](to_tensor(images), severities, SampleRandom(seeds))
    expected = [
        corrupt_mirrored(image, "snow", severity, MirroredDraws(int(seed)))
        for image, severity, seed in zip(images, SEVERITIES, seeds)
    ]
    np.testing.assert_array_equal(to_bytes(output), np.stack(expected))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["glass_blur", "motion_blur", "snow"])
@pytest.mark.parametrize("severity", [1.0, 3.0, 5.0])
def test_random_corruptions_match_the_cpu_path_in_distribution(name: str, severity: float) -> None:
    """16 images × 4 seeds, torch draws against CPU draws for the same (image, severity).

    Every paired statistic (mean, std, PSNR to the clean image, mean squared Laplacian, the worst of 8
    log-spectrum bands) must have a z-score below 5: under equal distributions that fails with
    probability about 1e-5 per statistic (t with 63 degrees of freedom), while a systematic difference
    grows the z-score with the number of samples.
    """
    images = demo_images(16)
    tensor = to_tensor(images)
    severities = torch.full((len(images),), severity, dtype=torch.float64)
    torch_outputs, cpu_outputs = [], []
    for seed in range(4):
        seeds = torch.arange(len(images)) + 1000 * seed
        torch_outputs.append(to_bytes(ALL_CORRUPTIONS[name](tensor, severities, SampleRandom(seeds))))
        cpu_outputs.append(
            np.stack([corrupt(image, name, severity, rng=50_000 + 100 * seed + k) for k, image in enumerate(images)])
        )
    clean = np.concatenate([images] * 4)
    rows = paired_comparison(
        sample_statistics(clean, np.concatenate(torch_outputs)), sample_statistics(clean, np.concatenate(cpu_outputs))
    )
    assert all(row["z"] < 5.0 for row in rows.values()), rows


def flat_blocks(count: int, size: int = 64, block: int = 16) -> np.ndarray:
    """uint8 (count, size, size, 3) images of constant blocks: every blurred value lies near a level."""
    generator = np.random.default_rng(11)
    levels = generator.integers(0, 256, (count, size // block, size // block, 3))
    return np.repeat(np.repeat(levels, block, 1), block, 2).astype(np.uint8)


def test_gaussian_blurs_equal_the_cpu_path_on_flat_regions() -> None:
    """Flat regions put the float64 values within rounding of an integer: OpenCV's operation order matters."""
    images = flat_blocks(4)
    severities = (0.2, 0.3, 1.0, 4.0)
    output = blur.gaussian_blur(to_tensor(images), torch.tensor(severities, dtype=torch.float64), None)
    expected = np.stack([corrupt(image, "gaussian_blur", severity) for image, severity in zip(images, severities)])
    np.testing.assert_array_equal(to_bytes(output), expected)
    seeds = torch.arange(4) + 400
    output = blur.glass_blur(to_tensor(images), torch.tensor(severities, dtype=torch.float64), SampleRandom(seeds))
    np.testing.assert_array_equal(to_bytes(output), cpu_glass_blur_given_torch_offsets(images, severities, seeds))


def test_defocus_blur_below_severity_one_third_returns_the_exact_identity() -> None:
    """Below 1/3 the disk is one pixel and the kernel exactly a delta: both paths return the exact
    result, the image itself, where OpenCV's DFT rounding (±1e-14) would decide the truncation
    (docs/fidelity.md)."""
    images = flat_blocks(2)
    severities = (0.2, 0.3)
    output = blur.defocus_blur(to_tensor(images), torch.tensor(severities, dtype=torch.float64), None)
    expected = np.stack([corrupt(image, "defocus_blur", severity) for image, severity in zip(images, severities)])
    np.testing.assert_array_equal(expected, images)
    np.testing.assert_array_equal(to_bytes(output), images)


def _transform_count_dependent(transform):
    """``transform`` whose result's last bits change with the number of transforms in the call, as MKL's
    FFT does on AVX-512 Intel CPUs (it picks its vector kernels by that count)."""

    def perturbed(values, *arguments, **keywords):
        result = transform(values, *arguments, **keywords)
        count = values.shape[:-2].numel()
        return result * (1.0 + 1e-9 * (count % 7))

    return perturbed


def test_defocus_blur_does_not_depend_on_the_batch_with_a_count_dependent_fft(monkeypatch) -> None:
    """The guarantee holds whatever the FFT library does with the batch: a sample alone and in a batch
    of 4 are transformed by calls of the same shape."""
    for name in ("rfft2", "irfft2"):
        monkeypatch.setattr(torch.fft, name, _transform_count_dependent(getattr(torch.fft, name)))
    images = to_tensor(demo_images(4, size=64))
    severities = torch.tensor([0.8, 2.2, 3.9, 5.0], dtype=torch.float64)
    batch = blur.defocus_blur(images, severities, None)
    for index in range(4):
        alone = blur.defocus_blur(images[index : index + 1], severities[index : index + 1], None)
        assert torch.equal(batch[index : index + 1], alone), f"sample {index} changes with its batch"


def test_defocus_blur_gives_a_sample_the_same_bytes_in_every_slot_of_a_padded_fft_call(monkeypatch) -> None:
    """Calls of a fixed count (here 4, as a GPU's 16): a sample alone (slot 0 of a call padded with three
    zero images) and in each slot of a batch of 6 (two calls, the second padded) gives the same bytes,
    also when the FFT changes its last bits with the transform count."""
    monkeypatch.setattr(blur, "fft_samples_per_call", lambda device: 4)
    for name in ("rfft2", "irfft2"):
        monkeypatch.setattr(torch.fft, name, _transform_count_dependent(getattr(torch.fft, name)))
    images = to_tensor(demo_images(6, size=64))
    severities = torch.tensor([0.8, 2.2, 3.9, 5.0, 1.4, 4.4], dtype=torch.float64)
    batch = blur.defocus_blur(images, severities, None)
    for index in range(6):
        alone = blur.defocus_blur(images[index : index + 1], severities[index : index + 1], None)
        assert torch.equal(batch[index : index + 1], alone), f"sample {index} changes with its slot"


def test_defocus_blur_transforms_a_fixed_count_per_call_off_the_cpu(monkeypatch) -> None:
    """On a device other than the CPU (meta here) every FFT call holds FFT_SAMPLES_PER_CALL samples: 3
    samples take one call, 17 take two, so launches grow as B / 16."""
    counts: list[int] = []

    def recording(values, *arguments, **keywords):
        counts.append(values.shape[0])
        return original(values, *arguments, **keywords)

    original = torch.fft.rfft2
    monkeypatch.setattr(torch.fft, "rfft2", recording)
    for size in (3, 17):
        images = torch.zeros((size, 3, 64, 64), device="meta")
        blur.defocus_blur(images, torch.linspace(0.5, 5, size, dtype=torch.float64), None)
    assert counts == [blur.FFT_SAMPLES_PER_CALL] * 2 * 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", sorted(ALL_CORRUPTIONS))
def test_cuda_gives_the_bytes_of_cpu_torch(name: str) -> None:
    """Everything but defocus's FFT is single IEEE float64 operations in a fixed order (divisions by numbers
    included: ``numerics.divide``): the same bytes on CUDA. Defocus may flip a level where its float64
    value lies within ~1e-13 of an integer."""
    images = to_tensor(demo_images(4))
    severities = torch.tensor([0.4, 1.7, 3.2, 5.0], dtype=torch.float64)
    seeds = torch.arange(4) + 500
    on_cpu = to_bytes(ALL_CORRUPTIONS[name](images, severities, SampleRandom(seeds)))
    # severities and seeds stay on the host, as the pipeline keeps them (the corruptions' contract)
    on_cuda = to_bytes(ALL_CORRUPTIONS[name](images.cuda(), severities, SampleRandom(seeds, 0, "cuda")))
    difference = np.abs(on_cpu.astype(int) - on_cuda)
    if name == "defocus_blur":
        assert difference.max() <= 1 and (difference > 0).mean() < 1e-4
    else:
        np.testing.assert_array_equal(on_cuda, on_cpu)
