"""Streams of labelled batches: parsing, per-sample metadata, and named stream sources.

A stream is any iterable of ``(images, labels)`` or ``(images, labels, metadata)`` items: images a
float tensor N×C×H×W in [0, 1], labels an integer tensor (N,), metadata either a mapping from key to
a per-sample sequence (what torch's default collate makes of per-sample dicts) or a list of N
per-sample dicts. A torch DataLoader over a Dataset or IterableDataset is such a stream.

Stream *sources* turn a string given on the command line into a stream. Built in: ``synthetic[:k=v,…]``
(see ``tta_eval.synthetic``), ``ccc:<run folder or shard pattern>`` (CCC shards read with
``ccc.open_stream``, in stream order) and a folder in ImageFolder layout. Other loaders plug in with
``register_stream_source(scheme, opener)``; ``--stream scheme:location`` then calls
``opener(location, options)``.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tta_eval.validation import check_positive_int

# torch is imported where batches are handled, so that the stream sources' registry (named by
# ``tta-eval --help``) loads without it.
if TYPE_CHECKING:
    import torch

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
        raise ValueError(
            f"stream batch {batch_index}: {images.shape[0]} images but {labels.shape[0]} labels"
        )
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


def limit_samples(batches: Iterable[Any], max_samples: int) -> SizedStream:
    """Items of ``batches`` until ``max_samples`` samples were yielded, the last batch cut; its length
    is ``max_samples`` (or the stream's own, if known and shorter)."""
    check_positive_int("max_samples", max_samples)
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

    batch_size >= 1; num_workers >= 0 DataLoader worker processes; image_size: side in pixels of
    the centre crop for image folders (images are resized so the short side is 256/224 of it);
    shuffle_seed: seed of the fixed permutation applied to image folders (their files are sorted by
    class otherwise), None keeps the sorted order.
    """

    batch_size: int = 64
    num_workers: int = 0
    image_size: int = 224
    shuffle_seed: int | None = 0

    def __post_init__(self) -> None:
        check_positive_int("batch_size", self.batch_size)
        check_positive_int("image_size", self.image_size)
        if isinstance(self.num_workers, bool) or not isinstance(self.num_workers, int) or self.num_workers < 0:
            raise ValueError(f"num_workers must be an integer >= 0, got {self.num_workers!r}")


StreamOpener = Callable[[str, StreamOptions], Iterable[Any]]
_SOURCES: dict[str, StreamOpener] = {}
_DOMAIN_KEYS: dict[str, str] = {}


def register_stream_source(scheme: str, opener: StreamOpener, domain_key: str | None = None) -> None:
    """Make ``--stream scheme:location`` call ``opener(location, options)``; scheme: [a-z0-9_]+.

    domain_key: the metadata key whose value a run records as each batch's domain when the user
    names none (e.g. the corruption pair of CCC streams); None: no domain.
    """
    if not scheme.replace("_", "").isalnum() or scheme != scheme.lower():
        raise ValueError(f"stream scheme must be lower-case letters, digits or '_', got {scheme!r}")
    if scheme in _SOURCES:
        raise ValueError(f"stream scheme {scheme!r} is already registered")
    _SOURCES[scheme] = opener
    if domain_key is not None:
        _DOMAIN_KEYS[scheme] = domain_key


def default_domain_key(text: str) -> str | None:
    """The domain key registered for the scheme of stream ``text`` ("ccc:…" → "pair"), else None."""
    return _DOMAIN_KEYS.get(text.partition(":")[0]) if ":" in text else None


def stream_schemes() -> list[str]:
    """Registered stream schemes."""
    return list(_SOURCES)


def parse_options(text: str, context: str) -> dict[str, Any]:
    """Parse "key=value,key=value" into a dict; values as Python literals (numbers, bools, tuples) or strings."""
    options: dict[str, Any] = {}
    if not text:
        return options
    for part in text.split(","):
        key, separator, raw = part.partition("=")
        key = key.strip()
        if not separator or not key:
            raise ValueError(f"{context}: options must look like key=value, got {part!r}")
        options[key] = parse_value(raw.strip())
    return options


def parse_value(raw: str) -> Any:
    """A Python literal if ``raw`` is one (1, 0.5, 2e-4, True, None, ('a', 'b')), ``raw`` itself otherwise."""
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw


def _open_synthetic(location: str, options: StreamOptions) -> SyntheticStream:
    from tta_eval.synthetic import SyntheticStream, SyntheticStreamSpec

    values = parse_options(location, "synthetic stream")
    values.setdefault("batch_size", options.batch_size)
    if "corruptions" in values:
        corruptions = values["corruptions"]
        values["corruptions"] = tuple(corruptions.split("+")) if isinstance(corruptions, str) else tuple(corruptions)
    valid = [field.name for field in dataclasses.fields(SyntheticStreamSpec)]
    unknown = sorted(set(values) - set(valid))
    if unknown:
        raise ValueError(f"unknown synthetic stream option(s) {', '.join(unknown)}; valid: {', '.join(valid)}")
    return SyntheticStream(SyntheticStreamSpec(**values))


def open_image_folder(location: str, options: StreamOptions) -> torch.utils.data.DataLoader:
    """DataLoader over an ImageFolder (root/<class>/<image>): classes indexed in sorted folder order.

    For ImageNet-style folders named by WordNet id the sorted order is the standard ImageNet class
    index. Images: resize (short side image_size·256/224), centre crop image_size, in [0, 1].
    """
    import torch
    import torchvision
    from torchvision.transforms import v2

    root = Path(location)
    if not root.is_dir():
        raise ValueError(f"stream folder {location!r} does not exist or is not a directory")
    transform = v2.Compose(
        [
            v2.ToImage(),
            v2.Resize(round(options.image_size * 256 / 224), antialias=True),
            v2.CenterCrop(options.image_size),
            v2.ToDtype(torch.float32, scale=True),
        ]
    )
    try:
        dataset = torchvision.datasets.ImageFolder(str(root), transform=transform)
    except FileNotFoundError as error:
        raise ValueError(f"stream folder {location!r} is not in ImageFolder layout (root/<class>/<image>): {error}") from None
    generator = None
    if options.shuffle_seed is not None:
        generator = torch.Generator().manual_seed(options.shuffle_seed)
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=options.batch_size,
        shuffle=options.shuffle_seed is not None,
        generator=generator,
        num_workers=options.num_workers,
    )


def open_stream_source(text: str, options: StreamOptions) -> Iterable[Any]:
    """The stream named by ``text``: "<scheme>:<location>" for a registered scheme, "synthetic", or a folder."""
    scheme, separator, location = text.partition(":")
    if scheme in _SOURCES:
        return _SOURCES[scheme](location if separator else "", options)
    if Path(text).is_dir():
        return _open_sized_image_folder(text, options)
    raise ValueError(
        f"stream {text!r} is neither an existing folder nor '<scheme>:<options>' with a known scheme "
        f"({', '.join(_SOURCES)})"
    )


register_stream_source("synthetic", _open_synthetic)
def _open_sized_image_folder(location: str, options: StreamOptions) -> SizedStream:
    """``open_image_folder`` with its number of images as the stream's length."""
    loader = open_image_folder(location, options)
    return SizedStream(loader, len(loader.dataset))  # type: ignore[arg-type]


register_stream_source("folder", _open_sized_image_folder)


PAIR_KEY = "pair"
"""Metadata key added to CCC samples: their corruption pair "n1→n2" (the domain key of CCC runs)."""


def _open_ccc(location: str, options: StreamOptions) -> SizedStream:
    """``ccc:<run folder | shard pattern>``: a CCC stream (``ccc.open_stream``) as float batches in [0, 1],
    in stream order; each sample's metadata also names its pair (``PAIR_KEY``)."""
    from ccc.stream import open_stream, stream_loader

    if not location:
        raise ValueError("stream 'ccc:' needs a run folder or shard pattern, e.g. ccc:shards/baseline_20_transition+speed_2000_seed_43")
    stream = open_stream(location, image_format="float")
    loader = stream_loader(stream, batch_size=options.batch_size, num_workers=options.num_workers)
    return SizedStream(_with_pairs(loader), stream.length)


def _with_pairs(loader: Iterable[Any]) -> Iterator[Any]:
    for images, labels, metadata in loader:
        yield images, labels, [{**entry, PAIR_KEY: f"{entry['n1']}→{entry['n2']}"} for entry in metadata]


register_stream_source("ccc", _open_ccc, domain_key=PAIR_KEY)
