"""Fidelity of the corruption sets to the public resolution scripts (tests/golden/README.md,
docs/fidelity.md "Corruption sets").

Every golden output was made by the public script's function at an integer severity after
``np.random.seed(seed)``; ``corrupt(..., rng=np.random.RandomState(seed), corruption_set=...)`` must
give the same bytes, except in the measured cases of ``KNOWN_DIFFERENCES``. Impulse noise draws from
an OS-seeded generator in the reference, so only its statistics are compared.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ccc.corruptions import canonical_name, corrupt, get_corruption_set, list_corruption_sets
from ccc.corruptions.statistics import per_image_statistics
from tests.builders import GOLDEN

GOLDEN_SETS = sorted(path.stem.removeprefix("corruption_set_") for path in GOLDEN.glob("corruption_set_*.npz"))

# (set, public function name, severity) -> (largest difference in levels, largest fraction of values
# that differ), as measured (docs/fidelity.md). Why:
# - gaussian_blur, glass_blur: OpenCV's separable filter with scipy's kernel sums in another order
#   than scipy: float64 values differ in the last bit, and a value on a level boundary truncates the
#   other way (sigma 0.4 here; none at the other sigmas with these images).
# - spatter (mud): scipy rounds the blurred float32 mud mask to float32 between its two axes, the
#   project keeps float64 (as for ImageNet).
# - saturate at 1: today's interpolation gives factor 0.30000000000000004 for the table's 0.3 (as
#   for ImageNet).
KNOWN_DIFFERENCES = {
    ("cifar", "gaussian_blur", 1): (1, 0.005),
    ("cifar", "glass_blur", 3): (1, 0.01),
    ("cifar", "glass_blur", 5): (1, 0.01),
    ("cifar", "spatter", 4): (1, 0.001),
    ("cifar", "saturate", 1): (1, 0.005),
    ("tinyimagenet", "saturate", 1): (1, 0.005),
}

SHARED_DATA = {"imagenet64": "tinyimagenet"}
"""Sets whose public script has the same distortion functions and tables as another set's (measured
identical outputs, docs/fidelity.md): they share that set's data and golden outputs."""


def _golden(corruption_set: str):
    return np.load(GOLDEN / f"corruption_set_{corruption_set}.npz")


def _cases():
    cases = set()
    for corruption_set in GOLDEN_SETS:
        for key in _golden(corruption_set).files:
            if key != "inputs":
                name, severity = key.split("@")[:2]
                cases.add((corruption_set, name, int(severity)))
    return sorted(cases)


def test_every_set_but_imagenet_has_golden_data_or_shares_a_set_s():
    assert GOLDEN_SETS == sorted(name for name in list_corruption_sets() if name not in {"imagenet", *SHARED_DATA})
    for name, owner in SHARED_DATA.items():
        shared, golden = get_corruption_set(name), get_corruption_set(owner)
        assert shared.parameter_tables is golden.parameter_tables and shared.settings is golden.settings
        assert (shared.image_size, shared.python_floats) == (golden.image_size, golden.python_floats)


@pytest.mark.parametrize("corruption_set, name, severity", _cases())
def test_legacy_mode_reproduces_the_public_script(corruption_set, name, severity):
    golden = _golden(corruption_set)
    inputs = golden["inputs"]
    keys = [key for key in golden.files if key.startswith(f"{name}@{severity}@")]
    differences = []
    for key in keys:
        index, seed = (int(part) for part in key.split("@")[2:])
        ours = corrupt(
            inputs[index],
            canonical_name(name),
            float(severity),
            rng=np.random.RandomState(seed),
            corruption_set=corruption_set,
        )
        differences.append(np.abs(ours.astype(np.int64) - golden[key]))
    difference = np.concatenate([d.ravel() for d in differences])
    assert len(keys) == len(inputs)
    largest, fraction = KNOWN_DIFFERENCES.get((corruption_set, name, severity), (0, 0.0))
    assert difference.max() <= largest, f"max difference {difference.max()}"
    assert np.mean(difference > 0) <= fraction, f"{np.mean(difference > 0):.4f} of the values differ"


def _impulse_cases():
    return [
        (corruption_set, severity)
        for corruption_set in GOLDEN_SETS
        for severity in json.loads((GOLDEN / f"corruption_set_{corruption_set}_impulse.json").read_text())[
            "impulse_noise"
        ]
    ]


@pytest.mark.parametrize("corruption_set, severity", _impulse_cases())
def test_impulse_noise_has_the_public_script_statistics(corruption_set, severity):
    """Each statistic's mean over (call, image) agrees within 4 standard errors of the difference."""
    reference = json.loads((GOLDEN / f"corruption_set_{corruption_set}_impulse.json").read_text())["impulse_noise"]
    reference = reference[severity]
    calls = reference["psnr"]["count"] // len(_golden(corruption_set)["inputs"])
    ours = per_image_statistics(
        "impulse_noise",
        float(severity),
        _golden(corruption_set)["inputs"],
        [lambda seed=seed: np.random.RandomState(seed) for seed in range(calls)],
        corruption_set=corruption_set,
    )
    for statistic, values in ours.items():
        expected = reference[statistic]
        standard_error = math.sqrt(expected["std"] ** 2 / expected["count"] + values.var(ddof=1) / len(values))
        assert abs(values.mean() - expected["mean"]) <= 4 * standard_error, (statistic, values.mean(), expected)
