"""The demo world's own settings for a short demonstration run: stream speed and length, and the
evaluation's methods and options.

They are the demo's, not the paper's (``docs/demo.md``, "The demonstration run"): the paper's values
are tuned for ImageNet, ResNet-50 and 7.5M-image streams, and on this small world they would show
nothing in a few minutes (one corruption pair per 40,000–80,000 images at speed 2,000; filters that
reject every sample with 16 classes; a learning rate that moves the 140k-parameter CNN too little in
a few hundred steps; a reset interval longer than the stream). ``ccc-generate --demo`` and
``tta-eval run`` on a demo stream apply them wherever the user gave no value of their own, print
them, and record them (manifest, ``config.json``). This module holds data only: it knows option
names of ``tta_eval`` methods as plain strings and imports nothing of ``tta_eval``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

DEMO_SPEED = 100
"""Images per severity step of a demo stream: the demo paths are 14–41 steps long (medium's 27–40), so
a corruption pair lasts 1,400–4,100 images and a 30,000-image stream crosses about ten pairs."""

DEMO_NUM_IMAGES = 30_000
"""Length of a demo stream: a few minutes to render and to evaluate five methods on two CPU cores."""

DEMO_SHARD_BYTES_PER_IMAGE = 24_000
"""Shard bytes per demo sample (224×224 JPEG at quality 85 of the smooth procedural images, plus tar
members): the README's 224×224 demo stream wrote 719.6 MB for 30,000 images."""

DEMO_DOMAIN_IMAGES = 200
"""Images per severity level of a demo ``gradual`` stream (15 × 9 × 200 = 27,000 images); a demo ``cin-c``
stream shows every demo image per corruption (``ccc.demo.folder.DEMO_SOURCE_IMAGES``)."""

DEMO_METHODS: tuple[str, ...] = ("source", "bn", "tent", "eta", "rdumb")
"""Methods ``tta-eval run`` evaluates on a demo stream when no ``--method`` is given: the source
model, BN adaptation, one method that drifts (Tent), its filtered variant (ETA) and the same with
periodic resets (RDumb)."""

DEMO_FILTER_MARGIN = 0.4
"""ETA/EATA's redundancy margin ε for 16 classes (published: 0.05 for 1,000): with 0.05 the cosine
filter rejects every confident sample once the mean prediction exists (0.5 % adapted)."""

DEMO_LEARNING_RATE = 0.05
"""SGD learning rate of the demonstration's entropy-minimising methods (published: 2.5·10⁻⁴ for
batch 64): 200× larger, so that the 470 steps of a 30,000-image stream move the small CNN as far
as the paper's 117,000 steps move ResNet-50: Tent and ETA drift below BN, RDumb's resets hold
(measured in docs/demo.md; at 0.02 only Tent drifts, at 0.01 and below the drift stays within a few
points)."""

DEMO_RESET_EVERY = 50
"""RDumb's reset interval in batches (published: 1,000): 470 batches of 64 make a demo stream,
so resets come every 3,200 images, about once per corruption pair, as in the paper."""

DEMO_CIFAR_LEARNING_RATE = 1.0
"""The same for the 32×32 world's model (62 k parameters against 140 k): on its medium stream (30,000 images)
Tent stays above BN at 0.2 (88.2 % against 86.3 %), ends 15 points below it at 0.5 and drifts steadily
from 15,000 images on to 30 points below it at 1.0, while ETA's filter and RDumb's resets hold BN's level
(docs/demo.md, "The 32×32 world")."""


def _method_options(learning_rate: float) -> Mapping[str, Mapping[str, Any]]:
    """The demonstration's options per method (registry name) at an SGD ``learning_rate`` (> 0)."""
    filtered = {"learning_rate": learning_rate, "redundancy_margin": DEMO_FILTER_MARGIN}
    return MappingProxyType(
        {
            "tent": MappingProxyType({"learning_rate": learning_rate}),
            "eta": MappingProxyType(filtered),
            "eata": MappingProxyType(filtered),
            "rdumb": MappingProxyType({**filtered, "reset_every": DEMO_RESET_EVERY}),
        }
    )


DEMO_METHOD_OPTIONS: Mapping[str, Mapping[str, Any]] = _method_options(DEMO_LEARNING_RATE)
"""Per method (registry name), the options the demo world gives it unless the user sets them."""

DEMO_CIFAR_METHOD_OPTIONS: Mapping[str, Mapping[str, Any]] = _method_options(DEMO_CIFAR_LEARNING_RATE)
"""The same for the 32×32 world (:data:`DEMO_CIFAR_LEARNING_RATE`)."""
