"""The demo world's method settings (``ccc.demo.DEMO_METHOD_OPTIONS``, docs/demo.md): a demo-world
stream gets them unless the run names other settings."""

from __future__ import annotations

from ccc.demo import DEMO_METHOD_OPTIONS
from tta_eval.method_settings.registry import MethodSettings, SettingValue, register_method_settings

DEMO = "demo"
"""The settings of the demo world (``ccc.demo.DEMO_METHOD_OPTIONS``), given to demo-world streams."""

register_method_settings(
    MethodSettings(
        name=DEMO,
        heading="demo world settings (docs/demo.md; the demo's, not the paper's)",
        options={
            method: {option: SettingValue(value, "ccc.demo.DEMO_METHOD_OPTIONS") for option, value in values.items()}
            for method, values in DEMO_METHOD_OPTIONS.items()
        },
    )
)
