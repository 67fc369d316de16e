"""The tree is formatted and linted as ``[tool.ruff]`` in pyproject.toml says (ruff, 120 columns;
pycodestyle, pyflakes and import-order rules): ``ruff format`` and ``ruff check --fix`` mend what this
finds."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.builders import REPOSITORY


def _ruff(*arguments: str) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec("ruff") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("ruff is not installed: pip install -e '.[test]'")
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    return subprocess.run(
        [sys.executable, "-m", "ruff", *arguments], cwd=REPOSITORY, capture_output=True, text=True, timeout=300
    )


def test_the_tree_is_formatted() -> None:
    result = _ruff("format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_tree_passes_the_linter() -> None:
    result = _ruff("check", ".")
    assert result.returncode == 0, result.stdout + result.stderr
