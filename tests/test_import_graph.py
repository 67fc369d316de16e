"""The import graph keeps the design's layering (docs/design.md, issue 20).

Every ``import`` statement in ``ccc`` and ``tta_eval`` is read from the source (including imports inside
functions, which run later but bind the modules all the same) and checked against the rules below:
``ccc`` never imports ``tta_eval``; a stage never imports a later one (plan → render → write → load;
the loader never imports the generation driver; render never reads the calibration table); the
calibration package never imports the demo world; methods never know protocols; libraries never
import command-line modules. And no module imports itself back through others: the graph has no circle,
``TYPE_CHECKING`` and function-level imports included.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent
PACKAGES = ("ccc", "tta_eval")


@dataclass(frozen=True)
class Rule:
    """Modules named ``importer`` (or below it) must not import ``forbidden`` (or below them), except
    ``allowed`` (or below them)."""

    importer: str
    forbidden: tuple[str, ...]
    why: str
    allowed: tuple[str, ...] = ()

    def breaks(self, name: str) -> bool:
        """Whether importing module ``name`` breaks the rule."""
        return any(is_within(name, forbidden) for forbidden in self.forbidden) and not any(
            is_within(name, allowed) for allowed in self.allowed
        )


LIBRARY_OF_CCC = (
    "ccc.corruptions",
    "ccc.stream",
    "ccc.render",
    "ccc.shards",
    "ccc.generate",
    "ccc.load",
    "ccc.check_run",
)

RULES = (
    Rule("ccc", ("tta_eval",), "ccc is usable without tta_eval; tta_eval builds on ccc"),
    Rule("ccc.registry", ("ccc", "tta_eval"), "the registry pattern stands alone", allowed=("ccc.registry",)),
    Rule(
        "ccc.corruptions",
        ("ccc",),
        "corruptions are pure pixel functions, the lowest stage (only the registry pattern below them)",
        allowed=("ccc.corruptions", "ccc.registry"),
    ),
    Rule(
        "ccc.stream",
        (
            "ccc.render",
            "ccc.shards",
            "ccc.generate",
            "ccc.load",
            "ccc.check_run",
            "ccc.calibration",
            "ccc.demo",
            "ccc.execution",
            "ccc.models",
        ),
        "the plan stage describes samples without pixels or IO; it is given a table, it does not read one",
    ),
    Rule(
        "ccc.render",
        (
            "ccc.stream.plan",
            "ccc.stream.sources",
            "ccc.calibration",
            "ccc.shards",
            "ccc.generate",
            "ccc.load",
            "ccc.check_run",
            "ccc.demo",
            "ccc.execution",
            "ccc.models",
        ),
        "rendering turns a SampleSpec into pixels; it never reads the calibration table",
    ),
    *(
        Rule(importer, ("ccc.render_torch",), "torch is optional for the CPU path: it never imports the torch backend")
        for importer in ("ccc.corruptions", "ccc.render", "ccc.stream", "ccc.shards")
    ),
    Rule(
        "ccc.render_torch",
        ("ccc",),
        "the torch backend renders SampleSpecs with the corruptions' own parameter tables, the registry pattern and "
        "the CPU path's render settings (its precisions), nothing else",
        allowed=("ccc.render_torch", "ccc.corruptions", "ccc.stream.spec", "ccc.registry", "ccc.render"),
    ),
    Rule(
        "ccc.shards",
        ("ccc.calibration", "ccc.generate", "ccc.load", "ccc.check_run", "ccc.demo", "ccc.execution", "ccc.models"),
        "shards are IO only",
    ),
    Rule(
        "ccc.shards.record",
        ("ccc.shards.reader", "ccc.shards.writer", "ccc.shards.manifest", "ccc.shards.verify"),
        "the sample schema is the shard format's lowest layer: reader, writer, manifest and verification build on it",
    ),
    Rule(
        "ccc.load",
        ("ccc.generate", "ccc.check_run", "ccc.execution", "ccc.demo"),
        "the loader never imports the generation driver",
    ),
    Rule(
        "ccc.generate",
        ("ccc.load", "ccc.check_run", "ccc.demo", "ccc.calibration"),
        "the driver renders a given plan; it resolves nothing",
    ),
    Rule(
        "ccc.execution",
        (*LIBRARY_OF_CCC, "ccc.calibration", "ccc.demo", "ccc.models"),
        "Ray orchestrates and owns no domain logic",
    ),
    Rule("ccc.models", (*LIBRARY_OF_CCC, "ccc.calibration", "ccc.demo", "ccc.execution"), "model loading stands alone"),
    Rule(
        "ccc.cifar_models",
        ("ccc",),
        "the CIFAR architectures are plain torch modules; ccc.models names and loads them",
        allowed=("ccc.cifar_models",),
    ),
    Rule(
        "ccc.calibration",
        ("ccc.demo", "ccc.generate", "ccc.load", "ccc.shards"),
        "the demo world builds on calibration, never the reverse",
    ),
    Rule(
        "ccc.calibration.table_io",
        ("ccc.calibration.table", "ccc.calibration.presets", "ccc.calibration.published"),
        "the table file format works on plain arrays and JSON values; the table type builds on it, never the reverse",
    ),
    Rule(
        "tta_eval.methods",
        (
            "tta_eval.protocols",
            "tta_eval.experiment",
            "tta_eval.run",
            "tta_eval.sweep",
            "tta_eval.reports",
            "tta_eval.run_folder",
            "tta_eval.cli",
            "tta_eval.metrics",
            "tta_eval.plots",
        ),
        "a method never knows the protocol, the run or its reports",
    ),
    Rule(
        "tta_eval.protocols",
        ("tta_eval.experiment", "tta_eval.run", "tta_eval.sweep", "tta_eval.reports", "tta_eval.cli", "tta_eval.plots"),
        "protocols produce records; runs and reports consume them",
    ),
    Rule(
        "tta_eval.metrics",
        ("tta_eval.methods", "tta_eval.experiment", "tta_eval.run", "tta_eval.sweep", "tta_eval.cli", "tta_eval.plots"),
        "metrics consume records and never touch models",
    ),
    Rule(
        "tta_eval.streams",
        (
            "tta_eval.methods",
            "tta_eval.protocols",
            "tta_eval.experiment",
            "tta_eval.run_folder",
            "tta_eval.checkpoint",
            "tta_eval.records",
            "tta_eval.metrics",
            "tta_eval.reports",
            "tta_eval.plots",
        ),
        "stream sources deliver batches; they know neither methods, protocols nor runs",
    ),
    Rule(
        "tta_eval.plots",
        ("tta_eval.experiment", "tta_eval.run", "tta_eval.sweep", "tta_eval.cli"),
        "plots draw records and metrics (and read a method's colour from its registry entry)",
    ),
)

COMMAND_LINE_MODULES = ("ccc.cli", "tta_eval.cli")


def module_name(path: Path, root: Path) -> str:
    """Dotted module name of a source file under ``root`` (``ccc/stream/plan.py`` → ``ccc.stream.plan``)."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, root: Path) -> Iterator[tuple[int, tuple[str, ...]]]:
    """(line, names) of every import statement in a source file, anywhere in it: the absolute module
    name, and for ``from M import x`` also ``M.x`` (``from ccc import calibration`` binds a module)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, (alias.name,)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield node.lineno, (target, *(f"{target}.{alias.name}" for alias in node.names))


def is_within(module: str, prefix: str) -> bool:
    """Whether ``module`` is ``prefix`` or one of its submodules."""
    return module == prefix or module.startswith(prefix + ".")


def source_files(root: Path = REPOSITORY) -> list[Path]:
    return sorted(path for package in PACKAGES for path in (root / package).rglob("*.py"))


def violations(root: Path, rules: tuple[Rule, ...] = RULES) -> list[str]:
    """Every forbidden import in the packages under ``root``, one line each:
    ``file:line importer imports module (why)``."""
    found = []
    for path in source_files(root):
        importer = module_name(path, root)
        for line, names in imported_modules(path, root):
            where = f"{path.relative_to(root)}:{line} {importer} imports"
            for rule in rules:
                if is_within(importer, rule.importer):
                    hits = [name for name in names if rule.breaks(name)]
                    if hits:
                        found.append(f"{where} {hits[0]} ({rule.why})")
            if not any(is_within(importer, cli) for cli in COMMAND_LINE_MODULES):
                hits = [name for name in names if any(is_within(name, cli) for cli in COMMAND_LINE_MODULES)]
                if hits:
                    found.append(f"{where} {hits[0]} (libraries never import command-line modules)")
    return sorted(set(found))


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module → the modules its import statements name, anywhere in its file (``TYPE_CHECKING`` blocks
    and functions included): for ``from M import x``, ``M.x`` where that is a module, else ``M``."""
    modules = {module_name(path, root): path for path in source_files(root)}
    graph = {}
    for module, path in modules.items():
        targets = set()
        for _, (base, *members) in imported_modules(path, root):
            submodules = [member for member in members if member in modules]
            targets.update(submodules or ([base] if base in modules else []))
        graph[module] = targets
    return graph


def import_circles(root: Path) -> list[list[str]]:
    """Every group of modules under ``root`` that import one another in a circle (each reaches every
    other through imports), sorted; a module importing itself is a group of one."""
    graph = import_graph(root)
    reachable = {}
    for start in graph:
        seen, frontier = set(), [start]
        while frontier:
            for target in graph[frontier.pop()]:
                if target not in seen:
                    seen.add(target)
                    frontier.append(target)
        reachable[start] = seen
    circles = {
        tuple(sorted(other for other in reachable[module] if module in reachable[other]))
        for module in graph
        if module in reachable[module]
    }
    return sorted(list(circle) for circle in circles)


def test_no_forbidden_import() -> None:
    assert violations(REPOSITORY) == []


def test_no_import_circle() -> None:
    assert import_circles(REPOSITORY) == []


def test_the_circle_finder_sees_type_checking_and_function_level_imports(tmp_path: Path) -> None:
    (tmp_path / "ccc" / "stage").mkdir(parents=True)
    (tmp_path / "ccc" / "__init__.py").write_text("")
    (tmp_path / "ccc" / "stage" / "__init__.py").write_text("")
    (tmp_path / "ccc" / "stage" / "low.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ccc.stage.high import High\n"
    )
    (tmp_path / "ccc" / "stage" / "high.py").write_text("from ccc.stage import low\n")
    (tmp_path / "ccc" / "other.py").write_text("def f():\n    import ccc.third\n")
    (tmp_path / "ccc" / "third.py").write_text("from ccc.other import f\n")
    (tmp_path / "tta_eval").mkdir()
    (tmp_path / "tta_eval" / "__init__.py").write_text("")
    assert import_circles(tmp_path) == [["ccc.other", "ccc.third"], ["ccc.stage.high", "ccc.stage.low"]]


def test_the_version_is_pyprojects() -> None:
    """``ccc.__version__`` (ccc/version.py) is the version pip installs."""
    from ccc.version import __version__

    pyproject = (REPOSITORY / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^version = "([^"]+)"$', pyproject, re.MULTILINE).group(1) == __version__


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.importer)
def test_every_rule_names_modules_that_exist(rule: Rule) -> None:
    """A rule about a module that was renamed away would pass silently; this keeps the rules in step."""
    modules = {module_name(path, REPOSITORY) for path in source_files()}
    assert any(is_within(module, rule.importer) for module in modules), rule.importer
    for forbidden in rule.forbidden:
        assert any(is_within(module, forbidden) for module in modules) or forbidden == "tta_eval", forbidden
    for allowed in rule.allowed:
        assert any(is_within(module, allowed) for module in modules), allowed


def test_the_checker_finds_a_forbidden_import_inside_a_function(tmp_path: Path) -> None:
    (tmp_path / "ccc" / "stream").mkdir(parents=True)
    (tmp_path / "ccc" / "__init__.py").write_text("")
    (tmp_path / "ccc" / "stream" / "__init__.py").write_text("")
    (tmp_path / "ccc" / "stream" / "plan.py").write_text(
        "def f():\n    from ..render import render_sample\n    import tta_eval.methods\n"
    )
    (tmp_path / "tta_eval").mkdir()
    (tmp_path / "tta_eval" / "__init__.py").write_text("")
    found = violations(tmp_path)
    assert any("ccc.stream.plan imports ccc.render (" in line for line in found), found
    assert any("ccc.stream.plan imports tta_eval.methods" in line for line in found), found


def test_the_corruptions_may_import_the_registry_pattern_and_nothing_else_of_ccc(tmp_path: Path) -> None:
    (tmp_path / "ccc" / "corruptions").mkdir(parents=True)
    (tmp_path / "ccc" / "__init__.py").write_text("")
    (tmp_path / "ccc" / "registry.py").write_text("")
    (tmp_path / "ccc" / "corruptions" / "__init__.py").write_text("from . import noise\n")
    (tmp_path / "ccc" / "corruptions" / "noise.py").write_text(
        "from ccc.registry import Registry\nfrom ccc.validation import check_choice\n"
    )
    (tmp_path / "tta_eval").mkdir()
    (tmp_path / "tta_eval" / "__init__.py").write_text("")
    found = violations(tmp_path)
    assert len(found) == 1 and "ccc.corruptions.noise imports ccc.validation (" in found[0], found


def printed_by_a_fresh_interpreter(code: str) -> str:
    """What ``python -c code`` prints (stripped), run from the repository in a new process: which modules an
    import loads, unaffected by what this test process has imported."""
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment, check=True, cwd=REPOSITORY
    )
    return result.stdout.strip()


def test_importing_the_loader_loads_neither_the_driver_nor_the_demo_world() -> None:
    code = (
        "import sys, ccc.load; print(sorted(name for name in sys.modules "
        "if name in ('ccc.generate', 'ccc.check_run', 'ccc.demo', 'tta_eval')))"
    )
    assert printed_by_a_fresh_interpreter(code) == "[]"


def test_the_calibration_rendering_engine_does_not_load_torch() -> None:
    """Rendering calibration images runs in CPU workers that need no model: they never pay torch's import."""
    code = "import sys, ccc.calibration.compute.engine; print('torch' in sys.modules)"
    assert printed_by_a_fresh_interpreter(code) == "False"


def test_an_evaluation_loads_torchvision_only_when_it_uses_it() -> None:
    """torchvision's import costs seconds (its ops import torch._dynamo): ``tta-eval methods``, a source/BN run
    and the model loader for factory models never pay it; augmentations and torchvision models import it
    when used."""
    code = (
        "import sys, tta_eval.cli, tta_eval.run, tta_eval.methods, tta_eval.synthetic, ccc.models; "
        "print('torchvision' in sys.modules)"
    )
    assert printed_by_a_fresh_interpreter(code) == "False"
