"""steer: weights of the exp / linear / binary mappings, every scope and a non-default
estimator against a hand computation of Ω (docs/design.md §5) and of the mapping (float64, rtol 1e-10);
the gradient w.r.t. logp is −λ_t·I_t·A_t·r_t·m_t/Σm."""

from __future__ import annotations

import math

import pytest
import torch

import entflow as ef
from entflow.errors import MissingInputError
from support.methods_ref import loss_grad, make_batch, ppo_grad_weight, ref_estimate


def ref_exp_weights(omega, mask, lam_min, floor, units):
    lam = torch.ones_like(omega)
    for rows in units:
        vals = omega[rows][mask[rows]].abs()
        denom = max(float(vals.max()), floor)
        for i in rows:
            for j in range(omega.shape[1]):
                if mask[i, j]:
                    x = math.exp(math.log(lam_min) * abs(float(omega[i, j])) / denom)
                    lam[i, j] = min(max(x, lam_min), 1.0)
    return lam


def _units(b, scope):
    n = b.logp.shape[0]
    if scope == "batch":
        return [list(range(n))]
    if scope == "sequence":
        return [[i] for i in range(n)]
    return [(b.group_index == g).nonzero().squeeze(1).tolist() for g in b.group_index.unique().tolist()]


@pytest.mark.parametrize("scope", ["batch", "group", "sequence"])
def test_steer_exp_weights_and_gradient(gen, scope):
    b = make_batch(gen)
    mask = b.mask.bool()
    omega = ref_estimate(b, "steer")
    lam = ref_exp_weights(omega, mask, 0.6, 0.02, _units(b, scope))
    out, g = loss_grad(b, ef.get_method("steer", lambda_min=0.6, scope=scope))
    torch.testing.assert_close(out.token_weights, lam * b.mask, rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(g, lam * ppo_grad_weight(b) * b.mask / b.mask.sum(), rtol=1e-10, atol=1e-14)
    assert out.metrics["steer/weight_min"] == pytest.approx(float(lam[mask].min()), rel=1e-12)
    assert out.metrics["steer/weight_mean"] == pytest.approx(float(lam[mask].mean()), rel=1e-12)
    assert not out.token_weights.requires_grad


def test_steer_floor_keeps_weights_near_one_when_all_changes_are_small(gen):
    b = make_batch(gen)
    tiny = ef.TokenBatch(b.logp, b.old_logp, b.advantages * 1e-4, b.mask, old_entropy=b.old_entropy)
    omega = ref_estimate(tiny, "steer")
    assert float(omega.abs().max()) < 0.02
    lam = ref_exp_weights(omega, b.mask.bool(), 0.8, 0.02, _units(b, "batch"))
    out = ef.policy_loss(tiny, "steer")
    torch.testing.assert_close(out.token_weights, lam * b.mask, rtol=1e-10, atol=1e-14)
    assert out.metrics["steer/weight_min"] > 0.8


@pytest.mark.parametrize("scope", ["batch", "sequence"])
def test_steer_linear_mapping(gen, scope):
    b = make_batch(gen)
    mask = b.mask.bool()
    a = ref_estimate(b, "steer").abs()
    lam = torch.ones_like(a)
    for rows in _units(b, scope):
        vals = a[rows][mask[rows]]
        lo, hi = float(vals.min()), float(vals.max())
        for i in rows:
            for j in range(a.shape[1]):
                if mask[i, j]:
                    lam[i, j] = 1.2 - (1.2 - 0.7) * (float(a[i, j]) - lo) / (hi - lo)
    out = ef.policy_loss(b, ef.get_method("steer", mapping="linear", lambda_min=0.7))
    if scope == "sequence":
        out = ef.policy_loss(b, ef.get_method("steer", mapping="linear", lambda_min=0.7, scope="sequence"))
    torch.testing.assert_close(out.token_weights, lam * b.mask, rtol=1e-10, atol=1e-12)
    assert out.metrics["steer/weight_max"] == pytest.approx(1.2)
    assert out.metrics["steer/weight_min"] == pytest.approx(0.7)


def test_steer_binary_mapping_top_20_percent(gen):
    b = make_batch(gen, n=16, t=20)
    mask = b.mask.bool()
    a = ref_estimate(b, "steer").abs()
    q = torch.quantile(a[mask], 0.8)
    lam = torch.where((a > q) & mask, 0.7, torch.ones_like(a)) * b.mask
    out = ef.policy_loss(b, ef.get_method("steer", mapping="binary", lambda_min=0.7))
    torch.testing.assert_close(out.token_weights, lam, rtol=0, atol=0)
    frac = float(((out.token_weights == 0.7) & mask).sum()) / int(mask.sum())
    assert abs(frac - 0.2) < 0.02


@pytest.mark.parametrize("estimator", ["opefo", "sampled_logit", "cov"])
def test_steer_estimator_is_selectable(gen, estimator):
    b = make_batch(gen)
    omega = ref_estimate(b, estimator)
    lam = ref_exp_weights(omega, b.mask.bool(), 0.8, 0.02, _units(b, "batch"))
    out = ef.policy_loss(b, ef.get_method("steer", estimator=estimator))
    torch.testing.assert_close(out.token_weights, lam * b.mask, rtol=1e-10, atol=1e-14)


def test_steer_reads_old_entropy_first_and_current_p(gen):
    b = make_batch(gen)
    # entropy (current, with grad) differs from old_entropy: the weights must follow old_entropy
    out_old = ef.policy_loss(b, "steer").token_weights
    b2 = ef.TokenBatch(b.logp, b.old_logp, b.advantages, b.mask, entropy=b.old_entropy.clone())
    out_ent = ef.policy_loss(b2, "steer").token_weights
    torch.testing.assert_close(out_old, out_ent, rtol=0, atol=0)
    with pytest.raises(MissingInputError, match="old_entropy"):
        ef.policy_loss(ef.TokenBatch(b.logp, b.old_logp, b.advantages, b.mask), "steer")
    with pytest.raises(MissingInputError, match="group_index"):
        ef.policy_loss(b2, ef.get_method("steer", scope="group"))


def test_steer_uses_the_clip_of_the_loss(gen):
    b = make_batch(gen, off_policy=0.8)
    omega = ref_estimate(b, "steer", lo=0.2, hi=0.28)
    lam = ref_exp_weights(omega, b.mask.bool(), 0.8, 0.02, _units(b, "batch"))
    out = ef.policy_loss(b, "clip_higher+steer")
    torch.testing.assert_close(out.token_weights, lam * b.mask, rtol=1e-10, atol=1e-14)
