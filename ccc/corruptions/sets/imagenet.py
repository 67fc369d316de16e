"""The ``imagenet`` set: ImageNet-C at 224×224 with CCC's severity-0 anchors, the tables registered
with the corruptions themselves (``docs/fidelity.md``). The default set; it also accepts other sizes
from 32×32, parameters kept in pixels."""

from __future__ import annotations

from .registry import CorruptionSet, register_corruption_set

register_corruption_set(
    CorruptionSet(
        name="imagenet",
        image_size=224,
        any_size=True,
        order=0,
        source="the CCC generator's make_imagenet_c.py (ImageNet-C's tables with severity-0 anchors)",
    )
)
