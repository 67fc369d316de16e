"""Calibration: how accurate a model is under every pair of corruptions and severities.

- :class:`CalibrationTable` — per ordered corruption pair a 21×21 accuracy grid (percent), image
  counts, :class:`CalibrationMetadata` and difficulty presets; saved as a documented ``.npz``
  (``docs/calibration_format.md``).
- :func:`import_ccc_pickle` — safe import of the published CCC matrices (pickle file or URL).
- :func:`load_calibration` — a table from a ``.npz``, the published pickle or its URL (converted once, cached).

Computing a table: :func:`ccc.calibration.run.calibrate` (the whole run, behind ``ccc-calibrate
compute``) over :mod:`ccc.calibration.compute` and :mod:`ccc.calibration.adaptive`; imported on
demand, since they load torch.
"""

from ccc.calibration.presets import CCC_CORRUPTIONS, RESNET50_DIFFICULTY_PRESETS, DifficultyPreset
from ccc.calibration.published import (
    PUBLISHED_MATRIX_URL,
    UnsafePickleError,
    import_ccc_pickle,
    load_calibration,
    read_matrix_pickle,
)
from ccc.calibration.table import (
    CORRUPTION_ALIASES,
    GRID_SIZE,
    SEVERITIES,
    CalibrationError,
    CalibrationMetadata,
    CalibrationTable,
    canonical_corruption_name,
)

__all__ = [
    "CCC_CORRUPTIONS",
    "CORRUPTION_ALIASES",
    "GRID_SIZE",
    "PUBLISHED_MATRIX_URL",
    "RESNET50_DIFFICULTY_PRESETS",
    "SEVERITIES",
    "CalibrationError",
    "CalibrationMetadata",
    "CalibrationTable",
    "DifficultyPreset",
    "UnsafePickleError",
    "canonical_corruption_name",
    "import_ccc_pickle",
    "load_calibration",
    "read_matrix_pickle",
]
