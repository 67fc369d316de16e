"""Streams of labelled batches: parsing, per-sample metadata, and named stream sources.

A stream is any iterable of ``(images, labels)`` or ``(images, labels, metadata)`` items: images a
float tensor N×C×H×W in [0, 1], labels an integer tensor (N,), metadata either a mapping from key to
a per-sample sequence (what torch's default collate makes of per-sample dicts) or a list of N
per-sample dicts. A torch DataLoader over a Dataset or IterableDataset is such a stream.

Stream *sources* turn a string given on the command line into a stream. Built in: ``synthetic[:k=v,…]``
(see ``tta_eval.synthetic``), ``ccc:<run folder or shard pattern>`` (CCC shards read with
``ccc.open_stream``, in stream order), ``ccc-render:<definition>`` (a CCC stream rendered on the fly
by ``ccc.render_stream`` in DataLoader workers, no shards stored) and a folder in ImageFolder layout. Other loaders plug in with
``register_stream_source(scheme, opener)``; ``--stream scheme:location`` then calls
``opener(location, options)``.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ccc.options import OPTION_SEPARATOR, parse_list, parse_options
from ccc.validation import MAX_BATCH_SIZE, MAX_IMAGE_SIZE, MAX_SAMPLES, check_non_negative_int, check_positive_int


# torch is imported where batches are handled, so that the stream sources' registry (named by
# ``tta-eval --help``) loads without it.
if TYPE_CHECKING:
    import torch

    from ccc.stream.spec import StreamSpec
    from tta_eval.synthetic import SyntheticStream


@dataclass(frozen=True)
class Batch:
    """One parsed stream item: images N×C×H×W (float), labels (N,) int64, metadata or None."""

    images: torch.Tensor
    labels: torch.Tensor
    metadata: Any = None

    @property
    def size(self) -> int:
        """Number of samples N."""
        return int(self.labels.shape[0])


def as_batch(item: Any, batch_index: int) -> Batch:
    """Validate one stream item and return it as a Batch; ValueError naming the batch otherwise."""
    import torch

    if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
        raise ValueError(
            f"stream batch {batch_index} must be (images, labels) or (images, labels, metadata), "
            f"got {type(item).__name__}{f' of length {len(item)}' if isinstance(item, (tuple, list)) else ''}"
        )
    images, labels = item[0], item[1]
    metadata = item[2] if len(item) == 3 else None
    if not isinstance(images, torch.Tensor) or images.dim() != 4 or not images.is_floating_point():
        description = (
            f"{tuple(images.shape)} {images.dtype}" if isinstance(images, torch.Tensor) else type(images).__name__
        )
        raise ValueError(f"stream batch {batch_index}: images must be a float tensor N×C×H×W, got {description}")
    if not isinstance(labels, torch.Tensor) or labels.dim() != 1 or labels.is_floating_point():
        description = (
            f"{tuple(labels.shape)} {labels.dtype}" if isinstance(labels, torch.Tensor) else type(labels).__name__
        )
        raise ValueError(f"stream batch {batch_index}: labels must be an integer tensor (N,), got {description}")
    if labels.shape[0] != images.shape[0]:
        raise ValueError(f"stream batch {batch_index}: {images.shape[0]} images but {labels.shape[0]} labels")
    if labels.shape[0] == 0:
        raise ValueError(f"stream batch {batch_index} is empty (0 samples)")
    return Batch(images, labels.long(), metadata)


def metadata_values(metadata: Any, key: str, batch_size: int, batch_index: int) -> list[str]:
    """Per-sample values of ``key`` in a batch's metadata, as strings (length ``batch_size``)."""
    import torch

    if metadata is None:
        raise ValueError(f"stream batch {batch_index} has no metadata, but domain key {key!r} was requested")
    if isinstance(metadata, Mapping):
        if key not in metadata:
            raise ValueError(
                f"domain key {key!r} not in the metadata of stream batch {batch_index}; "
                f"available keys: {', '.join(map(str, metadata))}"
            )
        values = metadata[key]
        if isinstance(values, torch.Tensor):
            values = values.tolist()
        elif isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            values = [values] * batch_size
    elif isinstance(metadata, Sequence) and all(isinstance(entry, Mapping) for entry in metadata):
        missing = [index for index, entry in enumerate(metadata) if key not in entry]
        if missing:
            raise ValueError(
                f"domain key {key!r} missing from sample {missing[0]} of stream batch {batch_index}; "
                f"available keys: {', '.join(map(str, metadata[missing[0]]))}"
            )
        values = [entry[key] for entry in metadata]
    else:
        raise ValueError(
            f"metadata of stream batch {batch_index} must be a mapping or a list of per-sample dicts, "
            f"got {type(metadata).__name__}"
        )
    if len(values) != batch_size:
        raise ValueError(
            f"metadata key {key!r} of stream batch {batch_index} has {len(values)} values for {batch_size} samples"
        )
    return [str(value) for value in values]


def majority_value(values: Sequence[str]) -> str:
    """The most frequent value; ties go to the value seen first."""
    counts = collections.Counter(values)
    best = max(counts.values())
    return next(value for value in values if counts[value] == best)


@dataclass(frozen=True)
class SizedStream:
    """A stream whose length in samples is known (None: unknown), e.g. from a manifest or --max-samples;
    progress bars show it as their total."""

    batches: Iterable[Any]
    num_samples: int | None

    def __iter__(self) -> Iterator[Any]:
        return iter(self.batches)


def stream_length(stream: Iterable[Any]) -> int | None:
    """Samples in ``stream`` if known (a :class:`SizedStream`), else None."""
    return stream.num_samples if isinstance(stream, SizedStream) else None


def skip_samples(batches: Iterable[Any], samples: int) -> Iterable[Any]:
    """``batches`` without its first ``samples`` samples, which are read and dropped whole batch by
    batch (``samples`` must fall on a batch boundary: ValueError otherwise); a sized stream's length
    shrinks by ``samples``. ``batches`` itself when ``samples`` is 0."""
    if not samples:
        return batches
    known = stream_length(batches)
    return SizedStream(_skipped(batches, samples), None if known is None else max(0, known - samples))


def _skipped(batches: Iterable[Any], samples: int) -> Iterator[Any]:
    iterator = iter(batches)
    dropped = 0
    while dropped < samples:
        item = next(iterator, None)
        if item is None:
            return
        dropped += as_batch(item, 0).size
    if dropped != samples:
        raise ValueError(
            f"cannot resume the stream at sample {samples:,}: it is not the start of a batch (batch boundary at {dropped:,})"
        )
    yield from iterator


def limit_samples(batches: Iterable[Any], max_samples: int) -> SizedStream:
    """Items of ``batches`` until ``max_samples`` samples were yielded, the last batch cut; its length
    is ``max_samples`` (or the stream's own, if known and shorter)."""
    check_positive_int("max_samples", max_samples, MAX_SAMPLES)
    known = stream_length(batches)
    return SizedStream(_limited(batches, max_samples), max_samples if known is None else min(known, max_samples))


def _limited(batches: Iterable[Any], max_samples: int) -> Iterator[Any]:
    seen = 0
    for index, item in enumerate(batches):
        batch = as_batch(item, index)
        remaining = max_samples - seen
        if batch.size > remaining:
            metadata = batch.metadata
            if isinstance(metadata, Mapping):
                metadata = {key: value[:remaining] for key, value in metadata.items()}
            elif isinstance(metadata, Sequence):
                metadata = metadata[:remaining]
            yield (batch.images[:remaining], batch.labels[:remaining], metadata)
            return
        yield item
        seen += batch.size
        if seen >= max_samples:
            return


@dataclass(frozen=True)
class StreamOptions:
    """Options given to stream openers.

    batch_size in [1, 65536]; num_workers >= 0 DataLoader worker processes; image_size: side in
    pixels of the centre crop for image folders (images are resized so the short side is 256/224
    of it), at most 16384; shuffle_seed: seed of the fixed permutation applied to image folders
    (their files are sorted by class otherwise), None keeps the sorted order; skip_bad_images:
    decode every image of a folder before the run and exclude the unreadable ones (logged), as
    ``ccc-generate --skip-bad-images`` does; without it the first unreadable image stops the run
    with an error naming it; classes: a class list file for image folders (one class folder name
    per line, line k = class k, as ``ccc-generate --classes``), None: the standard ImageNet index
    for WordNet-id folders, else sorted folder order; verify_shards: ``ccc:`` run folders (a
    manifest): compare each shard's sha256 with the manifest's before any of its samples is
    delivered (``ccc.open_stream(verify="sha256")``; a changed byte stops the stream naming the
    shard); False checks only sizes, keys and counts. Other sources ignore it.
    """

    batch_size: int = 64
    num_workers: int = 0
    image_size: int = 224
    shuffle_seed: int | None = 0
    skip_bad_images: bool = False
    classes: str | None = None
    verify_shards: bool = True

    def __post_init__(self) -> None:
        check_positive_int("batch_size", self.batch_size, MAX_BATCH_SIZE)
        check_positive_int("image_size", self.image_size, MAX_IMAGE_SIZE)
        check_non_negative_int("num_workers", self.num_workers)


DEMO_WORLD = "demo"
"""The world of streams rendered from the demo images (``ccc.demo``)."""

WORLD_MODELS = {DEMO_WORLD: "ccc.demo:demo_model"}
"""The model factory evaluated by default on a stream of each world other than ImageNet's."""


@dataclass(frozen=True)
class StreamDescription:
    """What is known of a stream before reading it.

    name: a short name of the stream (e.g. the run folder of CCC shards; not yet folder-safe); samples: its
    length in samples (None: unknown); world: "demo" for a stream of the demo world
    (``ccc.demo``), "imagenet" for one rendered from an ImageNet-layout folder, None when unknown; num_classes: how many classes its labels come
    from (None: unknown); run_name: the default name of a run folder evaluating it when that is not
    ``name`` (a rendered stream's ``<name>_rendered``, so that it never takes the run folder of its
    stored shards; ``tta-eval compare`` keys on ``name``); verification: how the stream's stored bytes are checked
    before its samples are used: "sha256" (each shard's sha256 against its manifest's,
    ``StreamOptions.verify_shards``), None: not beyond what reading and decoding notice.
    """

    name: str
    samples: int | None = None
    world: str | None = None
    num_classes: int | None = None
    run_name: str | None = None
    verification: str | None = None


StreamOpener = Callable[[str, StreamOptions], Iterable[Any]]
StreamDescriber = Callable[[str, StreamOptions], StreamDescription]
_SOURCES: dict[str, StreamOpener] = {}
_DESCRIBERS: dict[str, StreamDescriber] = {}
_DOMAIN_KEYS: dict[str, str | Callable[[str], str | None]] = {}
_SEEKABLE: set[str] = set()


def register_stream_source(
    scheme: str,
    opener: StreamOpener,
    describe: StreamDescriber | None = None,
    domain_key: str | Callable[[str], str | None] | None = None,
    seekable: bool = False,
) -> None:
    """Make ``--stream scheme:location`` call ``opener(location, options)``; scheme: [a-z0-9_-]+.

    describe: optional ``describe(location, options) -> StreamDescription`` that reads what is known
    of the stream (length, world) without reading its samples; without it only the name is known.
    domain_key: the metadata key whose value a run records as each batch's domain when the user
    names none (e.g. the corruption pair of CCC streams), or a function of the location returning
    it (e.g. depending on the stream's kind); None: no domain. seekable: the opener also takes
    ``start=S`` and then yields the stream from sample S (a multiple of the batch size) without
    reading what comes before (a resumed run); otherwise the first batches are read and dropped
    (``skip_samples``).
    """
    if not scheme.replace("_", "").replace("-", "").isalnum() or scheme != scheme.lower():
        raise ValueError(f"stream scheme must be lower-case letters, digits, '_' or '-', got {scheme!r}")
    if scheme in _SOURCES:
        raise ValueError(f"stream scheme {scheme!r} is already registered")
    _SOURCES[scheme] = opener
    if describe is not None:
        _DESCRIBERS[scheme] = describe
    if domain_key is not None:
        _DOMAIN_KEYS[scheme] = domain_key
    if seekable:
        _SEEKABLE.add(scheme)


def default_domain_key(text: str) -> str | None:
    """The domain key registered for the scheme of stream ``text`` ("ccc:<ccc stream>" → "pair",
    "ccc:<cin-c or gradual stream>" → "domain"), else None."""
    scheme, separator, location = text.partition(":")
    key = _DOMAIN_KEYS.get(scheme) if separator else None
    return key(location) if callable(key) else key


def stream_schemes() -> list[str]:
    """Registered stream schemes."""
    return list(_SOURCES)


def _open_synthetic(location: str, options: StreamOptions) -> SyntheticStream:
    from tta_eval.synthetic import SyntheticStream, SyntheticStreamSpec

    owner = "stream 'synthetic:'"
    values = parse_options(location, owner)
    values.setdefault("batch_size", options.batch_size)
    if "corruptions" in values:
        values["corruptions"] = parse_list("corruptions", values["corruptions"], owner)
    valid = [field.name for field in dataclasses.fields(SyntheticStreamSpec)]
    unknown = sorted(set(values) - set(valid))
    if unknown:
        raise ValueError(f"unknown synthetic stream option(s) {', '.join(unknown)}; valid: {', '.join(valid)}")
    return SyntheticStream(SyntheticStreamSpec(**values))


def describe_stream_source(text: str, options: StreamOptions) -> StreamDescription:
    """What is known of the stream named by ``text`` (see ``open_stream_source``) without reading it.

    Raises ValueError for a text that names no stream, as ``open_stream_source``.
    """
    scheme, separator, location = text.partition(":")
    if scheme in _SOURCES:
        describe = _DESCRIBERS.get(scheme)
        if describe is not None:
            return describe(location if separator else "", options)
        return StreamDescription(name=_last_component(location or scheme))
    if Path(text).is_dir():
        return _describe_image_folder(text, options)
    open_stream_source(text, options)
    raise AssertionError("unreachable: open_stream_source raises for an unknown stream")


def _last_component(text: str) -> str:
    """The last path component of ``text`` (``text`` itself if it has none)."""
    return Path(text.rstrip("/")).name or text


def open_stream_source(text: str, options: StreamOptions, start: int = 0) -> Iterable[Any]:
    """The stream named by ``text``: "<scheme>:<location>" for a registered scheme, "synthetic", or a folder.

    start: samples to leave out (a resumed run; a multiple of the batch size): a seekable source
    starts there, any other is read and its first batches dropped (``skip_samples``)."""
    check_non_negative_int("start", start)
    scheme, separator, location = text.partition(":")
    if scheme in _SEEKABLE and start:
        return _SOURCES[scheme](location if separator else "", options, start=start)
    if scheme in _SOURCES:
        return skip_samples(_SOURCES[scheme](location if separator else "", options), start)
    if Path(text).is_dir():
        return skip_samples(_open_sized_image_folder(text, options), start)
    raise ValueError(
        f"stream {text!r} is neither an existing folder nor '<scheme>:<options>' with a known scheme "
        f"({', '.join(_SOURCES)})"
    )


def _describe_synthetic(location: str, options: StreamOptions) -> StreamDescription:
    spec = _open_synthetic(location, options).spec
    name = f"synthetic:{location}" if location else "synthetic"
    return StreamDescription(name=name, samples=spec.num_batches * spec.batch_size, num_classes=spec.num_classes)


def _describe_image_folder(location: str, options: StreamOptions) -> StreamDescription:
    """An ImageFolder's name and image count (the images of its class folders are counted, not read).
    Its class count is left unknown: a subset of ImageNet's classes is evaluated with a 1,000-class
    model."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    from ccc.stream.sources import class_folder_images, read_class_list

    root = Path(location)
    if not root.is_dir():
        raise ValueError(f"stream folder {location!r} does not exist or is not a directory")
    images = class_folder_images(root, IMG_EXTENSIONS, note=False)
    classes = images if options.classes is None else read_class_list(options.classes)
    samples = sum(len(images.get(name, ())) for name in classes)
    return StreamDescription(name=_last_component(location), samples=samples or None)


def _open_sized_image_folder(location: str, options: StreamOptions) -> SizedStream:
    """``open_image_folder`` with its number of images as the stream's length."""
    from tta_eval.image_folder import open_image_folder

    loader = open_image_folder(location, options)
    return SizedStream(loader, len(loader.loader.dataset))  # type: ignore[arg-type]


register_stream_source("synthetic", _open_synthetic, _describe_synthetic)


register_stream_source("folder", _open_sized_image_folder, _describe_image_folder)


PAIR_KEY = "pair"
"""Metadata key added to CCC samples: their corruption pair "n1→n2" (the domain key of CCC runs)."""

DOMAIN_KEY = "domain"
"""Metadata key of the samples of ``cin-c`` and ``gradual`` streams naming their corruption (their
default domain key; ``severity`` holds the severity)."""


def _open_ccc(location: str, options: StreamOptions, start: int = 0) -> SizedStream:
    """``ccc:<run folder | shard pattern>``: a CCC stream (``ccc.open_stream``) as float batches in [0, 1],
    in stream order, from sample ``start`` (whole shards before it are not read; nothing when the
    stream ends there); each sample's metadata also names its pair (``PAIR_KEY``). A run folder's
    shards are verified against its manifest's sha256 unless ``options.verify_shards`` is off."""
    from ccc.load import open_stream, stream_loader

    if not location:
        raise ValueError(
            "stream 'ccc:' needs a run folder or shard pattern, e.g. ccc:shards/baseline_20_transition+speed_2000_seed_43"
        )
    verify = _ccc_verification(location, options)
    stream = open_stream(location, image_format="float", verify=verify)
    if start and stream.length is not None and start >= stream.length:
        return SizedStream([], 0)
    if start:
        stream = open_stream(location, image_format="float", start=start, verify=verify)
    loader = stream_loader(stream, batch_size=options.batch_size, num_workers=options.num_workers)
    return SizedStream(_with_pairs(loader), stream.length)


def _ccc_verification(location: str, options: StreamOptions) -> str | None:
    """``ccc.open_stream``'s ``verify`` for ``ccc:<location>``: "sha256" for a run folder (or its
    manifest.json) unless ``options.verify_shards`` is off; None for shard patterns (no manifest)."""
    folder = Path(location)
    folder = folder.parent if folder.name == "manifest.json" else folder
    return "sha256" if options.verify_shards and folder.is_dir() else None


def _describe_ccc(location: str, options: StreamOptions) -> StreamDescription:
    """A CCC run folder's length, world and shard verification from its manifest; a shard pattern is
    described by its name only."""
    from ccc.demo import DEMO_CLASSES, is_demo_stream
    from ccc.shards.manifest import ManifestError, load_manifest

    if not location:
        raise ValueError(
            "stream 'ccc:' needs a run folder or shard pattern, e.g. ccc:shards/baseline_20_transition+speed_2000_seed_43"
        )
    folder = Path(location)
    folder = folder.parent if folder.name == "manifest.json" else folder
    if not folder.is_dir():
        return StreamDescription(name=_last_component(location))
    try:
        spec = load_manifest(folder).stream
    except FileNotFoundError:
        raise ValueError(
            f"stream folder {location!r} has no manifest.json; pass a run folder written by ccc-generate or shard files"
        ) from None
    except ManifestError as error:
        raise ValueError(str(error)) from None
    demo = is_demo_stream(spec)
    return StreamDescription(
        name=folder.resolve().name,
        samples=spec.num_images,
        world=DEMO_WORLD if demo else "imagenet",
        num_classes=len(DEMO_CLASSES) if demo else None,
        verification=_ccc_verification(location, options),
    )


def _run_folder_stream(location: str) -> StreamSpec | None:
    """The stream of the run folder (or its manifest.json) at ``location``; None for anything else
    (shard patterns, URLs, folders without a readable manifest)."""
    from ccc.shards.manifest import ManifestError, load_manifest

    folder = Path(location)
    folder = folder.parent if folder.name == "manifest.json" else folder
    try:
        return load_manifest(folder).stream if folder.is_dir() else None
    except (FileNotFoundError, ManifestError):
        return None


def _run_folder_kind(location: str) -> str:
    """The stream kind of the run folder at ``location``; "ccc" for anything else."""
    spec = _run_folder_stream(location)
    return "ccc" if spec is None else spec.kind


def _ccc_domain_key(location: str) -> str:
    """The default domain key of ``ccc:<location>``: :data:`DOMAIN_KEY` for a run folder holding a
    ``cin-c`` or ``gradual`` stream, :data:`PAIR_KEY` otherwise (CCC streams, shard patterns)."""
    return PAIR_KEY if _run_folder_kind(location) == "ccc" else DOMAIN_KEY


def _with_pairs(loader: Iterable[Any]) -> Iterator[Any]:
    for images, labels, metadata in loader:
        yield images, labels, [{**entry, PAIR_KEY: f"{entry['n1']}→{entry['n2']}"} for entry in metadata]


register_stream_source("ccc", _open_ccc, _describe_ccc, domain_key=_ccc_domain_key, seekable=True)


RENDER_OPTIONS = ("imagenet", "calibration", "start")
"""Keys of ``ccc-render:`` that are not part of the stream definition (see ``RenderRequest``)."""


@dataclass(frozen=True)
class RenderRequest:
    """A parsed ``ccc-render:`` location: what ``ccc.render_stream`` is given.

    definition: a run folder (its manifest's stream) or a mapping of stream definition keys
    (``ccc.stream.spec.DEFINITION_KEYS``); imagenet: the source image folder (None: ``$CCC_IMAGENET``);
    calibration: the table's path (None for the kinds without calibration); start: first stream
    index rendered (>= 0); demo: the demo world (its images and table; speed and length default to
    ``ccc-generate --demo``'s).
    """

    definition: str | dict[str, Any]
    imagenet: str | None
    calibration: str | None
    start: int = 0
    demo: bool = False


RENDER_EXAMPLE = "ccc-render:demo,difficulty=medium,seed=43 or ccc-render:difficulty=medium,speed=2000,calibration=calibration/resnet50.npz,imagenet=/data/imagenet/val"


def parse_render_location(location: str) -> RenderRequest:
    """Parse ``[demo|RUN_FOLDER,]key=value,…``: stream definition keys (``kind``, ``difficulty``,
    ``speed``, ``seed``, ``baseline_accuracy``, ``corruptions`` joined by '+', ``num_images``,
    ``schedule``, ``path_objective``, ``severity``, ``crop``; ``ccc.stream.spec.resolve_stream_spec``)
    or a run folder, plus ``imagenet=PATH``, ``calibration=PATH`` (required outside the demo world
    for the ``ccc`` kind; the ``cin-c`` and ``gradual`` kinds use none) and ``start=INDEX``. Raises
    ValueError naming what is wrong."""
    from ccc.demo import DEMO_DOMAIN_IMAGES, DEMO_NUM_IMAGES, DEMO_SPEED, demo_calibration_path, is_demo_stream
    from ccc.stream.spec import CCC_KIND, DEFINITION_KEYS

    owner = "stream 'ccc-render:'"
    parts = [part.strip() for part in location.split(OPTION_SEPARATOR)] if location.strip() else []
    if "" in parts:
        raise ValueError(
            f"options of {owner} must be key=value pairs separated by {OPTION_SEPARATOR!r}, got an empty one in {location!r}"
        )
    bare = [part for part in parts if "=" not in part]
    values = parse_options(OPTION_SEPARATOR.join(part for part in parts if "=" in part), owner)
    demo = "demo" in bare
    folders = [part for part in bare if part != "demo"]
    if not parts or len(folders) > 1:
        raise ValueError(
            f"stream 'ccc-render:' needs a stream definition or one run folder, e.g. {RENDER_EXAMPLE}; got {location!r}"
        )
    unknown = sorted(set(values) - set(DEFINITION_KEYS) - set(RENDER_OPTIONS))
    if unknown:
        raise ValueError(
            f"unknown ccc-render option(s) {', '.join(unknown)}; valid: {', '.join(sorted({*DEFINITION_KEYS, *RENDER_OPTIONS}))}"
        )
    start = values.pop("start", 0)
    check_non_negative_int("start", start)
    imagenet = values.pop("imagenet", None)
    calibration = values.pop("calibration", None)
    if folders and not demo and imagenet is None and calibration is None:
        folder_stream = _run_folder_stream(folders[0])
        demo = folder_stream is not None and is_demo_stream(folder_stream)
    calibrated = (_run_folder_kind(folders[0]) if folders else values.get("kind", CCC_KIND)) == CCC_KIND
    if demo:
        if imagenet is not None or calibration is not None:
            raise ValueError(
                "stream 'ccc-render:demo' renders the demo world's images with its table: do not give imagenet= or calibration="
            )
        calibration = str(demo_calibration_path()) if calibrated else None
    elif calibration is None and calibrated:
        raise ValueError(
            f"stream 'ccc-render:' needs calibration=PATH (a calibration table, .npz) outside the demo world, e.g. {RENDER_EXAMPLE}"
        )
    if folders:
        if values:
            raise ValueError(
                f"stream 'ccc-render:{folders[0]}' takes its definition from the run folder's manifest; do not add {', '.join(values)}"
            )
        return RenderRequest(
            folders[0], None if imagenet is None else str(imagenet), _optional_path(calibration), start, demo
        )
    if "corruptions" in values:
        values["corruptions"] = parse_list("corruptions", values["corruptions"], owner)
    if demo and calibrated:
        values.setdefault("speed", DEMO_SPEED)
        values.setdefault("num_images", DEMO_NUM_IMAGES)
    elif demo and values.get("kind") == "gradual":
        values.setdefault("speed", DEMO_DOMAIN_IMAGES)
    return RenderRequest(values, None if imagenet is None else str(imagenet), _optional_path(calibration), start, demo)


def _optional_path(path: Any) -> str | None:
    return None if path is None else str(path)


def _open_ccc_render(location: str, options: StreamOptions, start: int = 0) -> SizedStream:
    """``ccc-render:<definition>``: a CCC stream rendered on the fly (``ccc.render_stream``) in
    ``options.num_workers`` DataLoader workers, float batches in [0, 1] in stream order, samples as
    the shards of ``ccc-generate`` would hold them; metadata as ``ccc:``'s (with ``PAIR_KEY``).
    start: samples after the location's own ``start=`` that are not rendered (a resumed run)."""
    from ccc.demo import demo_image_folder
    from ccc.load import render_stream, stream_loader
    from ccc.stream.spec import UNBOUNDED_IMAGES

    request = parse_render_location(location)
    imagenet = str(demo_image_folder()) if request.demo else request.imagenet
    stream = render_stream(
        request.definition,
        imagenet=imagenet,
        calibration=request.calibration,
        start=request.start + start,
        image_format="float",
    )
    loader = stream_loader(stream, batch_size=options.batch_size, num_workers=options.num_workers)
    unbounded = stream.spec.num_images >= UNBOUNDED_IMAGES  # type: ignore[attr-defined]
    return SizedStream(_with_pairs(loader), None if unbounded else stream.length)


RENDERED_RUN_SUFFIX = "_rendered"
"""Ends the default run folder name of a ``ccc-render:`` stream (the stream's name stays ``ccc-generate``'s)."""


def _count_source_images(request: RenderRequest) -> int | None:
    """The image count that names a cin-c definition without ``speed`` (every image per corruption),
    listed without reading an image; None for other definitions."""
    from ccc.demo import count_source_images

    if request.definition.get("kind") != "cin-c" or request.definition.get("speed") is not None:
        return None
    return count_source_images(request.imagenet, request.demo)


def _describe_ccc_render(location: str, options: StreamOptions) -> StreamDescription:
    """A rendered stream's name (that of ``ccc-generate``'s run folder for the same definition), run
    folder name, length and world, from its definition and the calibration table (no image is read)."""
    from ccc.calibration import CalibrationError, CalibrationTable
    from ccc.demo import DEMO_CLASSES, is_demo_stream
    from ccc.shards.manifest import ManifestError, load_manifest
    from ccc.stream.sources import ImageFolderError
    from ccc.stream.spec import CCC_KIND, UNBOUNDED_IMAGES, PlanError, domain_run_name, resolve_stream_spec, run_name

    request = parse_render_location(location)
    if isinstance(request.definition, str):
        folder = Path(request.definition)
        try:
            spec = load_manifest(folder.parent if folder.name == "manifest.json" else folder).stream
        except (FileNotFoundError, NotADirectoryError):
            raise ValueError(
                f"stream 'ccc-render:{request.definition}': no run folder with a manifest.json there; pass a run folder written by ccc-generate or a definition, e.g. {RENDER_EXAMPLE}"
            ) from None
        except ManifestError as error:
            raise ValueError(str(error)) from None
        name, samples, demo = folder.resolve().name, spec.num_images, is_demo_stream(spec)
    elif _definition_kind(request.definition) != CCC_KIND:
        try:
            spec = resolve_stream_spec(request.definition, None, "0" * 64, _count_source_images(request))
        except (PlanError, ImageFolderError) as error:
            raise ValueError(f"stream 'ccc-render:{location}': {error}") from None
        demo = _renders_demo_images(request)
        severity = spec.severity if spec.kind == "cin-c" else None
        name = ("demo_" if demo else "") + domain_run_name(spec.kind, severity, spec.speed, spec.crop, spec.seed)
        samples = spec.num_images
    else:
        if request.definition.get("speed") is None:
            raise ValueError(
                f"stream 'ccc-render:' needs speed=K (images per severity step; the paper: 1000, 2000 or 5000), e.g. {RENDER_EXAMPLE}"
            )
        try:
            spec = resolve_stream_spec(request.definition, CalibrationTable.load(request.calibration), "0" * 64)
        except (CalibrationError, PlanError, OSError) as error:
            raise ValueError(f"stream 'ccc-render:{location}': {error}") from None
        demo = _renders_demo_images(request)
        name = ("demo_" if demo else "") + run_name(spec.target_accuracy, spec.speed, spec.seed)
        samples = None if spec.num_images >= UNBOUNDED_IMAGES else spec.num_images
    if samples is not None:
        samples = max(samples - request.start, 0)
    return StreamDescription(
        name=name,
        samples=samples,
        world=DEMO_WORLD if demo else "imagenet",
        num_classes=len(DEMO_CLASSES) if demo else None,
        run_name=name + RENDERED_RUN_SUFFIX,
    )


def _renders_demo_images(request: RenderRequest) -> bool:
    from ccc.demo.folder import default_demo_folder

    return request.demo or (
        request.imagenet is not None and Path(request.imagenet).resolve() == default_demo_folder().resolve()
    )


def _definition_kind(definition: str | Mapping[str, Any]) -> str:
    """The stream kind of a ``ccc-render:`` definition: its ``kind`` key (default "ccc") or, for a
    run folder, its manifest's."""
    return _run_folder_kind(definition) if isinstance(definition, str) else definition.get("kind", "ccc")


def _ccc_render_domain_key(location: str) -> str | None:
    """The default domain key of ``ccc-render:<location>``, as ``ccc:``'s for the same kind (None
    when the location cannot be parsed: the opener then names the mistake)."""
    try:
        request = parse_render_location(location)
    except ValueError:
        return None
    return PAIR_KEY if _definition_kind(request.definition) == "ccc" else DOMAIN_KEY


register_stream_source(
    "ccc-render", _open_ccc_render, _describe_ccc_render, domain_key=_ccc_render_domain_key, seekable=True
)
