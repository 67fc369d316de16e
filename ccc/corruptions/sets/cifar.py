"""The ``cifar`` set: CIFAR-10-C / CIFAR-100-C at 32×32, from ImageNet-C's ``make_cifar_c.py``.

Severities 1..5 are the script's tables, written as it writes them (elastic's in units of its
``IMSIZE = 32``); severity 0 follows the rule CCC used for ImageNet (``docs/fidelity.md``,
"Corruption sets"): a component whose ImageNet anchor differs from its ImageNet severity-1 value
sets the strength of the effect and takes that anchor (noise and blur sizes 0, frost weights (1, 0),
contrast 1, pixelate 1, zoom stop 1, snow threshold and blend 1, spatter intensity 0, elastic
(0, 999, 0), JPEG 85 — the quality CCC stores images at); a component CCC anchored at its severity-1
value only shapes the effect and keeps this set's severity-1 value (fog's decay, snow's and spatter's
layer statistics, zoom's start and step).
Structural constants: fog's plasma map is 32×32 and frost's textures are first resized by 0.2.
Parameters are handed to the functions as Python floats, like the script's literals.
"""

from __future__ import annotations

from types import MappingProxyType

from .registry import CorruptionSet, register_corruption_set

IMAGE_SIZE = 32
"""Side of CIFAR images in pixels (the script's ``IMSIZE`` and its hard-coded 32s)."""

CIFAR_PARAMETER_TABLES = MappingProxyType(
    {
        "gaussian_noise": (0.0, 0.04, 0.06, 0.08, 0.09, 0.10),
        "shot_noise": (0.0, 1 / 500, 1 / 250, 1 / 100, 1 / 75, 1 / 50),
        "impulse_noise": (0.0, 0.01, 0.02, 0.03, 0.05, 0.07),
        "defocus_blur": ((0.0, 0.0), (0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)),
        "glass_blur": ((0.0, 0.0, 0.0), (0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2)),
        "motion_blur": ((0.0, 0.0), (6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)),
        "zoom_blur": (
            (1.0, 1.0, 0.01),
            (1, 1.06, 0.01),
            (1, 1.11, 0.01),
            (1, 1.16, 0.01),
            (1, 1.21, 0.01),
            (1, 1.26, 0.01),
        ),
        "snow": (
            (0.1, 0.2, 1, 1.0, 8, 3, 1.0),
            (0.1, 0.2, 1, 0.6, 8, 3, 0.95),
            (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
            (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9),
            (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
            (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8),
        ),
        "frost": ((1.0, 0.0), (1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45)),
        "fog": ((0.0, 3.0), (0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)),
        "brightness": (0.0, 0.05, 0.1, 0.15, 0.2, 0.3),
        "contrast": (1.0, 0.75, 0.5, 0.4, 0.3, 0.15),
        "elastic": (
            (0.0, 999.0, 0.0),
            (IMAGE_SIZE * 0, IMAGE_SIZE * 0, IMAGE_SIZE * 0.08),
            (IMAGE_SIZE * 0.05, IMAGE_SIZE * 0.2, IMAGE_SIZE * 0.07),
            (IMAGE_SIZE * 0.08, IMAGE_SIZE * 0.06, IMAGE_SIZE * 0.06),
            (IMAGE_SIZE * 0.1, IMAGE_SIZE * 0.04, IMAGE_SIZE * 0.05),
            (IMAGE_SIZE * 0.1, IMAGE_SIZE * 0.03, IMAGE_SIZE * 0.03),
        ),
        "pixelate": (1.0, 0.95, 0.9, 0.85, 0.75, 0.65),
        "jpeg": (85, 80, 65, 58, 50, 40),
        "speckle_noise": (0.0, 0.06, 0.1, 0.12, 0.16, 0.2),
        "gaussian_blur": (0.0, 0.4, 0.6, 0.7, 0.8, 1),
        "spatter": (
            (0.62, 0.1, 0.7, 0.7, 0.0, 0),
            (0.62, 0.1, 0.7, 0.7, 0.5, 0),
            (0.65, 0.1, 0.8, 0.7, 0.5, 0),
            (0.65, 0.3, 1, 0.69, 0.5, 0),
            (0.65, 0.1, 0.7, 0.69, 0.6, 1),
            (0.65, 0.1, 0.5, 0.68, 0.6, 1),
        ),
        "saturate": ((1.0, 0.0), (0.3, 0), (0.1, 0), (1.5, 0), (2, 0.1), (2.5, 0.2)),
    }
)
"""Corruption name → parameters at severities 0..5, in the units of the ImageNet tables."""

register_corruption_set(
    CorruptionSet(
        name="cifar",
        image_size=IMAGE_SIZE,
        any_size=False,
        order=1,
        source="ImageNet-C's make_cifar_c.py",
        parameter_tables=CIFAR_PARAMETER_TABLES,
        settings=MappingProxyType(
            {"fog": MappingProxyType({"map_size": 32}), "frost": MappingProxyType({"texture_scale": 0.2})}
        ),
        python_floats=True,
    )
)
