"""Table-path fidelity of the torch calibration backend: do its paths hold their target under the CPU path?

Usage::

    python scripts/fidelity_torch_table.py [--images 200] [--corruptions gaussian_noise,contrast]
        [--targets 50,30,12] [--device cpu] [--folder fidelity_torch_table] [--no-cpu-table] [--torch-cells]
        [--path-fraction 0.2]

On the demo world (its images, ``ccc.demo:demo_model``), with the committed demo table's settings
(docs/demo.md: adaptive scheme, blocks of 10, centre crop 224) on fewer corruptions:

1. computes a table with the torch calibration backend (``backend="torch"``, on ``--device``) and,
   unless ``--no-cpu-table``, the same table with the CPU backend ``model`` as a baseline (each kept as
   ``<folder>/<backend>.npz``; a rerun reuses it, an interrupted one resumes from its work folder);
2. finds each ordered pair's path for each target in each table (:func:`ccc.stream.paths.find_path`,
   the ``reference`` objective that streams use by default);
3. measures every cell of every path with the CPU engine (the reference rendering) on all the
   images (``<folder>/cells_cpu.json`` keeps them for a rerun) and prints, per table, pair and target:
   the path's mean accuracy in the table, its mean accuracy under the CPU path, and that accuracy
   minus the target (the issue asks ±1.5 points for the torch table), then the mean and largest
   absolute difference per table over the paths whose accuracy in the table is within 1.5 points of
   the target (a target outside a pair's range has no such path: marked "unreachable");
4. with ``--torch-cells``, also measures those paths of the torch table rendered by the torch backend
   on all the images (``cells_torch.json``): its difference to the CPU column is the rendering's
   share, its difference to the table column the adaptive scheme's estimation error.

The CPU-backend rows show how far the adaptive scheme's own estimates put a path from its target on
these images. Set ``torch.set_num_threads`` with ``--threads`` (default 1: the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from ccc.calibration.adaptive import AdaptiveSettings
from ccc.calibration.compute.backends.model import ModelBackend
from ccc.calibration.compute.backends.torch_render import TorchRenderBackend
from ccc.calibration.compute.engine import Cell, RenderContext, grid_cell
from ccc.calibration.compute.evaluator import ModelEvaluator
from ccc.calibration.compute.imageset import Preprocessing, select_calibration_images
from ccc.calibration.compute.job import MemoryResultStore, pending_units
from ccc.calibration.run import CalibrationConfig, calibrate
from ccc.calibration.table import CalibrationTable
from ccc.demo import demo_image_folder
from ccc.execution import SerialExecutor
from ccc.models import ModelSpec, load_model
from ccc.stream.paths import find_path, path_accuracies
from ccc.stream.sources import index_image_folder

DEMO_MODEL = "ccc.demo:demo_model"
BLOCK_SIZE = 10


def compute_table(backend: str, arguments: argparse.Namespace) -> CalibrationTable:
    """The demo table of ``backend`` on ``arguments``' corruptions and images (computed or reloaded)."""
    out = Path(arguments.folder) / f"{backend}.npz"
    if out.exists():
        return CalibrationTable.load(out)
    start = time.perf_counter()
    run = calibrate(
        CalibrationConfig(
            out=out,
            imagenet=demo_image_folder(),
            model=ModelSpec(DEMO_MODEL),
            corruptions=tuple(arguments.corruptions),
            images=arguments.images,
            block_size=BLOCK_SIZE,
            adaptive=AdaptiveSettings(targets=tuple(arguments.targets), path_fraction=arguments.path_fraction),
            serial=True,
            device=arguments.device if backend == "torch" else "cpu",
            backend=backend,
            show_progress=False,
        )
    )
    print(
        f"{backend} table: {run.outcome.evaluated_images:,} evaluations in {time.perf_counter() - start:.0f} s",
        flush=True,
    )
    return run.table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=200, help="calibration images of the demo folder")
    parser.add_argument("--corruptions", type=lambda text: text.split(","), default=["gaussian_noise", "contrast"])
    parser.add_argument("--targets", type=lambda text: [float(v) for v in text.split(",")], default=[50.0, 30.0, 12.0])
    parser.add_argument("--device", default="cpu", help="device of the torch backend (cpu or cuda[:index])")
    parser.add_argument("--folder", default="fidelity_torch_table", help="where the tables are kept")
    parser.add_argument("--no-cpu-table", action="store_true", help="skip the CPU-backend baseline table")
    parser.add_argument(
        "--path-fraction",
        type=float,
        default=AdaptiveSettings.path_fraction,
        help="largest share of the images a pair cell on a path gets (the adaptive scheme's path_fraction; "
        "default 1/5 as the demo table; 1 measures path cells on every image)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--torch-cells",
        action="store_true",
        help="also measure the torch table's paths (those within 1.5 points of their target in the table) "
        "rendered by the torch backend on all the images",
    )
    arguments = parser.parse_args()
    torch.set_num_threads(arguments.threads)
    Path(arguments.folder).mkdir(parents=True, exist_ok=True)

    backends = ["torch"] + ([] if arguments.no_cpu_table else ["model"])
    tables = {backend: compute_table(backend, arguments) for backend in backends}
    corruptions = tables["torch"].corruptions
    paths = {
        (backend, n1, n2, target): find_path(table.grid(n1, n2), target)
        for backend, table in tables.items()
        for n1, n2 in table.pairs()
        for target in arguments.targets
    }

    index = index_image_folder(demo_image_folder(), progress=False)
    image_set = select_calibration_images(index, arguments.images, 0, Preprocessing())
    context = RenderContext(image_set, corruptions, 0, BLOCK_SIZE)
    model = load_model(ModelSpec(DEMO_MODEL), "cpu")

    def path_cells(path: list[tuple[int, int]], n1: str, n2: str) -> list[Cell]:
        return [grid_cell(corruptions.index(n1), corruptions.index(n2), i, j) for i, j in path]

    cpu = measure_cells(
        "cpu", ModelBackend(SerialExecutor(), context, model), context, paths, path_cells, arguments.folder
    )
    rendered: dict[Cell, float] = {}
    reachable = {key for key, path in paths.items() if abs(claimed_accuracy(tables, key, path) - key[3]) <= 1.5}
    if arguments.torch_cells:
        backend = TorchRenderBackend(context, ModelEvaluator(model, arguments.device))
        chosen = {key: path for key, path in paths.items() if key[0] == "torch" and key in reachable}
        rendered = measure_cells("torch", backend, context, chosen, path_cells, arguments.folder)

    print(
        "| table | pair | target | path cells | in the table | torch on all images | under the CPU path "
        "| CPU path − target |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    differences: dict[str, list[float]] = {backend: [] for backend in backends}
    for key, path in paths.items():
        backend, n1, n2, target = key
        cells = path_cells(path, n1, n2)
        claimed = claimed_accuracy(tables, key, path)
        measured = float(np.mean([cpu[cell] for cell in cells]))
        on_torch = f"{np.mean([rendered[cell] for cell in cells]):.2f}" if all(c in rendered for c in cells) else "—"
        if key in reachable:
            differences[backend].append(measured - target)
        print(
            f"| {backend} | {n1} → {n2} | {target:g} | {len(path)} | {claimed:.2f} | {on_torch} | {measured:.2f} "
            f"| {measured - target:+.2f}{'' if key in reachable else ' (unreachable)'} |"
        )
    print()
    for backend, values in differences.items():
        absolute = np.abs(values)
        print(
            f"{backend} table: mean |CPU path − target| {absolute.mean():.2f} points, largest {absolute.max():.2f} "
            f"points over its {len(values)} paths whose table accuracy is within 1.5 points of the target"
        )


def claimed_accuracy(tables: dict[str, CalibrationTable], key: tuple[str, str, str, float], path) -> float:  # type: ignore[no-untyped-def]
    """A path's mean accuracy in the table it was found in (percent)."""
    backend, n1, n2, _ = key
    return float(np.mean(path_accuracies(tables[backend].grid(n1, n2), path)))


def measure_cells(name, backend, context, paths, path_cells, folder) -> dict[Cell, float]:  # type: ignore[no-untyped-def]
    """Accuracy (percent, all images) of every cell of ``paths`` rendered by ``backend``, cached in
    ``<folder>/cells_<name>.json`` (a rerun measures only the cells not there yet)."""
    cache = Path(folder) / f"cells_{name}.json"
    known = (
        {Cell(*map(int, text.split(","))): value for text, value in json.loads(cache.read_text()).items()}
        if cache.exists()
        else {}
    )
    wanted = {cell for (_, n1, n2, _), path in paths.items() for cell in path_cells(path, n1, n2)} - set(known)
    start = time.perf_counter()
    store = MemoryResultStore()
    backend.run(pending_units({cell: context.block_count for cell in wanted}, {}, context.block_count), store.append)
    for cell in wanted:
        correct = sum(store.results[(cell, block)] for block in range(context.block_count))
        known[cell] = 100.0 * correct / len(context.image_set)
    cache.write_text(json.dumps({",".join(map(str, cell)): value for cell, value in known.items()}))
    print(
        f"{name} rendering: {len(wanted)} path cells on {len(context.image_set)} images in "
        f"{time.perf_counter() - start:.0f} s",
        flush=True,
    )
    return known


if __name__ == "__main__":
    main()
