"""The demo world's calibration table and its difficulty presets.

The table ``calibration/demo.npz`` was computed with ``ccc-calibrate compute --model
ccc.demo:demo_model --adaptive --preprocessing stream`` on the demo images (``docs/demo.md`` gives the command, the
corruptions and the cost) and then given :data:`DEMO_DIFFICULTY_PRESETS` with
:func:`with_demo_presets`.
"""

from __future__ import annotations

from collections.abc import Mapping
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

DEMO_CALIBRATION_PATH = Path(__file__).resolve().parents[2] / "calibration" / "demo.npz"
"""The committed table in a source checkout (``<repository>/calibration/demo.npz``)."""


def demo_calibration_path() -> Path:
    """Path of the demo calibration table; FileNotFoundError saying where it was expected if absent."""
    if not DEMO_CALIBRATION_PATH.is_file():
        raise FileNotFoundError(
            f"the demo calibration table {DEMO_CALIBRATION_PATH} is missing "
            "(it ships with the source repository under calibration/)"
        )
    return DEMO_CALIBRATION_PATH


def with_demo_presets(table: CalibrationTable) -> CalibrationTable:
    """``table`` with :data:`DEMO_DIFFICULTY_PRESETS` as its difficulty presets (numbers and metadata unchanged).

    Raises CalibrationError if a preset names a corruption the table lacks.
    """
    missing = sorted({name for _, names in DEMO_DIFFICULTY_PRESETS.values() for name in names} - set(table.corruptions))
    if missing:
        raise CalibrationError(f"the table must hold the demo presets' corruptions; missing: {', '.join(missing)}")
    return CalibrationTable(
        table.accuracy_array, table.image_counts_array, table.pair_indices, table.metadata, DEMO_DIFFICULTY_PRESETS
    )
