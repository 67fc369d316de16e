"""Corruption sets: the public generators' parameter tables per image resolution (:mod:`.registry`).

>>> from ccc.corruptions.sets import get_corruption_set, list_corruption_sets
>>> list_corruption_sets()
['imagenet', 'cifar', 'tinyimagenet', 'imagenet64']
>>> get_corruption_set("cifar").image_size
32
"""

from __future__ import annotations

from ccc.registry import import_submodules

from .registry import REGISTRY, CorruptionSet, get_corruption_set, list_corruption_sets, register_corruption_set

__all__ = ["REGISTRY", "CorruptionSet", "get_corruption_set", "list_corruption_sets", "register_corruption_set"]

import_submodules(__name__, __path__)  # each module registers its set(s)
