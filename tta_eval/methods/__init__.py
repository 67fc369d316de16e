"""Test-time adaptation methods of the CCC paper and of the time-constrained papers, as registered entries.

>>> from tta_eval.methods import create, list_methods
>>> list_methods()  # doctest: +SKIP
['adabn', 'asr', 'bn', 'cmf', 'cotta', 'cpl', 'deyo', 'eata', 'eta', 'lame', 'memo', 'neo', 'petta', 'pl',
 'rdumb', 'rdumbpp', 'roid', 'rotta', 'rpl', 'sar', 'shot', 'shot_im', 'slr', 'source', 'tent', 'ttac_nq']
>>> method = create("rdumb", model)  # doctest: +SKIP
>>> logits = method(images)  # predicts, then adapts  # doctest: +SKIP

Each method lives in its own module, ``tta_eval/methods/<name>.py``: its frozen config dataclass
with the published defaults, its class and its ``register_method`` call. Importing this package
imports every module in it, so a new method is one new file (and its entry in docs/methods.md).
Shared pieces: ``base`` (interface, exact reset, SGD options, BatchNorm helpers), ``layers``
(classifier head, normalisation layers), ``losses``, ``augmentation``, ``reset`` (the reset
policies: periodic, drift-triggered, ASR's) and ``registry``.
"""

from ccc.registry import import_submodules
from tta_eval.methods.base import AdaptationMethod, NeedsStreamPreparation, StepInfo, TTAMethod
from tta_eval.methods.eta import ETA
from tta_eval.methods.rdumb import RDUMB_RESET_EVERY
from tta_eval.methods.registry import MethodEntry, create, get_method, list_methods, register_method, resolve_config
from tta_eval.methods.reset import PeriodicReset, ResetPolicyWrapper
from tta_eval.methods.ttac_nq import SourceFeatureStatistics, compute_source_statistics

import_submodules(__name__, __path__)

__all__ = [
    "AdaptationMethod",
    "ETA",
    "MethodEntry",
    "NeedsStreamPreparation",
    "PeriodicReset",
    "RDUMB_RESET_EVERY",
    "ResetPolicyWrapper",
    "SourceFeatureStatistics",
    "StepInfo",
    "TTAMethod",
    "compute_source_statistics",
    "create",
    "get_method",
    "list_methods",
    "register_method",
    "resolve_config",
]
