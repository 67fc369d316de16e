r"""Rendering speed of both backends — the CPU reference path and the torch path (``ccc.render_torch``) —
and of a ``tta-eval run`` on a stream rendered on the fly against the same run on stored shards.

Two parts (``--part render``, the default; ``tta``; ``all``):

- ``render``: images/s per corruption (one corruption per sample at severities drawn uniformly from
  (0, 5]), without corruption ("crop only": crop, resize, flip) and for the medium mix (``N`` samples
  spread evenly over a paper-length ``difficulty=medium`` stream of the ResNet-50 presets: all 15
  corruptions but brightness and jpeg, in pairs, on a synthetic calibration table, as ``generate.py``),
  on 200 ImageNet-size photographs (500×375, ``generate.py``'s ``make_source_folder``); every case
  uses the same crops, flips and seeds. The torch path also renders the ``medium stream``: 4 windows of
  the largest batch size's consecutive samples of the same stream, in order (each batch one corruption
  pair, as a stream rendered by ``ccc-generate --render-device`` or on the fly gets; the mix's batches,
  spread over the stream, are the worst case for the launches per batch).

  * source decoding (PIL, ``ccc.render.decode_jpeg``), timed on its own: it stays on the CPU in both paths;
  * the CPU path: ``ccc.render.render_pixels`` (decode, crop, corruption pair) then ``encode_jpeg``, one
    image at a time in this process (``--cpu-images`` per case); also reported without the decoding
    (its time minus the decoding time of the same images), the like-for-like figure for the torch path;
  * the torch path on ``--device`` at each ``--batch-sizes``: ``render_batch(specs, decoded images,
    device, jpeg=False)`` (host→device transfer of the decoded images included) and the final JPEG
    quality-85 round trip ``jpeg_round_trip`` on its output, timed apart; "with JPEG" is their sum,
    exactly ``render_batch(..., jpeg=True)``. Each repeat renders ``--images`` samples (rounded up to
    whole batches); untimed warm-up: one batch per case and batch size, and every batch of a repeat at
    the first batch size (so that every corruption has run once); CUDA synchronised around every
    timed call; the median over ``--repeats`` is reported. ``--render-precision float32`` times the
    torch path's float32 mode (``render_batch(..., precision="float32")``). The torch path's bytes differ from the CPU
    path's (its random corruptions draw from counter-based per-sample streams; reproducible on the
    same device type): this measures speed only.

- ``tta``: images/s of ``tta-eval run`` (one process per run, as a user runs it) for each ``--method``
  and ``--precision`` on a medium stream of length ``--tta-warmup + --tta-samples``: the demo world's
  (``ccc-render:demo,difficulty=medium``) for ``--model demo``, else (a 1,000-class model) the 200
  photographs in an ImageNet layout with the synthetic ResNet-50 table (speed 200), read three ways:
  ``shards`` (``ccc-generate`` output, read as ``ccc:DIR``, shard sha256 verified as by default; rendered
  with ``--render-device`` in one process when ``--device`` is a GPU), ``device`` (``ccc-render:…,device=DEVICE``:
  rendered by the torch path on the run's device), ``device_fast`` (the same with
  ``source_decoder=device,precision=float32``: sources decoded on the device, the float32 working
  precision) and ``workers`` (``ccc-render:`` without ``device``: the CPU path in ``--num-workers``
  DataLoader workers). A run's rate is its marginal one:
  ``--tta-samples`` ÷ (wall time of a run of warm-up + samples − wall time of a run of the warm-up
  alone), so process start, model loading, planning and worker start-up cancel; ``--tta-warmup 0`` runs no
  warm-up run, and the rate then includes them (a check that the part runs, as ``gpu_check.sh --quick``).
  Ratios: each on-the-fly stream's rate ÷ the shards' rate.

On the CPU, rates are CPU time of this process by default (``--clock cpu``: the rate per core; one torch
thread), robust to other load on a shared machine; ``--clock wall`` gives elapsed time, the default on
CUDA. Both are written to the JSON. The ``tta`` part always uses wall time.

CPU (the defaults: about 1.5 minutes of CPU)::

    python scripts/bench/render.py --json results/bench_render.json
    python scripts/bench/render.py --part tta --tta-samples 384 --json results/bench_render_tta.json

GPU (``scripts/bench/gpu_check.sh`` runs both parts and ``render_check.py``; goals: ≥ 5,000
images/s for the medium mix with the JPEG round trip, ResNet-50 source on the on-the-fly stream within
10 % of the shards)::

    python scripts/bench/render.py --part render --device cuda --batch-sizes 64,128,256,512 --images 1024 \
        --repeats 3 --json render_cuda.json
    python scripts/bench/render.py --part tta --device cuda --model resnet50 --precision fp32,bf16 \
        --tta-streams shards,device --tta-samples 12800 --tta-warmup 1280 --num-workers 12 --json tta_cuda.json
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corruptions import UsageError, _environment, _parse_names, run_and_write  # noqa: E402
from generate import make_source_folder, synthetic_table  # noqa: E402

from ccc.load.rendered_stream import check_render_device  # noqa: E402
from ccc.render import RENDER_PRECISIONS, decode_jpeg, encode_jpeg, render_pixels  # noqa: E402
from ccc.render_torch import jpeg_round_trip, render_batch  # noqa: E402
from ccc.stream.plan import plan_sample, plan_stream  # noqa: E402
from ccc.stream.spec import SampleSpec  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[2]
MEDIUM_MIX = "medium mix"
"""Name of the case rendered with the planned corruption pairs, its samples spread over the whole stream (a
batch holds up to 38 (stage, corruption) groups: the worst case for the launches per batch)."""
MEDIUM_STREAM = "medium stream"
"""Name of the torch-path case of the same stream's samples in order: :data:`STREAM_WINDOWS` windows of the
largest batch size's consecutive samples (:func:`window_specs`), rendered in order, so that a batch is
consecutive samples, one corruption pair (a pair lasts a whole path of the plan) as in the batches of
``ccc-generate --render-device`` and of an on-the-fly stream."""
STREAM_WINDOWS = 4
"""Windows of the :data:`MEDIUM_STREAM` case, at evenly spaced positions of :data:`PAPER_STREAM`."""
CROP_ONLY = "crop only"
"""Name of the case without corruption (both severities 0): decoding aside, the floor of each path.
The other cases are corruption names."""
SOURCE_IMAGES = 200
PAPER_STREAM = {"difficulty": "medium", "speed": SOURCE_IMAGES, "seed": 43, "num_images": 7_500_000}
"""The stream the samples are spread over: a paper-length medium stream (every path step equally likely)."""
STREAMS = ("shards", "device", "device_fast", "workers")
CLOCK_KEYS = {"cpu": "cpu_time", "wall": "wall"}


def _elapsed(device: torch.device) -> tuple[float, float]:
    """(wall, CPU) clocks in seconds, after the device's queued work has finished."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter(), time.process_time()


def _rates(images: int, seconds: Sequence[tuple[float, float]]) -> dict[str, float]:
    """Images/s from the median wall and the median CPU seconds of the repeats."""
    wall = statistics.median(second[0] for second in seconds)
    cpu = statistics.median(second[1] for second in seconds)
    return {"wall": images / wall, "cpu_time": images / cpu}


def medium_specs(folder: Path, count: int) -> list[SampleSpec]:
    """``count`` samples spread evenly over :data:`PAPER_STREAM` planned on ``folder``'s images."""
    plan = plan_stream(PAPER_STREAM, synthetic_table(), folder)
    stride = PAPER_STREAM["num_images"] // count
    return [plan_sample(plan, index * stride) for index in range(count)]


def window_specs(folder: Path, count: int, windows: int) -> list[list[SampleSpec]]:
    """``windows`` runs of ``count`` consecutive samples of :data:`PAPER_STREAM` planned on ``folder``'s
    images, starting at evenly spaced positions (the first half a spacing in)."""
    plan = plan_stream(PAPER_STREAM, synthetic_table(), folder)
    spacing = PAPER_STREAM["num_images"] // windows
    starts = [spacing // 2 + index * spacing for index in range(windows)]
    return [[plan_sample(plan, start + offset) for offset in range(count)] for start in starts]


def single_corruption_specs(specs: Sequence[SampleSpec], name: str, seed: int) -> list[SampleSpec]:
    """``specs`` (crops, flips, seeds kept) with corruption ``name`` alone, severities uniform in (0, 5]."""
    severities = 5.0 * (1.0 - np.random.default_rng(seed).random(len(specs)))
    return [
        dataclasses.replace(spec, n1=name, s1=float(severity), n2=name, s2=0.0)
        for spec, severity in zip(specs, severities)
    ]


def time_decoding(sources: Sequence[bytes], repeats: int) -> dict[str, float]:
    """Images/s of decoding the encoded ``sources`` with PIL into RGB arrays (one core)."""
    decode_jpeg(sources[0])
    seconds = []
    for _ in range(repeats):
        start = _elapsed(torch.device("cpu"))
        for source in sources:
            np.asarray(decode_jpeg(source))
        end = _elapsed(torch.device("cpu"))
        seconds.append((end[0] - start[0], end[1] - start[1]))
    return _rates(len(sources), seconds)


def time_cpu_path(specs: Sequence[SampleSpec], sources: Sequence[bytes], repeats: int) -> dict[str, dict[str, float]]:
    """Images/s of the CPU path on ``specs`` (``sources``: each spec's encoded source image), one image at a
    time: ``render_pixels`` alone and followed by ``encode_jpeg``. One untimed pass first (numba
    compilation, cached kernels and textures of every corruption used)."""
    for spec, source in zip(specs, sources):
        encode_jpeg(render_pixels(spec, source))
    pixels_seconds, total_seconds = [], []
    cpu = torch.device("cpu")
    for _ in range(repeats):
        pixels_wall = pixels_cpu = encode_wall = encode_cpu = 0.0
        for spec, source in zip(specs, sources):
            start = _elapsed(cpu)
            pixels = render_pixels(spec, source)
            middle = _elapsed(cpu)
            encode_jpeg(pixels)
            end = _elapsed(cpu)
            pixels_wall += middle[0] - start[0]
            pixels_cpu += middle[1] - start[1]
            encode_wall += end[0] - middle[0]
            encode_cpu += end[1] - middle[1]
        pixels_seconds.append((pixels_wall, pixels_cpu))
        total_seconds.append((pixels_wall + encode_wall, pixels_cpu + encode_cpu))
    return {
        "without_jpeg": _rates(len(specs), pixels_seconds),
        "with_jpeg": _rates(len(specs), total_seconds),
    }


def without_decoding(rate: dict[str, float], decoding: dict[str, float]) -> dict[str, float]:
    """The rate of a path whose time per image includes one decoding, with that decoding's time taken out."""
    return {clock: 1.0 / (1.0 / rate[clock] - 1.0 / decoding[clock]) for clock in rate}


def time_torch_path(
    specs: Sequence[SampleSpec],
    images: Sequence[np.ndarray],
    device: torch.device,
    batch_size: int,
    count: int,
    repeats: int,
    warm_all: bool,
    precision: str = "float64",
) -> dict[str, dict[str, float]]:
    """Images/s of the torch path on ``device``: ``count`` samples (rounded up to whole batches of
    ``batch_size``, cycling through ``specs`` and their decoded ``images``) per repeat; the corruption
    rendering (``render_batch(jpeg=False)``), the final JPEG round trip alone, and both. Untimed
    warm-up: the first batch (``warm_all``: every batch of one repeat, so that every corruption of
    ``specs`` has run once). ``precision``: ``render_batch``'s working float precision."""
    batches = -(-count // batch_size)
    order = [index % len(specs) for index in range(batches * batch_size)]
    chunks = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    for chunk in chunks if warm_all else chunks[:1]:
        warm = render_batch([specs[k] for k in chunk], [images[k] for k in chunk], device, False, precision)
        jpeg_round_trip(warm)
    render_seconds, jpeg_seconds, total_seconds = [], [], []
    for _ in range(repeats):
        render_wall = render_cpu = jpeg_wall = jpeg_cpu = 0.0
        for chunk in chunks:
            start = _elapsed(device)
            rendered = render_batch([specs[k] for k in chunk], [images[k] for k in chunk], device, False, precision)
            middle = _elapsed(device)
            jpeg_round_trip(rendered)
            end = _elapsed(device)
            render_wall += middle[0] - start[0]
            render_cpu += middle[1] - start[1]
            jpeg_wall += end[0] - middle[0]
            jpeg_cpu += end[1] - middle[1]
        render_seconds.append((render_wall, render_cpu))
        jpeg_seconds.append((jpeg_wall, jpeg_cpu))
        total_seconds.append((render_wall + jpeg_wall, render_cpu + jpeg_cpu))
    return {
        "without_jpeg": _rates(len(order), render_seconds),
        "jpeg_only": _rates(len(order), jpeg_seconds),
        "with_jpeg": _rates(len(order), total_seconds),
    }


def render_part(arguments: argparse.Namespace, device: torch.device, folder: Path) -> dict:
    """Decoding, CPU path and torch path rates of every case (see the module docstring)."""
    names = arguments.corruptions
    print(f"  planning {arguments.images} medium-mix samples over {SOURCE_IMAGES} photographs", file=sys.stderr)
    specs = medium_specs(make_source_folder(folder / "val", SOURCE_IMAGES), arguments.images)
    sources = [(folder / "val" / spec.source_path).read_bytes() for spec in specs]
    decoding = time_decoding(sources, arguments.repeats)
    images = [np.array(decode_jpeg(source)) for source in sources]
    windows = window_specs(folder / "val", max(arguments.batch_sizes), STREAM_WINDOWS)
    stream = [spec for window in windows for spec in window]
    decoded = {spec.source_path: image for spec, image in zip(specs, images)}
    for spec in stream:  # the 200 photographs, each decoded once
        if spec.source_path not in decoded:
            decoded[spec.source_path] = np.array(decode_jpeg((folder / "val" / spec.source_path).read_bytes()))
    cases = {
        MEDIUM_MIX: specs,
        MEDIUM_STREAM: stream,
        CROP_ONLY: [dataclasses.replace(spec, s1=0.0, s2=0.0) for spec in specs],
    } | {name: single_corruption_specs(specs, name, seed) for seed, name in enumerate(names, start=1)}
    result = {
        "decoding": decoding,
        "medium_mix_pairs": sorted({f"{spec.n1}+{spec.n2}" for spec in specs}),
        "medium_stream_pairs": [sorted({f"{spec.n1}+{spec.n2}" for spec in window}) for window in windows],
        "cpu_path": {},
        "torch_path": {},
        "torch_path_errors": {},
    }
    cpu_images = min(arguments.cpu_images, arguments.images)
    for case, case_specs in cases.items():
        case_images = [decoded[spec.source_path] for spec in stream] if case == MEDIUM_STREAM else images
        count = len(stream) if case == MEDIUM_STREAM else arguments.images
        if cpu_images and case != MEDIUM_STREAM:  # the CPU path renders one sample at a time: order is moot
            cpu = time_cpu_path(case_specs[:cpu_images], sources[:cpu_images], arguments.repeats)
            cpu["without_jpeg_excluding_decoding"] = without_decoding(cpu["without_jpeg"], decoding)
            cpu["with_jpeg_excluding_decoding"] = without_decoding(cpu["with_jpeg"], decoding)
            result["cpu_path"][case] = cpu
        try:
            result["torch_path"][case] = {
                str(batch_size): time_torch_path(
                    case_specs,
                    case_images,
                    device,
                    batch_size,
                    count,
                    arguments.repeats,
                    position == 0,
                    arguments.render_precision,
                )
                for position, batch_size in enumerate(arguments.batch_sizes)
            }
        except Exception as error:  # noqa: BLE001 - a case that fails on a device is reported; the others run
            result["torch_path_errors"][case] = f"{type(error).__name__}: {str(error).strip()[:300]}"
            print(f"  {case}: torch path failed: {result['torch_path_errors'][case]}", file=sys.stderr, flush=True)
            continue
        clock = CLOCK_KEYS[arguments.clock]
        best = max(rates["with_jpeg"][clock] for rates in result["torch_path"][case].values())
        print(f"  {case}: torch with JPEG up to {best:.1f} images/s", file=sys.stderr, flush=True)
    return result


def _run_seconds(command: list[str], environment: dict[str, str]) -> float:
    """Wall seconds of ``command``; a failure ends the benchmark with its last output line."""
    start = time.perf_counter()
    completed = subprocess.run(command, env=environment, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if completed.returncode != 0:
        lines = (completed.stderr or completed.stdout).strip().splitlines()
        raise UsageError(f"{' '.join(command[2:6])} … failed: {lines[-1] if lines else completed.returncode}")
    return seconds


def tta_part(arguments: argparse.Namespace, device: torch.device, folder: Path) -> dict:
    """Marginal images/s of ``tta-eval run`` per stream, method and precision, and the ratios to the shards."""
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")])),
    }
    length = arguments.tta_warmup + arguments.tta_samples
    if arguments.model == "demo":
        definition = f"demo,difficulty=medium,num_images={length}"
        world = ["--demo", "--difficulty", "medium"]
    else:  # a 1,000-class model: the photographs in an ImageNet layout, the synthetic ResNet-50 table
        sources, table = make_source_folder(folder / "val", SOURCE_IMAGES), folder / "table.npz"
        synthetic_table().save(table)
        stream = f"difficulty=medium,speed={SOURCE_IMAGES},seed=43,num_images={length}"
        definition = f"{stream},calibration={table},imagenet={sources}"
        world = ["--difficulty", "medium", "--speed", str(SOURCE_IMAGES), "--seed", "43", "--imagenet", str(sources),
                 "--calibration", str(table)]  # fmt: skip
    streams = {
        "shards": f"ccc:{folder / 'shards' / 'demo_medium'}",
        "device": f"ccc-render:{definition},device={arguments.device}",
        "device_fast": f"ccc-render:{definition},device={arguments.device},source_decoder=device,precision=float32",
        "workers": f"ccc-render:{definition}",
    }
    if "shards" in arguments.tta_streams:
        print(f"  writing {length} samples as shards", file=sys.stderr, flush=True)
        # on a GPU the shards are rendered there, in this process (no Ray cluster needed on a device machine)
        renderer = ["--workers", str(max(1, arguments.num_workers))]
        if device.type != "cpu":
            renderer = ["--workers", "1", "--render-device", arguments.device]
        _run_seconds(
            [sys.executable, "-m", "ccc.cli.generate", *world, "--num-images", str(length),
             "--shard-size", str(arguments.tta_shard_size), "--out", str(folder / "shards"), "--name", "demo_medium",
             *renderer, "--no-progress"],
            environment,
        )  # fmt: skip
    model = [] if arguments.model == "demo" else ["--model", arguments.model, "--weights", "none"]
    runs = []
    for precision in arguments.precision:
        for method in arguments.method:
            for stream in arguments.tta_streams:
                command = [
                    sys.executable, "-m", "tta_eval.cli", "run", "--stream", streams[stream], "--method", method,
                    *model, "--device", arguments.device, "--precision", precision,
                    "--batch-size", str(arguments.tta_batch_size), "--num-workers", str(arguments.num_workers),
                    "--collapse-reference", "none", "--no-progress", "--overwrite",
                    "--out", str(folder / "runs"), "--name", f"{stream}_{method}_{precision}",
                ]  # fmt: skip
                warmup = (
                    _run_seconds([*command, "--max-samples", str(arguments.tta_warmup)], environment)
                    if arguments.tta_warmup
                    else 0.0
                )
                whole = _run_seconds([*command, "--max-samples", str(length)], environment)
                rate = arguments.tta_samples / (whole - warmup)
                runs.append(
                    {"stream": stream, "method": method, "precision": precision, "images_per_second": rate,
                     "seconds_warmup_run": warmup, "seconds_whole_run": whole}
                )  # fmt: skip
                print(f"  {stream} {method} {precision}: {rate:.1f} images/s", file=sys.stderr, flush=True)
    ratios = {}
    for run in runs:
        shards = [
            other["images_per_second"]
            for other in runs
            if other["stream"] == "shards"
            and (other["method"], other["precision"]) == (run["method"], run["precision"])
        ]
        if run["stream"] != "shards" and shards:
            ratios[f"{run['stream']} / shards, {run['method']} {run['precision']}"] = (
                run["images_per_second"] / shards[0]
            )
    return {
        "model": arguments.model,
        "streams": {name: streams[name] for name in arguments.tta_streams},
        "batch_size": arguments.tta_batch_size,
        "warmup_samples": arguments.tta_warmup,
        "timed_samples": arguments.tta_samples,
        "num_workers": arguments.num_workers,
        "runs": runs,
        "ratios": ratios,
    }


def _format(value: float | None) -> str:
    return "—" if value is None else f"{value:,.1f}"


def render_table(result: dict, clock: str) -> str:
    """Markdown: per case, the CPU path and the torch path at each batch size, and torch ÷ CPU path."""
    key = CLOCK_KEYS[clock]
    batch_sizes = result["settings"]["batch_sizes"]
    torch_columns = [f"torch b={size} {label}" for size in batch_sizes for label in ("no JPEG", "JPEG")]
    lines = [
        f"decoding (PIL, one core): {result['render']['decoding'][key]:,.1f} images/s",
        "",
        "| case | CPU path (decode + render + encode) | CPU path excl. decoding, no JPEG "
        + "| CPU path excl. decoding, JPEG | "
        + " | ".join(torch_columns)
        + " | torch ÷ CPU path, no JPEG | torch ÷ CPU path, JPEG |",
        "|---|" + "---:|" * (5 + len(torch_columns)),
    ]
    for case, torch_rates in result["render"]["torch_path"].items():
        cpu = result["render"]["cpu_path"].get(case)
        best = {
            label: max(rates[label][key] for rates in torch_rates.values()) for label in ("without_jpeg", "with_jpeg")
        }
        cells = [
            _format(cpu and cpu["with_jpeg"][key]),
            _format(cpu and cpu["without_jpeg_excluding_decoding"][key]),
            _format(cpu and cpu["with_jpeg_excluding_decoding"][key]),
            *(
                _format(torch_rates[str(size)][label][key])
                for size in batch_sizes
                for label in ("without_jpeg", "with_jpeg")
            ),
            "—" if cpu is None else f"{best['without_jpeg'] / cpu['without_jpeg_excluding_decoding'][key]:.2f}",
            "—" if cpu is None else f"{best['with_jpeg'] / cpu['with_jpeg_excluding_decoding'][key]:.2f}",
        ]
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    lines += [f"| {case} | failed: {error} |" for case, error in result["render"]["torch_path_errors"].items()]
    return "\n".join(lines)


def tta_table(tta: dict) -> str:
    """Markdown: images/s of each run, and each on-the-fly stream's rate ÷ the shards'."""
    lines = ["| stream | method | precision | images/s (wall) |", "|---|---|---|---:|"]
    lines += [
        f"| {run['stream']} | {run['method']} | {run['precision']} | {run['images_per_second']:,.1f} |"
        for run in tta["runs"]
    ]
    lines += ["", *(f"- {label}: {ratio:.2f}" for label, ratio in tta["ratios"].items())]
    return "\n".join(lines)


def _positive_list(text: str, option: str) -> list[int]:
    try:
        values = [int(value) for value in text.split(",") if value.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise UsageError(f"{option} must be comma-separated positive integers, got {text!r}")
    return values


def _choices(text: str, option: str, valid: Sequence[str]) -> list[str]:
    values = [value.strip() for value in text.split(",") if value.strip()]
    if not values or any(value not in valid for value in values):
        raise UsageError(f"{option} must be a comma list of {', '.join(valid)}, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    """Command-line options of the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("render", "tta", "all"), default="render")
    parser.add_argument(
        "--device", default="cpu", help="cpu, cuda or cuda:INDEX: the torch path's device (default: cpu)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads on the CPU (default: 1)")
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCK_KEYS),
        default=None,
        help="rates in the tables: cpu (CPU time, per core; default on the CPU) or wall (default on CUDA)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write all results to this JSON file")
    render = parser.add_argument_group("render part")
    render.add_argument(
        "--corruptions",
        default="all",
        help="'all' (default: 19), 'main' (the 15 of CCC), 'none' (the medium mix and crops only) or a comma list",
    )
    render.add_argument("--batch-sizes", default="64", help="torch path batch sizes, comma list (default: 64)")
    render.add_argument("--images", type=int, default=64, help="samples per case and repeat (default: 64)")
    render.add_argument(
        "--cpu-images",
        type=int,
        default=64,
        help="samples per case of the CPU path, at most --images (default: 64; 0: skip)",
    )
    render.add_argument("--repeats", type=int, default=1, help="timed repeats; median reported (default: 1)")
    render.add_argument(
        "--render-precision",
        choices=RENDER_PRECISIONS,
        default=RENDER_PRECISIONS[0],
        help="the torch path's working float precision (default: float64)",
    )
    tta = parser.add_argument_group("tta part")
    tta.add_argument("--model", default="demo", help="demo (the demo model) or a torchvision name, random weights")
    tta.add_argument("--method", default="source,tent", help="comma list of tta-eval methods (default: source,tent)")
    tta.add_argument("--precision", default="fp32", help="comma list: fp32, bf16, fp16 (reduced on CUDA only)")
    tta.add_argument(
        "--tta-streams", default=",".join(STREAMS), help=f"comma list of {', '.join(STREAMS)} (default: all)"
    )
    tta.add_argument("--tta-samples", type=int, default=256, help="timed samples per run (default: 256)")
    tta.add_argument(
        "--tta-warmup", type=int, default=64, help="warm-up samples per run; 0: no warm-up run (default: 64)"
    )
    tta.add_argument("--tta-batch-size", type=int, default=64)
    tta.add_argument("--tta-shard-size", type=int, default=1000, help="samples per shard (default: 1000)")
    tta.add_argument(
        "--num-workers", type=int, default=1, help="DataLoader workers of every stream, and ccc-generate's (default: 1)"
    )
    tta.add_argument(
        "--work", type=Path, default=None, help="folder for the shards and runs (default: a temporary one)"
    )
    return parser


def run(arguments: argparse.Namespace) -> dict:
    """Run the parts named by parsed ``arguments``; prints the tables and returns the results."""
    arguments.corruptions = () if arguments.corruptions == "none" else _parse_names(arguments.corruptions)
    arguments.batch_sizes = _positive_list(arguments.batch_sizes, "--batch-sizes")
    arguments.method = [name.strip() for name in arguments.method.split(",") if name.strip()]
    arguments.precision = _choices(arguments.precision, "--precision", ("fp32", "bf16", "fp16"))
    arguments.tta_streams = _choices(arguments.tta_streams, "--tta-streams", STREAMS)
    for option in ("images", "repeats", "threads", "tta_samples", "tta_batch_size", "tta_shard_size"):
        if getattr(arguments, option) < 1:
            raise UsageError(f"--{option.replace('_', '-')} must be >= 1, got {getattr(arguments, option)}")
    if min(arguments.cpu_images, arguments.num_workers, arguments.tta_warmup) < 0:
        raise UsageError(
            "--cpu-images, --num-workers and --tta-warmup must be >= 0, got "
            f"{arguments.cpu_images}, {arguments.num_workers}, {arguments.tta_warmup}"
        )
    try:
        device = check_render_device(arguments.device)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if device.type == "cpu" and arguments.precision != ["fp32"]:
        raise UsageError("reduced precision needs a CUDA device; CPU runs use fp32")
    arguments.clock = arguments.clock or ("cpu" if device.type == "cpu" else "wall")
    torch.set_num_threads(arguments.threads)
    result: dict = {
        "settings": {
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
            "device_string": arguments.device,
            "torch": torch.__version__,
            "threads": arguments.threads,
            "clock": arguments.clock,
            "batch_sizes": arguments.batch_sizes,
            "images": arguments.images,
            "cpu_images": min(arguments.cpu_images, arguments.images),
            "repeats": arguments.repeats,
            "render_precision": arguments.render_precision,
            "source_images": f"{SOURCE_IMAGES} photographs, 500×375 or 375×500 JPEG quality 90",
        },
        "environment": _environment(),
    }
    with tempfile.TemporaryDirectory() as temporary:
        folder = arguments.work or Path(temporary)
        if arguments.part in ("all", "render"):
            result["render"] = render_part(arguments, device, folder)
            settings = result["settings"]
            print(f"device: {settings['device']}, torch {settings['torch']}, {settings['threads']} thread(s), ", end="")
            print(f"clock: {settings['clock']}\n")
            print(render_table(result, arguments.clock) + "\n")
        if arguments.part in ("all", "tta"):
            result["tta"] = tta_part(arguments, device, folder)
            print(tta_table(result["tta"]))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code (2 for a usage error)."""
    return run_and_write(run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
