"""Train a demo model on its demo world's training images; CPU, deterministic.

``--world imagenet`` (default) trains ``ccc.demo.model.DemoNet``, ``--world cifar`` the 32×32 world's
``ccc.demo.model.DemoNetCifar``. The training images are the world's ``train`` split, rendered in
memory (never written to the demo folder, which is the ``val`` split the benchmark calibrates and
streams on). Every step sees an augmentation: for ``imagenet`` the stream's, a torchvision-style
random-resized crop to 224×224 (PIL bilinear, as ``ccc.render``) and a horizontal flip with
probability 0.5; for ``cifar`` CIFAR's, a random 32×32 crop of the image zero-padded by 4 pixels and
a horizontal flip with probability 0.5. SGD with Nesterov momentum, linear warm-up then cosine
decay, cross-entropy.

Determinism: every random draw comes from ``numpy.random.SeedSequence(seed, …)`` or
``torch.manual_seed(seed)``, deterministic torch algorithms, a fixed thread count (``--threads``):
the same command with the same library versions and thread count writes the same weights.

    python scripts/train_demo_model.py                        # train, write ccc/demo/demo_model.pt, report
    python scripts/train_demo_model.py --evaluate-only        # measure the committed weights only
    python scripts/train_demo_model.py --world cifar --threads 1   # train ccc/demo/demo_model_cifar.pt

After training, it prints the sha256 to paste into ``ccc/demo/model.py`` (``DEMO_WEIGHTS_SHA256``,
``DEMO_CIFAR_WEIGHTS_SHA256``) and measures the model on the demo folder, written as Markdown
(``--report``) and JSON: for ``imagenet`` clean accuracy with centre and random crops and the accuracy
under each of the 15 corruptions at ``--severity``; for ``cifar`` clean accuracy on the whole 32×32
images and under every corruption of the ``cifar`` set at severities 1–5.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from PIL import Image
from torch import nn

from ccc.corruptions import CORRUPTIONS, get_corruption_set
from ccc.demo.evaluate import measure_accuracies
from ccc.demo.folder import DEMO_IMAGE_SEED, DEMO_WORLDS, DemoImageSpec, ensure_demo_folder, render_demo_files
from ccc.demo.images import CLASS_NAMES
from ccc.demo.model import (
    DEMO_CIFAR_WEIGHTS_PATH,
    DEMO_CIFAR_WEIGHTS_SHA256,
    DEMO_WEIGHTS_PATH,
    DEMO_WEIGHTS_SHA256,
    DemoNet,
    DemoNetCifar,
    file_sha256,
    load_demo_weights,
)
from ccc.render import crop_resize_flip
from ccc.stream.plan import sample_resized_crop
from ccc.stream.sources import ImageIndex, index_image_folder

logger = logging.getLogger("train_demo_model")


class WorldTraining(NamedTuple):
    """One world's model class, shipped weights and checksum, evaluation crop (``ccc.demo.evaluate.CROPS``)
    and training defaults (images per class, epochs, batch size, peak learning rate)."""

    model: type[DemoNet]
    weights: Path
    sha256: str
    crop: str
    train_images_per_class: int
    epochs: int
    batch_size: int
    learning_rate: float


WORLD_TRAINING = {
    "imagenet": WorldTraining(DemoNet, DEMO_WEIGHTS_PATH, DEMO_WEIGHTS_SHA256, "centre", 150, 8, 64, 0.1),
    "cifar": WorldTraining(
        DemoNetCifar, DEMO_CIFAR_WEIGHTS_PATH, DEMO_CIFAR_WEIGHTS_SHA256, "whole", 500, 15, 128, 0.1
    ),
}
"""Per demo world (``ccc.demo.folder.DEMO_WORLDS``): what this script trains and its defaults."""

_DEFAULTED = ("train_images_per_class", "epochs", "batch_size", "learning_rate")

CIFAR_PADDING = 4
"""Zero padding (pixels) around a 32×32 training image before its random 32×32 crop (CIFAR's augmentation)."""


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--world", choices=DEMO_WORLDS, default="imagenet", help="demo world whose model to train (default: imagenet)"
    )
    parser.add_argument("--out", type=Path, default=None, help="weights file to write (default: the package's)")
    parser.add_argument(
        "--train-images-per-class", type=int, default=None, help="training images per class (default: 150; cifar 500)"
    )
    parser.add_argument(
        "--epochs", type=int, default=None, help="passes over the training images (default: 8; cifar 15)"
    )
    parser.add_argument("--batch-size", type=int, default=None, help="images per step (default: 64; cifar 128)")
    parser.add_argument("--learning-rate", type=float, default=None, help="peak SGD learning rate (default: 0.1)")
    parser.add_argument("--weight-decay", type=float, default=5e-4, help="SGD weight decay (default: 5e-4)")
    parser.add_argument("--warmup-epochs", type=float, default=1.0, help="linear warm-up length in epochs (default: 1)")
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of initialisation, order and augmentation (default: 0)"
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default: 2; part of the determinism)")
    parser.add_argument("--workers", type=int, default=2, help="processes rendering the training images (default: 2)")
    parser.add_argument(
        "--evaluate-only", action="store_true", help="skip training; measure the weights at --out (checksum checked)"
    )
    parser.add_argument(
        "--monitor-images-per-class",
        type=int,
        default=25,
        help="demo images per class whose accuracy is logged after every epoch (default: 25; 0: none)",
    )
    parser.add_argument(
        "--eval-images-per-class",
        type=int,
        default=50,
        help="demo images per class for the final accuracy table (default: 50; 0: no table)",
    )
    parser.add_argument(
        "--severity", type=float, default=3.0, help="severity of the imagenet corruption table (default: 3)"
    )
    parser.add_argument(
        "--report", type=Path, default=None, help="also write the accuracy table (Markdown) and a .json next to it"
    )
    arguments = parser.parse_args(argv)
    training = WORLD_TRAINING[arguments.world]
    for name in _DEFAULTED:
        if getattr(arguments, name) is None:
            setattr(arguments, name, getattr(training, name))
    if arguments.out is None:
        arguments.out = training.weights
    return arguments


def load_training_images(images_per_class: int, workers: int, world: str) -> tuple[list[Image.Image], np.ndarray]:
    """Render and decode the ``train`` split of ``world``: PIL RGB images and their labels (0–15)."""
    spec = DemoImageSpec(images_per_class=images_per_class, seed=DEMO_IMAGE_SEED, split="train", world=world)
    images, labels = [], []
    for class_index, _, data in render_demo_files(spec, workers):
        with Image.open(io.BytesIO(data)) as decoded:
            images.append(decoded.convert("RGB"))
        labels.append(class_index)
    return images, np.array(labels, dtype=np.int64)


def augmented_batch(
    images: list[Image.Image], positions: np.ndarray, seed: int, epoch: int, world: str
) -> torch.Tensor:
    """Augmented images (draws from SeedSequence(seed, (1, epoch, position))), float N×3×H×W in [0, 1]:
    imagenet: random-resized crop to 224×224 + flip; cifar: random 32×32 crop of the zero-padded image + flip."""
    crops = []
    for position in positions:
        generator = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1, epoch, int(position))))
        image = images[int(position)]
        if world == "cifar":
            padded = np.pad(np.asarray(image), ((CIFAR_PADDING, CIFAR_PADDING), (CIFAR_PADDING, CIFAR_PADDING), (0, 0)))
            top, left = generator.integers(0, 2 * CIFAR_PADDING + 1, size=2)
            crop = padded[top : top + image.height, left : left + image.width]
            crops.append(crop[:, ::-1] if generator.random() < 0.5 else crop)
        else:
            box = sample_resized_crop(generator, *image.size)
            crops.append(crop_resize_flip(image, box, bool(generator.random() < 0.5)))
    return torch.from_numpy(np.stack(crops)).permute(0, 3, 1, 2).float().div_(255.0)


def learning_rate(step: int, total_steps: int, warmup_steps: int, peak: float) -> float:
    """Linear warm-up to ``peak`` then cosine decay to 0."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return peak * 0.5 * (1.0 + math.cos(math.pi * progress))


def train(
    arguments: argparse.Namespace, validation_index: ImageIndex | None, validation_positions: list[int]
) -> DemoNet:
    start = time.perf_counter()
    images, labels = load_training_images(arguments.train_images_per_class, arguments.workers, arguments.world)
    logger.info("rendered %d training images in %.1f s", len(images), time.perf_counter() - start)
    torch.manual_seed(arguments.seed)
    training = WORLD_TRAINING[arguments.world]
    model = training.model(len(CLASS_NAMES))
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        (no_decay if parameter.ndim == 1 else decay).append(parameter)
    optimizer = torch.optim.SGD(
        [{"params": decay, "weight_decay": arguments.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=arguments.learning_rate,
        momentum=0.9,
        nesterov=True,
    )
    steps_per_epoch = len(images) // arguments.batch_size
    total_steps = steps_per_epoch * arguments.epochs
    warmup_steps = max(1, round(arguments.warmup_epochs * steps_per_epoch))
    step = 0
    for epoch in range(arguments.epochs):
        model.train()
        order = np.random.default_rng(np.random.SeedSequence(arguments.seed, spawn_key=(0, epoch))).permutation(
            len(images)
        )
        running_loss, running_correct, seen = 0.0, 0, 0
        for batch_number in range(steps_per_epoch):
            positions = order[batch_number * arguments.batch_size : (batch_number + 1) * arguments.batch_size]
            inputs = augmented_batch(images, positions, arguments.seed, epoch, arguments.world)
            targets = torch.from_numpy(labels[positions])
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, total_steps, warmup_steps, arguments.learning_rate)
            logits = model(inputs)
            loss = nn.functional.cross_entropy(logits, targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            running_loss += loss.item() * len(positions)
            running_correct += int((logits.argmax(1) == targets).sum())
            seen += len(positions)
        monitored = ""
        if validation_index is not None:
            crop = training.crop
            accuracy = measure_accuracies(
                model, validation_index, corruptions=(), positions=validation_positions, crop=crop
            )["clean"]
            monitored = f", demo-folder accuracy {accuracy:.1f} % ({crop} images)"
        logger.info(
            "epoch %d/%d: loss %.3f, train accuracy %.1f %% (random crops)%s, %.0f s",
            epoch + 1,
            arguments.epochs,
            running_loss / seen,
            100.0 * running_correct / seen,
            monitored,
            time.perf_counter() - start,
        )
    logger.info("trained in %.0f s", time.perf_counter() - start)
    return model.eval()


def cifar_accuracy_table(model: nn.Module, index, positions: list[int]) -> dict[str, dict[str, float]]:
    """{"severity <s>": {"clean" | corruption: accuracy in percent}} on the whole 32×32 images, for
    every corruption of the ``cifar`` set at severities 1–5 (each severity's corruption draws from
    the same per-image seeds)."""
    names = tuple(get_corruption_set("cifar").parameter_tables)
    return {
        f"severity {severity}": dict(
            measure_accuracies(
                model,
                index,
                corruptions=names,
                severity=float(severity),
                crop="whole",
                positions=positions,
                corruption_set="cifar",
            )
        )
        for severity in range(1, 6)
    }


def cifar_markdown(table: dict[str, dict[str, float]], image_count: int) -> str:
    columns = list(table)
    lines = [
        f"| corruption ({image_count} images) | " + " | ".join(f"{c.split()[1]}" for c in columns) + " |",
        "|---|" + "---:|" * len(columns),
        "| clean | " + " | ".join(f"{table[c]['clean']:.1f}" for c in columns) + " |",
    ]
    corrupted = [name for name in table[columns[0]] if name != "clean"]
    for name in corrupted:
        lines.append(f"| {name} | " + " | ".join(f"{table[c][name]:.1f}" for c in columns) + " |")
    lines.append(
        f"| mean over the {len(corrupted)} corruptions | "
        + " | ".join(f"{np.mean([table[c][n] for n in corrupted]):.1f}" for c in columns)
        + " |"
    )
    return "\n".join(lines)


def accuracy_table(model: nn.Module, index, positions: list[int], severity: float) -> dict[str, dict[str, float]]:
    """{crop: {"clean" | corruption: accuracy in percent}} for centre and random crops."""
    return {
        crop: dict(
            measure_accuracies(model, index, corruptions=CORRUPTIONS, severity=severity, crop=crop, positions=positions)
        )
        for crop in ("centre", "random")
    }


def markdown(table: dict[str, dict[str, float]], severity: float, image_count: int) -> str:
    lines = [
        f"| condition ({image_count} demo images) | centre crop (calibration) | random crop + JPEG 85 (stream) |",
        "|---|---:|---:|",
    ]
    for name in table["centre"]:
        label = "clean" if name == "clean" else f"{name} {severity:g}"
        lines.append(f"| {label} | {table['centre'][name]:.1f} | {table['random'][name]:.1f} |")
    corrupted = [name for name in table["centre"] if name != "clean"]
    lines.append(
        f"| mean over the {len(corrupted)} corruptions | {np.mean([table['centre'][n] for n in corrupted]):.1f} "
        f"| {np.mean([table['random'][n] for n in corrupted]):.1f} |"
    )
    return "\n".join(lines)


def _first_per_class(index: ImageIndex, count: int) -> list[int]:
    """Positions of the first ``count`` images of every class of ``index``."""
    seen: dict[int, int] = {}
    positions = []
    for position, image in enumerate(index):
        if seen.get(image.class_index, 0) < count:
            positions.append(position)
            seen[image.class_index] = seen.get(image.class_index, 0) + 1
    return positions


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    arguments = parse_arguments(argv)
    torch.set_num_threads(arguments.threads)
    torch.use_deterministic_algorithms(True)
    needs_folder = (
        arguments.evaluate_only or arguments.eval_images_per_class > 0 or arguments.monitor_images_per_class > 0
    )
    training = WORLD_TRAINING[arguments.world]
    folder = ensure_demo_folder(world=arguments.world) if needs_folder else None
    index = index_image_folder(folder, progress=False) if folder is not None else None
    if arguments.evaluate_only:
        committed = arguments.out.resolve() == training.weights.resolve()
        expected = training.sha256 if committed else None
        model = load_demo_weights(training.model(), arguments.out, expected).eval()
    else:
        monitor = _first_per_class(index, arguments.monitor_images_per_class) if index is not None else []
        model = train(arguments, index if monitor else None, monitor)
        arguments.out.parent.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), arguments.out)
        logger.info(
            "wrote %s (%d bytes), sha256 %s", arguments.out, arguments.out.stat().st_size, file_sha256(arguments.out)
        )
    if index is None or arguments.eval_images_per_class == 0:
        return 0
    subset = _first_per_class(index, arguments.eval_images_per_class)
    start = time.perf_counter()
    if arguments.world == "cifar":
        table = cifar_accuracy_table(model, index, subset)
        text = cifar_markdown(table, len(subset))
        summary: dict[str, object] = {"world": "cifar", "images": len(subset), **table}
    else:
        table = accuracy_table(model, index, subset, arguments.severity)
        text = markdown(table, arguments.severity, len(subset))
        summary = {"severity": arguments.severity, "images": len(subset), **table}
    logger.info("measured in %.0f s", time.perf_counter() - start)
    print(text)
    if arguments.report is not None:
        arguments.report.write_text(text + "\n")
        arguments.report.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
