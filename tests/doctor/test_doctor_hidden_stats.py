"""Fault injection into the doctor's ``hidden_stats`` check (``token_stats_from_hidden`` vs float64
autograd through explicit logits): it passes on entflow's function and reports FAILED when its
subject is wrong by a little — an entropy off by 0.1 %, Σπ² off by 1e-4, the head's weight
gradient scaled by 1.01, the bias gradient lost, the bias ignored."""

from __future__ import annotations

import pytest
import torch

from entflow.core.hidden_stats import token_stats_from_hidden
from entflow.doctor import CHECKS, hidden_stats, run_checks
from support.doctor_faults import passed_on_cpu
from support.scale_grad import ScaleGrad


def _changed(field: str, change):
    def fn(*args, **kwargs):
        st = token_stats_from_hidden(*args, **kwargs)
        return st._replace(**{field: change(getattr(st, field))})

    return fn


def _weight_grad_scaled(factor: float):
    def fn(hidden, weight, *args, **kwargs):
        return token_stats_from_hidden(hidden, ScaleGrad.apply(weight, factor), *args, **kwargs)

    return fn


def _bias_detached(hidden, weight, ids, bias, *args, **kwargs):
    return token_stats_from_hidden(hidden, weight, ids, bias.detach(), *args, **kwargs)


def _bias_ignored(hidden, weight, ids, bias, *args, **kwargs):
    return token_stats_from_hidden(hidden, weight, ids, bias * 0.0, *args, **kwargs)


def test_hidden_stats_passes_on_cpu_and_says_why_triton_is_skipped():
    results = hidden_stats.check_hidden_stats("cpu", quick=True)
    ran = passed_on_cpu(results, "hidden_stats", hidden_stats.FORWARD_TOL[torch.float32])
    assert [r.name for r in ran] == ["hidden_stats[cpu,float32,tiled]", "hidden_stats[cpu,bfloat16,tiled]"]


@pytest.mark.parametrize(
    "fault",
    [
        _changed("entropy", lambda h: h * 1.001),
        _changed("sum_p2", lambda s: s + 1e-4),
        _weight_grad_scaled(1.01),
        _bias_detached,
        _bias_ignored,
    ],
    ids=["entropy*1.001", "sum_p2+1e-4", "weight-gradient*1.01", "bias-gradient-lost", "bias-ignored"],
)
def test_hidden_stats_check_fails_on_an_injected_fault(fault):
    results = hidden_stats.check_hidden_stats("cpu", quick=True, fn=fault)
    ran = [r for r in results if r.status != "SKIP"]
    assert len(ran) == 2 and all(r.status == "FAIL" and not r.ok for r in ran), [r.detail for r in ran]


def test_hidden_stats_is_a_registered_doctor_check():
    assert "hidden_stats" in CHECKS
    results = run_checks(device="cpu", quick=True, only=["hidden_stats"])
    assert {r.name for r in results if r.status == "PASS"} == {
        "hidden_stats[cpu,float32,tiled]",
        "hidden_stats[cpu,bfloat16,tiled]",
    }
