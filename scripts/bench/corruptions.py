"""Benchmark: milliseconds per 224x224 image of every corruption, ccc.corruptions vs reference style.

Runs on one core (thread pools of BLAS, OpenMP, OpenCV, numba and ImageMagick limited to 1 thread).
For each corruption and severity, every repetition times the project's ``ccc.corruptions.corrupt``
and the reference-style implementation (``reference_style.reference_corrupt``) on the same images,
alternating which of the two goes first; the reported figure is the median over repetitions of the
time per image. Optionally also times ``corrupt_batch`` per image, and scans a fine severity grid
(0.05..5) for the project's slowest case (the goal: no corruption slower than 20 ms/image).

    python scripts/bench/corruptions.py --repeats 5 --json results/bench_corruptions.json

See scripts/bench/README.md for all options.
"""

from __future__ import annotations

import os

# Before numpy, OpenCV and Wand are imported: one thread everywhere.
_THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMBA_NUM_THREADS",
    "MAGICK_THREAD_LIMIT",
)
for _variable in _THREAD_VARIABLES:
    os.environ[_variable] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from importlib import metadata  # noqa: E402
from pathlib import Path  # noqa: E402

import cv2  # noqa: E402
import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.reference_style
from tests.reference_style import ALL_CORRUPTIONS, MAIN_CORRUPTIONS, WAND_CORRUPTIONS, reference_corrupt  # noqa: E402

cv2.setNumThreads(1)

REPOSITORY = Path(__file__).resolve().parents[2]
GOLDEN_INPUTS = REPOSITORY / "tests" / "golden" / "corruption_inputs.npz"
DEFAULT_SEVERITIES = (0.25, 0.5, 1.0, 2.25, 3.0, 5.0)
GRID_SEVERITIES = tuple(round(0.05 * step, 2) for step in range(1, 101))
TARGET_MS_PER_IMAGE = 20.0


class UsageError(Exception):
    """A user mistake on the command line; reported as one line, exit code 2."""


@dataclass(frozen=True)
class Measurement:
    """Median milliseconds per image of one corruption at one severity (None: not measured)."""

    corruption: str
    severity: float
    ccc_ms: float | None
    reference_ms: float | None
    ccc_batch_ms: float | None

    @property
    def speedup(self) -> float | None:
        """Reference time divided by the project's time (> 1: the project is faster)."""
        if self.ccc_ms is None or self.reference_ms is None:
            return None
        return self.reference_ms / self.ccc_ms


def synthetic_natural_image(seed: int, size: int = 224) -> np.ndarray:
    """A deterministic natural-looking RGB uint8 image: 1/f (pink) colour noise plus a few sharp shapes.

    Natural images have roughly 1/f amplitude spectra and hard edges; both matter for the speed of
    some corruptions (JPEG, Canny in spatter, colour conversions), so a flat or white-noise image
    would be unrepresentative.
    """
    rng = np.random.default_rng(seed)
    frequencies = np.sqrt(np.fft.fftfreq(size)[:, None] ** 2 + np.fft.rfftfreq(size)[None, :] ** 2)
    frequencies[0, 0] = 1.0
    channels = []
    for _ in range(3):
        spectrum = (rng.normal(size=frequencies.shape) + 1j * rng.normal(size=frequencies.shape)) / frequencies
        channels.append(np.fft.irfft2(spectrum, s=(size, size)))
    image = np.stack(channels, axis=-1)
    image = (image - image.min()) / (image.max() - image.min())
    rows, columns = np.mgrid[0:size, 0:size]
    for _ in range(6):
        centre_row, centre_column = rng.uniform(0, size, size=2)
        radius = rng.uniform(size / 20, size / 5)
        inside = (rows - centre_row) ** 2 + (columns - centre_column) ** 2 < radius**2
        image[inside] = rng.uniform(0, 1, size=3)
    return np.round(image * 255).astype(np.uint8)


def load_images(source: str) -> np.ndarray:
    """Benchmark inputs as an Nx224x224x3 uint8 array.

    source: ``golden`` (the two golden input images), ``synthetic`` (two synthetic natural-ish
    images) or the path of an image file (centre-cropped to a square, resized to 224 with PIL
    bilinear).
    """
    if source == "golden":
        return np.load(GOLDEN_INPUTS)["images"]
    if source == "synthetic":
        return np.stack([synthetic_natural_image(seed) for seed in (0, 1)])
    path = Path(source)
    if not path.is_file():
        raise UsageError(f"--image must be 'golden', 'synthetic' or an image file, got {source!r}")
    try:
        with Image.open(path) as opened:
            picture = opened.convert("RGB")
    except OSError as error:
        raise UsageError(f"--image {source!r} is not a readable image: {error}") from error
    side = min(picture.size)
    left, top = (picture.width - side) // 2, (picture.height - side) // 2
    picture = picture.crop((left, top, left + side, top + side)).resize((224, 224), Image.BILINEAR)
    return np.asarray(picture)[np.newaxis]


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
"""cpu: CPU seconds of this (single-threaded) process, the per-core cost, robust to other load on a
shared machine; wall: elapsed seconds."""
_clock = CLOCKS["cpu"]


def _seconds_per_image(run_one: Callable[[np.ndarray, int], object], images: np.ndarray, seed_base: int) -> float:
    start = _clock()
    for index, image in enumerate(images):
        run_one(image, seed_base + index)
    return (_clock() - start) / len(images)


def _ccc_runner(ccc_corruptions, name: str, severity: float) -> Callable[[np.ndarray, int], object]:
    return lambda image, seed: ccc_corruptions.corrupt(image, name, severity, rng=np.random.default_rng(seed))


def _reference_runner(name: str, severity: float) -> Callable[[np.ndarray, int], object]:
    return lambda image, seed: reference_corrupt(image, name, severity, np.random.RandomState(seed))


def _batch_seconds_per_image(ccc_corruptions, name: str, severity: float, batch: np.ndarray, seed_base: int) -> float:
    rngs = [np.random.default_rng(seed_base + index) for index in range(len(batch))]
    start = _clock()
    ccc_corruptions.corrupt_batch(batch, name, severity, rngs)
    return (_clock() - start) / len(batch)


def measure(
    name: str,
    severity: float,
    images: np.ndarray,
    repeats: int,
    ccc_corruptions,
    with_reference: bool,
    batch: np.ndarray | None,
) -> Measurement:
    """Median ms/image over ``repeats`` repetitions, the implementations interleaved per repetition.

    One untimed warm-up call per implementation comes first (numba compilation, cached kernels,
    lazy imports). Even repetitions run the project's code first, odd ones the reference first.
    """
    runners: dict[str, Callable[[np.ndarray, int], object]] = {}
    if ccc_corruptions is not None:
        runners["ccc"] = _ccc_runner(ccc_corruptions, name, severity)
    if with_reference:
        runners["reference"] = _reference_runner(name, severity)
    for runner in runners.values():
        runner(images[0], 0)
    if batch is not None:
        _batch_seconds_per_image(ccc_corruptions, name, severity, batch[:1], 0)

    samples: dict[str, list[float]] = {key: [] for key in ("ccc", "reference", "batch")}
    for repetition in range(repeats):
        order = list(runners) if repetition % 2 == 0 else list(reversed(runners))
        seed_base = 1000 * (repetition + 1)
        for key in order:
            samples[key].append(_seconds_per_image(runners[key], images, seed_base))
        if batch is not None:
            samples["batch"].append(_batch_seconds_per_image(ccc_corruptions, name, severity, batch, seed_base))

    def median_ms(key: str) -> float | None:
        return 1000 * statistics.median(samples[key]) if samples[key] else None

    return Measurement(name, severity, median_ms("ccc"), median_ms("reference"), median_ms("batch"))


GRID_CONFIRMED_CANDIDATES = 3


def _median_ms(runner: Callable[[np.ndarray, int], object], images: np.ndarray, repeats: int) -> float:
    return 1000 * statistics.median(
        _seconds_per_image(runner, images, 1000 * (repetition + 1)) for repetition in range(repeats)
    )


def scan_severity_grid(
    ccc_corruptions, names: Sequence[str], images: np.ndarray, scan_repeats: int, confirm_repeats: int
) -> dict[str, dict[str, float]]:
    """For each corruption, the project's slowest median ms/image over severities 0.05, 0.10, ..., 5.

    The maximum of 100 noisy medians is biased upwards on a busy machine, so the
    ``GRID_CONFIRMED_CANDIDATES`` slowest severities of the scan (``scan_repeats`` repetitions each)
    are timed again with ``confirm_repeats`` repetitions, and the worst of those confirmed medians is
    reported (``ms``), next to the scan's raw maximum (``scan_max_ms``) and mean (``mean_ms``).
    """
    worst: dict[str, dict[str, float]] = {}
    for name in names:
        timings = {}
        for severity in GRID_SEVERITIES:
            runner = _ccc_runner(ccc_corruptions, name, severity)
            runner(images[0], 0)
            timings[severity] = _median_ms(runner, images, scan_repeats)
        candidates = sorted(timings, key=timings.__getitem__, reverse=True)[:GRID_CONFIRMED_CANDIDATES]
        confirmed = {
            severity: _median_ms(_ccc_runner(ccc_corruptions, name, severity), images, confirm_repeats)
            for severity in candidates
        }
        slowest = max(confirmed, key=confirmed.__getitem__)
        worst[name] = {
            "severity": slowest,
            "ms": confirmed[slowest],
            "scan_max_ms": max(timings.values()),
            "mean_ms": statistics.fmean(timings.values()),
        }
        print(f"  grid {name}: worst {confirmed[slowest]:.2f} ms at severity {slowest}", file=sys.stderr, flush=True)
    return worst


def _format_ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _format_ratio(numerator: float | None, denominator: float | None) -> str:
    if numerator is None or denominator is None:
        return "n/a"
    return f"{numerator / denominator:.1f}x"


def _mean(values: Sequence[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.fmean(present) if present and len(present) == len(values) else None


def summarize(measurements: Sequence[Measurement]) -> dict[str, dict[str, float | None]]:
    """Per corruption: max and mean over the measured severities of each implementation's ms/image."""
    summary: dict[str, dict[str, float | None]] = {}
    for name in dict.fromkeys(measurement.corruption for measurement in measurements):
        rows = [measurement for measurement in measurements if measurement.corruption == name]
        summary[name] = {}
        for field in ("ccc_ms", "reference_ms", "ccc_batch_ms"):
            values = [getattr(row, field) for row in rows]
            summary[name][f"max_{field}"] = None if None in values else max(values)
            summary[name][f"mean_{field}"] = _mean(values)
    return summary


def main_corruption_means(summary: dict[str, dict[str, float | None]]) -> dict[str, float | None] | None:
    """Means over the 15 main corruptions of the per-corruption figures (None unless all 15 were run)."""
    if not all(name in summary for name in MAIN_CORRUPTIONS):
        return None
    keys = summary[MAIN_CORRUPTIONS[0]].keys()
    return {key: _mean([summary[name][key] for name in MAIN_CORRUPTIONS]) for key in keys}


def render_tables(
    measurements: Sequence[Measurement],
    summary: dict[str, dict[str, float | None]],
    main_means: dict[str, float | None] | None,
    grid: dict[str, dict[str, float]] | None,
) -> str:
    """The results as markdown tables (per corruption x severity, per corruption, grid worst cases)."""
    with_batch = any(measurement.ccc_batch_ms is not None for measurement in measurements)
    header = "| corruption | severity | ccc ms/image | reference ms/image | speed-up |"
    rule = "|---|---:|---:|---:|---:|"
    if with_batch:
        header += " ccc batch ms/image |"
        rule += "---:|"
    lines = ["## ms per image, per corruption and severity", "", header, rule]
    for measurement in measurements:
        line = (
            f"| {measurement.corruption} | {measurement.severity:g} | {_format_ms(measurement.ccc_ms)} | "
            f"{_format_ms(measurement.reference_ms)} | {_format_ratio(measurement.reference_ms, measurement.ccc_ms)} |"
        )
        if with_batch:
            line += f" {_format_ms(measurement.ccc_batch_ms)} |"
        lines.append(line)

    lines += [
        "",
        "## per corruption, over the measured severities",
        "",
        "| corruption | ccc max ms | reference max ms | speed-up of max "
        "| ccc mean ms | reference mean ms | speed-up of mean |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    rows = list(summary.items())
    if main_means is not None:
        rows.append(("**mean of the 15 main**", main_means))
    for name, figures in rows:
        lines.append(
            f"| {name} | {_format_ms(figures['max_ccc_ms'])} | {_format_ms(figures['max_reference_ms'])} | "
            f"{_format_ratio(figures['max_reference_ms'], figures['max_ccc_ms'])} | "
            f"{_format_ms(figures['mean_ccc_ms'])} | {_format_ms(figures['mean_reference_ms'])} | "
            f"{_format_ratio(figures['mean_reference_ms'], figures['mean_ccc_ms'])} |"
        )

    if grid is not None:
        lines += [
            "",
            f"## ccc worst case over severities 0.05..5 (step 0.05); goal <= {TARGET_MS_PER_IMAGE:g} ms/image",
            "",
            "| corruption | worst ms/image (confirmed) | at severity | scan max ms | scan mean ms | within goal |",
            "|---|---:|---:|---:|---:|:---:|",
        ]
        for name, worst in grid.items():
            within = "yes" if worst["ms"] <= TARGET_MS_PER_IMAGE else "**no**"
            lines.append(
                f"| {name} | {worst['ms']:.2f} | {worst['severity']:g} | {worst['scan_max_ms']:.2f} "
                f"| {worst['mean_ms']:.2f} | {within} |"
            )
    return "\n".join(lines)


def _environment() -> dict[str, object]:
    versions = {}
    for package in ("numpy", "scipy", "scikit-image", "opencv-python", "Pillow", "numba", "Wand", "ccc"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "versions": versions,
        "threads": {variable: os.environ[variable] for variable in _THREAD_VARIABLES},
    }


def _parse_names(text: str) -> tuple[str, ...]:
    if text == "all":
        return ALL_CORRUPTIONS
    if text == "main":
        return MAIN_CORRUPTIONS
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in ALL_CORRUPTIONS]
    if unknown or not names:
        raise UsageError(
            f"--corruptions must be 'all', 'main' or a comma-separated list of {', '.join(ALL_CORRUPTIONS)}; "
            f"got {text!r}"
        )
    return names


def _parse_severities(text: str) -> tuple[float, ...]:
    try:
        severities = tuple(float(value) for value in text.split(",") if value.strip())
    except ValueError:
        raise UsageError(f"--severities must be comma-separated numbers in (0, 5], got {text!r}") from None
    if not severities or any(not 0 < severity <= 5 for severity in severities):
        raise UsageError(f"--severities must be comma-separated numbers in (0, 5], got {text!r}")
    return severities


def build_parser() -> argparse.ArgumentParser:
    """Command-line options of the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corruptions", default="all", help="'all' (default), 'main' (the 15 of CCC) or a comma list")
    parser.add_argument(
        "--severities",
        default=",".join(f"{severity:g}" for severity in DEFAULT_SEVERITIES),
        help="comma list of severities in (0, 5] (default: %(default)s)",
    )
    parser.add_argument(
        "--repeats", type=int, default=5, help="timed repetitions per case; median reported (default: 5)"
    )
    parser.add_argument(
        "--image", default="golden", help="'golden' (2 golden inputs, default), 'synthetic' or an image file path"
    )
    parser.add_argument("--batch", type=int, default=0, help="also time corrupt_batch on N images (per image)")
    parser.add_argument("--grid", action="store_true", help="scan severities 0.05..5 for ccc's worst case")
    parser.add_argument("--grid-repeats", type=int, default=3, help="repetitions per grid severity (default: 3)")
    parser.add_argument("--skip-reference", action="store_true", help="time only ccc.corruptions")
    parser.add_argument("--skip-ccc", action="store_true", help="time only the reference-style implementation")
    parser.add_argument("--json", type=Path, help="write all results to this JSON file")
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="cpu",
        help="cpu: CPU time of this process (default; per-core cost); wall: elapsed time",
    )
    return parser


def run(arguments: argparse.Namespace) -> dict[str, object]:
    """Run the benchmark described by parsed ``arguments``; prints the tables and returns the results."""
    names = _parse_names(arguments.corruptions)
    severities = _parse_severities(arguments.severities)
    if arguments.repeats < 1 or arguments.grid_repeats < 1:
        raise UsageError(
            f"--repeats and --grid-repeats must be >= 1, got {arguments.repeats}, {arguments.grid_repeats}"
        )
    if arguments.batch < 0:
        raise UsageError(f"--batch must be >= 0, got {arguments.batch}")
    if arguments.skip_ccc and arguments.skip_reference:
        raise UsageError("--skip-ccc and --skip-reference together leave nothing to time")
    if arguments.skip_ccc and (arguments.batch or arguments.grid):
        raise UsageError("--batch and --grid time ccc.corruptions; they cannot be combined with --skip-ccc")
    images = load_images(arguments.image)

    ccc_corruptions = None
    if not arguments.skip_ccc:
        try:
            import ccc.corruptions as ccc_corruptions
        except ImportError as error:
            raise UsageError(
                f"cannot import ccc.corruptions ({error}); use --skip-ccc for reference-only timings"
            ) from error

    wand_missing = False
    try:
        import wand.image  # noqa: F401
    except ImportError:
        wand_missing = True
    batch = None
    if arguments.batch:
        batch = np.stack([images[index % len(images)] for index in range(arguments.batch)])

    measurements = []
    for name in names:
        with_reference = not arguments.skip_reference and not (wand_missing and name in WAND_CORRUPTIONS)
        for severity in severities:
            measurement = measure(name, severity, images, arguments.repeats, ccc_corruptions, with_reference, batch)
            measurements.append(measurement)
            print(
                f"  {name} @ {severity:g}: ccc {_format_ms(measurement.ccc_ms)} ms, "
                f"reference {_format_ms(measurement.reference_ms)} ms",
                file=sys.stderr,
                flush=True,
            )
    grid = None
    if arguments.grid:
        grid = scan_severity_grid(ccc_corruptions, names, images, arguments.grid_repeats, arguments.repeats)

    summary = summarize(measurements)
    main_means = main_corruption_means(summary)
    print(render_tables(measurements, summary, main_means, grid))
    if wand_missing and not arguments.skip_reference:
        print("\nWand is not installed: reference motion_blur and snow were not timed.")
    return {
        "settings": {
            "clock": arguments.clock,
            "corruptions": list(names),
            "severities": list(severities),
            "repeats": arguments.repeats,
            "image": arguments.image,
            "images": len(images),
            "batch": arguments.batch,
            "grid_repeats": arguments.grid_repeats if arguments.grid else None,
        },
        "environment": _environment(),
        "measurements": [asdict(measurement) | {"speedup": measurement.speedup} for measurement in measurements],
        "per_corruption": summary,
        "mean_of_main_corruptions": main_means,
        "grid_worst_case": grid,
        "target_ms_per_image": TARGET_MS_PER_IMAGE,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code (2 for a usage error)."""
    global _clock
    arguments = build_parser().parse_args(argv)
    _clock = CLOCKS[arguments.clock]
    return run_and_write(run, arguments)


def run_and_write(run: Callable[[argparse.Namespace], dict], arguments: argparse.Namespace) -> int:
    """``run(arguments)``, its results written to ``arguments.json`` (if set); the exit code of a bench
    script (2 with one line on stderr for a :class:`UsageError`)."""
    try:
        results = run(arguments)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if arguments.json is not None:
        arguments.json.parent.mkdir(parents=True, exist_ok=True)
        arguments.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
