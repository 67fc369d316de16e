"""``ccc-mirror``: copy a remote CCC stream into a local folder, resumably, every shard checked.

Example::

    ccc-mirror published:baseline_20_transition+speed_2000_seed_43 mirror/
    ccc-mirror https://host/ccc/run mirror/run --connections 8 --shards 0-9

Each shard is downloaded (continued after an interruption), read to its end with every sample
decoded, and only then kept under its name; a re-run skips finished shards and continues partial
ones. Exit code 0 when every requested shard is mirrored, 2 for an error (one line), 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from ccc.cli.common import HelpFormatter, OneLineErrorParser, UsageError, count, examples, integer_at_least, run_command
from ccc.folder_lock import FolderInUseError
from ccc.shards.errors import ShardReadError
from ccc.shards.mirror import MIRROR_NAME, MirrorError, mirror_stream
from ccc.shards.published import PUBLISHED_PREFIX, PUBLISHED_URL_VARIABLE, get_published
from ccc.shards.remote import DEFAULT_REMOTE_OPTIONS, MAX_SECONDS, RemoteOptions

PROGRAM = "ccc-mirror"


def _shard_range(text: str) -> range:
    """argparse type: ``A-B`` (shard indices A to B, both included) or ``A``."""
    first, _, last = text.partition("-")
    try:
        begin, end = int(first), int(last or first)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be A-B or A (shard indices), got {text!r}") from None
    if not 0 <= begin <= end:
        raise argparse.ArgumentTypeError(f"must be A-B with 0 <= A <= B, got {text!r}")
    return range(begin, end + 1)


def _seconds(text: str) -> float:
    """argparse type: a duration in seconds in (0, ``MAX_SECONDS``] (the remote reader's bound)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be a number of seconds in (0, {MAX_SECONDS:,.0f}], got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser of ``ccc-mirror``."""
    parser = OneLineErrorParser(
        prog=PROGRAM,
        description="Copy a remote CCC stream into a local folder: parallel, resumable, every shard checked.",
        formatter_class=HelpFormatter,
        epilog=examples(
            (
                "ccc-mirror published:baseline_20_transition+speed_2000_seed_43 mirror/",
                "a published stream (then read it with CCC_PUBLISHED_URL=mirror)",
            ),
            (
                "ccc-mirror https://host/ccc/run mirror/run --connections 8 --shards 0-9",
                "a run folder served over HTTP (with its manifest.json): its first 10 shards",
            ),
        ),
    )
    parser.add_argument(
        "source",
        metavar="SOURCE",
        help=f"{PUBLISHED_PREFIX}<name>, the URL of a run folder (holding manifest.json), or a shard URL pattern",
    )
    parser.add_argument(
        "out",
        metavar="DIR",
        help=f"where to mirror; a {PUBLISHED_PREFIX} stream goes into DIR/<name>, so that "
        f"{PUBLISHED_URL_VARIABLE}=DIR reads it",
    )
    parser.add_argument(
        "--connections", type=integer_at_least(1), default=4, metavar="N", help="shards downloaded at once (threads)"
    )
    parser.add_argument("--shards", type=_shard_range, metavar="A-B", help="only shards A to B (0-based, included)")
    parser.add_argument("--published-url", metavar="URL", help=f"base URL of {PUBLISHED_PREFIX} names (a mirror's)")
    parser.add_argument(
        "--attempts",
        type=integer_at_least(1),
        metavar="N",
        default=DEFAULT_REMOTE_OPTIONS.attempts,
        help="tries per interruption of a download",
    )
    parser.add_argument(
        "--backoff",
        type=_seconds,
        metavar="SECONDS",
        default=DEFAULT_REMOTE_OPTIONS.backoff,
        help="seconds before the first retry (doubling)",
    )
    parser.add_argument(
        "--max-backoff",
        type=_seconds,
        metavar="SECONDS",
        default=DEFAULT_REMOTE_OPTIONS.max_backoff,
        help="longest wait between tries",
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        default=DEFAULT_REMOTE_OPTIONS.read_timeout,
        help="seconds without a byte",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def _run(arguments: argparse.Namespace) -> int:
    """Mirror the source; returns 0."""
    out = Path(arguments.out)
    if arguments.source.startswith(PUBLISHED_PREFIX):
        name = arguments.source[len(PUBLISHED_PREFIX) :]
        get_published(name)
        out = out / name
    if arguments.max_backoff < arguments.backoff:
        raise UsageError(f"--max-backoff must be >= --backoff ({arguments.backoff}), got {arguments.max_backoff}")
    remote = RemoteOptions(
        attempts=arguments.attempts,
        backoff=arguments.backoff,
        max_backoff=arguments.max_backoff,
        read_timeout=arguments.timeout,
    )
    with tqdm(
        total=None, unit="B", unit_scale=True, unit_divisor=1024, desc=out.name, disable=arguments.no_progress
    ) as bar:

        def progress(received: int, total: int | None) -> None:
            if total is not None and bar.total != total:
                bar.total = total
            bar.update(received)

        mirrored = mirror_stream(
            arguments.source,
            out,
            connections=arguments.connections,
            shards=arguments.shards,
            remote=remote,
            published_url=arguments.published_url,
            progress=progress,
        )
    size = sum(shard.bytes for shard in mirrored)
    samples = sum(shard.samples for shard in mirrored)
    print(
        f"{PROGRAM}: {count(len(mirrored), 'shard')} ({size / 2**30:.2f} GiB, {count(samples, 'sample')}) "
        f"checked in {out} ({MIRROR_NAME} lists them)"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``ccc-mirror``; returns the exit code (0 done, 2 error, 130 interrupted)."""
    arguments = build_parser().parse_args(argv)
    return run_command(
        PROGRAM,
        lambda: _run(arguments),
        (UsageError, MirrorError, ShardReadError, FolderInUseError, ValueError, OSError),
        interrupted="interrupted; run the same command again to continue",
    )


if __name__ == "__main__":
    sys.exit(main())
