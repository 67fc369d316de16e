"""``ccc-corruption-grid``: a picture of every corruption at a few severities.

Rows are corruptions, columns the clean image and the requested severities. The default image is
scikit-image's bundled astronaut photograph, resized to 256 and centre-cropped to 224 as ImageNet-C
preprocesses its images.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Sequence

import numpy as np
from numpy.typing import NDArray
from PIL import Image, ImageDraw, ImageFont, UnidentifiedImageError
from tqdm import tqdm

from ccc.cli.common import HelpFormatter, OneLineErrorParser, examples, run_command
from ccc.corruptions import CORRUPTIONS, corrupt_pair, list_corruptions, validate_severity
from ccc.stream.domains import center_crop
from ccc.stream.sources import UNREADABLE_IMAGE_ERRORS

logger = logging.getLogger(__name__)

LABEL_WIDTH = 130
HEADER_HEIGHT = 24
SIDE = 224


def center_crop_224(image: Image.Image) -> NDArray[np.uint8]:
    """ImageNet-C's preprocessing, torchvision's ``Resize(256)`` + ``CenterCrop(224)``
    (:func:`ccc.stream.domains.center_crop`); 224×224×3 uint8."""
    resized, box = center_crop(*image.size)
    return np.asarray(image.convert("RGB").resize(resized, Image.Resampling.BILINEAR).crop(box))


def default_image() -> NDArray[np.uint8]:
    """scikit-image's astronaut (bundled with the package, no download), 224×224."""
    from skimage import data

    return center_crop_224(Image.fromarray(data.astronaut()))


def render_grid(image: NDArray[np.uint8], names: Sequence[str], severities: Sequence[float], seed: int) -> Image.Image:
    """The grid as a PIL image: one row per corruption name, one column per severity (plus clean).

    Each cell is ``corrupt_pair(image, name, severity, name, 0, rng=seed)``, i.e. a single
    corruption drawn from a generator seeded with ``seed``.
    """
    columns = len(severities) + 1
    grid = Image.new("RGB", (LABEL_WIDTH + columns * SIDE, HEADER_HEIGHT + len(names) * SIDE), "white")
    draw = ImageDraw.Draw(grid)
    font = ImageFont.load_default(size=14)
    for column, title in enumerate(["clean"] + [f"severity {s:g}" for s in severities]):
        draw.text((LABEL_WIDTH + column * SIDE + 8, 4), title, fill="black", font=font)
    for row, name in enumerate(tqdm(names, desc="corrupting", unit="corruption", mininterval=2.0)):
        top = HEADER_HEIGHT + row * SIDE
        draw.text((6, top + SIDE // 2 - 8), name, fill="black", font=font)
        grid.paste(Image.fromarray(image), (LABEL_WIDTH, top))
        for column, severity in enumerate(severities, start=1):
            cell = corrupt_pair(image, name, severity, name, 0.0, rng=seed)
            grid.paste(Image.fromarray(cell), (LABEL_WIDTH + column * SIDE, top))
    return grid


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="ccc-corruption-grid",
        description="Write a PNG grid of every corruption at a few severities.",
        formatter_class=HelpFormatter,
        epilog=examples(
            "ccc-corruption-grid",
            (
                "ccc-corruption-grid --image ~/photo.jpg --severities 0.5 1 2 3 4 5 --out grid.png",
                "your own image, six severities",
            ),
            ("ccc-corruption-grid --holdout --seed 1", "also the 4 hold-out corruptions, other random draws"),
        ),
    )
    parser.add_argument("--image", type=Path, help="image file to corrupt (default: scikit-image's astronaut)")
    parser.add_argument("--severities", type=float, nargs="+", default=[1.0, 2.5, 5.0], help="severities in [0, 5]")
    parser.add_argument("--holdout", action="store_true", help="also show the 4 hold-out corruptions")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random corruptions")
    parser.add_argument("--out", type=Path, default=Path("corruption_grid.png"), help="output PNG path")
    return parser


def _run(arguments: argparse.Namespace) -> int:
    severities = [validate_severity(s, "--severities") for s in arguments.severities]
    if arguments.image is None:
        image = default_image()
    else:
        try:
            with Image.open(arguments.image) as opened:
                image = center_crop_224(opened)
        except UNREADABLE_IMAGE_ERRORS as error:
            raise ValueError(f"cannot read --image {arguments.image}: {error}") from None
    names = list_corruptions() if arguments.holdout else list(CORRUPTIONS)
    grid = render_grid(image, names, severities, arguments.seed)
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    grid.save(arguments.out)
    logger.info("wrote %s (%d corruptions x %d severities)", arguments.out, len(names), len(severities))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code (0 success, 2 user error)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    arguments = build_parser().parse_args(argv)
    return run_command("ccc-corruption-grid", lambda: _run(arguments), (ValueError, OSError, UnidentifiedImageError))


if __name__ == "__main__":
    sys.exit(main())
