"""rdumbpp (Mishra, arXiv 2601.15544, "RDumb++"): ETA reset when its predictions drift.

The drift detector is the reset policy ``rdumbpp`` (``tta_eval.methods.reset.DriftPolicy``), which any
method takes with ``reset=rdumbpp:param=value:…``; this entry is ETA with that policy as default. No
public code of RDumb++ was found: the detector's details and defaults are inferred (docs/methods.md).
"""

from __future__ import annotations

from tta_eval.methods.eta import ETA, ETAConfig
from tta_eval.methods.registry import MethodEntry, register_method


class RDumbPP(ETA):
    """ETA under its own name (the drift-triggered reset is the registry entry's default policy)."""

    method_name = "rdumbpp"


register_method(
    MethodEntry(
        "rdumbpp",
        RDumbPP,
        ETAConfig,
        "ETA reset to its initial state when the entropy of its predictions drifts (RDumb++, inferred details)",
        needs_batchnorm=False,
        reset="rdumbpp",
        sources="Mishra, arXiv 2601.15544 (RDumb++; no public code found); Press et al. NeurIPS 2023 (RDumb)",
        colour="#54278f",
    )
)
