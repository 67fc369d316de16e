"""ImageNet-C corruptions with continuous severity, single and in CCC pairs.

Public API::

    from ccc.corruptions import corrupt, corrupt_pair, corrupt_batch, CORRUPTIONS, HOLDOUT_CORRUPTIONS

    corrupted = corrupt(image, "fog", 2.75, rng=1234)             # uint8 HxWx3 in, uint8 out
    corrupted = corrupt_pair(image, "snow", 1.5, "jpeg", 0.25, rng=np.random.default_rng(7))
    corrupted = corrupt(image_32x32, "fog", 2.75, rng=1234, corruption_set="cifar")

- ``image``: numpy uint8 array HxWx3 (RGB). 224×224 is the reference size (exact there); other sizes
  from 32×32 work with the parameters kept in pixels as published (see ``docs/fidelity.md``).
- ``corruption_set``: whose parameters, a name of :func:`list_corruption_sets` — ``"imagenet"`` (the
  default: ImageNet-C at 224×224, the above), ``"cifar"`` (CIFAR-10-C's tables and constants, for
  32×32 images only), ``"tinyimagenet"`` or ``"imagenet64"`` (64×64 only);
  ``get_corruption_set(name).image_size`` is a set's size (:mod:`.sets`).
- ``severity``: float in [0, 5]; parameters are linearly interpolated between the published integer
  severities; 0 is the identity (a copy of the input, bit for bit).
- ``rng``: a ``numpy.random.Generator``, an int seed or None (fresh entropy) — the only source of
  randomness: the same (image, corruption, severity, seed) gives the same bytes in any process. A
  ``numpy.random.RandomState`` selects the legacy mode, which draws like the reference code after
  ``np.random.seed``.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from ccc.registry import import_submodules

from ._severity import validate_severity
from .apply import DEFAULT_CORRUPTION_SET, MIN_IMAGE_SIDE, corrupt, corrupt_batch, corrupt_pair
from .registry import REGISTRY, Corruption, aliases, canonical_name, get_corruption, list_corruptions
from .sets import CorruptionSet, get_corruption_set, list_corruption_sets

import_submodules(__name__, __path__)  # each family module registers its corruptions

__all__ = [
    "CORRUPTION_ALIASES",
    "CORRUPTIONS",
    "DEFAULT_CORRUPTION_SET",
    "HOLDOUT_CORRUPTIONS",
    "MIN_IMAGE_SIDE",
    "Corruption",
    "CorruptionSet",
    "canonical_name",
    "corrupt",
    "corrupt_batch",
    "corrupt_pair",
    "get_corruption",
    "get_corruption_set",
    "list_corruption_sets",
    "list_corruptions",
    "validate_severity",
]

CORRUPTIONS: tuple[str, ...] = tuple(entry.name for entry in REGISTRY if not entry.holdout)
"""The 15 ImageNet-C corruptions used by CCC, in ImageNet-C's (and the CCC generator's) order."""

HOLDOUT_CORRUPTIONS: tuple[str, ...] = tuple(entry.name for entry in REGISTRY if entry.holdout)
"""The 4 ImageNet-C hold-out corruptions (for tuning hyper-parameters such as a reset interval)."""

CORRUPTION_ALIASES: Mapping[str, str] = MappingProxyType(aliases())
"""Accepted alternative names → registered names (ImageNet-C's long names)."""
