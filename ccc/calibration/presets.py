"""Difficulty presets: a named target accuracy and the corruptions a stream may use.

One type, :class:`DifficultyPreset`, for every table's presets (stored in the table file, see
``docs/calibration_format.md``), and the public generator's presets for the ResNet-50 table, which
:func:`ccc.calibration.compute.job.compute_calibration` attaches to a computed ResNet-50 table and
:func:`ccc.calibration.import_ccc_pickle` to the imported published one.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from ccc.corruptions import CORRUPTIONS

__all__ = ["CCC_CORRUPTIONS", "RESNET50_DIFFICULTY_PRESETS", "DifficultyPreset"]

CCC_CORRUPTIONS: tuple[str, ...] = CORRUPTIONS
"""The 15 corruptions of CCC in the public generator's order (its names: ``elastic``, ``jpeg``)."""


class DifficultyPreset(NamedTuple):
    """A named difficulty: the target accuracy and the corruptions a stream may use.

    ``target_accuracy`` is in percent, in [0, 100]; ``corruptions`` are names of the table (at least
    two, since a stream needs pairs of distinct corruptions). Unpacks as ``target, names = preset``.
    """

    target_accuracy: float
    corruptions: tuple[str, ...]


def _all_but(*excluded: str) -> tuple[str, ...]:
    return tuple(name for name in CCC_CORRUPTIONS if name not in excluded)


RESNET50_DIFFICULTY_PRESETS: Mapping[str, DifficultyPreset] = MappingProxyType(
    {
        "easy": DifficultyPreset(40.0, _all_but("brightness")),
        "medium": DifficultyPreset(20.0, _all_but("brightness", "jpeg")),
        "hard": DifficultyPreset(0.0, ("gaussian_noise", "shot_noise", "impulse_noise", "contrast")),
    }
)
"""The public generator's difficulties for the ResNet-50 table (CCC-Easy / Medium / Hard)."""
