"""entropy_bonus, adaptive_entropy, kl_ref: loss terms and gradients against hand-written
formulas (float64, rtol 1e-10), the adaptive controller step by step, state round trips."""

from __future__ import annotations

import copy

import pytest
import torch

import entflow as ef
from entflow.errors import MissingInputError
from support.methods_ref import loss_grad, make_batch, ppo_grad_weight


def test_entropy_bonus_gradient_wrt_entropy_and_logp(gen):
    b = make_batch(gen)
    m = b.mask
    n = m.sum()
    out = ef.policy_loss(b, ef.get_method("entropy_bonus", c=0.01))
    gH, gL = torch.autograd.grad(out.loss, [b.entropy, b.logp])
    # loss −= c · Σ H m / Σ m  ⇒  ∂/∂H_t = −c m_t / Σm ; logp gradient is plain PPO
    torch.testing.assert_close(gH, -0.01 * m / n, rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(gL, ppo_grad_weight(b) * m / n, rtol=1e-10, atol=1e-14)
    expected = -0.01 * float((b.entropy.detach() * m).sum() / n)
    assert out.metrics["entropy_bonus/loss"] == pytest.approx(expected, rel=1e-10)
    assert out.metrics["entropy_bonus/coef"] == 0.01


def test_entropy_bonus_follows_the_loss_aggregation(gen):
    b = make_batch(gen)
    out = ef.policy_loss(b, "entropy_bonus", ef.LossSpec(agg="seq-mean-token-mean"))
    (gH,) = torch.autograd.grad(out.loss, b.entropy)
    m = b.mask
    expected = -0.001 * m / m.sum(-1, keepdim=True) / m.shape[0]
    torch.testing.assert_close(gH, expected, rtol=1e-10, atol=1e-14)


def test_entropy_bonus_uses_entropy_with_grad_not_old_entropy(gen):
    b = make_batch(gen, entropy=None)
    with pytest.raises(MissingInputError, match="entropy"):
        ef.policy_loss(b, "entropy_bonus")
    with pytest.raises(MissingInputError, match="entropy"):
        ef.policy_loss(b, ef.get_method("adaptive_entropy"))


def test_adaptive_entropy_controller_sequence_and_resume():
    m = ef.get_method("adaptive_entropy", target=0.5, delta=0.002, c_max=0.005, c_min=0.001, c0=0.001)
    Hs = [0.3, 0.3, 0.3, 0.3, 0.6, 0.2, 0.7, 0.7, 0.7, 0.5]
    c, on = 0.001, True
    for k, H in enumerate(Hs):
        m.update({"entropy": H, "step": k})
        if H < 0.5:
            c, on = min(c + 0.002, 0.005), True
        else:
            c, on = max(c - 0.002, 0.001), False
        assert m.coef == pytest.approx(c, abs=1e-15) and m.active is on
        if k == 4:
            saved = copy.deepcopy(m.state_dict())
            twin_h = Hs[k + 1 :]
    fresh = ef.get_method("adaptive_entropy", target=0.5, delta=0.002, c_max=0.005, c_min=0.001, c0=0.001)
    fresh.load_state_dict(saved)
    for k, H in enumerate(twin_h):
        fresh.update({"entropy": H, "step": k})
    assert fresh.state_dict() == m.state_dict()


def test_adaptive_entropy_term_applies_current_coef_only_when_on(gen):
    b = make_batch(gen)
    m = ef.get_method("adaptive_entropy", c0=0.003)
    n = b.mask.sum()
    meanH = float((b.entropy.detach() * b.mask).sum() / n)
    out = ef.policy_loss(b, m)
    assert out.metrics["adaptive_entropy/loss"] == pytest.approx(-0.003 * meanH, rel=1e-10)
    assert out.metrics["adaptive_entropy/coef"] == 0.003
    m.update({"entropy": 1.0, "step": 0})  # above target 0.2: c ← 0.0029, bonus off
    out = ef.policy_loss(b, m)
    assert out.metrics["adaptive_entropy/loss"] == 0.0
    assert out.metrics["adaptive_entropy/coef"] == pytest.approx(0.0029)
    with pytest.raises(MissingInputError, match="entropy"):
        m.update({"step": 1})


def test_kl_ref_value_and_gradient(gen):
    b = make_batch(gen)
    mm = b.mask
    n = mm.sum()
    lp = b.logp.detach()
    d = b.ref_logp - lp
    k3 = torch.exp(d) - d - 1
    out, g = loss_grad(b, ef.get_method("kl_ref", beta=0.05))
    assert out.metrics["kl_ref/kl"] == pytest.approx(float((k3 * mm).sum() / n), rel=1e-10)
    assert out.metrics["kl_ref/loss"] == pytest.approx(0.05 * float((k3 * mm).sum() / n), rel=1e-10)
    # ∂k3/∂logp = −exp(ref − logp) + 1
    expected = (ppo_grad_weight(b) + 0.05 * (1 - torch.exp(d))) * mm / n
    torch.testing.assert_close(g, expected, rtol=1e-10, atol=1e-14)


def test_kl_ref_needs_ref_logp_and_ignores_padding_garbage(gen):
    b = make_batch(gen, ref_logp=None)
    with pytest.raises(MissingInputError, match="ref_logp"):
        ef.policy_loss(b, "kl_ref")
    b = make_batch(gen)
    ref = b.ref_logp.clone()
    ref[~b.mask.bool()] = 1e4  # exp would overflow if padding leaked
    b2 = ef.TokenBatch(b.logp, b.old_logp, b.advantages, b.mask, ref_logp=ref)
    out, g = loss_grad(b2, "kl_ref")
    assert torch.isfinite(g).all() and torch.isfinite(out.loss)
