"""Named method settings: per method, the options a run gives it unless the user sets them, and the
run's batch size unless the user gives one, every value with its source.

A run selects them by name (``tta-eval run --settings cifar10``, ``ExperimentSettings.method_settings``);
a demo-world stream gets ``demo`` unless another is named (``tta_eval.settings``). Importing this
package imports every module of it (``ccc.registry.import_submodules``), each registering its
entries (``registry.register_method_settings``).

>>> get_method_settings("cifar10").options["eta"]["redundancy_margin"].value
0.4
"""

from __future__ import annotations

from ccc.registry import import_submodules
from tta_eval.method_settings.registry import (
    LINKED_OPTIONS,
    REGISTRY,
    MethodSettings,
    SettingValue,
    format_options,
    get_method_settings,
    list_method_settings,
    register_method_settings,
)

import_submodules(__name__, __path__)

from tta_eval.method_settings.cifar import CIFAR_BATCH_SIZE  # noqa: E402
from tta_eval.method_settings.demo import DEMO, DEMO_CIFAR  # noqa: E402

__all__ = [
    "CIFAR_BATCH_SIZE",
    "DEMO",
    "DEMO_CIFAR",
    "LINKED_OPTIONS",
    "REGISTRY",
    "MethodSettings",
    "SettingValue",
    "format_options",
    "get_method_settings",
    "list_method_settings",
    "register_method_settings",
]
