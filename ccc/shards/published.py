"""The 27 published CCC streams by name: ``published:<name>`` → the URLs of their shards.

The paper's streams (Press et al., 2023) are served as WebDataset tar shards, one folder per stream,
``<base URL>/<name>/serial_00000.tar`` …. A name is ``baseline_<b>_transition+speed_<k>_seed_<s>``
with baseline accuracy ``b`` in 0, 20, 40 (CCC-Hard, -Medium, -Easy), transition speed ``k`` in
1000, 2000, 5000 and seed ``s`` in 43, 44, 45. The public generator fills a shard with whole
transition steps of ``k`` images until it holds at least 25,000 and stops once 7,500,000 images are
written: 300 shards of 25,000 at speeds 1000 and 5000, 289 shards of 26,000 (7,514,000 images) at
speed 2000.

The base URL is :data:`DEFAULT_PUBLISHED_URL`, replaced by the ``published_url`` argument or the
:data:`PUBLISHED_URL_VARIABLE` environment variable (a mirror made with ``ccc-mirror``, served over
HTTP, or a local folder holding ``<name>/serial_*.tar``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from ccc.shards.record import shard_name

__all__ = [
    "DEFAULT_PUBLISHED_URL",
    "PUBLISHED_PREFIX",
    "PUBLISHED_STREAMS",
    "PUBLISHED_URL_VARIABLE",
    "PublishedStream",
    "get_published",
    "published_base_url",
    "published_locations",
    "resolve_published",
]

PUBLISHED_PREFIX = "published:"
"""Prefix of a published stream's name in ``open_stream`` sources (``published:baseline_20_…``)."""

DEFAULT_PUBLISHED_URL = "https://mlcloud.uni-tuebingen.de:7443/datasets/CCC"
"""Where the paper's shards are served (the folder holding one sub-folder per stream)."""

PUBLISHED_URL_VARIABLE = "CCC_PUBLISHED_URL"
"""Environment variable replacing :data:`DEFAULT_PUBLISHED_URL` (for mirrors)."""

_BASELINES = (0, 20, 40)
_SPEEDS = (1000, 2000, 5000)
_SEEDS = (43, 44, 45)
_TARGET_SHARD_SAMPLES = 25_000
_STREAM_SAMPLES = 7_500_000


@dataclass(frozen=True)
class PublishedStream:
    """One published stream.

    Attributes:
        name: ``baseline_<b>_transition+speed_<k>_seed_<s>``.
        baseline: baseline accuracy in percent (0 hard, 20 medium, 40 easy).
        speed: transition speed (images per severity step): 1000, 2000 or 5000.
        seed: 43, 44 or 45.
        shard_samples: samples per shard (25,000, or 26,000 at speed 2000).
        num_shards: shards in the stream (300, or 289 at speed 2000).
    """

    name: str
    baseline: int
    speed: int
    seed: int
    shard_samples: int
    num_shards: int

    @property
    def num_images(self) -> int:
        """Samples in the stream: ``num_shards · shard_samples``."""
        return self.num_shards * self.shard_samples


def _published(baseline: int, speed: int, seed: int) -> PublishedStream:
    shard_samples = -(-_TARGET_SHARD_SAMPLES // speed) * speed
    num_shards = -(-_STREAM_SAMPLES // shard_samples)
    name = f"baseline_{baseline}_transition+speed_{speed}_seed_{seed}"
    return PublishedStream(name, baseline, speed, seed, shard_samples, num_shards)


PUBLISHED_STREAMS: dict[str, PublishedStream] = {
    stream.name: stream
    for stream in (_published(baseline, speed, seed) for baseline in _BASELINES for speed in _SPEEDS for seed in _SEEDS)
}
"""The 27 published streams by name."""


def get_published(name: str) -> PublishedStream:
    """The published stream ``name`` (without the ``published:`` prefix).

    Raises:
        ValueError: an unknown name; the message gives the pattern and the values.
    """
    stream = PUBLISHED_STREAMS.get(name)
    if stream is None:
        raise ValueError(
            f"unknown published CCC stream {name!r}; published streams are baseline_<b>_transition+speed_<k>_seed_<s> "
            f"with b in {', '.join(map(str, _BASELINES))}, k in {', '.join(map(str, _SPEEDS))}, "
            f"s in {', '.join(map(str, _SEEDS))} (e.g. baseline_20_transition+speed_2000_seed_43)"
        )
    return stream


def published_base_url(published_url: str | None = None) -> str:
    """The base URL: ``published_url``, else ``$CCC_PUBLISHED_URL``, else :data:`DEFAULT_PUBLISHED_URL`."""
    base = published_url or os.environ.get(PUBLISHED_URL_VARIABLE) or DEFAULT_PUBLISHED_URL
    return base.rstrip("/")


def published_locations(name: str, published_url: str | None = None) -> list[str]:
    """The shard locations of published stream ``name``, in stream order: ``<base>/<name>/serial_<i>.tar``.

    Raises:
        ValueError: an unknown name.
    """
    stream = get_published(name)
    base = published_base_url(published_url)
    return [f"{base}/{stream.name}/{shard_name(index)}" for index in range(stream.num_shards)]


def resolve_published(source: object, published_url: str | None = None) -> object:
    """``source`` with every ``published:<name>`` (alone or in a list) replaced by its shard locations.

    Other sources are returned unchanged, so this can sit in front of any source parsing.

    Raises:
        ValueError: an unknown published name.
    """
    if isinstance(source, str):
        if source.startswith(PUBLISHED_PREFIX):
            return published_locations(source[len(PUBLISHED_PREFIX) :], published_url)
        return source
    if isinstance(source, Sequence) and any(
        isinstance(item, str) and item.startswith(PUBLISHED_PREFIX) for item in source
    ):
        resolved: list[object] = []
        for item in source:
            expanded = resolve_published(item, published_url)
            resolved.extend(expanded if isinstance(expanded, list) else [expanded])
        return resolved
    return source
