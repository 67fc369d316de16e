r"""Where a batch of the medium mix spends its time on a device: the torch renderer's steps, timed apart.

``render_batch`` on ``--batch`` medium-mix samples (``render.py``'s samples over a paper-length medium
stream, with the JPEG round trip) at ``--precision``, after one untimed batch; for ``--repeats`` batches
the device is synchronised around each step, whose wall time is charged to it:

- ``crop``: ``prepare_crop_resize_flip`` (the checks and tap tables, on the host) and its device half
  (the gathers);
- one row per corruption: both halves of every group of it in either stage, the host's preparation and
  the device's work (``samples``: how many samples it corrupted per batch; ``ms per sample``: its time over
  those samples);
- ``upload``: the batch's one copy (``BatchUpload.send``: the sources packed and every table written into
  the host buffer, then copied);
- ``jpeg``: the final quality-85 round trip;
- ``rest``: the batch's time outside those (stage bookkeeping, truncation to byte levels, rounding).

The synchronisations serialise host and device work that would otherwise overlap, so the shares are
those of a device that waits for its host. Then ``torch.profiler`` records one more batch (no extra
synchronisation): its wall time against the device's busy time (the sum of its kernels and copies: far
below the wall time, the host is what the device waits for), and the ``--top`` device kernels by their
total time. Last, ``--repeats`` batches rendered back to back, the device synchronised once at the end,
twice: with the renderer's host buffers (page-locked on CUDA, so that no copy waits for the work queued
before it) and with ordinary memory for every host buffer (as before commit 2fd407b: a copy may then wait
for the queued work, and the host's time and the device's add up instead of overlapping); with each, the
time until the last batch is enqueued (``back_to_back_enqueue_ms_per_batch``: the host's time per batch
where the device keeps up, to read against ``render_proxies.py``'s modelled host time on CUDA). Host work runs
with torch's default thread count (the packing of the sources uses it).

    python scripts/bench/render_profile.py --device cuda --batch 512 --json profile.json   # gpu_check.sh
    python scripts/bench/render_profile.py --device cpu --batch 4 --repeats 1 --top 5     # a check
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corruptions import UsageError, _environment, run_and_write  # noqa: E402
from generate import make_source_folder  # noqa: E402
from render import SOURCE_IMAGES, medium_specs  # noqa: E402

import ccc.render_torch._upload as upload  # noqa: E402
import ccc.render_torch.pipeline as pipeline  # noqa: E402
from ccc.load.rendered_stream import check_render_device  # noqa: E402
from ccc.render import RENDER_PRECISIONS, decode_jpeg  # noqa: E402


class StepClock:
    """Wall seconds and samples per step, the device synchronised around each timed call."""

    def __init__(self, device: torch.device):
        self.device = device
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.samples: dict[str, int] = collections.defaultdict(int)

    def _synchronise(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def timed(self, name: str, function: Callable, samples: Callable[..., int]) -> Callable:
        """``function`` charging its wall time to ``name`` and ``samples(*arguments)`` samples."""

        def call(*arguments, **options):
            self._synchronise()
            start = time.perf_counter()
            output = function(*arguments, **options)
            self._synchronise()
            self.seconds[name] += time.perf_counter() - start
            self.samples[name] += samples(*arguments)
            return output

        return call


def profile_steps(specs: Sequence, images: Sequence[np.ndarray], device: torch.device, precision: str, repeats: int):
    """Per-step seconds and samples over ``repeats`` batches, and the batches' total seconds. A step's row
    holds both of its halves: the host's preparation and the device's work."""
    clock = StepClock(device)
    originals = pipeline.prepare_crop_resize_flip, pipeline.jpeg_round_trip, pipeline.torch_corruption
    send = upload.BatchUpload.send

    def crop(specs: Sequence, *arguments: object) -> Callable:
        count = len(specs)
        step = clock.timed("crop", originals[0], lambda *_: count)(specs, *arguments)
        return clock.timed("crop", step, lambda *_: 0)

    def corruption(name: str):  # noqa: ANN202 (a TorchCorruption)
        entry = originals[2](name)

        def prepare(severities: torch.Tensor, *arguments: object) -> Callable:
            step = clock.timed(name, entry.prepare, lambda *_: len(severities))(severities, *arguments)
            return clock.timed(name, step, lambda *_: 0)

        return dataclasses.replace(entry, prepare=prepare)

    pipeline.prepare_crop_resize_flip = crop
    pipeline.jpeg_round_trip = clock.timed("jpeg", originals[1], lambda pixels, *_: len(pixels))
    pipeline.torch_corruption = corruption
    upload.BatchUpload.send = clock.timed("upload", send, lambda *_: len(specs))
    try:
        clock._synchronise()
        start = time.perf_counter()
        for _ in range(repeats):
            pipeline.render_batch(specs, images, device, True, precision)
        clock._synchronise()
        total = time.perf_counter() - start
    finally:
        pipeline.prepare_crop_resize_flip, pipeline.jpeg_round_trip, pipeline.torch_corruption = originals
        upload.BatchUpload.send = send
    return clock, total


def top_kernels(specs: Sequence, images: Sequence[np.ndarray], device: torch.device, precision: str, top: int):
    """One profiled batch: its wall ms, the device's busy ms (the sum of every kernel's and copy's time; the
    CPU ops' on a CPU device) and the ``top`` of them by total time, in ms."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profiler:
        start = time.perf_counter()
        pipeline.render_batch(specs, images, device, True, precision)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        wall = time.perf_counter() - start
    events = list(profiler.key_averages())
    key = "self_cpu_time_total"
    if device.type == "cuda":  # the kernels and copies themselves (an operator's row repeats its kernels' time)
        events = [event for event in events if event.device_type == torch.autograd.DeviceType.CUDA]
        key = "self_device_time_total"
    rows = sorted(events, key=lambda event: getattr(event, key), reverse=True)
    return {
        "wall_ms": 1000.0 * wall,
        "device_busy_ms": sum(getattr(event, key) for event in events) / 1000.0,
        "top": [
            {"name": event.key[:100], "calls": event.count, "ms": getattr(event, key) / 1000.0} for event in rows[:top]
        ],
    }


def back_to_back(
    specs: Sequence, images: Sequence[np.ndarray], device: torch.device, precision: str, repeats: int, pinned: bool
) -> tuple[float, float]:
    """Milliseconds per batch of ``repeats`` batches rendered back to back, the device synchronised once at the
    end, and of their enqueuing alone (until the last call returns, before that synchronisation: the host's
    time when the device keeps up, else the time until the device's queue held back the host);
    ``pinned=False``: every host buffer of the renderer from ordinary memory (``_upload.pinned_for`` says no),
    else the renderer's own (page-locked on CUDA)."""
    original = upload.pinned_for
    if not pinned:
        upload.pinned_for = lambda device: False
    try:
        pipeline.render_batch(specs, images, device, True, precision)  # the host allocator's blocks, warmed
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(repeats):
            pipeline.render_batch(specs, images, device, True, precision)
        enqueued = time.perf_counter()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return 1000.0 * (time.perf_counter() - start) / repeats, 1000.0 * (enqueued - start) / repeats
    finally:
        upload.pinned_for = original


def build_parser() -> argparse.ArgumentParser:
    """Command-line options of the profile."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cpu, cuda or cuda:INDEX (default: cuda)")
    parser.add_argument("--batch", type=int, default=512, help="samples per batch (default: 512)")
    parser.add_argument("--repeats", type=int, default=3, help="timed batches (default: 3)")
    parser.add_argument("--precision", choices=RENDER_PRECISIONS, default=RENDER_PRECISIONS[0])
    parser.add_argument("--top", type=int, default=25, help="kernels listed (default: 25)")
    parser.add_argument("--json", type=Path, default=None, help="write the results to this JSON file")
    return parser


def run(arguments: argparse.Namespace) -> dict:
    """The step table and the kernel list; prints both and returns the results."""
    if min(arguments.batch, arguments.repeats, arguments.top) < 1:
        raise UsageError("--batch, --repeats and --top must be >= 1")
    try:
        device = check_render_device(arguments.device)
    except ValueError as error:
        raise UsageError(str(error)) from None
    with tempfile.TemporaryDirectory() as temporary:
        folder = make_source_folder(Path(temporary) / "val", SOURCE_IMAGES)
        specs = medium_specs(folder, arguments.batch)
        images = [np.array(decode_jpeg((folder / spec.source_path).read_bytes())) for spec in specs]
    pipeline.render_batch(specs, images, device, True, arguments.precision)
    clock, total = profile_steps(specs, images, device, arguments.precision, arguments.repeats)
    per_batch = total / arguments.repeats
    steps = {
        name: {
            "ms_per_batch": 1000.0 * seconds / arguments.repeats,
            "share": seconds / total,
            "samples_per_batch": clock.samples[name] / arguments.repeats,
            "ms_per_sample": 1000.0 * seconds / clock.samples[name],
        }
        for name, seconds in sorted(clock.seconds.items(), key=lambda item: -item[1])
    }
    rest = total - sum(clock.seconds.values())
    steps["rest"] = {"ms_per_batch": 1000.0 * rest / arguments.repeats, "share": rest / total}
    result = {
        "settings": {
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "torch": torch.__version__,
            "batch": arguments.batch,
            "repeats": arguments.repeats,
            "precision": arguments.precision,
        },
        "environment": _environment(),
        "images_per_second_synchronised": arguments.batch / per_batch,
        "steps": steps,
        "profiled_batch": top_kernels(specs, images, device, arguments.precision, arguments.top),
    }
    timings = {
        memory: back_to_back(specs, images, device, arguments.precision, arguments.repeats, memory == "pinned")
        for memory in ("pinned", "pageable")
    }
    result["back_to_back_ms_per_batch"] = {memory: total for memory, (total, _) in timings.items()}
    result["back_to_back_enqueue_ms_per_batch"] = {memory: enqueued for memory, (_, enqueued) in timings.items()}
    print(
        f"medium mix, batch {arguments.batch}, {arguments.precision}: {1000.0 * per_batch:.1f} ms per batch "
        f"({result['images_per_second_synchronised']:,.0f} images/s with a synchronisation around every step)\n"
    )
    print("| step | ms per batch | share | samples per batch | ms per sample |\n|---|---:|---:|---:|---:|")
    for name, row in steps.items():
        extra = f"{row['samples_per_batch']:.0f} | {row['ms_per_sample']:.3f}" if "ms_per_sample" in row else " | "
        print(f"| {name} | {row['ms_per_batch']:.1f} | {100 * row['share']:.1f} % | {extra} |")
    profiled = result["profiled_batch"]
    print(
        f"\nprofiled batch: {profiled['wall_ms']:.1f} ms wall, device busy {profiled['device_busy_ms']:.1f} ms "
        f"(torch threads: {torch.get_num_threads()})"
    )
    print("\n| kernel | calls | ms |\n|---|---:|---:|")
    for row in profiled["top"]:
        print(f"| {row['name'].replace('|', '/')} | {row['calls']} | {row['ms']:.2f} |")
    pinned, pageable = (result["back_to_back_ms_per_batch"][memory] for memory in ("pinned", "pageable"))
    enqueued = result["back_to_back_enqueue_ms_per_batch"]
    print(
        f"\nback to back ({arguments.repeats} batches): {pinned:.1f} ms per batch with page-locked host buffers, "
        f"{pageable:.1f} with ordinary memory ({arguments.batch / pinned * 1000:,.0f} and "
        f"{arguments.batch / pageable * 1000:,.0f} images/s); enqueued in {enqueued['pinned']:.1f} and "
        f"{enqueued['pageable']:.1f} ms per batch (the host's share, compare render_proxies.py's modelled host time)"
    )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code (2 for a usage error)."""
    return run_and_write(run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
