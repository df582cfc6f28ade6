"""The peer libraries whose own functions the field methods are compared with: SkyRL 0.4.0 and
Trinity-RFT 0.6.0, each installed with ``--no-deps`` (their full dependency sets pull vLLM, Ray
clusters and model code that these functions never touch).

Install (the ``peers`` requirements of the README's test command)::

    pip install --no-deps --ignore-requires-python -r requirements-peers.txt

A test asks for a peer with :func:`skyrl_ppo_utils` or :func:`trinity`, which skip the test when
the peer (or the pinned version) is absent, so the suite runs without them; the float64 hand
references in the same test files run either way.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import types
import warnings
from typing import Any

import pytest

SKYRL_VERSION = "0.4.0"
TRINITY_VERSION = "0.6.0"
INSTALL = "pip install --no-deps --ignore-requires-python -r requirements-peers.txt"


def _require(dist: str, version: str) -> None:
    try:
        found = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{dist} {version} is not installed ({INSTALL})")
    if found != version:
        pytest.skip(f"{dist} {found} is installed; these comparisons pin {version}")


def skyrl_ppo_utils() -> Any:
    """``skyrl.backends.skyrl_train.utils.ppo_utils`` of SkyRL 0.4.0, imported without running
    ``skyrl/backends/__init__`` (which imports the model backends): the three parent packages are
    registered as bare namespace modules over their real folders first."""
    _require("skyrl", SKYRL_VERSION)
    skyrl = importlib.import_module("skyrl")
    root = skyrl.__path__[0]
    for name, folder in (
        ("skyrl.backends", "backends"),
        ("skyrl.backends.skyrl_train", "backends/skyrl_train"),
        ("skyrl.backends.skyrl_train.utils", "backends/skyrl_train/utils"),
    ):
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__path__ = [f"{root}/{folder}"]
            sys.modules[name] = module
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module("skyrl.backends.skyrl_train.utils.ppo_utils")


def skyrl_algorithm_config(**overrides: Any) -> Any:
    """SkyRL's ``AlgorithmConfig`` with ``overrides``."""
    _require("skyrl", SKYRL_VERSION)
    from skyrl.train.config import AlgorithmConfig

    cfg = AlgorithmConfig()
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


def trinity(module: str) -> Any:
    """``trinity.<module>`` of Trinity-RFT 0.6.0 (e.g. ``"algorithm.policy_loss_fn.topr_policy_loss"``)."""
    _require("trinity-rft", TRINITY_VERSION)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module(f"trinity.{module}")
