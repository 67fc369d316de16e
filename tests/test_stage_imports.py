"""The stages plan → render → write → load import only downward (issue 20): checked on the import
statements of every module, function-level imports included, and on what ``import ccc.load`` loads."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FORBIDDEN = {
    "ccc/stream": ("ccc.render", "ccc.shards", "ccc.generate", "ccc.load", "ccc.check_run", "ccc.calibration", "ccc.demo", "ccc.cli"),
    "ccc/render.py": ("ccc.stream.plan", "ccc.stream.sources", "ccc.shards", "ccc.generate", "ccc.load", "ccc.calibration", "ccc.demo", "ccc.cli"),
    "ccc/shards": ("ccc.generate", "ccc.load", "ccc.check_run", "ccc.calibration", "ccc.demo", "ccc.cli"),
    "ccc/generate.py": ("ccc.load", "ccc.check_run", "ccc.calibration", "ccc.demo", "ccc.cli"),
    "ccc/load.py": ("ccc.generate", "ccc.check_run", "ccc.demo", "ccc.cli"),
}


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


@pytest.mark.parametrize("stage", sorted(FORBIDDEN))
def test_no_stage_imports_a_higher_one(stage: str) -> None:
    target = ROOT / stage
    files = sorted(target.rglob("*.py")) if target.is_dir() else [target]
    assert files
    violations = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in files
        for module in sorted(imported_modules(path))
        if any(module == forbidden or module.startswith(forbidden + ".") for forbidden in FORBIDDEN[stage])
    ]
    assert violations == []


def test_the_loader_does_not_load_the_generation_driver() -> None:
    code = "import sys, ccc.load; print(sorted(name for name in sys.modules if name in ('ccc.generate', 'ccc.check_run', 'ccc.demo')))"
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment, check=True, cwd=ROOT)
    assert result.stdout.strip() == "[]"
