"""Per-sample corruption parameters from the one owner of the parameter tables, ``ccc.corruptions``."""

from __future__ import annotations

import torch
from torch import Tensor

from ccc.corruptions import get_corruption

__all__ = ["per_sample_parameters"]


def per_sample_parameters(name: str, severities: Tensor) -> Tensor:
    """The interpolated parameters of corruption ``name`` at each sample's severity.

    Args:
        name: a registered corruption name or alias.
        severities: float64 tensor (B,), each in [0, 5].

    Returns:
        float64 tensor on ``severities.device``: (B,) for a table of scalars, (B, P) for a table of
        P-tuples; each row is ``get_corruption(name).parameters(severity)``, bit for bit (all rows made at
        once on the host: :meth:`~ccc.corruptions.registry.Corruption.parameters_of`).
    """
    values = get_corruption(name).parameters_of(severities.detach().to("cpu", torch.float64).numpy())
    return torch.from_numpy(values).to(severities.device)
