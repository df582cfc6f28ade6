"""The fixture the TRL tests share."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(model_dir, tokenizer, dataset): the shared tiny policy (tests/support/trl_tiny.py), saved once
    per test module."""
    from support.trl_tiny import save_tiny_llama

    return save_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))
