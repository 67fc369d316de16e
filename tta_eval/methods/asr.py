"""asr (Lim, Hwang, Lee ICLR 2026, "When and Where to Reset Matters for Long-Term Test-Time Adaptation"):
ETA with ASR's adaptive, selective reset and importance-aware regulariser.

The reset is the policy ``asr`` (``tta_eval.methods.reset.ASRPolicy``), which any method takes with
``reset=asr`` (the public code applies it to ETA and ROID: ``--method roid:reset=asr``). This entry is
ETA with the optimiser of the public code's CCC configurations (YonseiML/asr cfgs/ccc/*/eta: SGD,
learning rate 2.5e-4, momentum 0.9, Nesterov from its conf.py defaults) and the policy as default.
"""

from __future__ import annotations

from dataclasses import dataclass

from tta_eval.methods.eta import ETA, ETAConfig
from tta_eval.methods.registry import MethodEntry, register_method


@dataclass(frozen=True)
class ASRConfig(ETAConfig):
    """ETA's options; Nesterov momentum on, as in YonseiML/asr (conf.py OPTIM.NESTEROV = True)."""

    nesterov: bool = True


class ASR(ETA):
    """ETA under its own name (the adaptive, selective reset is the registry entry's default policy)."""

    method_name = "asr"


register_method(
    MethodEntry(
        "asr",
        ASR,
        ASRConfig,
        "ETA with ASR's adaptive, selective reset and importance-aware regulariser",
        needs_batchnorm=False,
        reset="asr",
        sources=(
            "Lim, Hwang, Lee ICLR 2026 (arXiv 2603.03796); "
            "YonseiML/asr methods/base.py, methods/eata.py, conf.py, cfgs/ccc"
        ),
        colour="#e7ba52",
    )
)
