"""The ``tinyimagenet`` and ``imagenet64`` sets: Tiny-ImageNet-C and ImageNet-64x64-C at 64×64.

ImageNet-C's ``make_tinyimagenet_c.py`` and ``make_imagenet_64_c.py`` have the same distortion
functions with the same tables (they differ only in the data they load), so the two sets share
their data. Severities 1..5 are the scripts' tables, written as they write them (elastic's in units
of their ``IMSIZE = 64``); severity 0 follows the rule CCC used for ImageNet, as for the ``cifar`` set
(:mod:`.cifar`, ``docs/fidelity.md``). Structural constants: fog's plasma map is 64×64 and frost's
textures are first resized by 0.3. Parameters are handed to the functions as Python floats, like the
scripts' literals.
"""

from __future__ import annotations

from types import MappingProxyType

from .registry import CorruptionSet, register_corruption_set

IMAGE_SIZE = 64
"""Side of the images in pixels (the scripts' ``IMSIZE`` and their hard-coded 64s)."""

PARAMETER_TABLES_64 = MappingProxyType(
    {
        "gaussian_noise": (0.0, 0.04, 0.08, 0.12, 0.15, 0.18),
        "shot_noise": (0.0, 1 / 250, 1 / 100, 1 / 50, 1 / 30, 1 / 15),
        "impulse_noise": (0.0, 0.01, 0.02, 0.05, 0.08, 0.14),
        "defocus_blur": ((0.0, 0.0), (0.5, 0.6), (1, 0.1), (1.5, 0.1), (2.5, 0.01), (3, 0.1)),
        "glass_blur": ((0.0, 0.0, 0.0), (0.1, 1, 1), (0.5, 1, 1), (0.6, 1, 2), (0.7, 2, 1), (0.9, 2, 2)),
        "motion_blur": ((0.0, 0.0), (10, 1), (10, 1.5), (10, 2), (10, 2.5), (12, 3)),
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
            (0.1, 0.2, 1, 0.6, 8, 3, 0.8),
            (0.1, 0.2, 1, 0.5, 10, 4, 0.8),
            (0.15, 0.3, 1.75, 0.55, 10, 4, 0.7),
            (0.25, 0.3, 2.25, 0.6, 12, 6, 0.65),
            (0.3, 0.3, 1.25, 0.65, 14, 12, 0.6),
        ),
        "frost": ((1.0, 0.0), (1, 0.3), (0.9, 0.4), (0.8, 0.45), (0.75, 0.5), (0.7, 0.55)),
        "fog": ((0.0, 3.0), (0.4, 3), (0.7, 3), (1, 2.5), (1.5, 2), (2, 1.75)),
        "brightness": (0.0, 0.1, 0.2, 0.3, 0.4, 0.5),
        "contrast": (1.0, 0.4, 0.3, 0.2, 0.1, 0.05),
        "elastic": (
            (0.0, 999.0, 0.0),
            (IMAGE_SIZE * 0, IMAGE_SIZE * 0, IMAGE_SIZE * 0.08),
            (IMAGE_SIZE * 0.05, IMAGE_SIZE * 0.3, IMAGE_SIZE * 0.06),
            (IMAGE_SIZE * 0.1, IMAGE_SIZE * 0.08, IMAGE_SIZE * 0.06),
            (IMAGE_SIZE * 0.1, IMAGE_SIZE * 0.03, IMAGE_SIZE * 0.03),
            (IMAGE_SIZE * 0.16, IMAGE_SIZE * 0.03, IMAGE_SIZE * 0.02),
        ),
        "pixelate": (1.0, 0.9, 0.8, 0.7, 0.6, 0.5),
        "jpeg": (85, 65, 58, 50, 40, 25),
        "speckle_noise": (0.0, 0.15, 0.2, 0.25, 0.3, 0.35),
        "gaussian_blur": (0.0, 0.5, 0.75, 1, 1.25, 1.5),
        "spatter": (
            (0.62, 0.1, 0.7, 0.7, 0.0, 0),
            (0.62, 0.1, 0.7, 0.7, 0.6, 0),
            (0.65, 0.1, 0.8, 0.7, 0.6, 0),
            (0.65, 0.3, 1, 0.69, 0.6, 0),
            (0.65, 0.1, 0.7, 0.68, 0.6, 1),
            (0.65, 0.1, 0.5, 0.67, 0.6, 1),
        ),
        "saturate": ((1.0, 0.0), (0.3, 0), (0.1, 0), (2, 0), (5, 0.1), (30, 0.2)),
    }
)
"""Corruption name → parameters at severities 0..5, in the units of the ImageNet tables."""

SETTINGS_64 = MappingProxyType(
    {"fog": MappingProxyType({"map_size": 64}), "frost": MappingProxyType({"texture_scale": 0.3})}
)
"""The scripts' structural constants as keyword settings of the corruption functions."""

for order, name, script in ((2, "tinyimagenet", "make_tinyimagenet_c.py"), (3, "imagenet64", "make_imagenet_64_c.py")):
    register_corruption_set(
        CorruptionSet(
            name=name,
            image_size=IMAGE_SIZE,
            any_size=False,
            order=order,
            source=f"ImageNet-C's {script}",
            parameter_tables=PARAMETER_TABLES_64,
            settings=SETTINGS_64,
            python_floats=True,
        )
    )
