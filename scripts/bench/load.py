"""Benchmark: reading CCC shards with ``ccc.open_stream`` versus a bare webdataset pipeline.

Renders a small stream once (``--samples`` images in ``--shards`` shards, ImageNet-size source
JPEGs), then, in alternating repetitions over the same shards:

- ``webdataset``: ``WebDataset(urls, shardshuffle=False).decode("rgb8").to_tuple("input.jpg", "output.cls")``
  — decode to uint8 HWC arrays, nothing else;
- ``ccc``: ``open_stream(run_folder)`` — uint8 CHW tensors, label and metadata record per sample,
  in stream order (byte size, keys and sample count checked against the manifest);
- ``ccc sha256``: ``open_stream(run_folder, verify="sha256")`` — the same, each shard's sha256
  compared with the manifest's before its first sample is delivered;

each with 0 DataLoader workers (iterated in this process) and with 2 workers (batches of 64; the
webdataset pipeline splits shards between workers, ours splits batches round-robin). Reports
samples/s (median of the repetitions), ccc's overhead relative to webdataset and the rate with
sha256 verification relative to the rate without (median of the per-repetition ratios: each pair
runs back to back, so the ratio is robust to other jobs on the machine).

    python scripts/bench/load.py --samples 2000 --shards 4 --repeats 5 --json results/bench_load.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generate import make_plan, make_source_folder, synthetic_table, warm_up  # noqa: E402

from ccc.execution import SerialExecutor  # noqa: E402
from ccc.generate import generate_stream  # noqa: E402
from ccc.load import open_stream, stream_loader  # noqa: E402
from ccc.stream.sources import index_image_folder, load_source_images  # noqa: E402

BATCH_SIZE = 64

# webdataset's "rgb8" arrays are read-only; the default collate of the baseline warns about it once per worker.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


def webdataset_rate(urls: list[str], workers: int) -> float:
    """Samples/s of the bare webdataset decode pipeline."""
    import webdataset

    dataset = (
        webdataset.WebDataset(urls, shardshuffle=False, empty_check=False)
        .decode("rgb8")
        .to_tuple("input.jpg", "output.cls")
    )
    started = time.perf_counter()
    if workers == 0:
        count = sum(1 for _ in dataset)
    else:
        loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH_SIZE, num_workers=workers)
        count = sum(len(labels) for _, labels in loader)
    return count / (time.perf_counter() - started)


def ccc_rate(run: Path, workers: int, verify: str | None = None) -> float:
    """Samples/s of ``open_stream`` (uint8 tensors, stream order), with ``verify`` as given."""
    started = time.perf_counter()
    if workers == 0:
        count = sum(1 for _ in open_stream(run, verify=verify))
    else:
        loader = stream_loader(open_stream(run, verify=verify), batch_size=BATCH_SIZE, num_workers=workers)
        count = sum(len(labels) for _, labels, _ in loader)
    return count / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=2000, help="stream length (default 2000)")
    parser.add_argument("--shards", type=int, default=4, help="number of shards (default 4)")
    parser.add_argument("--repeats", type=int, default=5, help="alternating repetitions (default 5)")
    parser.add_argument("--workers", default="0,2", help="comma list of DataLoader worker counts (default 0,2)")
    parser.add_argument("--json", metavar="PATH", help="write the numbers as JSON")
    arguments = parser.parse_args()
    workers_list = [int(value) for value in arguments.workers.split(",")]
    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary)
        print("rendering the stream …", file=sys.stderr)
        warm_up()
        sources = load_source_images(index_image_folder(make_source_folder(root / "val", 200), progress=False))
        table = synthetic_table()
        plan = make_plan(
            table, sources, "medium", arguments.samples, speed=100, shard_size=-(-arguments.samples // arguments.shards)
        )
        run = root / "run"
        generate_stream(plan, run, SerialExecutor(), progress=False)
        urls = sorted(str(path) for path in run.glob("serial_*.tar"))
        rates: dict[str, dict[int, list[float]]] = {
            name: {w: [] for w in workers_list} for name in ("webdataset", "ccc", "ccc sha256")
        }
        for workers in workers_list:
            webdataset_rate(urls, workers)
            ccc_rate(run, workers)
        for repeat in range(arguments.repeats):
            print(f"repetition {repeat + 1}/{arguments.repeats} …", file=sys.stderr)
            for workers in workers_list:
                rates["webdataset"][workers].append(webdataset_rate(urls, workers))
                rates["ccc"][workers].append(ccc_rate(run, workers))
                rates["ccc sha256"][workers].append(ccc_rate(run, workers, verify="sha256"))
    print(
        f"\n## Reading {arguments.samples} samples in {arguments.shards} shards "
        f"(samples/s, median of {arguments.repeats})\n"
    )
    print(
        "| DataLoader workers | webdataset decode | ccc.open_stream | ccc overhead "
        "| verify='sha256' | sha256 / plain rate |"
    )
    print("|---|---|---|---|---|---|")
    results = {}
    for workers in workers_list:
        bare = statistics.median(rates["webdataset"][workers])
        ours = statistics.median(rates["ccc"][workers])
        verified = statistics.median(rates["ccc sha256"][workers])
        ratio = statistics.median(v / p for v, p in zip(rates["ccc sha256"][workers], rates["ccc"][workers]))
        overhead = bare / ours - 1
        results[workers] = {
            "webdataset": bare,
            "ccc": ours,
            "ccc_sha256": verified,
            "overhead": overhead,
            "sha256_ratio": ratio,
            "all": {k: v[workers] for k, v in rates.items()},
        }
        print(f"| {workers} | {bare:,.0f} | {ours:,.0f} | {overhead * 100:+.1f} % | {verified:,.0f} | {ratio:.3f} |")
    if arguments.json:
        Path(arguments.json).parent.mkdir(parents=True, exist_ok=True)
        Path(arguments.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
