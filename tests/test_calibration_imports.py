"""Import rules of the calibration package: it never imports the demo world (the demo depends on
calibration, never the reverse) nor tta_eval, and its rendering engine never loads torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted((ROOT / "ccc" / "calibration").rglob("*.py")) + [ROOT / "ccc" / "execution.py", ROOT / "ccc" / "models.py"]


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(ROOT)))
def test_calibration_imports_neither_the_demo_nor_tta_eval(path: Path) -> None:
    forbidden = sorted(name for name in imported_modules(path) if name.split(".")[0] == "tta_eval" or name.startswith("ccc.demo"))
    assert forbidden == [], f"{path.relative_to(ROOT)} imports {forbidden}"


def test_the_rendering_engine_does_not_load_torch() -> None:
    code = "import sys, ccc.calibration.compute.engine; print('torch' in sys.modules)"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert completed.stdout.strip() == "False"
