"""Fixtures of the tta_eval tests."""

from __future__ import annotations

import pytest
from torch import nn

from tests.tta_eval.tta_helpers import make_tiny_cnn


@pytest.fixture
def tiny_cnn() -> nn.Module:
    return make_tiny_cnn()
