"""Every registry is wired the same way (``ccc.registry``'s docstring): a package's ``registry.py``
holds its ``Registry`` and a ``register_<kind>()`` function, each entry's module calls that function
at its end, and the package's ``__init__`` imports every module with
``import_submodules(__name__, __path__)``, so that a new entry is one new module."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.builders import REPOSITORY

PACKAGES = ("ccc", "tta_eval")


def registry_modules(root: Path = REPOSITORY) -> list[Path]:
    """Source files that create a ``Registry`` at module level (``ccc/registry.py``, the pattern itself, excepted)."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if path == root / "ccc" / "registry.py":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in tree.body:
                value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
                if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "Registry":
                    found.append(path)
                    break
    return found


def _calls_import_submodules_on_itself(init: Path) -> bool:
    for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "import_submodules":
            arguments = [getattr(argument, "id", None) for argument in node.args]
            if arguments == ["__name__", "__path__"]:
                return True
    return False


def test_the_registries_are_the_known_ones() -> None:
    """A registry that appears elsewhere must be wired like these (and the list kept current)."""
    assert [str(path.relative_to(REPOSITORY)) for path in registry_modules()] == [
        "ccc/calibration/compute/backends/registry.py",
        "ccc/corruptions/registry.py",
        "ccc/corruptions/sets/registry.py",
        "ccc/render_torch/registry.py",
        "tta_eval/method_settings/registry.py",
        "tta_eval/methods/registry.py",
        "tta_eval/protocols/registry.py",
        "tta_eval/streams/registry.py",
    ]


def test_every_registry_is_a_registry_module_with_a_register_function() -> None:
    for path in registry_modules():
        assert path.name == "registry.py", path
        functions = [
            node.name for node in ast.parse(path.read_text(encoding="utf-8")).body if isinstance(node, ast.FunctionDef)
        ]
        assert any(name.startswith("register_") for name in functions), f"{path}: no register_<kind>() function"


def test_every_registry_package_imports_all_its_modules() -> None:
    for path in registry_modules():
        package = path.parent
        assert _calls_import_submodules_on_itself(package / "__init__.py"), package / "__init__.py"


def test_the_wiring_check_sees_a_package_that_lists_its_modules_by_hand(tmp_path: Path) -> None:
    package = tmp_path / "ccc" / "things"
    package.mkdir(parents=True)
    (tmp_path / "ccc" / "__init__.py").write_text("")
    (tmp_path / "tta_eval").mkdir()
    (package / "__init__.py").write_text("from . import first, second\n")
    (package / "things.py").write_text("from ccc.registry import Registry\nREGISTRY = Registry('thing')\n")
    (found,) = registry_modules(tmp_path)
    assert found.name == "things.py" and not _calls_import_submodules_on_itself(package / "__init__.py")
