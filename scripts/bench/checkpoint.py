"""Benchmark of tta-eval's checkpoints: size and write time per model, and the overhead of a run's checkpoints.

Size and write time: for each model (the demo model, ``ccc.demo:demo_model``, and torchvision's
ResNet-50 with random weights; ``--models`` to choose) the methods of ``--methods`` are created on
it, each adapts once on a batch of random images (so optimisers hold their state), and the
checkpoint a run of these methods would write (``tta_eval.checkpoint.write_checkpoint`` of a
``Checkpoint`` holding each method's ``method_state_dict``: tensors and plain values, atomically
written and fsynced) is written ``--repeats`` times to
``--folder``; the size and the median write time are reported.

Overhead: ``tta_eval.experiment.run_experiment`` runs the demo model's methods (source, bn, tent,
eta, rdumb) over a synthetic stream of 224×224 images (``--batches`` batches of 64) with a checkpoint
every ``--every`` samples, timing every checkpoint (records flushed and fsynced, the file written).
It reports the share of the run's wall time spent in checkpoints at that interval and, from the
mean checkpoint time and the run's samples per second, the share at the default interval
(``tta_eval.checkpoint.DEFAULT_CHECKPOINT_EVERY``). One torch thread unless ``--threads``.

    python scripts/bench/checkpoint.py
    python scripts/bench/checkpoint.py --models demo --batches 20 --every 320
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ccc.models import ModelSpec, load_model
from tta_eval.checkpoint import DEFAULT_CHECKPOINT_EVERY, Checkpoint, Checkpointer, write_checkpoint
from tta_eval.experiment import run_experiment
from tta_eval.methods import create
from tta_eval.methods.base import method_state_dict
from tta_eval.run_folder import CHECKPOINT_FILE
from tta_eval.settings import ExperimentSettings, MethodSpec
from tta_eval.streams import StreamOptions

MODELS = {"demo": ModelSpec("ccc.demo:demo_model"), "resnet50": ModelSpec("resnet50", weights="none")}
RUN_METHODS = ("source", "bn", "tent", "eta", "rdumb")


def checkpoint_cost(
    model_name: str, methods: list[str], folder: Path, repeats: int, image_size: int
) -> tuple[int, float]:
    """(bytes, median seconds) of collecting the state of ``methods`` on model ``model_name`` and
    writing their checkpoint."""
    model = load_model(MODELS[model_name], torch.device("cpu"))
    images = torch.rand(4, 3, image_size, image_size)
    modules = {}
    for name in methods:
        method = create(name, model)
        method(images)
        modules[name] = method
    seconds = []
    size = 0
    for _ in range(repeats):
        started = time.perf_counter()
        states = {name: method_state_dict(method) for name, method in modules.items()}
        size = write_checkpoint(folder / CHECKPOINT_FILE, Checkpoint("{}", 0, 0, states, {}, {}, {}, {}, {}, {}))
        seconds.append(time.perf_counter() - started)
    return size, statistics.median(seconds)


def run_overhead(folder: Path, batches: int, every: int) -> dict[str, float]:
    """Wall time of a demo-model run and of its checkpoints (seconds), samples, checkpoints."""
    timed: list[float] = []
    save = Checkpointer.save

    def timed_save(self: Checkpointer, state: dict, samples: int) -> None:
        started = time.perf_counter()
        save(self, state, samples)
        timed.append(time.perf_counter() - started)

    Checkpointer.save = timed_save  # type: ignore[method-assign]
    try:
        settings = ExperimentSettings(
            stream=f"synthetic:num_batches={batches},num_classes=16,image_size=224",
            methods=tuple(MethodSpec(name, name) for name in RUN_METHODS),
            model=MODELS["demo"],
            output_root=folder,
            run_name="overhead",
            stream_options=StreamOptions(batch_size=64),
            collapse_reference=None,
            progress=False,
            checkpoint_every=every,
        )
        started = time.perf_counter()
        run_experiment(settings)
        wall = time.perf_counter() - started
    finally:
        Checkpointer.save = save  # type: ignore[method-assign]
    return {
        "wall": wall,
        "checkpoints": float(len(timed)),
        "checkpoint_seconds": sum(timed),
        "samples": float(batches * 64),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="demo,resnet50", help="comma-separated: demo, resnet50")
    parser.add_argument("--methods", default="source,tent,eta,rdumb,cotta", help="methods in the measured checkpoint")
    parser.add_argument("--repeats", type=int, default=3, help="writes per model (median reported)")
    parser.add_argument("--batches", type=int, default=40, help="batches of 64 in the overhead run (0: skip it)")
    parser.add_argument("--every", type=int, default=640, help="samples between checkpoints in the overhead run")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--folder", type=Path, default=None, help="where to write (default: a temporary folder)")
    arguments = parser.parse_args()
    torch.set_num_threads(arguments.threads)
    methods = arguments.methods.split(",")
    with tempfile.TemporaryDirectory() as temporary:
        folder = arguments.folder or Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        print(f"| model | methods | checkpoint size (MB) | write time (s, median of {arguments.repeats}) |")
        print("|---|---|---:|---:|")
        for model_name in arguments.models.split(","):
            size, seconds = checkpoint_cost(model_name, methods, folder, arguments.repeats, 64)
            print(f"| {model_name} | {', '.join(methods)} | {size / 1e6:.1f} | {seconds:.3f} |")
        if arguments.batches:
            result = run_overhead(folder, arguments.batches, arguments.every)
            per_checkpoint = result["checkpoint_seconds"] / max(result["checkpoints"], 1.0)
            run_seconds = result["wall"] - result["checkpoint_seconds"]
            seconds_per_default_interval = run_seconds / result["samples"] * DEFAULT_CHECKPOINT_EVERY
            print()
            print(
                f"demo-model run ({', '.join(RUN_METHODS)}; "
                f"{result['samples']:.0f} samples of 224×224 in {result['wall']:.1f} s): "
                f"{result['checkpoints']:.0f} checkpoints every {arguments.every:,} samples "
                f"took {result['checkpoint_seconds']:.2f} s "
                f"({100 * result['checkpoint_seconds'] / result['wall']:.2f} % of the run; "
                f"{per_checkpoint:.3f} s each); "
                f"at the default interval of {DEFAULT_CHECKPOINT_EVERY:,} samples: "
                f"{100 * per_checkpoint / (seconds_per_default_interval + per_checkpoint):.3f} % of the run time"
            )


if __name__ == "__main__":
    main()
