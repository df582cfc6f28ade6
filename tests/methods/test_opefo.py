"""opefo (all four variants, selectable estimator) and opefo_target against hand
computations of ΔH, S±, λ* (float64, rtol 1e-10); the adaptive variant balances the weighted
flow to zero (paper 001 Eq. 8)."""

from __future__ import annotations

import pytest
import torch

import entflow as ef
from entflow.errors import ParameterError
from support.methods_ref import loss_grad, make_batch, ppo_grad_weight, ref_estimate


def _flow(dH, mask):
    d = dH[mask]
    s_pos = float(d[d > 0].sum())
    s_neg = float(d[d < 0].abs().sum())
    return s_pos, s_neg, (s_neg - s_pos) / max(s_neg + s_pos, 1e-12)


def _weights(dH, mask, lam_pos, lam_neg):
    w = torch.ones_like(dH)
    w[(dH > 0) & mask] = 1 + lam_pos
    w[(dH < 0) & mask] = 1 - lam_neg
    return w * mask


@pytest.mark.parametrize("variant", ["adaptive", "static", "pos_only", "neg_only"])
def test_opefo_variants(gen, variant):
    b = make_batch(gen)
    mask = b.mask.bool()
    dH = ref_estimate(b, "opefo")
    s_pos, s_neg, lam_star = _flow(dH, mask)
    lam = 0.05 if variant == "static" else lam_star
    lp = 0.0 if variant == "neg_only" else lam
    ln = 0.0 if variant == "pos_only" else lam
    w = _weights(dH, mask, lp, ln)
    out, g = loss_grad(b, ef.get_method("opefo", variant=variant, lam=0.05))
    torch.testing.assert_close(out.token_weights, w, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(g, w * ppo_grad_weight(b) / b.mask.sum(), rtol=1e-10, atol=1e-14)
    assert out.metrics["opefo/lambda"] == pytest.approx(lam, rel=1e-10)
    assert out.metrics["opefo/S_pos"] == pytest.approx(s_pos, rel=1e-10)
    assert out.metrics["opefo/S_neg"] == pytest.approx(s_neg, rel=1e-10)


def test_opefo_adaptive_balances_the_flow(gen):
    b = make_batch(gen, n=16, t=20)
    out = ef.policy_loss(b, "opefo")
    dH = ref_estimate(b, "opefo")
    assert abs(float((out.token_weights * dH).sum())) < 1e-10 * float(dH.abs().sum())


@pytest.mark.parametrize("estimator", ["steer", "sampled_logit"])
def test_opefo_estimator_selectable(gen, estimator):
    b = make_batch(gen)
    mask = b.mask.bool()
    dH = ref_estimate(b, estimator)
    _, _, lam = _flow(dH, mask)
    out = ef.policy_loss(b, ef.get_method("opefo", estimator=estimator))
    torch.testing.assert_close(out.token_weights, _weights(dH, mask, lam, lam), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("target", [0.3, 1.0, 1.3, 5.0])
def test_opefo_target(gen, target):
    b = make_batch(gen)
    mask = b.mask.bool()
    dH = ref_estimate(b, "opefo")
    _, _, lam_star = _flow(dH, mask)
    H = float(b.old_entropy[mask].mean())
    k, f_max, lam_max = 2.0, 0.3, 0.9
    f = min(max(k * (target - H) / target, -f_max), f_max)
    lam = min(max(lam_star + f, -lam_max), lam_max)
    out = ef.policy_loss(b, ef.get_method("opefo_target", target=target, k=k, f_max=f_max, lam_max=lam_max))
    torch.testing.assert_close(out.token_weights, _weights(dH, mask, lam, lam), rtol=1e-12, atol=1e-14)
    assert out.metrics["opefo_target/lambda"] == pytest.approx(lam, rel=1e-10)
    assert out.metrics["opefo_target/f"] == pytest.approx(f, rel=1e-10)
    # below target the net weighted flow is positive (entropy pushed up), above it negative
    net = float((out.token_weights * dH).sum())
    assert (net > 0) == (target > H)


def test_opefo_target_requires_target():
    with pytest.raises(ParameterError, match="target"):
        ef.get_method("opefo_target")
    with pytest.raises(ParameterError, match="target"):
        ef.get_method("opefo_target", target=0.0)
