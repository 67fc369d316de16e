"""rdumb (Press et al. NeurIPS 2023): ETA reset to its initial state every 1000 batches.

Any method takes the same policy with ``reset=periodic:every=N`` (short form ``reset_every=N``); this
entry only changes its default.
"""

from __future__ import annotations

from tta_eval.methods.eta import ETA, ETAConfig
from tta_eval.methods.registry import MethodEntry, register_method

RDUMB_RESET_EVERY = 1000
"""Batches between two resets (the CCC paper's value)."""


class RDumb(ETA):
    """ETA under its own name (the reset is the registry entry's default policy)."""

    method_name = "rdumb"


register_method(
    MethodEntry(
        "rdumb",
        RDumb,
        ETAConfig,
        "ETA reset to its initial state every 1000 batches",
        needs_batchnorm=False,
        reset=f"periodic:every={RDUMB_RESET_EVERY}",
        sources="Press et al. NeurIPS 2023; CCC code models/rdumb.py",
        colour="tab:purple",
    )
)
