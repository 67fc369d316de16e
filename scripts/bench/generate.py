"""Benchmark: end-to-end stream rendering (decode → crop → corruption pair → JPEG → tar), images/s per core.

Measures, in one run and on the same samples:

1. **ccc, one core**: ``ccc.generate.generate_stream`` with the serial backend (plan, read, decode,
   random-resized crop with PIL, ``corrupt_pair``, JPEG q85 optimised, tar shard, sha256, manifest).
2. **reference style, one core**: the public generator's per-sample pipeline on the same source
   images and the same (n1, s1, n2, s2): ``PIL.Image.open(...).convert("RGB")``, torchvision
   ``RandomHorizontalFlip`` + ``RandomResizedCrop(224)`` on the PIL image, the reference-style
   corruptions (``reference_style.reference_corrupt``, the original algorithms on modern libraries)
   with the ``np.uint8`` round trip between them, JPEG q85 optimised, ``webdataset.TarWriter``.
   The public code's per-step re-listing and shuffling of the whole image folder is not included.
3. **Ray scaling** (``--ray-workers 1,2``): ``generate_stream`` with ``RayExecutor`` on a local
   cluster of 1 and of 2 CPUs, after a warm-up stream in the same cluster.
4. **Memory** (``--memory-images N``): resident memory of this process sampled every second while
   the serial backend renders an N-image stream (speed 2000 or the number of source images if
   smaller, 25,000-sample shards, hard difficulty).

Streams use speed 1 so that a few hundred consecutive samples visit many corruption pairs and
severities: every path step of any stream is equally weighted, so this is the stream's pair mix at
any speed. The calibration table is synthetic (no ImageNet or real table here): a smooth accuracy
model over all 15 corruptions with the public difficulty lists, so the paths are realistic in shape
but not the real ResNet-50 ones. Source images: natural photographs from scikit-image, randomly
cropped and resized to ImageNet's typical 500×375 / 375×500, JPEG quality 90.

Everything runs with one thread per process (BLAS, OpenMP, numba, OpenCV, ImageMagick). Per-core
figures are CPU seconds of this process by default (``--clock cpu``), robust to other load on a
shared machine; ``--clock wall`` gives elapsed time. Ray scaling and memory use wall time.

    python scripts/bench/generate.py --samples 300 --ray-workers 1,2 --json results/bench_generate.json
"""

from __future__ import annotations

import os

for _variable in (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMBA_NUM_THREADS",
    "MAGICK_THREAD_LIMIT",
):
    os.environ[_variable] = "1"
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import argparse  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torchvision.transforms as transforms  # noqa: E402
from PIL import Image  # noqa: E402

from ccc.calibration import RESNET50_DIFFICULTY_PRESETS, CalibrationMetadata, CalibrationTable  # noqa: E402
from ccc.corruptions import corrupt_pair  # noqa: E402
from ccc.execution import RayExecutor, SerialExecutor  # noqa: E402
from ccc.generate import generate_stream, library_versions  # noqa: E402
from ccc.render import render_sample  # noqa: E402
from ccc.shards.record import format_info  # noqa: E402
from ccc.shards.writer import ShardWriter  # noqa: E402
from ccc.stream.plan import build_stream_plan, plan_sample  # noqa: E402
from ccc.stream.sources import index_image_folder, load_source_images  # noqa: E402
from ccc.stream.spec import StreamSpec  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.reference_style
from tests.reference_style import MAIN_CORRUPTIONS, WAND_CORRUPTIONS, reference_corrupt  # noqa: E402

cv2.setNumThreads(1)
torch.set_num_threads(1)


def make_source_folder(root: Path, count: int, classes: int = 10, seed: int = 0) -> Path:
    """``count`` ImageNet-size JPEGs (500×375 or 375×500, quality 90) from scikit-image photographs."""
    from skimage import data

    photographs = [
        data.astronaut(),
        data.coffee(),
        data.chelsea(),
        data.rocket(),
        data.immunohistochemistry(),
        data.hubble_deep_field(),
    ]
    generator = np.random.default_rng(seed)
    for index in range(count):
        photograph = Image.fromarray(photographs[index % len(photographs)])
        width, height = photograph.size
        crop_width, crop_height = int(width * generator.uniform(0.6, 1)), int(height * generator.uniform(0.6, 1))
        left, top = (
            int(generator.integers(0, width - crop_width + 1)),
            int(generator.integers(0, height - crop_height + 1)),
        )
        size = (500, 375) if generator.random() < 0.75 else (375, 500)
        image = photograph.crop((left, top, left + crop_width, top + crop_height)).resize(
            size, Image.Resampling.BICUBIC
        )
        folder = root / f"n{index % classes:08d}"
        folder.mkdir(parents=True, exist_ok=True)
        image.save(folder / f"ILSVRC2012_val_{index:08d}.JPEG", quality=90)
    return root


def synthetic_table(seed: int = 0) -> CalibrationTable:
    """All 15 corruptions, accuracy ``76·exp(-a·i)·exp(-b·j)`` (± 1 %) with a per-corruption rate, ResNet-50 presets."""
    generator = np.random.default_rng(seed)
    rates = dict(zip(MAIN_CORRUPTIONS, generator.uniform(0.05, 0.35, len(MAIN_CORRUPTIONS))))
    steps = np.arange(21)
    grids = {}
    for first in MAIN_CORRUPTIONS:
        for second in MAIN_CORRUPTIONS:
            if first != second:
                grid = 76.0 * np.exp(-rates[first] * steps)[:, None] * np.exp(-rates[second] * steps)[None, :]
                grids[(first, second)] = np.clip(grid + generator.uniform(-1, 1, grid.shape), 0, 100)
    metadata = CalibrationMetadata(
        model_name="synthetic benchmark model", preprocessing="none", image_set_description="none", image_count=5000,
    )  # fmt: skip
    return CalibrationTable.from_grids(
        MAIN_CORRUPTIONS,
        grids,
        image_counts=5000,
        metadata=metadata,
        difficulty_presets=dict(RESNET50_DIFFICULTY_PRESETS),
    )


def make_plan(
    table: CalibrationTable,
    sources,
    difficulty: str,
    num_images: int,
    speed: int = 1,
    seed: int = 43,
    shard_size: int | None = None,
):
    target, corruptions = table.difficulty_presets[difficulty]
    spec = StreamSpec(
        target_accuracy=target, corruptions=corruptions, speed=speed, seed=seed, num_images=num_images,
        calibration_checksum=table.checksum(), source_index_checksum=sources.index_checksum, difficulty=difficulty,
        shard_size=shard_size or num_images,
    )  # fmt: skip
    return build_stream_plan(spec, table, sources)


def warm_up() -> None:
    """One call of every corruption on both sides (numba compilation, cached kernels, frost files)."""
    image = np.asarray(Image.new("RGB", (224, 224), (120, 90, 60)))
    for name in MAIN_CORRUPTIONS:
        corrupt_pair(image, name, 1.0, name, 0.0, rng=0)
        reference_corrupt(image, name, 1.0, np.random.RandomState(0))


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
"""cpu: CPU seconds of this (single-threaded) process, the per-core cost, robust to other load on a
shared machine; wall: elapsed seconds. Ray and memory measurements always use wall time."""


def run_ours(plan, folder: Path, clock) -> float:
    """Seconds per image of ``generate_stream`` (serial backend) over the whole plan, including its setup."""
    started = clock()
    summary = generate_stream(plan, folder, SerialExecutor(), progress=False, overwrite=True)
    return (clock() - started) / summary.images_rendered


def ours_per_sample(plan, folder: Path, clock) -> list[float]:
    """Seconds of each sample through ccc's per-sample work: plan, read, render, tar member writes."""
    root = Path(plan.sources.root)
    folder.mkdir(parents=True, exist_ok=True)
    times = []
    with ShardWriter(folder, 0, 0) as writer:
        for index in range(plan.spec.num_images):
            started = clock()
            spec = plan_sample(plan, index)
            writer.write(render_sample(spec, (root / spec.source_path).read_bytes()))
            times.append(clock() - started)
        writer.commit()
    return times


def reference_per_sample(plan, folder: Path, clock) -> list[float]:
    """Seconds of each sample through the public generator's per-sample pipeline on the plan's samples."""
    import webdataset

    samples = [plan_sample(plan, index) for index in range(plan.spec.num_images)]
    root = Path(plan.sources.root)
    crop = transforms.Compose([transforms.RandomHorizontalFlip(), transforms.RandomResizedCrop(224)])
    torch.manual_seed(plan.spec.seed)
    state = np.random.RandomState(plan.spec.seed)
    folder.mkdir(parents=True, exist_ok=True)
    times = []
    with webdataset.TarWriter(str(folder / "reference.tar")) as sink:
        for position, spec in enumerate(samples):
            started = clock()
            with open(root / spec.source_path, "rb") as handle:
                image = Image.open(handle).convert("RGB")
            array = np.asarray(crop(image))
            if spec.s1 > 0:
                array = reference_corrupt(array, spec.n1, spec.s1, state)
            if spec.s2 > 0:
                array = reference_corrupt(array, spec.n2, spec.s2, state)
            buffer = io.BytesIO()
            Image.fromarray(array).save(buffer, format="JPEG", quality=85, optimize=True)
            sink.write(
                {
                    "__key__": f"sample_{position}",
                    "info": format_info(spec),
                    "input.jpg": buffer.getvalue(),
                    "output.cls": spec.class_index,
                }
            )
            times.append(clock() - started)
    return times


def uses_imagemagick(spec) -> bool:
    """Whether the reference-style pipeline calls ImageMagick (motion blur, snow) for this sample."""
    return (spec.s1 > 0 and spec.n1 in WAND_CORRUPTIONS) or (spec.s2 > 0 and spec.n2 in WAND_CORRUPTIONS)


def run_ray(table, sources, workers_list: list[int], num_images: int, folder: Path) -> dict[int, float]:
    """Images/s of ``generate_stream`` with Ray on local clusters of each size in ``workers_list``."""
    from ccc.execution import ray_session

    results = {}
    for workers in workers_list:
        with ray_session(workers=workers, object_store_bytes=200 * 2**20) as ray:
            executor = RayExecutor(ray)
            generate_stream(
                make_plan(table, sources, "medium", 25 * 2 * workers, seed=7),
                folder / f"warmup{workers}",
                executor,
                progress=False,
                overwrite=True,
            )
            summary = generate_stream(
                make_plan(table, sources, "medium", num_images),
                folder / f"ray{workers}",
                executor,
                progress=False,
                overwrite=True,
            )
            results[workers] = summary.images_per_second
    return results


def resident_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run_memory(table, sources, num_images: int, folder: Path) -> dict[str, float]:
    """Resident memory (MB) while rendering ``num_images`` serially: early (after 5 % of the time),
    max afterwards, final.

    Speed 2000 (or the number of source images if smaller), 25,000-sample shards, hard difficulty.
    """
    plan = make_plan(table, sources, "hard", num_images, speed=min(2000, len(sources)), shard_size=25_000)
    samples: list[tuple[float, int]] = []
    stop = threading.Event()

    def sample_memory() -> None:
        while not stop.wait(1.0):
            samples.append((time.perf_counter(), resident_bytes()))

    sampler = threading.Thread(target=sample_memory, daemon=True)
    started = time.perf_counter()
    sampler.start()
    try:
        summary = generate_stream(plan, folder / "memory", SerialExecutor(), progress=True, overwrite=True)
    finally:
        stop.set()
        sampler.join()
    duration = time.perf_counter() - started
    early = [rss for moment, rss in samples if moment - started <= 0.05 * duration] or [samples[0][1]]
    later = [rss for moment, rss in samples if moment - started > 0.05 * duration]
    return {
        "images": summary.images_rendered,
        "speed": plan.spec.speed,
        "seconds": duration,
        "rss_mb_after_5_percent": max(early) / 1e6,
        "rss_mb_max_afterwards": max(later) / 1e6 if later else float("nan"),
        "rss_mb_final": samples[-1][1] / 1e6,
        "rss_mb_every_10_seconds": [round(rss / 1e6, 1) for _, rss in samples[::10]],
    }


def print_per_core_table(rows: list[dict], clock_name: str) -> None:
    """The per-core comparison as a markdown table on stdout."""
    print(f"\n## Rendering on one core (ms per image, {clock_name} time)\n")
    print(
        "| difficulty | pairs visited | ccc generate_stream | ccc per-sample loop | reference style | speed-up "
        "| samples w/o ImageMagick | ccc on those | reference on those | speed-up on those |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['difficulty']} | {row['pairs']} | {row['ccc_end_to_end_ms']:.1f} | {row['ccc_ms']:.1f} | "
            f"{row['reference_ms']:.1f} | {row['reference_ms'] / row['ccc_end_to_end_ms']:.1f}× | "
            f"{row['samples_without_imagemagick']} | {row['ccc_ms_without_imagemagick']:.1f} | "
            f"{row['reference_ms_without_imagemagick']:.1f} | "
            f"{row['reference_ms_without_imagemagick'] / row['ccc_ms_without_imagemagick']:.1f}× |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--samples",
        type=int,
        default=300,
        help="samples per difficulty and pipeline (default 300; 0 skips the per-core comparison)",
    )
    parser.add_argument("--source-images", type=int, default=300, help="source JPEGs to create (default 300)")
    parser.add_argument("--difficulties", default="medium,easy", help="comma list of presets (default medium,easy)")
    parser.add_argument(
        "--ray-workers", default="", help="comma list of local Ray cluster sizes, e.g. 1,2 (default: skip)"
    )
    parser.add_argument(
        "--ray-samples",
        type=int,
        default=1600,
        help="samples per Ray measurement (default 1600; short streams understate scaling)",
    )
    parser.add_argument(
        "--memory-images",
        type=int,
        default=0,
        help="also render a stream of this length and track memory (default: skip)",
    )
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="cpu",
        help="per-core timing: cpu (default, CPU time of this process) or wall",
    )
    parser.add_argument("--json", metavar="PATH", help="write all numbers as JSON")
    arguments = parser.parse_args()
    clock = CLOCKS[arguments.clock]

    results: dict = {
        "library_versions": library_versions(),
        "cpu": platform.processor() or platform.machine(),
        "settings": vars(arguments),
    }
    with tempfile.TemporaryDirectory(prefix="ccc-bench-") as temporary:
        root = Path(temporary)
        print(f"creating {arguments.source_images} source images …", file=sys.stderr)
        folder = make_source_folder(root / "val", arguments.source_images)
        sources = load_source_images(index_image_folder(folder, progress=False))
        table = synthetic_table()
        print("warming up …", file=sys.stderr)
        warm_up()
        rows = []
        for difficulty in arguments.difficulties.split(",") if arguments.samples > 0 else []:
            plan = make_plan(table, sources, difficulty, arguments.samples)
            specs = [plan_sample(plan, index) for index in range(arguments.samples)]
            print(f"{difficulty}: ccc …", file=sys.stderr)
            end_to_end = run_ours(plan, root / f"ours-{difficulty}", clock)
            ours = np.array(ours_per_sample(plan, root / f"ours-loop-{difficulty}", clock))
            print(f"{difficulty}: reference style …", file=sys.stderr)
            reference = np.array(reference_per_sample(plan, root / f"reference-{difficulty}", clock))
            plain = np.array([not uses_imagemagick(spec) for spec in specs])
            rows.append({
                "difficulty": difficulty,
                "pairs": len(plan.schedule.visits(arguments.samples)),
                "ccc_end_to_end_ms": end_to_end * 1e3,
                "ccc_ms": float(ours.mean() * 1e3),
                "reference_ms": float(reference.mean() * 1e3),
                "samples_without_imagemagick": int(plain.sum()),
                "ccc_ms_without_imagemagick": float(ours[plain].mean() * 1e3) if plain.any() else float("nan"),
                "reference_ms_without_imagemagick": (
                    float(reference[plain].mean() * 1e3) if plain.any() else float("nan")
                ),
            })  # fmt: skip
        results["per_core"] = rows
        if rows:
            print_per_core_table(rows, arguments.clock)
        if arguments.ray_workers:
            workers_list = [int(value) for value in arguments.ray_workers.split(",")]
            print("Ray …", file=sys.stderr)
            ray_results = run_ray(table, sources, workers_list, arguments.ray_samples, root)
            results["ray_images_per_second"] = ray_results
            print("\n## Ray, medium, local cluster\n\n| workers | images/s | scaling vs first |\n|---|---|---|")
            first = ray_results[workers_list[0]]
            for workers, rate in ray_results.items():
                print(f"| {workers} | {rate:.1f} | {rate / first:.2f}× |")
        if arguments.memory_images:
            print("memory run …", file=sys.stderr)
            memory = run_memory(table, sources, arguments.memory_images, root)
            results["memory"] = memory
            print(f"\n## Memory, serial, hard, speed {memory['speed']}\n")
            print(
                f"{memory['images']:,} images in {memory['seconds']:.0f} s; resident memory after 5 % of the run "
                f"{memory['rss_mb_after_5_percent']:.0f} MB, max afterwards {memory['rss_mb_max_afterwards']:.0f} MB, "
                f"final {memory['rss_mb_final']:.0f} MB"
            )
    if arguments.json:
        Path(arguments.json).parent.mkdir(parents=True, exist_ok=True)
        Path(arguments.json).write_text(json.dumps(results, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
