"""rdumbpp (Mishra, arXiv 2601.15544, "RDumb++"; code himans-iitk/Rdumbpp ``CCC/models/rdumbpp.py``):
RDumb's ETA with a 4.2-nat entropy margin and a lowest-entropy fallback, reset when its predictions drift.

The drift detector is the reset policy ``rdumbpp`` (``tta_eval.methods.reset.DriftPolicy``), which any
method takes with ``reset=rdumbpp:param=value:…``; this entry is the author's base method with that
policy as default (docs/methods.md, "rdumbpp").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ccc.validation import check_in_range
from tta_eval.methods.eta import ETA, ETAConfig
from tta_eval.methods.registry import MethodEntry, register_method

RDUMBPP_ENTROPY_MARGIN = 4.2
"""The author's entropy margin E0 in nats on ImageNet's 1,000 classes ("CCC entropy median")."""


@dataclass(frozen=True)
class RDumbPPConfig(ETAConfig):
    """ETA's options with RDumb++'s base method.

    entropy_margin_fraction: E0 = fraction · ln C; the default 4.2 / ln 1000 (0.608) gives the author's
    4.2 nats on 1,000 classes; fallback_fraction in [0, 1]: when no sample has an entropy below E0, the
    max(1, ⌊fraction · N⌋) lowest-entropy samples of the batch (N samples) are the reliable ones
    (0: none, ETA's rule).
    """

    entropy_margin_fraction: float = RDUMBPP_ENTROPY_MARGIN / math.log(1000)
    fallback_fraction: float = 0.2

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in_range("fallback_fraction", self.fallback_fraction, 0.0, 1.0)


class RDumbPP(ETA):
    """ETA whose first filter falls back to the lowest-entropy samples when none is reliable (the
    drift-triggered reset is the registry entry's default policy)."""

    method_name = "rdumbpp"

    def _reliable(self, entropies: torch.Tensor, margin: float) -> torch.Tensor:
        """Samples below ``margin``; if there are none, the max(1, ⌊fallback_fraction · N⌋) lowest."""
        reliable = super()._reliable(entropies, margin)
        fraction = self.config.fallback_fraction
        if reliable.numel() > 0 or fraction == 0.0:
            return reliable
        count = max(1, int(fraction * entropies.numel()))
        return entropies.topk(count, largest=False).indices.sort().values


register_method(
    MethodEntry(
        "rdumbpp",
        RDumbPP,
        RDumbPPConfig,
        "ETA (4.2-nat margin, lowest-entropy fallback) reset when the entropy of its predictions drifts (RDumb++)",
        needs_batchnorm=False,
        reset="rdumbpp",
        sources="Mishra, arXiv 2601.15544 (RDumb++); himans-iitk/Rdumbpp CCC/models/rdumbpp.py, CCC/eval.py",
        colour="#54278f",
    )
)
