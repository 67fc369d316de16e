"""The cin-c and gradual stream kinds (ccc/stream/domains.py): their plans against a re-derivation
(order, severities, counts, crops), their specs' JSON, the ccc kind's JSON left as it was, their
errors, and rendering one corruption at an integer severity exactly as ``ccc.corruptions.corrupt``."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ccc.corruptions import corrupt
from ccc.render import crop_resize_flip, render_pixels
from ccc.stream.plan import (
    FLIP_PROBABILITY,
    SAMPLE_PURPOSE,
    plan_hash,
    plan_sample,
    plan_stream,
    sample_resized_crop,
)
from ccc.stream.spec import PlanError, StreamSpec, resolve_stream_spec
from tests.builders import make_calibration_table, make_image_folder

# ImageNet-C's 15 corruptions in the order of CoTTA's and mariodoebler/test-time-adaptation's
# configurations (gaussian_noise … jpeg_compression), in the registry's spelling.
IMAGENET_C_ORDER = (
    "gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur", "motion_blur", "zoom_blur",
    "snow", "frost", "fog", "brightness", "contrast", "elastic", "pixelate", "jpeg",
)  # fmt: skip
GRADUAL = (1, 2, 3, 4, 5, 4, 3, 2, 1)  # mariodoebler/test-time-adaptation test_time.py, setting "gradual"
CHECKSUM = "0" * 64


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = make_image_folder(tmp_path_factory.mktemp("kinds") / "val", classes=3, images_per_class=4)
    # one portrait image, so centre crops of both orientations are checked
    Image.new("RGB", (240, 331), (90, 120, 150)).save(folder / "n00000000" / "ILSVRC2012_val_00000099.JPEG")
    return folder


def levels(plan, count: int) -> list[tuple[str, float, str, float]]:
    return [(s.n1, s.s1, s.n2, s.s2) for s in (plan_sample(plan, index) for index in range(count))]


def test_cin_c_plan_is_the_fifteen_corruptions_in_order_at_one_severity(images: Path) -> None:
    plan = plan_stream({"kind": "cin-c", "severity": 3, "speed": 4, "seed": 7}, None, images)
    spec = plan.spec
    assert spec.corruptions == IMAGENET_C_ORDER and spec.num_images == 15 * 4 and spec.severity == 3
    expected = [(name, 3.0, name, 0.0) for name in IMAGENET_C_ORDER for _ in range(4)]
    assert levels(plan, spec.num_images) == expected
    samples = [plan_sample(plan, index) for index in range(spec.num_images)]
    assert [s.domain for s in samples] == [name for name in IMAGENET_C_ORDER for _ in range(4)]
    assert [s.pair_index for s in samples] == [k // 4 for k in range(60)]
    assert all(s.calibrated_accuracy is None for s in samples)
    first = [s.source_path for s in samples[:4]]
    assert len(set(first)) == 4  # distinct images inside a domain
    for domain in range(15):  # every domain the same images in the same order, as the public loaders
        assert [s.source_path for s in samples[4 * domain : 4 * domain + 4]] == first
    with pytest.raises(PlanError, match="index"):
        plan_sample(plan, spec.num_images)


def test_cin_c_shows_every_source_image_once_per_corruption_by_default(images: Path) -> None:
    """The CCC paper's CIN-C and YonseiML/asr's CIN-C scripts (CORRUPTION.NUM_EX 50000): the whole validation
    set per corruption."""
    plan = plan_stream({"kind": "cin-c", "corruptions": "fog,snow,jpeg_compression"}, None, images)
    assert (plan.spec.speed, plan.spec.num_images) == (13, 3 * 13)
    samples = [plan_sample(plan, index) for index in range(plan.spec.num_images)]
    first = [s.source_path for s in samples[:13]]
    assert sorted(first) == sorted(plan.sources.relative_paths)  # each image once
    assert [s.source_path for s in samples[13:26]] == first and [s.source_path for s in samples[26:]] == first
    assert first != sorted(first)  # a seeded order, not the folder's
    assert [
        s.source_path
        for s in (
            plan_sample(plan_stream({"kind": "cin-c", "corruptions": "fog", "seed": 44}, None, images), i)
            for i in range(13)
        )
    ] != first


def test_the_default_images_per_domain_need_the_image_count_for_cin_c_only() -> None:
    assert resolve_stream_spec({"kind": "cin-c"}, None, CHECKSUM, 50_000).speed == 50_000
    assert (
        resolve_stream_spec({"kind": "gradual"}, None, CHECKSUM).speed == 5000
    )  # mariodoebler's gradual: RobustBench's 5,000
    with pytest.raises(PlanError, match="a cin-c stream without speed shows every source image per corruption"):
        resolve_stream_spec({"kind": "cin-c"}, None, CHECKSUM)


def test_gradual_plan_goes_1_to_5_to_1_for_every_corruption(images: Path) -> None:
    plan = plan_stream({"kind": "gradual", "corruptions": "fog,jpeg_compression,snow", "speed": 2}, None, images)
    assert plan.spec.corruptions == ("fog", "jpeg", "snow") and plan.spec.num_images == 3 * 9 * 2
    expected = [
        (name, float(level), name, 0.0) for name in ("fog", "jpeg", "snow") for level in GRADUAL for _ in range(2)
    ]
    assert levels(plan, plan.spec.num_images) == expected
    samples = [plan_sample(plan, index) for index in range(plan.spec.num_images)]
    assert [s.pair_index for s in samples] == [k // 18 for k in range(54)]
    assert [s.path_position for s in samples[:18]] == [k // 2 for k in range(18)]


def test_a_longer_stream_repeats_the_sequence(images: Path) -> None:
    plan = plan_stream({"kind": "cin-c", "corruptions": ["fog", "snow"], "speed": 3, "num_images": 14}, None, images)
    assert [s[0] for s in levels(plan, 14)] == ["fog"] * 3 + ["snow"] * 3 + ["fog"] * 3 + ["snow"] * 3 + ["fog"] * 2
    assert plan_sample(plan, 13).pair_index == 4


def test_random_crops_are_the_ccc_streams_draws(images: Path) -> None:
    plan = plan_stream({"kind": "cin-c", "speed": 5, "seed": 11}, None, images)
    for index in (0, 7, 59):
        sample = plan_sample(plan, index)
        generator = np.random.default_rng(np.random.SeedSequence(11, spawn_key=(SAMPLE_PURPOSE, index)))
        assert sample.crop_box == sample_resized_crop(generator, *sample.source_size)
        assert sample.flip == bool(generator.random() < FLIP_PROBABILITY)
        assert sample.seed == int(generator.integers(0, 2**63))


# ImageNet's common sizes (landscape and portrait), odd sizes, squares and near-squares
CENTER_CROP_SIZES = (
    (500, 375), (640, 480), (1024, 768), (2048, 1536), (375, 500), (480, 640), (333, 257), (257, 333),
    (999, 701), (701, 999), (256, 256), (300, 300), (227, 231), (231, 227), (1001, 3),
)  # fmt: skip


@pytest.fixture(scope="module")
def center_crop_sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One image of each of CENTER_CROP_SIZES, per-pixel noise (every interpolation error shows)."""
    folder = tmp_path_factory.mktemp("center") / "val" / "n00000000"
    folder.mkdir(parents=True)
    generator = np.random.default_rng(3)
    for number, (width, height) in enumerate(CENTER_CROP_SIZES):
        pixels = generator.integers(0, 256, (height, width, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"ILSVRC2012_val_{number:08d}.JPEG", quality=95)
    return folder.parent


def test_center_crops_are_torchvision_resize_256_then_center_crop_224_pixel_for_pixel(
    center_crop_sources: Path,
) -> None:
    """ImageNet-C's preprocessing (hendrycks/robustness make_imagenet_c.py): Resize(256), CenterCrop(224)
    on a PIL image."""
    from torchvision import transforms

    imagenet_c = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224)])
    count = len(CENTER_CROP_SIZES)
    plan = plan_stream(
        {"kind": "cin-c", "corruptions": "fog", "speed": count, "crop": "center"}, None, center_crop_sources
    )
    samples = [plan_sample(plan, index) for index in range(count)]
    assert sorted(s.source_size for s in samples) == sorted(CENTER_CROP_SIZES)
    for sample in samples:
        source = (center_crop_sources / sample.source_path).read_bytes()
        with Image.open(io.BytesIO(source)) as opened:
            expected = np.asarray(imagenet_c(opened.convert("RGB")))
        uncorrupted = dataclasses.replace(sample, s1=0.0)  # both stages at severity 0: the crop alone
        assert np.array_equal(render_pixels(uncorrupted, source), expected), sample.source_size
        assert sample.flip is False and sample.to_json_dict()["resize"] == list(sample.resize)
        generator = np.random.default_rng(
            np.random.SeedSequence(plan.spec.seed, spawn_key=(SAMPLE_PURPOSE, sample.index))
        )
        assert sample.seed == int(generator.integers(0, 2**63))


@pytest.mark.parametrize("name", ["gaussian_noise", "glass_blur", "frost", "elastic", "jpeg"])
def test_a_sample_is_one_corruption_rendered_as_imagenet_c_at_its_severity(images: Path, name: str) -> None:
    plan = plan_stream({"kind": "cin-c", "corruptions": [name], "severity": 4, "speed": 2}, None, images)
    sample = plan_sample(plan, 1)
    source = (images / sample.source_path).read_bytes()
    with Image.open(io.BytesIO(source)) as opened:
        cropped = crop_resize_flip(opened.convert("RGB"), sample.crop_box, sample.flip)
    expected = corrupt(cropped, name, 4, rng=np.random.default_rng(sample.seed))
    assert np.array_equal(render_pixels(sample, source), expected)


def test_the_ccc_kind_serialises_as_before() -> None:
    table = make_calibration_table()
    spec = resolve_stream_spec({"difficulty": "medium", "speed": 4}, table, CHECKSUM)
    assert spec.kind == "ccc"
    document = spec.to_json_dict()
    assert sorted(document) == sorted([
        "target_accuracy", "corruptions", "speed", "seed", "num_images", "calibration_checksum",
        "source_index_checksum", "difficulty", "schedule", "path_objective", "shard_size",
    ])  # fmt: skip
    assert StreamSpec.from_json_dict(document) == spec


def test_the_ccc_kind_samples_have_no_domain_key(images: Path) -> None:
    table = make_calibration_table()
    plan = plan_stream({"difficulty": "medium", "speed": 4, "num_images": 8}, table, images)
    assert not {"domain", "resize"} & set(plan_sample(plan, 3).to_json_dict())


def test_domain_specs_round_trip_and_their_hash_depends_on_the_definition(images: Path) -> None:
    plan = plan_stream({"kind": "cin-c", "speed": 2, "crop": "center"}, None, images)
    document = plan.spec.to_json_dict()
    assert (document["kind"], document["severity"], document["crop"]) == ("cin-c", 5, "center")
    assert document["target_accuracy"] is None and document["calibration_checksum"] is None
    assert StreamSpec.from_json_dict(document) == plan.spec
    hashes = {
        plan_hash(plan_stream(definition, None, images))
        for definition in (
            {"kind": "cin-c", "speed": 2, "crop": "center"},
            {"kind": "cin-c", "speed": 2},
            {"kind": "cin-c", "speed": 2, "severity": 4},
            {"kind": "gradual", "speed": 2},
        )
    }
    assert len(hashes) == 4
    assert plan_hash(plan) == plan_hash(plan_stream({"kind": "cin-c", "speed": 2, "crop": "center"}, None, images))


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        (
            {"kind": "ccc", "difficulty": "medium", "speed": 4, "severity": 5},
            "severity: only for the cin-c kind, not a ccc stream",
        ),
        ({"kind": "cin-c", "difficulty": "medium"}, "difficulty: not for a cin-c stream"),
        ({"kind": "gradual", "severity": 3}, "severity: not for a gradual stream"),
        ({"kind": "cin-c", "severity": 6}, "severity must be an integer in [1, 5], got 6"),
        ({"kind": "cin-c", "crop": "middle"}, "crop must be one of random, center, whole, got 'middle'"),
        ({"kind": "cin-c", "corruptions": "fog,haze"}, "unknown corruption 'haze'"),
        ({"kind": "cin-c", "corruptions": "fog,fog"}, "each once"),
        ({"kind": "cin-c", "speed": 0}, "speed must be an integer >= 1"),
        ({"kind": "mixed"}, "kind must be one of ccc, cin-c, gradual, got 'mixed'"),
        ({"difficulty": "medium", "speed": 4}, "needs a calibration table"),
    ],
)
def test_bad_definitions_name_the_parameter(definition: dict, message: str) -> None:
    table = make_calibration_table() if definition.get("kind") == "ccc" else None
    with pytest.raises(PlanError) as error:
        resolve_stream_spec(definition, table, CHECKSUM, 13)
    assert message in str(error.value)


def test_more_images_per_domain_than_the_folder_holds_is_refused(images: Path) -> None:
    with pytest.raises(
        PlanError,
        match=r"images per domain \(speed, --images-per-domain\) must be at most the number of source images \(13\)",
    ):
        plan_stream({"kind": "cin-c", "speed": 14}, None, images)


def test_the_center_crop_of_an_imagenet_sized_image() -> None:
    from ccc.stream.domains import center_crop

    # 500×375: Resize(256) gives int(256·500/375) = 341×256; the margin 117 is halved and rounded to even
    assert center_crop(500, 375) == ((341, 256), (58, 16, 282, 240))
    assert center_crop(375, 500) == ((256, 341), (16, 58, 240, 282))
    with pytest.raises(ValueError, match="width must be"):
        center_crop(0, 5)


def test_a_domain_spec_built_directly_checks_its_fields() -> None:
    base = {
        "target_accuracy": None, "corruptions": ("fog",), "speed": 2, "seed": 0, "num_images": 18,
        "calibration_checksum": None, "source_index_checksum": CHECKSUM, "kind": "gradual",
    }  # fmt: skip
    assert StreamSpec(**base).domain_levels == tuple(("fog", level) for level in GRADUAL)
    with pytest.raises(PlanError, match="corruptions must be registered names .*, got jpeg_compression"):
        StreamSpec(**{**base, "corruptions": ("jpeg_compression",)})
    with pytest.raises(PlanError, match="a gradual stream has no calibration: target_accuracy must be None, got 30"):
        StreamSpec(**{**base, "target_accuracy": 30})
    with pytest.raises(PlanError, match="a ccc stream has calibrated severities and random or whole-image crops"):
        StreamSpec(**{**base, "kind": "ccc", "target_accuracy": 30.0, "corruptions": ("fog", "snow"),
                      "calibration_checksum": CHECKSUM, "crop": "center"})  # fmt: skip
