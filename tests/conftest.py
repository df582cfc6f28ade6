"""Small shared fixtures for the tests."""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):  # under pytest-xdist: one torch thread per worker
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)


@pytest.fixture
def gen() -> torch.Generator:
    """A seeded CPU generator (each test gets a fresh one)."""
    return torch.Generator().manual_seed(1234)


@pytest.fixture(scope="session")
def micro_policy(tmp_path_factory) -> str:
    """The micro lab policy of ``support.lab_micro`` (warm-started once per session)."""
    from support.lab_micro import pretrain_micro_policy

    return pretrain_micro_policy(tmp_path_factory.mktemp("micro-cache"))


@pytest.fixture
def parity(monkeypatch) -> None:
    """The reward ``parity`` (``support.real_tiny.parity_reward``) registered for one test."""
    from entflow.hf.rewards import REWARDS
    from support.real_tiny import parity_reward

    monkeypatch.setitem(REWARDS, "parity", parity_reward)


@pytest.fixture(scope="module")
def train_server(tmp_path_factory):
    """A server of ``entflow train`` processes (``support.kill_resume.TrainServer``), one per test module."""
    from support.kill_resume import TrainServer

    server = TrainServer(tmp_path_factory.mktemp("train-logs"))
    yield server
    server.close()
