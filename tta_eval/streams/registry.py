"""The registry of stream sources: ``--stream <scheme>:<location>`` opens a stream by its scheme.

A source is one module of ``tta_eval.streams`` ending in ``REGISTRY.register(StreamSource(...))``
(``ccc.registry``'s convention); its ``order`` is where it is listed in ``tta-eval run --help`` and
in errors. User code adds one with :func:`register_stream_source` (listed after the built-in ones).
A plain folder path names an image folder (the ``folder`` source).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccc.demo import DEMO_MODEL_NAMES
from ccc.registry import Registry
from ccc.validation import check_non_negative_int
from tta_eval.cli_options import CliOption
from tta_eval.streams.batch import skip_samples
from tta_eval.streams.options import StreamOptions

DEMO_WORLD = "demo"
"""The world of streams rendered from the demo images (``ccc.demo``)."""

DEMO_CIFAR_WORLD = "demo_cifar"
"""The world of streams rendered from the 32×32 demo images with the ``cifar`` corruption set (``ccc.demo``)."""

DEMO_WORLD_NAMES = {"imagenet": DEMO_WORLD, "cifar": DEMO_CIFAR_WORLD}
"""The world name of each demo world, by its corruption set (``ccc.demo.DEMO_WORLDS``)."""

WORLD_MODELS = {name: DEMO_MODEL_NAMES[corruption_set] for corruption_set, name in DEMO_WORLD_NAMES.items()}
"""The model factory evaluated by default on a stream of each world other than ImageNet's."""


def ccc_stream_world(spec: Any) -> str:
    """The world of a CCC stream of ``spec`` (a ``ccc.stream.spec.StreamSpec``): its demo world's name
    (:data:`DEMO_WORLD_NAMES`) when it was rendered from a demo world's images, else its corruption set."""
    from ccc.demo import demo_world_of

    world = demo_world_of(spec)
    return spec.corruption_set if world is None else DEMO_WORLD_NAMES[world]


FOLDER_SCHEME = "folder"
"""The scheme of image folders, the source that also reads a stream given as a plain folder path."""


@dataclass(frozen=True)
class StreamDescription:
    """What is known of a stream before reading it.

    name: a short name of the stream (e.g. the run folder of CCC shards; not yet folder-safe);
    samples: its length in samples (None: unknown); world: "demo" for a stream of the demo world
    (``ccc.demo``), "demo_cifar" for one of its 32×32 world, "imagenet" for one rendered from an
    ImageNet-layout folder with ImageNet-C's parameters, the corruption set (``cifar``,
    ``tinyimagenet``, ``imagenet64``) for one rendered with another set's, None when unknown;
    num_classes: how many classes its labels come from (None: unknown); run_name: the default name
    of a run folder evaluating it when that is not ``name`` (a rendered stream's ``<name>_rendered``,
    so that it never takes the run folder of its stored shards; ``tta-eval compare`` keys on
    ``name``); verification: how the stream's stored bytes are checked before its samples are used:
    "sha256" (each shard's sha256 against its manifest's, ``StreamOptions.verify_shards``), None: not
    beyond what reading and decoding notice; batch_size: samples per batch when the stream fixes it
    (``synthetic:batch_size=16``), None when it takes ``--batch-size``.
    """

    name: str
    samples: int | None = None
    world: str | None = None
    num_classes: int | None = None
    run_name: str | None = None
    verification: str | None = None
    batch_size: int | None = None


StreamOpener = Callable[..., Iterable[Any]]
"""opener(location, options) -> an iterable of batches; a seekable source's also takes ``start=S``."""

StreamDescriber = Callable[[str, StreamOptions], StreamDescription]
"""describe(location, options) -> what is known of the stream without reading its samples."""

DomainKey = str | Callable[[str], str | None] | None
"""A metadata key, a function of the location returning one (or None), or None."""

_SCHEME = re.compile(r"[a-z0-9_-]+")


@dataclass(frozen=True)
class StreamSource:
    """A registered stream source: ``--stream <name>:<location>`` calls ``opener(location, options)``.

    name: the scheme, lower-case letters, digits, '_' or '-'; opener: see ``StreamOpener``; order:
    where the source is listed in ``tta-eval run --help`` and in errors (ascending, unique);
    describe: reads what is known of the stream (length, world) without reading its samples; None:
    only its name is known. domain_key: the metadata key whose value a run records as each batch's
    domain when the user names none (e.g. the corruption pair of CCC streams), or a function of the
    location returning it (e.g. depending on the stream's kind); None: no domain. seekable: the
    opener also takes ``start=S`` and then yields the stream from sample S (a multiple of the batch
    size) without reading what comes before (a resumed run); otherwise the first batches are read
    and dropped (``skip_samples``). options: the source's command-line options (with their
    defaults), shown in ``tta-eval run --help`` under ``title`` (None: "<name>: streams");
    from_options(values): the ``StreamOptions`` fields they set, from their values (option dest →
    value); by default each option's dest is a field's name.
    """

    name: str
    opener: StreamOpener
    order: float
    describe: StreamDescriber | None = None
    domain_key: DomainKey = None
    seekable: bool = False
    options: tuple[CliOption, ...] = ()
    title: str | None = None
    from_options: Callable[[Mapping[str, Any]], Mapping[str, Any]] = dict

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _SCHEME.fullmatch(self.name):
            raise ValueError(f"stream scheme must be lower-case letters, digits, '_' or '-', got {self.name!r}")

    @property
    def heading(self) -> str:
        """The heading of the source's options in ``tta-eval run --help``."""
        return self.title or f"{self.name}: streams"


REGISTRY: Registry[StreamSource] = Registry("stream scheme", ordered=True)
"""The stream sources, by scheme, in the order of ``order``."""


def register_stream_source(
    scheme: str,
    opener: StreamOpener,
    describe: StreamDescriber | None = None,
    domain_key: DomainKey = None,
    seekable: bool = False,
) -> StreamSource:
    """Make ``--stream scheme:location`` call ``opener(location, options)``; scheme: [a-z0-9_-]+.

    The arguments are ``StreamSource``'s; the source is listed after those registered before it. A
    source with command-line options registers a ``StreamSource`` in ``REGISTRY`` itself. Returns
    the registered entry; ValueError for a scheme that is malformed or already registered.
    """
    order = max((source.order for source in REGISTRY), default=0) + 1
    return REGISTRY.register(StreamSource(scheme, opener, order, describe, domain_key, seekable))


def stream_sources() -> list[StreamSource]:
    """The registered stream sources, in their order."""
    return REGISTRY.entries()


def stream_schemes() -> list[str]:
    """Registered stream schemes, in their order."""
    return REGISTRY.names()


def default_domain_key(text: str) -> str | None:
    """The domain key registered for the scheme of stream ``text`` ("ccc:<ccc stream>" → "pair",
    "ccc:<cin-c or gradual stream>" → "domain"), else None."""
    scheme, separator, location = text.partition(":")
    key = REGISTRY.get(scheme).domain_key if separator and scheme in REGISTRY else None
    return key(location) if callable(key) else key


def _source_of(text: str) -> tuple[StreamSource, str]:
    """The source of stream ``text`` and the location it is given; ValueError for neither a
    registered scheme nor an existing folder."""
    scheme, separator, location = text.partition(":")
    if scheme in REGISTRY:
        return REGISTRY.get(scheme), location if separator else ""
    if Path(text).is_dir():
        return REGISTRY.get(FOLDER_SCHEME), text
    raise ValueError(
        f"stream {text!r} is neither an existing folder nor '<scheme>:<options>' with a known scheme "
        f"({', '.join(stream_schemes())})"
    )


def describe_stream_source(text: str, options: StreamOptions) -> StreamDescription:
    """What is known of the stream named by ``text`` (see ``open_stream_source``) without reading it.

    Raises ValueError for a text that names no stream, as ``open_stream_source``.
    """
    source, location = _source_of(text)
    if source.describe is None:
        return StreamDescription(name=last_component(location or source.name))
    return source.describe(location, options.resolved())


def last_component(text: str) -> str:
    """The last path component of ``text`` (``text`` itself if it has none)."""
    return Path(text.rstrip("/")).name or text


def open_stream_source(text: str, options: StreamOptions, start: int = 0) -> Iterable[Any]:
    """The stream named by ``text``: "<scheme>:<location>" for a registered scheme, "synthetic", or a folder.

    start: samples to leave out (a resumed run; a multiple of the batch size): a seekable source
    starts there, any other is read and its first batches dropped (``skip_samples``). options without
    a batch size read batches of ``DEFAULT_BATCH_SIZE``."""
    check_non_negative_int("start", start)
    source, location = _source_of(text)
    options = options.resolved()
    if source.seekable and start:
        return source.opener(location, options, start=start)
    return skip_samples(source.opener(location, options), start)
