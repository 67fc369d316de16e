"""Fixtures of the tta_eval tests."""

from __future__ import annotations

import pytest
from torch import nn

from tests.tta_eval.tta_helpers import make_tiny_cnn


@pytest.fixture
def tiny_cnn() -> nn.Module:
    return make_tiny_cnn()


@pytest.fixture
def scratch_stream_sources(monkeypatch: pytest.MonkeyPatch):
    """The stream-source registry as a copy for one test: the sources it registers are gone after it,
    so no later test (in this process or, under pytest-xdist, whatever it runs next) sees them."""
    import tta_eval.streams.registry

    monkeypatch.setattr(tta_eval.streams.registry, "REGISTRY", tta_eval.streams.registry.REGISTRY.copy())
    return tta_eval.streams.registry.REGISTRY
