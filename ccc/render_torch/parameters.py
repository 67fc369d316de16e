"""Per-sample corruption parameters for the torch backend, from the one owner of the tables."""

from __future__ import annotations

import torch
from torch import Tensor

from ccc.corruptions import get_corruption


def per_sample_parameters(name: str, severities: Tensor) -> Tensor:
    """The interpolated parameters of corruption ``name`` for each sample.

    Args:
        name: a registered corruption name (or alias).
        severities: float (B,) severities in [0, 5], any device.

    Returns:
        float64 tensor on ``severities.device``: (B,) for a corruption with a scalar parameter table,
        (B, P) for a table of P-tuples; row k is ``get_corruption(name).parameters(severities[k])``.
    """
    entry = get_corruption(name)
    values = [entry.parameters(float(severity)) for severity in severities.detach().cpu().tolist()]
    return torch.tensor(values, dtype=torch.float64, device=severities.device)
