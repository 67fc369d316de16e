"""The demo worlds' calibration tables and their difficulty presets.

The table ``calibration/demo.npz`` was computed with ``ccc-calibrate compute --model
ccc.demo:demo_model --adaptive --preprocessing stream`` on the demo images (``docs/demo.md`` gives the command, the
corruptions and the cost) and then given :data:`DEMO_DIFFICULTY_PRESETS` with
:func:`with_demo_presets`; ``calibration/demo_cifar.npz``, the 32×32 world's, with ``ccc-calibrate compute
--demo --corruption-set cifar --adaptive`` (:data:`DEMO_CIFAR_DIFFICULTY_PRESETS`). :data:`DEMO_TABLES`
names each world's table, corruptions and presets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from ccc.calibration.presets import DifficultyPreset
from ccc.calibration.table import CalibrationError, CalibrationTable

DEMO_CALIBRATION_CORRUPTIONS: tuple[str, ...] = (
    "gaussian_noise",
    "impulse_noise",
    "motion_blur",
    "frost",
    "contrast",
)
"""The corruptions calibrated for the demo world: 5 of the 15, from every ImageNet-C family (noise,
blur, weather, digital), each bringing the demo model below 40 % at severity 5, and cheap to
compute (``docs/demo.md``)."""

DEMO_DIFFICULTY_PRESETS: Mapping[str, DifficultyPreset] = MappingProxyType(
    {
        "easy": DifficultyPreset(50.0, DEMO_CALIBRATION_CORRUPTIONS),
        "medium": DifficultyPreset(30.0, ("gaussian_noise", "impulse_noise", "frost", "contrast")),
        "hard": DifficultyPreset(12.0, ("frost", "contrast")),
    }
)
"""Difficulties of the demo world: target accuracy (percent) and the corruptions a stream may use.

Chosen as the public ResNet-50 presets (targets 40 / 20 / 0 for a clean accuracy of 76 % and chance
0.1 %) are: easy near half the clean accuracy, medium near a third, hard near chance, the demo
model's clean accuracy being 99 % and chance 6.25 %. As there, a corruption is left out of a
difficulty when it cannot bring the model down to the target: ``motion_blur`` alone never goes
below 42 %, so it only serves easy. Hard keeps the only two corruptions whose pairs the table
measures near 12 %: frost and contrast (reference paths 13.0 and 12.8 %); the model keeps 22–26 %
along every path that pairs a noise with a noise or with contrast (CCC-Hard's choice), so those
pairs cannot make a hard stream here (``docs/demo.md``).
"""

DEMO_CIFAR_CALIBRATION_CORRUPTIONS: tuple[str, ...] = (
    "gaussian_noise",
    "impulse_noise",
    "defocus_blur",
    "frost",
    "contrast",
)
"""The corruptions calibrated for the 32×32 demo world (``cifar`` set): again one or two of every ImageNet-C
family, those under which its model falls most gradually: the noises (36.6 and 28.5 % at severity 5),
defocus blur (50.8 %), frost (58.1 %) and contrast (24.1 %) (``docs/demo.md``, "The 32×32 world")."""

DEMO_CIFAR_DIFFICULTY_PRESETS: Mapping[str, DifficultyPreset] = MappingProxyType(
    {
        "easy": DifficultyPreset(50.0, DEMO_CIFAR_CALIBRATION_CORRUPTIONS),
        "medium": DifficultyPreset(35.0, ("gaussian_noise", "impulse_noise", "contrast")),
        "hard": DifficultyPreset(27.0, ("impulse_noise", "contrast")),
    }
)
"""Difficulties of the 32×32 demo world (its model's clean accuracy is 99.3 %, chance 6.25 %), chosen from its
table's reference paths (``docs/demo.md``, "The 32×32 world"): easy at half the clean accuracy over all five
corruptions (path means 49.3–57.1 %, 50.7 % on average); medium at 35 % over the corruptions whose pairs reach it
(the noises and contrast: 34.8–40.2 %, 35.8 %; with defocus blur or frost a path keeps 48–56 %, as those alone
never go below 51 and 57 %); hard at 27 %, as low as paths of this table go on average (impulse noise and
contrast: 27.3 and 29.3 %): along a CCC path one severity falls to 0 as the other rises, and no corruption alone
brings the model below 24 %, so unlike the 320×240 world's, no pair reaches near chance.
"""

_CALIBRATION_FOLDER = Path(__file__).resolve().parents[2] / "calibration"


@dataclass(frozen=True)
class DemoTable:
    """A demo world's calibration table: its file under ``<repository>/calibration/``, the corruptions it
    measures and the difficulty presets it carries."""

    path: Path
    corruptions: tuple[str, ...]
    presets: Mapping[str, DifficultyPreset]


DEMO_TABLES: Mapping[str, DemoTable] = MappingProxyType(
    {
        "imagenet": DemoTable(_CALIBRATION_FOLDER / "demo.npz", DEMO_CALIBRATION_CORRUPTIONS, DEMO_DIFFICULTY_PRESETS),
        "cifar": DemoTable(
            _CALIBRATION_FOLDER / "demo_cifar.npz", DEMO_CIFAR_CALIBRATION_CORRUPTIONS, DEMO_CIFAR_DIFFICULTY_PRESETS
        ),
    }
)
"""Each demo world's table, by the world's corruption set (``ccc.demo.DEMO_WORLDS``)."""

DEMO_CALIBRATION_PATH = DEMO_TABLES["imagenet"].path
"""The committed table of the 320×240 world in a source checkout (``<repository>/calibration/demo.npz``)."""


def demo_table(corruption_set: str = "imagenet") -> DemoTable:
    """The :class:`DemoTable` of the demo world of ``corruption_set``; ValueError naming the worlds otherwise."""
    if corruption_set not in DEMO_TABLES:
        raise ValueError(
            f"the demo world exists for corruption sets {', '.join(DEMO_TABLES)}, not {corruption_set!r}: "
            "drop --demo and pass your images (--imagenet or --dataset) with a calibration table of that set"
        )
    return DEMO_TABLES[corruption_set]


def demo_calibration_path(corruption_set: str = "imagenet") -> Path:
    """Path of the calibration table of the demo world of ``corruption_set`` (``"imagenet"``:
    ``calibration/demo.npz``, ``"cifar"``: ``calibration/demo_cifar.npz``); FileNotFoundError saying where it
    was expected if absent, ValueError for a set without a demo world."""
    path = demo_table(corruption_set).path
    if not path.is_file():
        raise FileNotFoundError(
            f"the demo calibration table {path} is missing (it ships with the source repository under calibration/)"
        )
    return path


def with_demo_presets(table: CalibrationTable, corruption_set: str = "imagenet") -> CalibrationTable:
    """``table`` with the difficulty presets of the demo world of ``corruption_set`` (numbers and metadata
    unchanged).

    Raises CalibrationError if a preset names a corruption the table lacks.
    """
    presets = demo_table(corruption_set).presets
    missing = sorted({name for _, names in presets.values() for name in names} - set(table.corruptions))
    if missing:
        raise CalibrationError(f"the table must hold the demo presets' corruptions; missing: {', '.join(missing)}")
    return CalibrationTable(table.accuracy_array, table.image_counts_array, table.pair_indices, table.metadata, presets)
