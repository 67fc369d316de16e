"""Tests of ccc.render: the crop/resize equals torchvision's on PIL images, the whole pipeline equals
its definition byte for byte, the public info text, and source checks."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F

from ccc.corruptions import corrupt_pair
from ccc.render import JPEG_QUALITY, OUTPUT_SIZE, SourceImageMismatchError, crop_resize_flip, render_sample
from ccc.shards.record import format_info
from ccc.stream.spec import SampleSpec


def source_jpeg(size: tuple[int, int] = (500, 375), mode: str = "RGB", seed: int = 0) -> bytes:
    generator = np.random.default_rng(seed)
    coarse = generator.integers(0, 256, (6, 8, 3), dtype=np.uint8)
    image = Image.fromarray(coarse).resize(size, Image.Resampling.BICUBIC).convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def make_spec(**overrides: object) -> SampleSpec:
    fields = dict(
        index=7,
        step=1,
        pair_index=0,
        path_position=1,
        path_cell=(5, 2),
        n1="gaussian_noise",
        s1=1.25,
        n2="fog",
        s2=0.5,
        calibrated_accuracy=20.5,
        source_position=3,
        source_path="n01440764/ILSVRC2012_val_00000293.JPEG",
        class_index=0,
        source_size=(500, 375),
        crop_box=(40, 30, 340, 330),
        flip=True,
        seed=123456789,
    )
    fields.update(overrides)
    return SampleSpec(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "box", [(0, 0, 500, 375), (40, 30, 340, 330), (123, 7, 180, 90), (1, 2, 499, 374), (60, 0, 110, 375)]
)
@pytest.mark.parametrize("flip", [False, True])
def test_crop_resize_flip_equals_torchvision_on_pil(box: tuple[int, int, int, int], flip: bool) -> None:
    image = Image.open(io.BytesIO(source_jpeg())).convert("RGB")
    left, top, right, bottom = box
    expected = F.resized_crop(
        image,
        top,
        left,
        bottom - top,
        right - left,
        [OUTPUT_SIZE, OUTPUT_SIZE],
        InterpolationMode.BILINEAR,
        antialias=True,
    )
    if flip:
        expected = F.hflip(expected)
    np.testing.assert_array_equal(crop_resize_flip(image, box, flip), np.asarray(expected))


def test_render_equals_its_definition() -> None:
    spec = make_spec()
    source = source_jpeg()
    image = Image.open(io.BytesIO(source)).convert("RGB")
    cropped = np.asarray(image.crop(spec.crop_box).resize((224, 224), Image.Resampling.BILINEAR))[:, ::-1]
    corrupted = corrupt_pair(
        np.ascontiguousarray(cropped), "gaussian_noise", 1.25, "fog", 0.5, rng=np.random.default_rng(spec.seed)
    )
    buffer = io.BytesIO()
    Image.fromarray(corrupted).save(buffer, format="JPEG", quality=JPEG_QUALITY, optimize=True)
    rendered = render_sample(spec, source)
    assert rendered.spec == spec
    assert rendered.image == buffer.getvalue()
    assert render_sample(spec, source).image == rendered.image
    decoded = Image.open(io.BytesIO(rendered.image))
    assert (decoded.format, decoded.mode, decoded.size) == ("JPEG", "RGB", (224, 224))


def test_the_render_seed_drives_the_corruption() -> None:
    source = source_jpeg()
    first = render_sample(make_spec(seed=1), source).image
    assert render_sample(make_spec(seed=2), source).image != first
    clean = make_spec(s1=0.0, s2=0.0)
    assert (
        render_sample(dataclasses.replace(clean, seed=1), source).image
        == render_sample(dataclasses.replace(clean, seed=2), source).image
    )


@pytest.mark.parametrize("mode", ["L", "CMYK"])
def test_non_rgb_sources_are_converted(mode: str) -> None:
    rendered = render_sample(make_spec(), source_jpeg(mode=mode))
    assert Image.open(io.BytesIO(rendered.image)).mode == "RGB"


def test_a_changed_source_image_is_refused() -> None:
    with pytest.raises(
        SourceImageMismatchError,
        match=r"n01440764/ILSVRC2012_val_00000293.JPEG must be 500x375 pixels as when the stream was planned, "
        r"got 400x300",
    ):
        render_sample(make_spec(), source_jpeg(size=(400, 300)))


def test_info_text_has_the_public_layout() -> None:
    assert format_info(make_spec()) == (
        "++dir++n01440764++name++ILSVRC2012_val_00000293.JPEG++n1++gaussian_noise++s1++1.25++n2++fog++s2++0.5"
    )
    # The public code writes severities with str(float): 0 -> "0.0", 5 -> "5.0".
    assert format_info(make_spec(s1=0.0, s2=5.0, n2="jpeg")).endswith(
        "++n1++gaussian_noise++s1++0.0++n2++jpeg++s2++5.0"
    )
