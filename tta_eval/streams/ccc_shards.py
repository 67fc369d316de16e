"""``ccc:<run folder | shard pattern>``: CCC shards read in stream order (``ccc.open_stream``), a run
folder's shards verified against its manifest; the metadata keys of CCC samples."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ccc.shards.published import PUBLISHED_PREFIX, get_published
from tta_eval.cli_options import CliOption
from tta_eval.streams.batch import SizedStream
from tta_eval.streams.options import StreamOptions
from tta_eval.streams.registry import REGISTRY, StreamDescription, StreamSource, ccc_stream_world, last_component

if TYPE_CHECKING:
    from ccc.stream.spec import StreamSpec


PAIR_KEY = "pair"
"""Metadata key added to CCC samples: their corruption pair "n1→n2" (the domain key of CCC runs)."""

DOMAIN_KEY = "domain"
"""Metadata key of the samples of ``cin-c`` and ``gradual`` streams naming their corruption (their
default domain key; ``severity`` holds the severity)."""

_NO_LOCATION = (
    "stream 'ccc:' needs a run folder or shard pattern, e.g. ccc:shards/baseline_20_transition+speed_2000_seed_43"
)


def _open_ccc(location: str, options: StreamOptions, start: int = 0) -> SizedStream:
    """``ccc:<run folder | shard pattern>``: a CCC stream (``ccc.open_stream``) as float batches in [0, 1],
    in stream order, from sample ``start`` (whole shards before it are not read; nothing when the
    stream ends there); each sample's metadata also names its pair (``PAIR_KEY``). A run folder's
    shards are verified against its manifest's sha256 unless ``options.verify_shards`` is off;
    ``http(s)://`` shards are read under ``options.remote_options()``."""
    from ccc.load import open_stream, stream_loader

    if not location:
        raise ValueError(_NO_LOCATION)
    verify = _ccc_verification(location, options)
    remote = options.remote_options()
    stream = open_stream(location, image_format="float", verify=verify, remote=remote)
    if start and stream.length is not None and start >= stream.length:
        return SizedStream([], 0)
    if start:
        stream = open_stream(location, image_format="float", start=start, verify=verify, remote=remote)
    loader = stream_loader(stream, batch_size=options.batch_size, num_workers=options.num_workers)
    return SizedStream(with_pairs(loader), stream.length)


def _ccc_verification(location: str, options: StreamOptions) -> str | None:
    """``ccc.open_stream``'s ``verify`` for ``ccc:<location>``: "sha256" for a run folder (or its
    manifest.json) or a ccc-mirror folder unless ``options.verify_shards`` is off; None for shard
    patterns (no manifest)."""
    folder = Path(location)
    folder = folder.parent if folder.name == "manifest.json" else folder
    return "sha256" if options.verify_shards and folder.is_dir() else None


def _describe_ccc(location: str, options: StreamOptions) -> StreamDescription:
    """A CCC run folder's length, world and shard verification from its manifest; a shard pattern is
    described by its name only."""
    from ccc.demo import DEMO_CLASSES, is_demo_stream
    from ccc.shards.manifest import MANIFEST_NAME, ManifestError, load_manifest
    from ccc.shards.mirror import MIRROR_NAME

    if not location:
        raise ValueError(_NO_LOCATION)
    if location.startswith(PUBLISHED_PREFIX):
        published = get_published(location[len(PUBLISHED_PREFIX) :])
        return StreamDescription(name=published.name, samples=published.num_images, world="imagenet")
    folder = Path(location)
    folder = folder.parent if folder.name == "manifest.json" else folder
    if not folder.is_dir():
        return StreamDescription(name=last_component(location))
    if not (folder / MANIFEST_NAME).exists() and (folder / MIRROR_NAME).exists():
        return _describe_mirror(folder, location, options)
    try:
        spec = load_manifest(folder).stream
    except FileNotFoundError:
        raise ValueError(
            f"stream folder {location!r} has no manifest.json; pass a run folder written by ccc-generate, "
            "a ccc-mirror folder or shard files"
        ) from None
    except ManifestError as error:
        raise ValueError(str(error)) from None
    demo = is_demo_stream(spec)
    return StreamDescription(
        name=folder.resolve().name,
        samples=spec.num_images,
        world=ccc_stream_world(spec),
        num_classes=len(DEMO_CLASSES) if demo else None,
        verification=_ccc_verification(location, options),
    )


def _describe_mirror(folder: Path, location: str, options: StreamOptions) -> StreamDescription:
    """A ``ccc-mirror`` folder without a manifest (a published stream): its name, its length from the
    sample counts ``mirror.json`` records, the ImageNet world."""
    from ccc.shards.mirror import MirrorError, mirrored_shards

    try:
        shards = mirrored_shards(folder)
    except MirrorError as error:
        raise ValueError(str(error)) from None
    return StreamDescription(
        name=folder.resolve().name,
        samples=sum(shard.samples for shard in shards),
        world="imagenet",
        verification=_ccc_verification(location, options),
    )


def run_folder_stream(location: str) -> StreamSpec | None:
    """The stream of the run folder (or its manifest.json) at ``location``; None for anything else
    (shard patterns, URLs, folders without a readable manifest)."""
    from ccc.shards.manifest import ManifestError, load_manifest

    folder = Path(location)
    folder = folder.parent if folder.name == "manifest.json" else folder
    try:
        return load_manifest(folder).stream if folder.is_dir() else None
    except (FileNotFoundError, ManifestError):
        return None


def run_folder_kind(location: str) -> str:
    """The stream kind of the run folder at ``location``; "ccc" for anything else."""
    spec = run_folder_stream(location)
    return "ccc" if spec is None else spec.kind


def _ccc_domain_key(location: str) -> str:
    """The default domain key of ``ccc:<location>``: :data:`DOMAIN_KEY` for a run folder holding a
    ``cin-c`` or ``gradual`` stream, :data:`PAIR_KEY` otherwise (CCC streams, shard patterns)."""
    return PAIR_KEY if run_folder_kind(location) == "ccc" else DOMAIN_KEY


def with_pairs(loader: Iterable[Any]) -> Iterator[Any]:
    """The batches of ``loader`` (images, labels, per-sample metadata dicts), each sample's metadata
    gaining its corruption pair under ``PAIR_KEY``."""
    for images, labels, metadata in loader:
        yield images, labels, [{**entry, PAIR_KEY: f"{entry['n1']}→{entry['n2']}"} for entry in metadata]


REGISTRY.register(
    StreamSource(
        "ccc",
        _open_ccc,
        order=3,
        describe=_describe_ccc,
        domain_key=_ccc_domain_key,
        seekable=True,
        options=(
            CliOption(
                "--no-verify",
                {
                    "action": "store_true",
                    "help": "ccc: run folders: do not compare each shard's sha256 with the manifest's before "
                    "reading it (verified by default, about 3 %% of a run's time; sizes, keys and counts are "
                    "still checked, but a changed image byte is then delivered silently: a JPEG with a changed "
                    "byte usually still decodes, to a slightly different image)",
                },
            ),
            CliOption(
                "--remote-deadline",
                {
                    "type": float,
                    "metavar": "SECONDS",
                    "help": "ccc: http(s) shards: seconds a shard's read may wait on the server without useful "
                    "progress (all retries and waits together) before the run stops with an error naming the "
                    "shard (default 300, at most 86400)",
                },
            ),
            CliOption(
                "--remote-min-rate",
                {
                    "type": float,
                    "metavar": "BYTES_PER_S",
                    "help": "ccc: http(s) shards: bytes per second a try must deliver to count as progress; a "
                    "slower one is retried, within --remote-deadline (default 10000; 0: any byte counts)",
                },
            ),
        ),
        title="ccc: streams (run folders of ccc-generate)",
        from_options=lambda values: {
            "verify_shards": not values["no_verify"],
            "remote_deadline": values["remote_deadline"],
            "remote_min_rate": values["remote_min_rate"],
        },
    )
)
