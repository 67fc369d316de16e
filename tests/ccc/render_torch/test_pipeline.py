"""render_batch against the CPU path (ccc.render), and its reproducibility and batch independence."""

from __future__ import annotations

import dataclasses
import io
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from PIL import Image

from ccc.demo.images import render_demo_image
from ccc.registry import Registry
from ccc.render import crop_resize_flip as crop_resize_flip_pillow
from ccc.render import decode_jpeg, encode_jpeg, render_pixels
from ccc.render_torch import registry
from ccc.render_torch.geometry import crop_resize_flip
from ccc.render_torch.pipeline import apply_corruption_stage, render_batch
from ccc.stream.domains import center_crop
from ccc.stream.spec import SampleSpec

SOURCES = [render_demo_image(k, np.random.default_rng(k)) for k in range(6)]


def _png(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _spec(k: int, n1: str, s1: float, n2: str, s2: float, center: bool = False) -> SampleSpec:
    height, width = SOURCES[k % len(SOURCES)].shape[:2]
    generator = np.random.default_rng(100 + k)
    resize = None
    if center:
        resize, box = center_crop(width, height)
    else:
        side = int(generator.integers(60, min(width, height)))
        left, top = int(generator.integers(0, width - side + 1)), int(generator.integers(0, height - side + 1))
        box = (left, top, left + side, top + int(side * generator.uniform(0.8, 1.0)))
    return SampleSpec(
        index=k, step=k, pair_index=0, path_position=0, path_cell=(0, 0), n1=n1, s1=s1, n2=n2, s2=s2,
        calibrated_accuracy=50.0, source_position=k, source_path=f"c/{k}.png", class_index=0,
        source_size=(width, height), crop_box=box, flip=bool(k % 2), seed=1000 + 7 * k, resize=resize,
    )  # fmt: skip


def _cpu(specs: list[SampleSpec]) -> np.ndarray:
    return np.stack([render_pixels(spec, _png(SOURCES[spec.index % len(SOURCES)])) for spec in specs])


def _torch(specs: list[SampleSpec], jpeg: bool = False) -> np.ndarray:
    images = [SOURCES[spec.index % len(SOURCES)] for spec in specs]
    return render_batch(specs, images, "cpu", jpeg=jpeg).permute(0, 2, 3, 1).numpy()


def test_geometry_equals_the_cpu_path():
    specs = [_spec(k, "contrast", 0.0, "brightness", 0.0, center=k >= 4) for k in range(6)]
    np.testing.assert_array_equal(_torch(specs), _cpu(specs))


def test_one_batch_of_crops_of_every_shape_equals_pillow():
    boxes = [
        (10, 5, 234, 229),  # 224×224: copied, no resampling
        (0, 0, 320, 240),  # the whole image, wider than tall
        (100, 0, 160, 240),  # narrow and tall: Pillow resamples vertically first
        (30, 40, 130, 90),  # small: enlarged
        (5, 7, 300, 60),  # flat
        (50, 10, 274, 200),  # 224 wide: only the vertical pass changes
    ]
    specs = [
        dataclasses.replace(_spec(k, "contrast", 0.0, "brightness", 0.0), index=k, crop_box=box, source_size=(320, 240))
        for k, box in enumerate(boxes)
    ]
    sources = [np.random.default_rng(k).integers(0, 256, (240, 320, 3), dtype=np.uint8) for k in range(len(boxes))]
    expected = np.stack(
        [
            crop_resize_flip_pillow(Image.fromarray(image), spec.crop_box, spec.flip)
            for spec, image in zip(specs, sources)
        ]
    )
    ours = crop_resize_flip(specs, sources, "cpu")
    np.testing.assert_array_equal(torch.round(ours * 255).to(torch.uint8).permute(0, 2, 3, 1).numpy(), expected)


def test_crops_run_on_the_meta_device():
    """The crop reads no device data on the host (the meta device holds none), with and without resize."""
    specs = [_spec(k, "contrast", 0.0, "brightness", 0.0, center=k == 2) for k in range(3)]
    crops = crop_resize_flip(specs, [SOURCES[k % len(SOURCES)] for k in range(3)], "meta")
    assert crops.shape == (3, 3, 224, 224) and crops.dtype == torch.float32 and crops.device.type == "meta"


def test_sources_decoded_on_the_device_are_cropped_there():
    """Sources already on the device (as nvJPEG leaves them on CUDA; here the meta device, which holds no
    data, so a host round trip would fail) mixed with host ones, with and without resize."""
    specs = [_spec(k, "contrast", 0.0, "brightness", 0.0, center=k == 2) for k in range(3)]
    sources = [torch.from_numpy(SOURCES[k % len(SOURCES)]).permute(2, 0, 1).to("meta") for k in range(3)]
    crops = crop_resize_flip(specs, [sources[0], SOURCES[1 % len(SOURCES)], sources[2]], "meta")
    assert crops.shape == (3, 3, 224, 224) and crops.device.type == "meta"


def test_tensor_sources_give_the_same_crops():
    specs = [_spec(k, "contrast", 0.0, "brightness", 0.0) for k in range(2)]
    arrays = crop_resize_flip(specs, SOURCES[:2], "cpu")
    tensors = crop_resize_flip(specs, [torch.from_numpy(s).permute(2, 0, 1) for s in SOURCES[:2]], "cpu")
    assert torch.equal(arrays, tensors) and arrays.shape == (2, 3, 224, 224) and arrays.dtype == torch.float32


def test_packing_threads_give_the_same_crops(monkeypatch: pytest.MonkeyPatch):
    """A batch packed by several threads (76 samples without resize: two threads of 38; array and tensor
    sources mixed) equals the same batch packed by one."""
    from ccc.render_torch import geometry

    specs = [_spec(k, "contrast", 0.0, "brightness", 0.0, center=k % 20 == 0) for k in range(80)]
    sources = [SOURCES[k % len(SOURCES)] for k in range(80)]
    sources = [torch.from_numpy(s).permute(2, 0, 1) if k % 3 else s for k, s in enumerate(sources)]
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = crop_resize_flip(specs, sources, "cpu")
        torch.set_num_threads(2)
        calls = []

        def recording(**options) -> ThreadPoolExecutor:
            calls.append(options)
            return ThreadPoolExecutor(**options)

        monkeypatch.setattr(geometry, "ThreadPoolExecutor", recording)
        together = crop_resize_flip(specs, sources, "cpu")
    finally:
        torch.set_num_threads(threads)
    assert calls == [{"max_workers": 2}]  # the 4 resized samples are packed by one
    assert torch.equal(alone, together)


def test_deterministic_pairs_equal_the_cpu_path_with_mixed_corruptions_in_one_batch():
    pairs = [("contrast", 2.5, "pixelate", 1.25), ("saturate", 4.0, "jpeg", 3.5), ("brightness", 0.75, "contrast", 5.0)]
    specs = [_spec(k, *pairs[k % 3], center=k == 5) for k in range(6)]
    np.testing.assert_array_equal(_torch(specs), _cpu(specs))


def test_samples_left_at_severity_zero_beside_corrupted_ones_keep_their_bytes():
    specs = [_spec(0, "contrast", 2.5, "pixelate", 0.0), _spec(1, "contrast", 0.0, "pixelate", 1.25)]
    specs += [_spec(2, "saturate", 0.0, "jpeg", 0.0), _spec(3, "brightness", 0.75, "contrast", 5.0)]
    np.testing.assert_array_equal(_torch(specs), _cpu(specs))


def test_the_final_jpeg_round_trip_equals_pillows_decoded_bytes():
    specs = [_spec(k, "pixelate", 2.0, "contrast", 0.5) for k in range(3)]
    expected = np.stack([np.asarray(decode_jpeg(encode_jpeg(image))) for image in _cpu(specs)])
    np.testing.assert_array_equal(_torch(specs, jpeg=True), expected)


def test_same_specs_same_bytes_and_halves_equal_the_whole_batch():
    pairs = [("gaussian_noise", 2.0, "shot_noise", 3.0), ("impulse_noise", 1.5, "contrast", 2.0)]
    specs = [_spec(k, *pairs[k % 2]) for k in range(6)]
    whole = _torch(specs)
    np.testing.assert_array_equal(whole, _torch(specs))
    np.testing.assert_array_equal(whole, np.concatenate([_torch(specs[:2]), _torch(specs[2:])]))
    np.testing.assert_array_equal(whole[3:4], _torch(specs[3:4]))


def test_a_pair_with_a_severity_zero_stage_is_the_single_corruption():
    specs = [_spec(k, "speckle_noise", 3.0, "fog", 0.0) for k in range(2)]
    seeds = torch.tensor([spec.seed for spec in specs])
    crops = crop_resize_flip(specs, SOURCES[:2], "cpu")
    single = apply_corruption_stage(crops, ["speckle_noise"] * 2, [3.0, 3.0], seeds, 0)
    np.testing.assert_array_equal(_torch(specs), torch.round(single * 255).to(torch.uint8).permute(0, 2, 3, 1).numpy())


def test_noise_pairs_are_close_to_the_cpu_path_in_distribution():
    specs = [_spec(k, "gaussian_noise", 2.0, "brightness", 1.0) for k in range(6)]
    ours, theirs = _torch(specs).astype(np.float64), _cpu(specs).astype(np.float64)
    assert abs(ours.mean() - theirs.mean()) < 0.5
    assert abs(ours.std() - theirs.std()) < 0.5


def test_the_float32_precision_renders_close_to_float64_and_the_same_where_exact():
    """Pixelate and jpeg are integer arithmetic in both precisions; the others move a few bytes by a level."""
    integer = [_spec(k, "pixelate", 2.0, "jpeg", 3.0) for k in range(2)]
    images = [SOURCES[spec.index % len(SOURCES)] for spec in integer]
    assert torch.equal(render_batch(integer, images, "cpu"), render_batch(integer, images, "cpu", precision="float32"))
    pairs = [("gaussian_blur", 3.0, "fog", 2.0), ("saturate", 4.0, "snow", 1.5), ("elastic", 5.0, "frost", 2.5)]
    specs = [_spec(k, *pairs[k % 3]) for k in range(3)]
    images = [SOURCES[spec.index % len(SOURCES)] for spec in specs]
    exact = render_batch(specs, images, "cpu", jpeg=False).double()
    single = render_batch(specs, images, "cpu", jpeg=False, precision="float32").double()
    assert 0 < float((single != exact).double().mean()) < 0.05
    assert float((single - exact).abs().mean()) < 0.05


def test_an_unknown_precision_is_one_line():
    specs = [_spec(0, "contrast", 1.0, "brightness", 0.0)]
    with pytest.raises(ValueError, match="render precision must be one of float64, float32, got 'float16'"):
        render_batch(specs, SOURCES[:1], "cpu", precision="float16")


def test_a_corruption_without_torch_implementation_is_one_line(monkeypatch: pytest.MonkeyPatch):
    trimmed = Registry("torch corruption", ordered=True)
    for entry in registry.REGISTRY:
        if entry.name != "contrast":
            trimmed.register(entry)
    monkeypatch.setattr(registry, "REGISTRY", trimmed)
    with pytest.raises(NotImplementedError, match="corruption 'contrast' has no torch implementation"):
        _torch([_spec(0, "contrast", 1.0, "brightness", 0.0)])
    assert _torch([_spec(0, "contrast", 0.0, "brightness", 1.0)]).shape == (1, 224, 224, 3)


def test_the_package_exposes_its_public_names():
    import ccc.render_torch as render_torch

    assert render_torch.render_batch is render_batch
    assert {"SampleRandom", "per_sample_parameters", "jpeg_round_trip", "crop_resize_flip"} <= set(render_torch.__all__)
    assert {"gaussian_noise", "contrast", "pixelate", "jpeg"} <= set(render_torch.torch_corruptions())
