"""The demo worlds' method settings (``ccc.demo.DEMO_METHOD_OPTIONS`` and ``DEMO_CIFAR_METHOD_OPTIONS``,
docs/demo.md): a demo-world stream gets its world's unless the run names other settings. Each is named after
its world (``tta_eval.streams.DEMO_WORLD_NAMES``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ccc.demo import DEMO_CIFAR_METHOD_OPTIONS, DEMO_METHOD_OPTIONS
from tta_eval.method_settings.registry import MethodSettings, SettingValue, register_method_settings

DEMO = "demo"
"""The settings of the demo world (``ccc.demo.DEMO_METHOD_OPTIONS``), given to demo-world streams."""

DEMO_CIFAR = "demo_cifar"
"""The settings of the 32×32 demo world (``ccc.demo.DEMO_CIFAR_METHOD_OPTIONS``), given to its streams."""


def _register(name: str, heading: str, options: Mapping[str, Mapping[str, Any]], source: str) -> None:
    register_method_settings(
        MethodSettings(
            name=name,
            heading=heading,
            options={
                method: {option: SettingValue(value, source) for option, value in values.items()}
                for method, values in options.items()
            },
        )
    )


_register(
    DEMO,
    "demo world settings (docs/demo.md; the demo's, not the paper's)",
    DEMO_METHOD_OPTIONS,
    "ccc.demo.DEMO_METHOD_OPTIONS",
)
_register(
    DEMO_CIFAR,
    "32x32 demo world settings (docs/demo.md; the demo's, not the paper's)",
    DEMO_CIFAR_METHOD_OPTIONS,
    "ccc.demo.DEMO_CIFAR_METHOD_OPTIONS",
)
