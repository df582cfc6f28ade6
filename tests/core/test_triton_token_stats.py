"""The Triton kernel of token_stats (values and gradients vs float64), run from
``tests/support/triton_kernel_checks.py`` in a fresh process: on CPU under Triton's interpreter, and on
CUDA when a GPU is present. Tolerances: 1e-4 for float32 input, 2e-2 for bf16."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from support.triton_subprocess import run_check_file

pytest.importorskip("triton")

CHECKS = Path(__file__).parents[1] / "support" / "triton_kernel_checks.py"


def _run(interpret: bool) -> None:
    run_check_file(CHECKS, 11, interpret)


def test_triton_kernel_on_cpu_interpreter():
    _run(interpret=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_triton_kernel_on_cuda():
    _run(interpret=False)
