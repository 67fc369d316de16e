"""Benchmark: CPU milliseconds per image of every corruption of a corruption set (``ccc.corruptions`` with
``corruption_set=…``, generator mode), beside the public script's own functions when you give them.

One core (thread pools of BLAS, OpenMP, OpenCV, numba and ImageMagick limited to 1 thread). Random images
of the set's size; per corruption and integer severity, ``--images`` images each through ``ccc`` and then
through the public function (``np.random.seed(0)`` first), in one process; the figure is CPU time per
image over all severities. The public scripts are not part of this project: ``--reference FILE`` loads a
module holding the distortion functions of ``make_cifar_c.py`` (or ``make_tinyimagenet_c.py``) as you
copied them, with the script's name for each (``elastic_transform``, ``jpeg_compression``) and its working
directory holding the frost textures; without it only ``ccc`` is timed.

    python scripts/bench/corruption_sets.py --corruption-set cifar --reference ~/make_cifar_c_functions.py
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_variable] = "1"
os.environ["MAGICK_THREAD_LIMIT"] = "1"

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from types import ModuleType  # noqa: E402

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout first
from ccc.corruptions import corrupt, get_corruption_set, list_corruption_sets, list_corruptions  # noqa: E402

REFERENCE_NAMES = {"elastic": "elastic_transform", "jpeg": "jpeg_compression"}
"""Our corruption names that the public scripts spell otherwise."""

PIL_INPUTS = ("motion_blur", "jpeg_compression", "pixelate")
"""Public functions that call PIL methods on their input (the others take it as an array too)."""


def _load_reference(path: Path) -> ModuleType:
    specification = importlib.util.spec_from_file_location("public_reference", path)
    if specification is None or specification.loader is None:
        raise SystemExit(f"corruption_sets.py: error: --reference {path} is not a Python file")
    module = importlib.util.module_from_spec(specification)
    specification.loader.exec_module(module)
    return module


def _cpu_ms(call: Callable[[np.ndarray, int], object], images: np.ndarray) -> float:
    start = time.process_time()
    for position, image in enumerate(images):
        call(image, position)
    return 1e3 * (time.process_time() - start)


def measure(corruption_set: str, images: int, severities: Sequence[int], reference: ModuleType | None) -> dict:
    """Per corruption: ccc's and (with ``reference``) the public function's CPU ms per image."""
    size = get_corruption_set(corruption_set).image_size
    pixels = np.random.default_rng(0).integers(0, 256, (images, size, size, 3), dtype=np.uint8)
    rows = {}
    for name in list_corruptions():
        ours = theirs = 0.0
        public = None if reference is None else getattr(reference, REFERENCE_NAMES.get(name, name))
        for severity in severities:
            ours += _cpu_ms(
                lambda image, k: corrupt(image, name, float(severity), rng=k, corruption_set=corruption_set), pixels
            )
            if public is not None:
                np.random.seed(0)
                theirs += _cpu_ms(lambda image, _: np.uint8(public(Image.fromarray(image), severity)), pixels)
        count = images * len(severities)
        rows[name] = {"ccc_ms": ours / count, "reference_ms": theirs / count if public is not None else None}
    return rows


def table(rows: dict) -> str:
    lines = ["| corruption | ccc ms/image | public script ms/image | ratio |", "|---|---:|---:|---:|"]
    for name, row in {**rows, "mean": _mean(rows)}.items():
        reference = row["reference_ms"]
        shown = f"{reference:.3f} | {reference / row['ccc_ms']:.2f}" if reference is not None else "— | —"
        lines.append(f"| {name} | {row['ccc_ms']:.3f} | {shown} |")
    return "\n".join(lines)


def _mean(rows: dict) -> dict:
    references = [row["reference_ms"] for row in rows.values()]
    return {
        "ccc_ms": float(np.mean([row["ccc_ms"] for row in rows.values()])),
        "reference_ms": float(np.mean(references)) if None not in references else None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corruption-set", choices=list_corruption_sets(), default="cifar")
    parser.add_argument("--images", type=int, default=200, help="images per corruption and severity (default 200)")
    parser.add_argument("--severities", default="1,3,5", help="comma list of integer severities (default 1,3,5)")
    parser.add_argument("--reference", type=Path, help="a module file with the public script's distortion functions")
    parser.add_argument("--json", type=Path, help="write the rows to this JSON file")
    arguments = parser.parse_args(argv)
    reference = None
    if arguments.reference is not None:
        os.chdir(arguments.reference.resolve().parent)
        reference = _load_reference(arguments.reference.resolve())
    severities = [int(value) for value in arguments.severities.split(",")]
    rows = measure(arguments.corruption_set, arguments.images, severities, reference)
    print(table(rows))
    if arguments.json is not None:
        arguments.json.write_text(json.dumps({"corruption_set": arguments.corruption_set, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
