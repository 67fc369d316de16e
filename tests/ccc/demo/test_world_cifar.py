"""The demo world at CIFAR resolution (32×32 images, the ``cifar`` corruption set, DemoNetCifar)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import ccc.demo
from ccc.demo import CLASS_NAMES, DEMO_CIFAR_MODEL_NAME, DEMO_WORLDS, demo_image_folder, demo_model_cifar
from ccc.demo.evaluate import measure_accuracies
from ccc.demo.folder import (
    DEMO_CIFAR_IMAGES_VERSION,
    DEMO_IMAGES_PER_CLASS,
    EXPECTED_CIFAR_CONTENT_SHA256,
    EXPECTED_CIFAR_INDEX_SHA256,
    SPLITS,
    DemoImagesError,
    DemoImageSpec,
    content_checksum,
    demo_image_generator,
    read_record,
    write_demo_folder,
)
from ccc.demo.images import CIFAR_GEOMETRY, draw_parameters, render_demo_image
from ccc.models import ModelSpec, load_model
from ccc.stream.sources import index_image_folder

SMALL_CIFAR = DemoImageSpec(images_per_class=2, world="cifar")


@pytest.mark.parametrize("class_index", range(len(CLASS_NAMES)))
def test_cifar_render_is_32_pixels_and_a_pure_function_of_the_generator(class_index: int) -> None:
    first = render_demo_image(class_index, np.random.default_rng(class_index), CIFAR_GEOMETRY)
    second = render_demo_image(class_index, np.random.default_rng(class_index), CIFAR_GEOMETRY)
    assert first.shape == (32, 32, 3) and first.dtype == np.uint8
    np.testing.assert_array_equal(first, second)
    assert first.std() > 10  # not a flat image


def test_cifar_main_object_fills_much_of_the_frame() -> None:
    for seed in range(20):
        main = draw_parameters(seed % 16, np.random.default_rng(seed), CIFAR_GEOMETRY).main
        side = 32 * CIFAR_GEOMETRY.supersample
        assert min(main.semi_axes) >= 0.3 * side
        shortest, longest = CIFAR_GEOMETRY.period_range
        assert CIFAR_GEOMETRY.supersample * shortest <= main.period <= CIFAR_GEOMETRY.supersample * longest


def test_cifar_folder_is_byte_reproducible_png_in_imagenet_layout(tmp_path: Path) -> None:
    serial = write_demo_folder(tmp_path / "serial", SMALL_CIFAR, workers=1)
    parallel = write_demo_folder(tmp_path / "parallel", SMALL_CIFAR, workers=2)
    checksum = content_checksum(serial, "cifar")
    assert checksum == content_checksum(parallel, "cifar") == read_record(serial)["content_sha256"]
    assert read_record(serial)["world"] == "cifar"
    index = index_image_folder(serial, progress=False)
    assert index.classes == CLASS_NAMES and len(index) == 2 * len(CLASS_NAMES)
    assert index[0].relative_path == "blue_checks/blue_checks_00000.png"
    with Image.open(index.path(0)) as image:
        assert image.format == "PNG" and image.size == (32, 32) and image.mode == "RGB"


def test_worlds_never_draw_the_same_numbers() -> None:
    """The cifar world's spawn keys follow the imagenet world's splits, so no cifar image reuses the
    draws of an imagenet image (of either split)."""
    firsts = {
        (world, split): demo_image_generator(DemoImageSpec(world=world, split=split), 3, 0).random()
        for world, split in itertools.product(DEMO_WORLDS, SPLITS)
    }
    assert len(set(firsts.values())) == len(DEMO_WORLDS) * len(SPLITS)


def test_unknown_world_is_refused_with_the_list(tmp_path: Path) -> None:
    with pytest.raises(DemoImagesError, match="unknown demo world 'tiny'; available: imagenet, cifar"):
        DemoImageSpec(world="tiny")
    with pytest.raises(DemoImagesError, match="unknown demo world 'imagenet64'; available: imagenet, cifar"):
        demo_image_folder(tmp_path, corruption_set="imagenet64")


@pytest.fixture(scope="session")
def cifar_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The full 32×32 demo image folder, built once per test session in a temporary cache (about 6 s)."""
    return demo_image_folder(tmp_path_factory.mktemp("cache"), corruption_set="cifar")


@pytest.mark.slow
def test_full_cifar_build_matches_the_reference_checksums(cifar_folder: Path) -> None:
    assert cifar_folder.name == DEMO_CIFAR_IMAGES_VERSION
    index = index_image_folder(cifar_folder, progress=False)
    assert len(index) == DEMO_IMAGES_PER_CLASS * len(CLASS_NAMES) == ccc.demo.DEMO_SOURCE_IMAGES
    assert index.checksum() == EXPECTED_CIFAR_INDEX_SHA256
    content = content_checksum(cifar_folder, "cifar")
    assert read_record(cifar_folder)["content_sha256"] == content == EXPECTED_CIFAR_CONTENT_SHA256
    assert demo_image_folder(cifar_folder.parents[1], corruption_set="cifar") == cifar_folder


def test_cifar_model_gives_16_logits_for_32_pixel_images() -> None:
    model = demo_model_cifar()
    assert not model.training
    with torch.no_grad():
        logits = model(torch.rand(3, 3, 32, 32))
    assert logits.shape == (3, len(CLASS_NAMES)) and torch.isfinite(logits).all()


def test_cifar_model_loads_through_its_factory_name() -> None:
    model = load_model(ModelSpec(DEMO_CIFAR_MODEL_NAME))
    images = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(images), demo_model_cifar()(images))


@pytest.mark.slow
def test_shipped_cifar_model_is_accurate_on_the_built_folder(cifar_folder: Path) -> None:
    index = index_image_folder(cifar_folder, progress=False)
    accuracies = measure_accuracies(
        demo_model_cifar(), index, corruptions=("gaussian_noise",), severity=5.0, crop="whole", corruption_set="cifar"
    )
    assert accuracies["clean"] >= 95.0
    assert accuracies["gaussian_noise"] < accuracies["clean"] - 10.0
