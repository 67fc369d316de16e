"""Benchmark: time from the first request to the outcome (samples or one error line) of a remote shard
read under the DEFAULT ``RemoteOptions``, for each fault of a fault-injecting server on 127.0.0.1.

Every scenario serves one real CCC shard (4 samples, rendered from a small synthetic stream) with the
test suite's fault server (``tests/ccc/shards/fault_server.py``) and reads it with
``open_stream([url], image_format="jpeg")``, streamed and through the shard cache (``cache=``), all
scenarios at once (each its own server; the time is waiting, not work). The faults:

- ``drop mid-body``: the connection is reset after 9,000 bytes, once (then the file is served);
- ``503 always``; ``stall before headers`` (silent for 10 minutes, every request);
- ``trickle 1 B/0.5 s`` (every request); ``no Content-Length, closed half-way`` (every request);
- ``HTML served with 200``; ``gzip body`` (``Content-Encoding: gzip``); ``redirect loop``.

Reported per scenario and mode: the outcome (``ok`` with the sample count, or ``error``), seconds,
the retry warning lines logged, and the error line. The slow scenarios end at the deadline
(``RemoteOptions.deadline``, 300 s by default): a full run takes about 5 minutes.

    python scripts/bench/remote_faults.py --json results/bench_remote_faults.json
    python scripts/bench/remote_faults.py --only "gzip body" --only "redirect loop"
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPOSITORY))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from corruptions import UsageError, run_and_write  # noqa: E402

from ccc.load import StreamError, open_stream  # noqa: E402
from ccc.shards.record import shard_name  # noqa: E402
from ccc.shards.remote import DEFAULT_REMOTE_OPTIONS  # noqa: E402
from tests.builders import make_ccc_run  # noqa: E402
from tests.ccc.shards.fault_server import FaultServer  # noqa: E402

PATH = "/ccc/serial_00000.tar"
SCENARIOS: dict[str, tuple[str, tuple]] = {
    "drop mid-body": ("once", ("reset", 9000)),
    "503 always": ("always", ("status", 503, None)),
    "stall before headers": ("always", ("silent", 600.0)),
    "trickle 1 B/0.5 s": ("always", ("trickle", 0.5)),
    "no Content-Length, closed half-way": ("always", ("no-length", 9000)),
    "HTML served with 200": ("always", ("html",)),
    "gzip body": ("always", ("gzip",)),
    "redirect loop": ("always", ("redirect", PATH)),
}
"""Scenario name → (how often the fault is served, the fault server's fault)."""

MODES = ("stream", "cache")


class _Counter(logging.Handler):
    """Counts the retry warning lines of each server (by its base URL)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []
        self.lock_lines = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self.lock_lines:
            self.lines.append(record.getMessage())

    def count(self, base: str) -> int:
        with self.lock_lines:
            return sum(f"{base}/" in line for line in self.lines)


def _scenario(name: str, mode: str, shard: bytes, scratch: Path, counter: _Counter) -> dict:
    """Serve ``shard`` with the scenario's fault and read it; the outcome, seconds and warnings."""
    how, fault = SCENARIOS[name]
    with FaultServer({PATH: shard}) as server:
        if how == "once":
            server.add_faults(PATH, fault)
        else:
            server.always[PATH] = fault
        cache = scratch / f"cache-{len(list(scratch.iterdir()))}-{mode}" if mode == "cache" else None
        began = time.monotonic()
        try:
            samples = sum(1 for _ in open_stream([server.url(PATH)], image_format="jpeg", cache=cache))
            outcome, message = f"ok ({samples} samples)", ""
        except (StreamError, OSError) as error:
            outcome, message = "error", str(error).replace(server.base, "http://127.0.0.1:PORT")
        seconds = time.monotonic() - began
        warnings = counter.count(server.base)
    return {
        "scenario": name,
        "mode": mode,
        "outcome": outcome,
        "seconds": seconds,
        "warnings": warnings,
        "message": message,
    }


def run(arguments: argparse.Namespace) -> dict:
    names = arguments.only or list(SCENARIOS)
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        raise UsageError(f"unknown scenario {unknown[0]!r}; available: {', '.join(SCENARIOS)}")
    counter = _Counter()
    logging.getLogger("ccc.shards").addHandler(counter)
    logging.getLogger("ccc.shards").propagate = False
    with tempfile.TemporaryDirectory() as scratch:
        folder = make_ccc_run(Path(scratch) / "run", num_images=4, speed=4, shard_size=4)
        shard = (folder / shard_name(0)).read_bytes()
        cases = [(name, mode) for name in names for mode in MODES]
        with ThreadPoolExecutor(max_workers=len(cases)) as pool:
            rows = list(pool.map(lambda case: _scenario(*case, shard, Path(scratch), counter), cases))
    options = DEFAULT_REMOTE_OPTIONS
    print(
        f"default RemoteOptions: {options.attempts} attempts, backoff {options.backoff:g} s doubling to "
        f"{options.max_backoff:g} s, read_timeout {options.read_timeout:g} s, deadline {options.deadline:g} s, "
        f"min_rate {options.min_rate:,.0f} B/s; a {len(shard):,}-byte shard\n"
    )
    print("| scenario | mode | outcome | seconds | retry lines | message |")
    print("|---|---|---|---:|---:|---|")
    for row in rows:
        print(
            f"| {row['scenario']} | {row['mode']} | {row['outcome']} | {row['seconds']:.1f} | {row['warnings']} "
            f"| {row['message']} |"
        )
    return {"options": vars(options), "shard_bytes": len(shard), "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", metavar="SCENARIO", help="run only this scenario (repeatable)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    return run_and_write(run, parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
