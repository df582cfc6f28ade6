"""entropy_bonus's coefficient schedules (constant, linear, cosine, step): the coefficient against a
hand-written float64 reference at every step, the loss against a static bonus at the scheduled
coefficient, the constant schedule bit-identical to the static bonus as it was, bad parameters
named. Resuming a lab run under a schedule: tests/trainer/test_entropy_schedule_resume.py."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

import entflow as ef
from entflow.errors import ParameterError
from entflow.methods.base import NONNEG, LossContext, Method, param
from entflow.methods.needs import needs_of
from support.methods_ref import make_batch
from support.throwaway_methods import registered

C, C_END, STEPS = 0.02, 0.005, 7


def reference(kind: str, t: int, c: float = C, c_end: float = C_END, steps: int = STEPS) -> float:
    """c(t) by the formulas of docs/methods.md, in float64, written out for each kind."""
    s = min(t, steps)
    if kind == "constant":
        return c
    if kind == "linear":
        return c + (c_end - c) * s / steps if t < steps else c_end
    if kind == "cosine":
        return c_end + (c - c_end) * (1.0 + math.cos(math.pi * s / steps)) / 2.0 if t < steps else c_end
    assert kind == "step"
    return c if t < steps else c_end


def scheduled(kind: str, **kw) -> Method:
    if kind == "constant":
        return ef.get_method("entropy_bonus", c=kw.get("c", C))
    return ef.get_method(
        "entropy_bonus", c=kw.get("c", C), schedule=kind, c_end=kw.get("c_end", C_END), steps=kw.get("steps", STEPS)
    )


def at_step(b: ef.TokenBatch, t: int) -> ef.TokenBatch:
    """``b`` at the 0-based training step ``t`` (fresh leaves, so gradients do not accumulate)."""
    return ef.TokenBatch(
        b.logp.detach().clone().requires_grad_(True),
        b.old_logp,
        b.advantages,
        b.mask,
        entropy=b.entropy.detach().clone().requires_grad_(True),
        step=t,
    )


KINDS = ("constant", "linear", "cosine", "step")


@pytest.mark.parametrize("kind", KINDS)
def test_coefficient_equals_the_float64_reference_at_every_step(kind):
    m = scheduled(kind)
    for t in range(STEPS + 4):
        assert m.coef_at(t) == pytest.approx(reference(kind, t), rel=1e-15, abs=0), (kind, t)
    # the ends exactly: c at t = 0, c_end from t = steps on
    assert m.coef_at(0) == C
    if kind != "constant":
        assert m.coef_at(STEPS) == C_END and m.coef_at(STEPS + 100) == C_END
        assert m.coef_at(STEPS - 1) != C_END  # and not one step early


def test_hand_values_of_each_schedule():
    """A few values worked out by hand (c = 0.4 → 0.0 over 4 steps), independent of the formulas."""
    kw = dict(c=0.4, c_end=0.0, steps=4)
    linear = [scheduled("linear", **kw).coef_at(t) for t in range(6)]
    cosine = [scheduled("cosine", **kw).coef_at(t) for t in range(6)]
    step = [scheduled("step", **kw).coef_at(t) for t in range(6)]
    assert linear == pytest.approx([0.4, 0.3, 0.2, 0.1, 0.0, 0.0], abs=1e-15)
    h = 0.2 * (1 + math.sqrt(0.5))  # 0.4·(1 + cos(π/4))/2
    assert cosine == pytest.approx([0.4, h, 0.2, 0.4 - h, 0.0, 0.0], abs=1e-15)
    assert step == [0.4, 0.4, 0.4, 0.4, 0.0, 0.0]
    # a warm-up (c_end > c) runs the same formulas upwards
    up = [scheduled("linear", c=0.0, c_end=0.3, steps=3).coef_at(t) for t in range(5)]
    assert up == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.3], abs=1e-15)
    # c_end = 0 as a command line or JSON gives it (an int) is the float 0.0, like c
    end = scheduled("step", c=1, c_end=0, steps=2)
    assert type(end.c_end) is float and type(end.coef_at(5)) is float and type(end.coef_at(0)) is float


@pytest.mark.parametrize("kind", KINDS)
def test_loss_equals_a_static_bonus_at_the_scheduled_coefficient(gen, kind):
    b = make_batch(gen)
    n = b.mask.sum()
    mean_h = float((b.entropy.detach() * b.mask).sum() / n)
    m = scheduled(kind)
    for t in range(STEPS + 2):
        x, y = at_step(b, t), at_step(b, t)
        out = ef.policy_loss(x, m)
        static = ef.policy_loss(y, ef.get_method("entropy_bonus", c=reference(kind, t)))
        gx = torch.autograd.grad(out.loss, [x.logp, x.entropy])
        gy = torch.autograd.grad(static.loss, [y.logp, y.entropy])
        assert torch.equal(out.loss, static.loss), (kind, t)
        assert all(torch.equal(a, b_) for a, b_ in zip(gx, gy, strict=True)), (kind, t)
        assert out.metrics["entropy_bonus/coef"] == pytest.approx(reference(kind, t), rel=1e-15, abs=0)
        assert out.metrics["entropy_bonus/loss"] == pytest.approx(-reference(kind, t) * mean_h, rel=1e-12)
        # ∂loss/∂H_t = −c(t)·m_t/Σm (token-mean), the term's own gradient
        torch.testing.assert_close(gx[1], -reference(kind, t) * b.mask / n, rtol=1e-12, atol=1e-16)


@dataclass(repr=False)
class StaticBonusBefore(Method):
    """``entropy_bonus`` as it was before schedules: ``loss −= c · agg(H)``, a copy of its code."""

    name = "test_static_entropy_bonus"
    needs = ("entropy",)

    c: float = param(0.001, NONNEG, "bonus coefficient c")

    def loss_terms(self, ctx: LossContext, agg: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        H = ctx.batch.require("entropy", "entropy_bonus")
        mean_H = agg(H)
        ctx.metrics["entropy_bonus/coef"] = self.c
        ctx.metrics["entropy_bonus/entropy"] = mean_H.detach()
        return {"entropy_bonus/loss": -self.c * mean_H}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_constant_schedule_is_bit_identical_to_the_static_bonus(gen, dtype, agg):
    b = make_batch(gen)
    b = ef.TokenBatch(*(v.detach().to(dtype) for v in (b.logp, b.old_logp, b.advantages, b.mask)),
                      entropy=b.entropy.detach().to(dtype))  # fmt: skip
    with registered(StaticBonusBefore):
        for method in (
            ef.get_method("entropy_bonus", c=0.013),
            ef.get_method("entropy_bonus", c=0.013, schedule="constant"),
            ef.get_method("clip_higher+entropy_bonus", c=0.013),
        ):
            old = "clip_higher+test_static_entropy_bonus" if "+" in method.name else "test_static_entropy_bonus"
            for t in (0, 5, 10_000):
                x, y = at_step(b, t), at_step(b, t)
                out = ef.policy_loss(x, method, ef.LossSpec(agg=agg))
                before = ef.policy_loss(y, ef.get_method(old, c=0.013), ef.LossSpec(agg=agg))
                assert torch.equal(out.loss, before.loss)
                ga = torch.autograd.grad(out.loss, [x.logp, x.entropy])
                gb = torch.autograd.grad(before.loss, [y.logp, y.entropy])
                assert all(torch.equal(p, q) for p, q in zip(ga, gb, strict=True))
                assert out.metrics == before.metrics
    assert not needs_of(ef.get_method("entropy_bonus")).reads_step


@pytest.mark.parametrize("kind", ["linear", "cosine", "step"])
def test_a_schedule_reads_the_step_and_holds_no_state(kind):
    m = scheduled(kind)
    assert needs_of(m).reads_step and m.reads_step
    assert needs_of(m).controllers == () and needs_of(m).stateful == () and m.state_dict() == {}
    composed = ef.get_method("clip_higher+entropy_bonus+kl_ref", schedule=kind, c_end=0.0, steps=3)
    assert needs_of(composed).reads_step


@pytest.mark.parametrize(
    "params,field,seen",
    [
        ({"schedule": "exponential", "c_end": 0.0, "steps": 3}, "schedule", "'exponential'"),
        ({"schedule": "linear", "c_end": -0.1, "steps": 3}, "c_end", "-0.1"),
        ({"schedule": "linear", "c_end": float("nan"), "steps": 3}, "c_end", "nan"),
        ({"schedule": "cosine", "c_end": 0.0, "steps": 0}, "steps", "0"),
        ({"schedule": "cosine", "c_end": 0.0, "steps": 2.5}, "steps", "2.5"),
        ({"schedule": "step", "c_end": 0.0, "steps": True}, "steps", "True"),
        ({"schedule": "linear", "steps": 3}, "c_end", "schedule='linear'"),
        ({"schedule": "cosine", "c_end": 0.0}, "steps", "schedule='cosine'"),
        ({"c_end": 0.1}, "c_end", "0.1"),  # constant would silently ignore it
        ({"steps": 10}, "steps", "10"),
        ({"c": -1.0, "schedule": "linear", "c_end": 0.0, "steps": 3}, "c", "-1.0"),
    ],
)
def test_bad_schedule_parameters_name_the_field_and_the_value(params, field, seen):
    with pytest.raises(ParameterError) as e:
        ef.get_method("entropy_bonus", **params)
    assert e.value.param == field and e.value.owner == "entropy_bonus"
    assert f"'{field}'" in str(e.value) and seen in str(e.value)
