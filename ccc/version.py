"""The library's version, ``ccc.__version__``: a module of its own so that modules below the package's
``__init__`` (the calibration table records it) read it without importing the package's lazy exports."""

from __future__ import annotations

__version__ = "0.1.0"
"""Equal to ``version`` in pyproject.toml (tests/test_import_graph.py checks it)."""
