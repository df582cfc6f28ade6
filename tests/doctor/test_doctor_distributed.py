"""The doctor's data-parallel check passes on two gloo ranks and fails when the all_reduce of the
batch statistics is broken (each rank keeps its own partial sums and maxima)."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from entflow.doctor.distributed import CASES, TOL, check_distributed
from support.doctor_faults import prepare_with_local_all_reduce

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")


def test_two_gloo_ranks_pass_and_a_broken_all_reduce_fails_every_method():
    good = check_distributed("cpu")
    assert [r.name for r in good] == [f"distributed[gloo,2 ranks]:{name}" for name, _ in CASES]
    assert all(r.ok and r.status == "PASS" and r.error <= TOL for r in good), [r.detail for r in good]

    broken = check_distributed("cpu", prepare=prepare_with_local_all_reduce)
    assert [r.status for r in broken] == ["FAIL"] * len(CASES), [r.detail for r in broken]
    assert all(r.error > 1e3 * TOL for r in broken)  # far outside the tolerance, not borderline
