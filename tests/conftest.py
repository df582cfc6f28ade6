"""Small shared fixtures for the tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def gen() -> torch.Generator:
    """A seeded CPU generator (each test gets a fresh one)."""
    return torch.Generator().manual_seed(1234)
