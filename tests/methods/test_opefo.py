"""opefo (all four variants, selectable estimator) and opefo_target against hand
computations of ΔH, S±, λ* (float64, rtol 1e-10); the adaptive variant balances the weighted
flow to zero (paper 001 Eq. 8).

OPEFO's λ* (paper 001 Eq. 6 and Eq. 9) on hand-worked strict on-policy batches, written to pin
down the explanation of the lab's large λ* in docs/regime.md: λ* is large when the low-probability
tokens (large |log p + H| and (1 − p)² ≈ 1) sit in failed responses, and exactly 0 when the same
tokens are spread evenly over correct and failed responses. Expected values are computed here from
the two equations with ``math`` (float64), independently of entflow's estimator code."""

from __future__ import annotations

import math

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


# --- OPEFO's λ* ---

D = torch.float64
H0 = 0.5  # entropy of every state in these batches (nats)
P_HIGH, P_SLIP = 0.9, 0.01


def _batch(slip_rows: list[int], rewards: list[float], pad_tail: bool = False) -> ef.TokenBatch:
    """One group of 4 responses, 2 tokens each (+1 padded column when ``pad_tail``): every token
    has p = 0.9 except the second token of each row in ``slip_rows`` (p = 0.01). Strict on-policy:
    logp = old_logp."""
    t = 3 if pad_tail else 2
    p = torch.full((4, t), P_HIGH, dtype=D)
    for r in slip_rows:
        p[r, 1] = P_SLIP
    mask = torch.ones(4, t, dtype=D)
    if pad_tail:
        p[:, 2] = 1e-6  # a padded position with an extreme probability: must not enter S±
        mask[:, 2] = 0
    logp = p.log()
    rw = torch.tensor(rewards, dtype=D)
    gi = torch.zeros(4, dtype=torch.long)
    base = ef.TokenBatch(logp=logp, old_logp=logp, advantages=None, mask=mask, rewards=rw, group_index=gi)
    # the row's advantage on every column, padding included (as a trainer that broadcasts [N] → [N, T]
    # without masking would hand it over): only the mask may keep the padded position out of S±
    adv = ef.compute_advantages(base)[:, :1].expand(4, t).clone()
    return ef.TokenBatch(
        logp=logp.clone().requires_grad_(True),
        old_logp=logp,
        advantages=adv,
        mask=mask,
        old_entropy=torch.full((4, t), H0, dtype=D),
        rewards=rw,
        group_index=gi,
    )


def _dh(a: float, p: float) -> float:
    return -a * (1 - p) ** 2 * (math.log(p) + H0)  # paper 001 Eq. 6 (η = 1), strict on-policy: w = A


def _expected(slip_rows: list[int], rewards: list[float]) -> tuple[float, float, float]:
    mean = sum(rewards) / 4
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / 3)  # unbiased, as GRPO's group std
    s_pos = s_neg = 0.0
    for i, r in enumerate(rewards):
        a = (r - mean) / (std + 1e-6)
        for p in (P_HIGH, P_SLIP if i in slip_rows else P_HIGH):
            d = _dh(a, p)
            s_pos += max(d, 0.0)
            s_neg += max(-d, 0.0)
    return s_pos, s_neg, (s_neg - s_pos) / (s_neg + s_pos)  # paper 001 Eq. 9


def _lambda(batch: ef.TokenBatch) -> tuple[float, float, float]:
    m = ef.policy_loss(batch, "opefo").metrics
    return float(m["opefo/S_pos"]), float(m["opefo/S_neg"]), float(m["opefo/lambda_star"])


@pytest.mark.parametrize("pad_tail", [False, True])
def test_slips_in_failed_responses_make_lambda_near_one(pad_tail):
    """The lab's case: the rare token is what makes a response fail. The A<0, p = 0.01 tokens
    give ΔH = A·(1−p)²·|log p + H| ≈ −3.48 each, the A>0 high-probability tokens only ≈ −0.0034:
    S⁻ ≫ S⁺ and λ* ≈ 0.998 (hand value), whatever the padding holds."""
    rows, rewards = [2, 3], [1.0, 1.0, 0.0, 0.0]
    s_pos, s_neg, lam = _lambda(_batch(rows, rewards, pad_tail))
    e_pos, e_neg, e_lam = _expected(rows, rewards)
    assert s_pos == pytest.approx(e_pos, rel=1e-9)
    assert s_neg == pytest.approx(e_neg, rel=1e-9)
    assert lam == pytest.approx(e_lam, rel=1e-9)
    assert lam == pytest.approx(0.99804, abs=1e-4)  # worked by hand in docs/regime.md


def test_slips_spread_over_both_outcomes_balance_exactly():
    """Same tokens, but one correct and one failed response carry the slip: the flows cancel
    term by term (λ* = 0), so a large λ* is a property of where rare tokens sit, not of Eq. 9."""
    rows, rewards = [1, 3], [1.0, 1.0, 0.0, 0.0]
    s_pos, s_neg, lam = _lambda(_batch(rows, rewards))
    e_pos, e_neg, _ = _expected(rows, rewards)
    assert s_pos == pytest.approx(e_pos, rel=1e-9) and s_neg == pytest.approx(e_neg, rel=1e-9)
    assert abs(lam) < 1e-9


def test_slips_in_correct_responses_make_lambda_negative():
    """The mirror case (a rare token is what makes a response *succeed*, exploration paying off):
    S⁺ ≫ S⁻ and λ* ≈ −0.998 — the sign convention of Eq. 9 (λ* > 0 ⇔ S⁻ > S⁺)."""
    rows, rewards = [0, 1], [1.0, 1.0, 0.0, 0.0]
    _, _, lam = _lambda(_batch(rows, rewards))
    assert lam == pytest.approx(_expected(rows, rewards)[2], rel=1e-9)
    assert lam == pytest.approx(-0.99804, abs=1e-4)


def test_lambda_is_invariant_to_the_advantage_scale():
    """λ* is a ratio of sums of ΔH, each linear in A (and in η): scaling every advantage by c > 0
    (batch std instead of group std, Dr. GRPO's no-std, the learning rate) cannot change it."""
    b = _batch([2, 3], [1.0, 1.0, 0.0, 0.0])
    lam = _lambda(b)[2]
    scaled = ef.TokenBatch(
        logp=b.logp.detach().clone().requires_grad_(True),
        old_logp=b.old_logp,
        advantages=b.advantages * 7.3,
        mask=b.mask,
        old_entropy=b.old_entropy,
    )
    assert _lambda(scaled)[2] == pytest.approx(lam, rel=1e-12)
