"""The one registry pattern (ccc.registry): names, order, errors, package import."""

import dataclasses
import sys

import pytest

from ccc.registry import Registry, import_submodules


@dataclasses.dataclass(frozen=True)
class _Entry:
    name: str
    order: int = 0


def test_an_unordered_registry_lists_by_name_and_filters_by_pattern():
    registry = Registry("thing")
    for name in ("tent", "eta", "eata"):
        registry.register(_Entry(name))
    assert registry.names() == ["eata", "eta", "tent"]
    assert registry.names("e*") == ["eata", "eta"]
    assert "tent" in registry and len(registry) == 3


def test_an_ordered_registry_lists_by_order_whatever_the_registration_order():
    registry = Registry("protocol", ordered=True)
    registry.register(_Entry("discrete", 30))
    registry.register(_Entry("offline", 10))
    registry.register(_Entry("continuous", 20))
    assert registry.names() == ["offline", "continuous", "discrete"]
    assert [entry.name for entry in registry] == registry.names()


def test_a_taken_name_or_order_and_an_unknown_name_are_one_line_errors():
    registry = Registry("protocol", ordered=True)
    registry.register(_Entry("offline", 10))
    with pytest.raises(ValueError, match="protocol 'offline' is already registered"):
        registry.register(_Entry("offline", 20))
    with pytest.raises(ValueError, match="has the order 10 of 'offline'"):
        registry.register(_Entry("other", 10))
    with pytest.raises(ValueError, match="needs a number 'order'"):
        registry.register(_Entry("other", None))
    with pytest.raises(ValueError, match="unknown protocol 'nope'; available: offline$"):
        registry.get("nope")


def test_import_submodules_imports_every_public_module_of_a_package(tmp_path, monkeypatch):
    package = tmp_path / "toy_plugins"
    package.mkdir()
    (package / "__init__.py").write_text("LOADED = []\n")
    (package / "alpha.py").write_text("from toy_plugins import LOADED\nLOADED.append('alpha')\n")
    (package / "_helper.py").write_text("from toy_plugins import LOADED\nLOADED.append('_helper')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import toy_plugins

    try:
        import_submodules("toy_plugins", toy_plugins.__path__)
        assert toy_plugins.LOADED == ["alpha"]
    finally:
        for name in [name for name in sys.modules if name.startswith("toy_plugins")]:
            del sys.modules[name]


def test_a_copy_takes_new_entries_without_changing_the_original():
    registry = Registry("method")
    registry.register(_Entry("tent"))
    scratch = registry.copy()
    scratch.register(_Entry("toy"))
    assert scratch.names() == ["tent", "toy"] and registry.names() == ["tent"]
