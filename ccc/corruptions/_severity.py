"""Continuous severities: linear interpolation of ImageNet-C parameter tables.

Every corruption has a parameter table at the integer severities 0..5 (severity 0 being the
identity anchor that CCC added). The parameters at a real severity ``s`` are the element-wise linear
interpolation of that table, computed with exactly the floating-point formulas of the reference
implementation (``scipy.interpolate.interp1d(kind="linear")``), because several callers round or
truncate the result (JPEG quality, pixelate size, glass-blur offsets) and a one-ulp difference would
flip them:

- a table of scalars is evaluated like scipy does it for 1-D data, i.e. with ``numpy.interp``
  (exact table values at integer severities);
- a table of tuples is evaluated like scipy's general path: the bracket is found with
  ``searchsorted(side="left")`` clipped to [1, 5], and the value is
  ``slope * (s - s_low) + value_low`` with ``slope = (value_high - value_low) / (s_high - s_low)``
  (so an integer severity ``k >= 1`` is reached from the bracket ``[k - 1, k]``).

Values are numpy float64 scalars, as in the reference: under numpy 2's promotion rules they keep
float32 arithmetic in float64 where the reference's does.
"""

from __future__ import annotations

from typing import Sequence, Union

import numpy as np
from numpy.typing import NDArray

SEVERITY_ANCHORS = np.arange(6)
"""The integer severities 0..5 at which every parameter table is given."""

MAX_SEVERITY = 5.0

ParameterTable = Sequence[Union[float, Sequence[float]]]
"""A corruption's parameters at the severities 0..5: 6 scalars or 6 equal-length tuples."""


def interpolate_table(table: ParameterTable, severities: NDArray[np.float64]) -> NDArray[np.float64]:
    """A table of 6 scalars or of 6 equal-length P-tuples (severities 0..5) interpolated at every severity of
    ``severities`` (float64 (N,), each in [0, 5]), with the reference's formulas (module docstring), each
    severity's value made by the same float64 operations as for that severity alone.

    Returns:
        float64 (N,) for a table of scalars, (N, P) for a table of tuples.
    """
    values = np.asarray(table, dtype=np.float64)
    severities = np.asarray(severities, dtype=np.float64)
    if values.ndim == 1:
        return np.interp(severities, SEVERITY_ANCHORS, values)
    high = np.clip(np.searchsorted(SEVERITY_ANCHORS, severities), 1, len(SEVERITY_ANCHORS) - 1)
    low = high - 1
    slope = (values[high] - values[low]) / (SEVERITY_ANCHORS[high] - SEVERITY_ANCHORS[low]).astype(np.float64)[:, None]
    return slope * (severities - SEVERITY_ANCHORS[low])[:, None] + values[low]


def validate_severity(severity: object, parameter: str = "severity") -> float:
    """Return ``severity`` as a float after checking it is a finite number in [0, 5].

    Raises:
        ValueError: naming ``parameter``, the expected range and the received value. A severity is
            never clipped silently.
    """
    if isinstance(severity, (bool, np.bool_)) or not isinstance(severity, (int, float, np.integer, np.floating)):
        raise ValueError(f"{parameter} must be a real number in [0, 5], got {severity!r}")
    value = float(severity)
    if not np.isfinite(value) or value < 0.0 or value > MAX_SEVERITY:
        raise ValueError(f"{parameter} must be in [0, 5], got {value!r}")
    return value
