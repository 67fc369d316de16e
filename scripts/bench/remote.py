"""Benchmark: remote reading over loopback versus local reading, and ``ccc-mirror`` with 1, 4, 8 connections.

Builds ``--shards`` tar shards in the published layout (``info``, ``input.jpg``, ``output.cls``) of
``--samples-per-shard`` samples each, every sample the same real CCC JPEG (rendered once from a
small synthetic stream), then serves the folder with ``python -m http.server`` in a separate process
on 127.0.0.1 and measures, in alternating repetitions:

- ``local``: ``open_stream([paths], image_format="jpeg")`` — tar parsing and the sample records,
  no JPEG decoding (the transport is what differs);
- ``remote``: the same over ``http://127.0.0.1`` (``ccc.shards.remote``: urllib3, retries armed);
- ``mirror N``: ``mirror_stream(url pattern, folder, connections=N)`` for N in ``--connections``
  — download, full decode of every sample, sha256 and rename (into a fresh folder each time).

Reports MB/s (median of the repetitions) and the remote/local ratio (median of per-repetition
ratios, each pair back to back). Loopback has no latency or bandwidth limit: these numbers bound
the client's own cost, not a real server's.

    python scripts/bench/remote.py --shards 8 --samples-per-shard 500 --repeats 3
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPOSITORY))

from ccc.load import open_stream  # noqa: E402
from ccc.shards.mirror import mirror_stream  # noqa: E402
from ccc.shards.record import shard_name, shard_pattern  # noqa: E402
from tests.builders import make_ccc_run  # noqa: E402


def write_shards(folder: Path, shards: int, per_shard: int) -> int:
    """Write the shards (one real JPEG repeated); return their total size in bytes."""
    run = make_ccc_run(folder / "source", num_images=4, speed=4, shard_size=4)
    with tarfile.open(run / shard_name(0)) as archive:
        jpeg = next(archive.extractfile(m).read() for m in archive.getmembers() if m.name.endswith(".input.jpg"))
    info = b"++dir++n00000000++name++a.JPEG++n1++fog++s1++1.0++n2++snow++s2++0.5"
    total = 0
    for index in range(shards):
        path = folder / "serve" / shard_name(index)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as archive:
            for number in range(per_shard):
                for extension, content in (("info", info), ("input.jpg", jpeg), ("output.cls", b"7")):
                    member = tarfile.TarInfo(f"sample_{index * per_shard + number:08d}.{extension}")
                    member.size = len(content)
                    archive.addfile(member, io.BytesIO(content))
        total += path.stat().st_size
    return total


def read_rate(source: list[str], total: int) -> float:
    begin = time.perf_counter()
    count = sum(1 for _ in open_stream(source, image_format="jpeg"))
    assert count > 0
    return total / (time.perf_counter() - begin) / 1e6


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--samples-per-shard", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--json", help="also write the results as JSON")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ccc-bench-remote-") as work:
        work_path = Path(work)
        total = write_shards(work_path, arguments.shards, arguments.samples_per_shard)
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", work + "/serve"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(1.0)
            base = f"http://127.0.0.1:{port}"
            local = [str(work_path / "serve" / shard_name(index)) for index in range(arguments.shards)]
            remote = [f"{base}/{shard_name(index)}" for index in range(arguments.shards)]
            rates: dict[str, list[float]] = {"local": [], "remote": []}
            ratios = []
            for _ in range(arguments.repeats):
                rates["local"].append(read_rate(local, total))
                rates["remote"].append(read_rate(remote, total))
                ratios.append(rates["remote"][-1] / rates["local"][-1])
                for connections in arguments.connections:
                    target = work_path / f"mirror_{connections}"
                    begin = time.perf_counter()
                    mirror_stream(f"{base}/{shard_pattern(arguments.shards)}", target, connections=connections)
                    rates.setdefault(f"mirror {connections}", []).append(total / (time.perf_counter() - begin) / 1e6)
                    shutil.rmtree(target)
        finally:
            server.terminate()
            server.wait()
    results = {name: statistics.median(values) for name, values in rates.items()}
    print(f"{arguments.shards} shards, {total / 1e6:.1f} MB, median of {arguments.repeats} repetitions:")
    for name, rate in results.items():
        print(f"  {name:10s} {rate:8.1f} MB/s")
    print(f"  remote/local {statistics.median(ratios):.2f}")
    if arguments.json:
        Path(arguments.json).write_text(json.dumps({"MB/s": results, "remote/local": statistics.median(ratios)}))


if __name__ == "__main__":
    main()
