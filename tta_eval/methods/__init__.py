"""Test-time adaptation methods of the CCC paper, as registered entries.

>>> from tta_eval.methods import create, list_methods
>>> list_methods()  # doctest: +SKIP
['source', 'bn', 'tent', 'rpl', 'slr', 'cpl', 'cotta', 'eta', 'eata', 'rdumb']
>>> method = create("rdumb", model)  # doctest: +SKIP
>>> logits = method(images)  # predicts, then adapts  # doctest: +SKIP
"""

from tta_eval.methods.base import AdaptationMethod, NeedsStreamPreparation, StepInfo, TTAMethod
from tta_eval.methods.configs import (
    BatchNormConfig,
    CoTTAConfig,
    CPLConfig,
    EATAConfig,
    ETAConfig,
    RPLConfig,
    SLRConfig,
    SourceConfig,
    TentConfig,
)
from tta_eval.methods.cotta import CoTTA
from tta_eval.methods.entropy import EATA, ETA, Tent
from tta_eval.methods.pseudo_label import CPL, RPL, SLR
from tta_eval.methods.registry import MethodEntry, create, get_method, list_methods, register_method, resolve_config
from tta_eval.methods.reset import PeriodicReset
from tta_eval.methods.statistics import BatchNormStatistics, Source

RDUMB_RESET_EVERY = 1000

for _entry in (
    MethodEntry(
        "source",
        Source,
        SourceConfig,
        "pretrained model, evaluation mode, no adaptation",
        needs_batchnorm=False,
        sources="CCC code models/pretrained.py",
    ),
    MethodEntry(
        "bn",
        BatchNormStatistics,
        BatchNormConfig,
        "test-batch BatchNorm statistics, nothing learned",
        sources="Schneider et al. 2020; CCC code models/batchnorm.py",
    ),
    MethodEntry(
        "tent",
        Tent,
        TentConfig,
        "entropy minimisation over BN affine parameters",
        sources="Wang et al. ICLR 2021; DequanWang/tent; CCC code models/tent.py",
    ),
    MethodEntry(
        "rpl",
        RPL,
        RPLConfig,
        "generalised cross-entropy (q=0.8) to hard pseudo-labels, BN affine parameters",
        sources="Rusak et al. TMLR 2022; CCC code models/rpl.py",
    ),
    MethodEntry(
        "slr",
        SLR,
        SLRConfig,
        "soft likelihood ratio + diversity regulariser, Adam, BN affine parameters",
        sources="Mummadi et al. 2021 (arXiv 2106.14999); no public CCC implementation",
    ),
    MethodEntry(
        "cpl",
        CPL,
        CPLConfig,
        "conjugate pseudo-labels of the PolyLoss (eps=8), BN affine parameters",
        sources="Goyal et al. NeurIPS 2022; CCC code models/conjugate.py",
    ),
    MethodEntry(
        "cotta",
        CoTTA,
        CoTTAConfig,
        "mean teacher with augmentation-averaged pseudo-labels and stochastic restore",
        sources="Wang et al. CVPR 2022; qinenergy/cotta imagenet/cotta.py; CCC code models/cotta.py",
    ),
    MethodEntry(
        "eta",
        ETA,
        ETAConfig,
        "entropy minimisation on reliable, non-redundant, re-weighted samples",
        sources="Niu et al. ICML 2022; mr-eggplant/EATA eata.py; CCC code models/eata.py",
    ),
    MethodEntry(
        "eata",
        EATA,
        EATAConfig,
        "ETA + Fisher-weighted anchor (alpha=2000, Fisher from the first 2000 stream images)",
        sources="Niu et al. ICML 2022; mr-eggplant/EATA; CCC code models/eata.py",
    ),
    MethodEntry(
        "rdumb",
        ETA,
        ETAConfig,
        "ETA reset to its initial state every 1000 batches",
        reset_every=RDUMB_RESET_EVERY,
        sources="Press et al. NeurIPS 2023; CCC code models/rdumb.py",
    ),
):
    register_method(_entry)
del _entry

__all__ = [
    "AdaptationMethod",
    "BatchNormStatistics",
    "CPL",
    "CoTTA",
    "EATA",
    "ETA",
    "MethodEntry",
    "NeedsStreamPreparation",
    "PeriodicReset",
    "RDUMB_RESET_EVERY",
    "RPL",
    "SLR",
    "Source",
    "StepInfo",
    "TTAMethod",
    "Tent",
    "create",
    "get_method",
    "list_methods",
    "register_method",
    "resolve_config",
]
