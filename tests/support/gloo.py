"""Multi-process test scaffolding: a free loopback port and a gloo spawn that returns rank 0's report."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

# (method, params, agg): the six of acceptance 1, which both distributed tests run first
# (tests/core/test_distributed.py, and inside verl tests/integrations/test_verl_distributed.py)
ACCEPTANCE_CASES = [
    ("grpo", {}, "token-mean"),
    ("steer", {}, "token-mean"),
    ("opefo", {}, "token-mean"),
    ("clip_cov", {"ratio": 0.1, "cov_low": -10.0, "cov_high": 10.0, "seed": 5}, "token-mean"),
    ("kl_cov", {"ratio": 0.1}, "token-mean"),
    ("forking_tokens", {}, "token-mean"),
]


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (for ``init_method="tcp://127.0.0.1:PORT"`` or ``--master_port``)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ranks(worker: Callable[[int, int, str], None], world: int, out_path: Path) -> dict:
    """Run ``worker(rank, port, out_path)`` on ``world`` processes; return the JSON rank 0 wrote
    (``report_from_rank0``). Skips the test where torch.distributed is not built in."""
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    mp.spawn(worker, args=(free_port(), str(out_path)), nprocs=world, join=True)
    return json.loads(Path(out_path).read_text())


def report_from_rank0(rank: int, report: dict, out_path: str) -> None:
    """Rank 0 writes its ``report`` as JSON to ``out_path`` (what ``spawn_ranks`` returns)."""
    if rank == 0:
        Path(out_path).write_text(json.dumps(report))
