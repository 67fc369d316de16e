"""Builders of small test inputs, shared by the tests of every package: ImageNet-layout image folders,
synthetic calibration tables, rendered CCC run folders, and a procedural texture world with a
deterministic classifier."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

TESTS = Path(__file__).resolve().parent
"""The tests folder."""
REPOSITORY = TESTS.parent
"""The repository root (what ``PYTHONPATH`` needs for a subprocess to import ``tests.builders``)."""
GOLDEN = TESTS / "golden"
"""The golden reference data (tests/golden/README.md)."""


def make_image_folder(
    root: Path, classes: int = 3, images_per_class: int = 4, size: tuple[int, int] = (500, 375), seed: int = 0
) -> Path:
    """Write a small ImageNet-layout folder ``root/<wnid>/ILSVRC2012_val_<k>.JPEG`` and return ``root``.

    Images are smooth random colour fields (JPEG quality 90) of ``size`` = (width, height) pixels,
    ImageNet's typical 500×375 by default; class folders are fake WordNet ids n0000000<c>.
    """
    from PIL import Image

    generator = np.random.default_rng(seed)
    counter = 0
    for class_index in range(classes):
        folder = root / f"n{class_index:08d}"
        folder.mkdir(parents=True, exist_ok=True)
        for _ in range(images_per_class):
            counter += 1
            coarse = generator.integers(0, 256, (6, 8, 3), dtype=np.uint8)
            image = Image.fromarray(coarse).resize(size, Image.Resampling.BICUBIC)
            image.save(folder / f"ILSVRC2012_val_{counter:08d}.JPEG", quality=90)
    return root


def make_calibration_table(
    corruptions: tuple[str, ...] = ("brightness", "jpeg", "pixelate", "contrast"),
    presets: dict | None = None,
    seed: int = 0,
    preprocessing_kind: str = "centre",
    corruption_set: str = "imagenet",
):
    """A synthetic :class:`ccc.calibration.CalibrationTable` holding every ordered pair of ``corruptions``.

    Accuracy falls smoothly with both severities, ``76 · (1 - a)^i · (1 - b)^j`` with a per-corruption
    rate in [0.05, 0.15] plus ±1 % noise (percent, clipped to [0, 100]), so severity paths for targets
    20–40 are 5–30 cells long. ``presets`` defaults to ``{"medium": (30.0, corruptions)}``. Only IEEE
    multiplications and additions, in a fixed order: the same bits on every CPU (numpy's ``exp`` is not:
    its AVX-512 and AVX2 kernels differ in last bits, and the streams pinned on this table would too).
    ``preprocessing_kind`` and ``corruption_set`` are the metadata's.
    """
    from ccc.calibration import CalibrationMetadata, CalibrationTable

    generator = np.random.default_rng(seed)
    rates = dict(zip(corruptions, generator.uniform(0.05, 0.15, len(corruptions))))
    decays = {name: np.cumprod(np.r_[1.0, np.full(20, 1.0 - rate)]) for name, rate in rates.items()}
    grids = {}
    for first in corruptions:
        for second in corruptions:
            if first != second:
                grid = 76.0 * decays[first][:, None] * decays[second][None, :]
                grids[(first, second)] = np.clip(grid + generator.uniform(-1, 1, grid.shape), 0, 100)
    metadata = CalibrationMetadata(
        model_name="synthetic test model",
        preprocessing="none (synthetic numbers)",
        image_set_description="none (synthetic numbers)",
        image_count=100,
        created="2024-01-01T00:00:00+00:00",
        preprocessing_kind=preprocessing_kind,
        corruption_set=corruption_set,
    )
    return CalibrationTable.from_grids(
        corruptions,
        grids,
        image_counts=100,
        metadata=metadata,
        difficulty_presets=presets if presets is not None else {"medium": (30.0, corruptions)},
    )


TEXTURE_CLASS_COLOURS = ((0.75, 0.3, 0.25), (0.25, 0.35, 0.75))
"""RGB in [0, 1] of the two colours of :func:`texture_image` classes (class = colour × texture)."""


def make_ccc_run(root: Path, num_images: int, speed: int, shard_size: int, image_folder: Path | None = None) -> Path:
    """A CCC run folder ``root/baseline_30_transition+speed_<speed>_seed_43_images_<num_images>`` (named as
    ``ccc-generate`` names it) of ``num_images`` samples
    (shards of ``shard_size``), rendered serially over ``image_folder`` (default: a fresh 3-class
    ``make_image_folder`` under ``root``) with ``make_calibration_table()`` at target 30 %."""
    from ccc.execution import SerialExecutor
    from ccc.generate import generate_stream
    from ccc.stream.sources import index_image_folder, load_source_images
    from ccc.stream.spec import run_name

    folder = image_folder if image_folder is not None else make_image_folder(root / "val")
    table = make_calibration_table()
    sources = load_source_images(index_image_folder(folder, progress=False))
    run = root / run_name(30.0, speed, 43, num_images)
    generate_stream(make_ccc_plan(table, sources, num_images, speed, shard_size), run, SerialExecutor(), progress=False)
    return run


def make_ccc_plan(table, sources, num_images: int, speed: int, shard_size: int):
    """The plan of a CCC stream at target 30 %, seed 43, over ``table`` (a CalibrationTable) and
    ``sources`` (loaded SourceImages): ``num_images`` samples, ``speed`` per step, shards of ``shard_size``."""
    from ccc.stream.plan import build_stream_plan
    from ccc.stream.spec import StreamSpec

    spec = StreamSpec(
        target_accuracy=30.0,
        corruptions=table.corruptions,
        speed=speed,
        seed=43,
        num_images=num_images,
        calibration_checksum=table.checksum(),
        source_index_checksum=sources.index_checksum,
        shard_size=shard_size,
    )
    return build_stream_plan(spec, table, sources)


def texture_image(class_index: int, generator: np.random.Generator, size: int = 40) -> np.ndarray:
    """A uint8 RGB ``size``×``size`` image of one of 4 classes: (red, blue) × (smooth, striped).

    Colour, stripe period (3–4 px), orientation and phase are jittered per image, plus mild pixel
    noise, so that noise, blur and contrast change the accuracy of :func:`tiny_texture_classifier`
    gradually with severity.
    """
    colour = np.array(TEXTURE_CLASS_COLOURS[class_index % 2]) + generator.normal(0.0, 0.04, 3)
    rows, columns = np.mgrid[0:size, 0:size].astype(np.float64)
    angle = generator.uniform(0.0, np.pi)
    period = generator.uniform(3.0, 4.0)
    amplitude = 0.22 if class_index >= 2 else 0.0
    stripes = amplitude * np.sin(
        2 * np.pi * (rows * np.cos(angle) + columns * np.sin(angle)) / period + generator.uniform(0, 7)
    )
    image = colour[None, None, :] * (1.0 + stripes[:, :, None]) + generator.normal(0.0, 0.015, (size, size, 3))
    return np.clip(np.round(image * 255), 0, 255).astype(np.uint8)


def make_texture_folder(root: Path, images_per_class: int = 4, size: int = 40, seed: int = 0) -> Path:
    """An ImageNet-layout folder of :func:`texture_image` JPEGs (quality 95): 4 classes ``n0000000<c>``."""
    from PIL import Image

    generator = np.random.default_rng(seed)
    for class_index in range(4):
        folder = root / f"n{class_index:08d}"
        folder.mkdir(parents=True, exist_ok=True)
        for k in range(images_per_class):
            Image.fromarray(texture_image(class_index, generator, size)).save(folder / f"img_{k:04d}.JPEG", quality=95)
    return root


def tiny_texture_classifier():
    """A deterministic BatchNorm CNN that tells the 4 :func:`texture_image` classes apart (no training).

    Conv 3×3 (mean colour channels and ± Laplacian of the grey image) → BatchNorm → ReLU → global
    average pool → linear nearest-prototype head, prototypes measured on 16 generated images per
    class. Takes images in [0, 1] (N×3×H×W), returns 4 logits; accuracy falls with noise (adds
    Laplacian energy), blur (removes it) and contrast (fades colour and stripes).
    """
    import torch
    from torch import nn

    convolution = nn.Conv2d(3, 5, 3, padding=1, bias=False)
    laplacian = torch.tensor([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]]) / 3.0
    weight = torch.zeros(5, 3, 3, 3)
    for channel in range(3):
        weight[channel, channel, 1, 1] = 1.0
        weight[3, channel] = laplacian
        weight[4, channel] = -laplacian
    features = nn.Sequential(convolution, nn.BatchNorm2d(5), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    with torch.no_grad():
        convolution.weight.copy_(weight)
        features[1].running_var.fill_(1.0)
        features[1].weight.copy_(torch.tensor([1.0, 1.0, 1.0, 4.0, 4.0]))
    features.eval()
    generator = np.random.default_rng(12345)
    prototypes = []
    for class_index in range(4):
        images = np.stack([texture_image(class_index, generator, 32) for _ in range(16)])
        with torch.no_grad():
            prototypes.append(features(torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0).mean(0))
    prototype = torch.stack(prototypes)
    head = nn.Linear(5, 4)
    with torch.no_grad():
        head.weight.copy_(2.0 * prototype * 20.0)
        head.bias.copy_(-(prototype**2).sum(1) * 20.0)
    return nn.Sequential(features, head).eval()


def cli_user_error(main, capsys, argv: list[str]) -> str:
    """Run a command's ``main(argv)`` expecting a user error (exit code 2, one line on stderr, no
    traceback; ``capsys`` is pytest's fixture) and return that line."""
    try:
        code = main(argv)
    except SystemExit as exit_request:
        code = exit_request.code
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


def run_quick_bench(script: str, output: Path, timeout: int = 300) -> tuple[dict, str]:
    """Run ``scripts/bench/<script> --quick --json <output>`` from the repository root; its JSON results
    and its stdout (the calling test fails, with the script's last stderr, on a non-zero exit)."""
    result = subprocess.run(
        [sys.executable, str(REPOSITORY / "scripts" / "bench" / script), "--quick", "--json", str(output)],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(output.read_text()), result.stdout


def pretend_demo_world(monkeypatch, run_folder: Path, world: str = "imagenet") -> None:
    """Make ``ccc.demo.demo_world_of`` (and so every command's world detection) take the stream of
    ``run_folder`` (a ccc-generate run folder) for a stream of the demo world ``world``: the world is
    recognised by the stream's source index checksum, and the fixtures' folders are not the demo's."""
    import json

    import ccc.demo

    checksum = json.loads((Path(run_folder) / "manifest.json").read_text())["stream"]["source_index_checksum"]
    original = ccc.demo.demo_world_of
    monkeypatch.setattr(
        ccc.demo, "demo_world_of", lambda spec: world if spec.source_index_checksum == checksum else original(spec)
    )


def load_script(relative_path: str, monkeypatch=None):  # noqa: ANN201
    """The script at ``relative_path`` of the repository (e.g. ``"scripts/bench/long_horizon.py"``) imported as
    a module named after its file; with pytest's ``monkeypatch`` also registered in ``sys.modules`` for the test
    (a script whose dataclasses look their module up needs it)."""
    import importlib.util
    import sys

    path = REPOSITORY / relative_path
    specification = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(specification)
    if monkeypatch is not None:
        monkeypatch.setitem(sys.modules, path.stem, module)
    specification.loader.exec_module(module)
    return module
