"""The Triton kernel of token_stats (values and gradients vs float64), run from
``tests/support/triton_kernel_checks.py`` in a fresh process: on CPU under Triton's interpreter, and on
CUDA when a GPU is present. Tolerances (issue 12): 1e-4 for float32 input, 2e-2 for bf16."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

CHECKS = Path(__file__).parents[1] / "support" / "triton_kernel_checks.py"


def _run(interpret: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    cmd = [sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-p", "no:cacheprovider", "-rf", str(CHECKS)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=CHECKS.parent.parent, timeout=300)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    summary = res.stdout.strip().splitlines()[-1]
    assert "11 passed" in summary and "skipped" not in summary, res.stdout[-2000:]  # every check ran


def test_triton_kernel_on_cpu_interpreter():
    _run(interpret=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_triton_kernel_on_cuda():
    _run(interpret=False)
