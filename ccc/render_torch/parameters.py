"""Per-sample corruption parameters for the torch backend, from the one owner of the tables."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ccc.corruptions import get_corruption


def per_sample_parameters(name: str, severities: Tensor) -> Tensor:
    """The interpolated parameters of corruption ``name`` at each sample's severity.

    Args:
        name: a registered corruption name or alias.
        severities: float64 (B,), each in (0, 5].

    Returns:
        float64 tensor on ``severities.device``: (B,) for a table of scalars, (B, P) for a table of
        P-tuples; row ``k`` equals ``get_corruption(name).parameters(severities[k])``.
    """
    entry = get_corruption(name)
    values = np.asarray([entry.parameters(severity) for severity in severities.tolist()], dtype=np.float64)
    return torch.as_tensor(values, dtype=torch.float64, device=severities.device)
