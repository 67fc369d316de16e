"""CCC streams for other projects: read shards (ours or the published ones) or render on the fly.

    from ccc import open_stream, render_stream, stream_loader

    stream = open_stream("shards/baseline_20_transition+speed_2000_seed_43")     # folder with a manifest
    for image, label, metadata in stream:                                        # stream order
        ...
    for images, labels, metadata in stream_loader(stream, batch_size=64, num_workers=4):
        ...                                                                      # still stream order

Both :func:`open_stream` and :func:`render_stream` return a :class:`CCCStream`, a
``torch.utils.data.IterableDataset`` yielding :class:`StreamSample` ``(image, label, metadata)``.

**Order.** Positions ``start, start + 1, …`` (up to ``start + limit``) are cut into chunks of
``chunk_size`` consecutive samples. Consumers are the ``world_size`` ranks × the DataLoader workers
of each rank. With ``rank_split="interleaved"`` (default) chunk ``c`` goes to rank ``c % world_size``;
with ``"contiguous"`` (finite streams) rank ``r`` gets the ``r``-th of ``world_size`` contiguous,
equal (±1) ranges. Inside a rank, the rank's chunks go round-robin to its DataLoader workers, which
is exactly the order in which a ``DataLoader`` with ``batch_size == chunk_size`` collects batches —
so :func:`stream_loader` (which sets ``chunk_size`` to the batch size, or, for a stream rendered on a GPU
by one rank, to the multiple of it that the GPU renders at once) yields each rank's samples in stream
order. Every position is read by exactly one consumer: no loss, no duplicate; a stream with fewer shards
(or samples) than workers works, idle workers end at once. Details: ``docs/loading.md``.

**Checks.** With a manifest, every shard's byte size is compared with the manifest's before it is
read, every sample's key must be its stream index (``sample_key``) and a shard must hold exactly
the manifest's sample count; ``verify="sha256"`` also compares each shard's sha256 with the
manifest's before any of its samples is delivered (catches any changed byte, e.g. in a JPEG, which
decoding alone may not notice).

**Errors.** ``on_error="raise"`` (default): a missing, unfinished, truncated, damaged or altered
shard, or a sample without image or label, stops the stream with a :class:`StreamError` naming the
shard and the sample. ``on_error="skip"``: such samples (or the rest of such a shard) are skipped,
and a :class:`StreamWarning` with the counts is issued when the iteration ends. Every index is
delivered at most once, every skipped index this consumer would have read is counted once, and the
shards after a skipped one are read. The stream is never shortened silently.

**Modules.** :mod:`ccc.load.selection` (which positions a rank and a DataLoader worker read),
:mod:`ccc.load.shard_stream` (:func:`open_stream`), :mod:`ccc.load.rendered_stream`
(:func:`render_stream`), :mod:`ccc.load.decode` (image formats, tar samples), :mod:`ccc.load.loader`
(:func:`stream_loader`), over :mod:`ccc.load.base` (:class:`CCCStream`) and :mod:`ccc.load.sample`
(what a stream yields, how it fails). Everything public is importable from ``ccc.load``.
"""

from __future__ import annotations

from ccc.load.base import ERROR_POLICIES, CCCStream
from ccc.load.decode import IMAGE_FORMATS, IMAGENET_MEAN, IMAGENET_STD, decode_image, decode_tar_sample
from ccc.load.loader import collate_samples, stream_loader
from ccc.load.rendered_stream import render_stream
from ccc.load.sample import StreamError, StreamSample, StreamWarning
from ccc.load.selection import RANK_SPLITS
from ccc.load.shard_stream import VERIFY_MODES, ShardLocation, open_stream
from ccc.stream.spec import UNBOUNDED_IMAGES

__all__ = [
    "ERROR_POLICIES",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "IMAGE_FORMATS",
    "RANK_SPLITS",
    "UNBOUNDED_IMAGES",
    "VERIFY_MODES",
    "CCCStream",
    "ShardLocation",
    "StreamError",
    "StreamSample",
    "StreamWarning",
    "collate_samples",
    "decode_image",
    "decode_tar_sample",
    "open_stream",
    "render_stream",
    "stream_loader",
]
