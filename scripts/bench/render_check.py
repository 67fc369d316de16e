r"""Does the torch renderer run on a device, and does that device give the CPU's bytes?

For every case (each corruption alone at severities drawn uniformly from (0, 5], the medium mix and
crop only: ``render.py``'s cases and samples, ``--batch`` of each) and every ``--precisions``:
``render_batch(specs, images, DEVICE, jpeg=False, precision)`` twice on ``--device`` and once on the CPU
(torch's CPU device, same specs, images and precision). Per case it reports:

- ``status``: ``ok``, or the error in one line and the innermost frame inside ``ccc/`` (the other
  cases still run);
- ``deterministic``: the device's two renders are the same bytes (run to run, one process);
- against the CPU, before the final JPEG round trip (``before_jpeg``) and after it: the share of
  differing bytes (%), the largest and the mean absolute difference (levels), and the samples that
  differ at all. The JPEG round trip (exact on every device) turns a one-level difference in a pixel
  into differences across its 8×8 block (up to about 10 levels), so the first is the device's own.
  The random streams are bit-identical on every device (``ccc.render_torch.random``), so a difference
  is the device's float arithmetic: transcendental functions, FFT and matrix-product reduction
  orders, fused multiply-adds.
- ``triton_vs_aten``: where the device runs the renderer's fused Triton kernels (``ccc.render_torch._triton``,
  CUDA), the same comparison of its render against a third one with ``CCC_TORCH_KERNELS=aten`` (the ATen
  compositions on the same device): the kernels promise 0 differing bytes; None where the device has none;
- ``seconds``: wall seconds of the first device render (warm-up included: the first call of a kernel, the
  Triton kernels' compilation).

On the CPU (``--device cpu``) the comparison is trivially exact: that run checks the script itself::

    python scripts/bench/render_check.py --device cpu --batch 2 --corruptions gaussian_noise,contrast \
        --json /tmp/check.json
    python scripts/bench/render_check.py --device cuda --batch 16 --json check.json   # part of gpu_check.sh
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corruptions import UsageError, _environment, _parse_names, run_and_write  # noqa: E402
from generate import make_source_folder  # noqa: E402
from render import CROP_ONLY, MEDIUM_MIX, SOURCE_IMAGES, medium_specs, single_corruption_specs  # noqa: E402

from ccc.load.rendered_stream import check_render_device  # noqa: E402
from ccc.render import RENDER_PRECISIONS, decode_jpeg  # noqa: E402
from ccc.render_torch import jpeg_round_trip, render_batch  # noqa: E402
from ccc.render_torch._triton import KERNELS_VARIABLE, fuses  # noqa: E402
from ccc.stream.spec import SampleSpec  # noqa: E402

PACKAGE = str(Path(__file__).resolve().parents[2] / "ccc")


def _error_line(error: BaseException) -> str:
    """``Type: message`` (first line) and the innermost traceback frame inside the package."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename.startswith(PACKAGE)]
    where = f" at {Path(frames[-1].filename).relative_to(Path(PACKAGE).parent)}:{frames[-1].lineno}" if frames else ""
    message = str(error).strip().splitlines()
    return f"{type(error).__name__}: {message[0] if message else ''}{where}"


def _synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def _aten_compositions() -> Iterator[None]:
    """Within: the renderer runs its ATen compositions instead of its Triton kernels."""
    before = os.environ.get(KERNELS_VARIABLE)
    os.environ[KERNELS_VARIABLE] = "aten"
    try:
        yield
    finally:
        if before is None:
            del os.environ[KERNELS_VARIABLE]
        else:
            os.environ[KERNELS_VARIABLE] = before


def compare(device_bytes: np.ndarray, cpu_bytes: np.ndarray) -> dict[str, float | int]:
    """Differences between two uint8 (B, 3, H, W) renders: % of differing bytes, max and mean |Δ| (levels),
    number of samples with any difference."""
    difference = np.abs(device_bytes.astype(np.int16) - cpu_bytes.astype(np.int16))
    return {
        "differing_percent": float(100.0 * np.count_nonzero(difference) / difference.size),
        "max_levels": int(difference.max()),
        "mean_levels": float(difference.mean()),
        "differing_samples": int(np.count_nonzero(difference.reshape(len(difference), -1).max(axis=1))),
    }


def check_case(
    specs: Sequence[SampleSpec], images: Sequence[np.ndarray], device: torch.device, precision: str
) -> dict[str, object]:
    """Render ``specs`` twice on ``device`` and once on the CPU; the fields of the module docstring."""
    try:
        start = time.perf_counter()
        first = render_batch(specs, images, device, False, precision)
        _synchronise(device)
        seconds = time.perf_counter() - start
        second = render_batch(specs, images, device, False, precision)
        cpu = render_batch(specs, images, "cpu", False, precision)
        aten = None
        if fuses(device):
            with _aten_compositions():
                aten = render_batch(specs, images, device, False, precision)
        first_jpeg, cpu_jpeg = jpeg_round_trip(first), jpeg_round_trip(cpu)
    except Exception as error:  # noqa: BLE001 - reported per case; the other cases still run
        return {"status": _error_line(error)}
    return {
        "status": "ok",
        "seconds": seconds,
        "deterministic": bool(torch.equal(first, second)),
        "triton_vs_aten": None if aten is None else compare(first.cpu().numpy(), aten.cpu().numpy()),
        "before_jpeg": compare(first.cpu().numpy(), cpu.numpy()),
        **compare(first_jpeg.cpu().numpy(), cpu_jpeg.numpy()),
    }


def check_table(result: dict) -> str:
    """Markdown: one row per precision and case."""
    batch = result["settings"]["batch"]
    lines = [
        "| precision | case | status | deterministic | before JPEG: bytes ≠ CPU (%), max Δ, samples "
        "| after JPEG: bytes ≠ CPU (%), max Δ, mean Δ, samples | Triton kernels: bytes ≠ ATen (%), max Δ |",
        "|---|---|---|---|---|---|---|",
    ]
    for precision, cases in result["cases"].items():
        for case, row in cases.items():
            if row["status"] != "ok":
                lines.append(f"| {precision} | {case} | {row['status']} | | | | |")
                continue
            before, fused = row["before_jpeg"], row["triton_vs_aten"]
            fused_text = "none here" if fused is None else f"{fused['differing_percent']:.4f}, {fused['max_levels']}"
            lines.append(
                f"| {precision} | {case} | ok | {'yes' if row['deterministic'] else 'NO'} | "
                f"{before['differing_percent']:.4f}, {before['max_levels']}, {before['differing_samples']}/{batch} | "
                f"{row['differing_percent']:.4f}, {row['max_levels']}, {row['mean_levels']:.5f}, "
                f"{row['differing_samples']}/{batch} | {fused_text} |"
            )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """Command-line options of the check."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cpu, cuda or cuda:INDEX (default: cuda)")
    parser.add_argument("--batch", type=int, default=16, help="samples per case (default: 16)")
    parser.add_argument(
        "--corruptions", default="all", help="'all' (default: 19), 'main', 'none' (mix and crop only) or a comma list"
    )
    parser.add_argument(
        "--precisions", default=",".join(RENDER_PRECISIONS), help="comma list (default: float64,float32)"
    )
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: 0, torch's choice)")
    parser.add_argument("--json", type=Path, default=None, help="write the results to this JSON file")
    return parser


def run(arguments: argparse.Namespace) -> dict:
    """Every case at every precision; prints the table and returns the results."""
    names = () if arguments.corruptions == "none" else _parse_names(arguments.corruptions)
    precisions = [name.strip() for name in arguments.precisions.split(",") if name.strip()]
    if not precisions or any(name not in RENDER_PRECISIONS for name in precisions):
        raise UsageError(f"--precisions must be a comma list of {', '.join(RENDER_PRECISIONS)}, got {precisions}")
    if arguments.batch < 1:
        raise UsageError(f"--batch must be >= 1, got {arguments.batch}")
    try:
        device = check_render_device(arguments.device)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if arguments.threads:
        torch.set_num_threads(arguments.threads)
    with tempfile.TemporaryDirectory() as temporary:
        folder = make_source_folder(Path(temporary) / "val", SOURCE_IMAGES)
        specs = medium_specs(folder, arguments.batch)
        images = [np.array(decode_jpeg((folder / spec.source_path).read_bytes())) for spec in specs]
    cases = {MEDIUM_MIX: specs, CROP_ONLY: [dataclasses.replace(spec, s1=0.0, s2=0.0) for spec in specs]}
    cases |= {name: single_corruption_specs(specs, name, seed) for seed, name in enumerate(names, start=1)}
    result: dict = {
        "settings": {
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "torch": torch.__version__,
            "batch": arguments.batch,
            "precisions": precisions,
        },
        "environment": _environment(),
        "cases": {},
    }
    for precision in precisions:
        result["cases"][precision] = {}
        for case, case_specs in cases.items():
            row = check_case(case_specs, images, device, precision)
            result["cases"][precision][case] = row
            print(f"  {precision} {case}: {row['status']}", file=sys.stderr, flush=True)
    print(check_table(result))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code (2 for a usage error)."""
    return run_and_write(run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
