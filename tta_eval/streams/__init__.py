"""Streams of labelled batches and the named stream sources that ``tta-eval --stream`` opens.

A stream is any iterable of ``(images, labels)`` or ``(images, labels, metadata)`` items (see
``tta_eval.streams.batch``); a torch DataLoader over a Dataset or IterableDataset is one.

Stream *sources* turn a string given on the command line into a stream. One module per source,
each registering a ``StreamSource`` (``tta_eval.streams.registry``) with its command-line options:
``synthetic[:k=v,…]`` (``synthetic.py``, the stream of ``tta_eval.synthetic``), a folder in
ImageFolder layout (``image_folder.py``: ``folder:PATH`` or a plain path), ``ccc:<run folder or
shard pattern>`` (``ccc_shards.py``: CCC shards read with ``ccc.open_stream``, in stream order) and
``ccc-render:<definition>`` (``ccc_render.py``: a CCC stream rendered on the fly by
``ccc.render_stream`` in DataLoader workers, no shards stored). Other loaders plug in with
``register_stream_source(scheme, opener)``; ``--stream scheme:location`` then calls
``opener(location, options)`` with the run's ``StreamOptions``.

Importing this package loads no torch: the sources import it when a stream is opened.
"""

from __future__ import annotations

from ccc.registry import import_submodules
from tta_eval.streams.batch import (
    Batch,
    SizedStream,
    as_batch,
    limit_samples,
    majority_value,
    metadata_values,
    skip_samples,
    stream_length,
)
from tta_eval.streams.options import DEFAULT_BATCH_SIZE, StreamOptions
from tta_eval.streams.registry import (
    DEMO_CIFAR_WORLD,
    DEMO_WORLD,
    DEMO_WORLD_NAMES,
    REGISTRY,
    WORLD_MODELS,
    StreamDescription,
    StreamSource,
    default_domain_key,
    describe_stream_source,
    open_stream_source,
    register_stream_source,
    stream_schemes,
    stream_sources,
)

import_submodules(__name__, __path__)

from tta_eval.streams.ccc_render import RenderRequest, parse_render_location  # noqa: E402
from tta_eval.streams.ccc_shards import DOMAIN_KEY, PAIR_KEY  # noqa: E402
from tta_eval.streams.image_folder import open_image_folder  # noqa: E402

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "Batch",
    "DEMO_CIFAR_WORLD",
    "DEMO_WORLD",
    "DEMO_WORLD_NAMES",
    "DOMAIN_KEY",
    "PAIR_KEY",
    "REGISTRY",
    "RenderRequest",
    "SizedStream",
    "StreamDescription",
    "StreamOptions",
    "StreamSource",
    "WORLD_MODELS",
    "as_batch",
    "default_domain_key",
    "describe_stream_source",
    "limit_samples",
    "majority_value",
    "metadata_values",
    "open_image_folder",
    "open_stream_source",
    "parse_render_location",
    "register_stream_source",
    "skip_samples",
    "stream_length",
    "stream_schemes",
    "stream_sources",
]
