"""Fault injection into the doctor's numeric checks (token_stats and loss gradients): each check
passes on entflow's functions and reports FAILED when its subject is wrong by a little — an
entropy off by 0.1 % or by 1e-3 nats, a gradient scaled by 1.01, a loss whose clip moved."""

from __future__ import annotations

import pytest
import torch

import entflow as ef
from entflow.doctor import gradients, token_stats
from entflow.doctor.result import CheckResult, max_relative_to_peak, max_scaled_error
from support.doctor_faults import passed_on_cpu
from support.scale_grad import ScaleGrad


def _with_entropy(change):
    def fn(*args, **kwargs):
        st = ef.token_stats(*args, **kwargs)
        return st._replace(entropy=change(st.entropy))

    return fn


def _grad_scaled(factor: float):
    """token_stats whose logits receive ``factor`` × the true gradient (values unchanged)."""

    def fn(logits, *args, **kwargs):
        return ef.token_stats(ScaleGrad.apply(logits, factor), *args, **kwargs)

    return fn


def _statuses(results: list[CheckResult]) -> dict[str, str]:
    return {r.name: r.status for r in results}


def test_token_stats_passes_on_cpu_and_says_why_triton_is_skipped():
    results = token_stats.check_token_stats("cpu", quick=True)
    assert len(passed_on_cpu(results, "token_stats", token_stats.FORWARD_TOL[torch.float32])) == 4


@pytest.mark.parametrize(
    "fault",
    [
        _with_entropy(lambda h: h * 1.001),
        _with_entropy(lambda h: h + 1e-3),
        _grad_scaled(1.01),
    ],
    ids=["entropy*1.001", "entropy+1e-3", "gradient*1.01"],
)
def test_token_stats_check_fails_on_an_injected_fault(fault):
    results = token_stats.check_token_stats("cpu", quick=True, fn=fault)
    ran = [r for r in results if r.status != "SKIP"]
    assert len(ran) == 4 and all(r.status == "FAIL" and not r.ok for r in ran), [r.detail for r in ran]


def test_a_check_that_raises_is_reported_failed_not_passed():
    def broken(*args, **kwargs):
        raise RuntimeError("kernel launch failed")

    results = token_stats.check_token_stats("cpu", quick=True, fn=broken)
    ran = [r for r in results if r.status != "SKIP"]
    assert all(r.status == "FAIL" and "RuntimeError: kernel launch failed" in r.detail for r in ran)


def test_the_reference_is_independent_float64():
    """The float64 reference equals hand-computed softmax statistics, and its gradient equals
    central finite differences (the reference itself can be trusted)."""
    logits, ids, _ = token_stats.make_logits((1, 2, 5))
    ref = token_stats.reference_token_stats(logits, ids, 0.8)
    z = logits[0, 1] / 0.8
    p = torch.exp(z - z.max()) / torch.exp(z - z.max()).sum()
    assert float(ref.entropy[0, 1]) == pytest.approx(float(-(p * p.log()).sum()), rel=1e-12)
    assert float(ref.sum_p2[0, 1]) == pytest.approx(float((p * p).sum()), rel=1e-12)
    assert float(ref.logp[0, 1]) == pytest.approx(float(p[ids[0, 1]].log()), rel=1e-12)
    x = logits.clone().requires_grad_()
    token_stats.reference_token_stats(x, ids, 0.8).entropy.sum().backward()
    h, i = 1e-6, (0, 1, 3)
    plus, minus = logits.clone(), logits.clone()
    plus[i] += h
    minus[i] -= h
    entropy = lambda x: token_stats.reference_token_stats(x, ids, 0.8).entropy.sum()  # noqa: E731
    fd = (entropy(plus) - entropy(minus)) / (2 * h)
    assert float(x.grad[i]) == pytest.approx(float(fd), rel=1e-6)


def test_error_measures():
    ref = torch.tensor([0.5, -4.0, 100.0], dtype=torch.float64)
    assert max_scaled_error(ref + torch.tensor([1e-3, 0.0, 0.0]), ref) == pytest.approx(1e-3)  # |ref| < 1: absolute
    assert max_scaled_error(ref + torch.tensor([0.0, 0.0, 1.0]), ref) == pytest.approx(1e-2)  # relative
    assert max_scaled_error(torch.tensor([float("nan"), 0.0, 0.0]), ref) == float("inf")
    assert max_relative_to_peak(ref * 1.01, ref) == pytest.approx(1e-2)
    assert max_relative_to_peak(torch.full((3,), float("inf")), ref) == float("inf")


# --------------------------------------------------------------------------------------------
# loss gradients
# --------------------------------------------------------------------------------------------

NAMES = [name for name, _ in gradients.METHODS]


def test_loss_gradients_pass_for_every_method():
    results = gradients.check_loss_gradients("cpu", quick=True)
    assert _statuses(results) == {f"loss_gradient[cpu,{n}]": "PASS" for n in NAMES}, [r.detail for r in results]
    assert all(r.error < gradients.GRAD_TOL / 10 for r in results)  # a margin, not a borderline pass


def test_loss_gradients_fail_when_the_gradient_is_scaled_by_1_01():
    def scaled(logits, inputs, method):
        return gradients.entflow_loss(ScaleGrad.apply(logits, 1.01), inputs, method)

    results = gradients.check_loss_gradients("cpu", quick=True, loss_fn=scaled)
    assert _statuses(results) == {f"loss_gradient[cpu,{n}]": "FAIL" for n in NAMES}
    assert all(r.measurements["gradient_error"] == pytest.approx(0.01, rel=0.05) for r in results)


def test_loss_gradients_fail_when_the_method_is_wrong():
    """A loss that ignores the method (plain GRPO for every method) passes for grpo only: the
    reference really contains each method's own terms."""

    def always_grpo(logits, inputs, method):
        return gradients.entflow_loss(logits, inputs, ef.get_method("grpo"))

    results = gradients.check_loss_gradients("cpu", quick=True, loss_fn=always_grpo)
    assert _statuses(results) == {f"loss_gradient[cpu,{n}]": "PASS" if n == "grpo" else "FAIL" for n in NAMES}


def test_loss_gradients_fail_when_the_clip_moves():
    def wider_clip(logits, inputs, method):
        st = ef.token_stats(logits, inputs.ids, token_stats.TEMPERATURE)
        batch = ef.TokenBatch(st.logp, inputs.old_logp, inputs.advantages, inputs.mask)
        return ef.policy_loss(batch, method, ef.LossSpec(0.2, 0.21), metrics="none").loss

    results = gradients.check_loss_gradients("cpu", quick=True, loss_fn=wider_clip)
    assert results[0].name == "loss_gradient[cpu,grpo]" and results[0].status == "FAIL"


def test_gradient_reference_for_grpo_is_the_written_out_formula():
    """The grpo reference (written out in the doctor) equals ef.policy_loss in float64."""
    logits, inputs = gradients.make_inputs(8, 6, 11)
    ref = gradients.reference_loss(logits, inputs, ef.get_method("grpo"))
    st = token_stats.reference_token_stats(logits, inputs.ids, token_stats.TEMPERATURE)
    out = ef.policy_loss(ef.TokenBatch(st.logp, inputs.old_logp, inputs.advantages, inputs.mask), "grpo")
    assert float(ref) == pytest.approx(float(out.loss), rel=1e-12)
    r = torch.exp(st.logp - inputs.old_logp)
    assert bool(((r > 1.2) | (r < 0.8)).any())  # the clip is active in the checked batch


@pytest.mark.parametrize("installed", [True, False])
def test_the_triton_variant_runs_only_with_triton_and_cuda(monkeypatch, installed):
    from entflow.core import triton_token_stats as tts

    monkeypatch.setattr(tts, "available", lambda: installed)
    on_cuda = dict(token_stats._variants(torch.device("cuda")))
    on_cpu = dict(token_stats._variants(torch.device("cpu")))
    assert on_cuda["triton"] == ({"backend": "triton"} if installed else "triton not installed")
    no_cuda = "the Triton kernel needs a CUDA device (this is cpu)"
    assert on_cpu["triton"] == (no_cuda if installed else "triton not installed")
    results = token_stats.check_token_stats("cpu", quick=True)
    assert {r.skipped_reason for r in results if r.status == "SKIP"} == {on_cpu["triton"]}
