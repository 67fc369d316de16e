"""per_sample_parameters equals the registry's interpolation, sample by sample."""

from __future__ import annotations

import pytest
import torch

from ccc.corruptions import get_corruption, list_corruptions
from ccc.render_torch.parameters import per_sample_parameters


@pytest.mark.parametrize("name", list_corruptions())
def test_rows_equal_the_registry_parameters(name: str):
    severities = torch.tensor([0.5, 5.0, 0.5, 2.75, 1.0, 4.999], dtype=torch.float64)
    values = per_sample_parameters(name, severities)
    assert values.dtype == torch.float64 and values.shape[0] == 6
    for row, severity in zip(values, severities.tolist()):
        expected = torch.tensor(get_corruption(name).parameters(severity), dtype=torch.float64)
        assert torch.equal(row, expected)
