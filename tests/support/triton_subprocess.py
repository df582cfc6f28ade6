"""Run a Triton check file in a fresh process (Triton reads ``TRITON_INTERPRET`` when first imported):
on the CPU under Triton's interpreter, or compiled on CUDA.

Under the interpreter a probe runs first: Triton ≤ 3.6's interpreter turns a scalar kernel argument
into a one-element NumPy array and indexes it with ``int()``, which NumPy ≥ 2.4 refuses
(``TypeError: only 0-dimensional arrays can be converted to Python scalars``), so any kernel that
loops up to a runtime length fails there before it computes anything. That combination skips with
the versions in the reason; Triton 3.9 runs the checks. The compiled kernels are not affected
(checked on CUDA with Triton 3.6.0: docs/benchmarks.md, "On a GPU").
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import numpy as np, torch, triton, triton.language as tl

@triton.jit
def copy(X, Y, N, BLOCK: tl.constexpr):
    for start in range(0, N, BLOCK):  # a loop bounded by a scalar argument
        offs = start + tl.arange(0, BLOCK)
        tl.store(Y + offs, tl.load(X + offs, mask=offs < N), mask=offs < N)

x, y = torch.arange(5.0), torch.zeros(5)
try:
    copy[(1,)](x, y, 5, BLOCK=4)
except Exception as e:
    if "0-dimensional" not in str(e):
        raise
    print(f"Triton {triton.__version__}'s interpreter cannot loop up to a scalar argument with NumPy "
          f"{np.__version__} ({type(e).__name__}: int() of a one-element array); Triton 3.9 can")
else:
    assert torch.equal(x, y), (x, y)
"""


def _env(interpret: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return env


def interpreter_skip_reason() -> str | None:
    """Why Triton's interpreter cannot run the checks here, or None when it can (a fresh process)."""
    res = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=_env(True), timeout=120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    return res.stdout.strip() or None


def run_check_file(checks: Path, expected: int, interpret: bool) -> None:
    """Run ``checks`` with pytest in a fresh process; all ``expected`` checks must run and pass."""
    pytest.importorskip("triton")
    if interpret and (reason := interpreter_skip_reason()):
        pytest.skip(reason)
    cmd = [sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-p", "no:cacheprovider", "-rf", str(checks)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=_env(interpret), cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    summary = res.stdout.strip().splitlines()[-1]
    assert f"{expected} passed" in summary and "skipped" not in summary, res.stdout[-2000:]  # every check ran
