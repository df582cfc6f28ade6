"""STARE (methods/stare.py): against an independent float64 reference of the authors' pipeline
(arXiv 2606.19236, as their README states it: T± by the sign of A, L± = the top-P by surprisal
−log π with k = ⌈P·|T±|⌉ and at least 1, ω = W on L+, M on L− for C2, 1 elsewhere, applied while
the batch entropy is below H_tgt, J = agg(ω·PPO-clip)), read against their verl code
(``compute_stare_token_weights``, ``STAREController``). No library ships STARE (a TRL pull request
is open), so there is no peer function to call. Loss and gradient w.r.t. the log-probs, token-mean
and seq-mean-token-mean, ragged masks, an all-zero and an all-equal group.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import entflow as ef
from entflow.errors import MissingInputError
from support.field_peers import (
    AGGS,
    aggregate_rows,
    assert_bad_parameter_is_named,
    assert_matches_hand,
    grpo_batch,
    ours,
    rows_loss_and_grad,
)


def mean_entropy(b: ef.TokenBatch, agg: str) -> float:
    rows = [
        [float(b.old_entropy[i, t]) for t in range(b.mask.shape[1]) if b.mask[i, t] > 0] for i in range(b.mask.shape[0])
    ]
    return aggregate_rows(rows, agg)


def hand_sets(b: ef.TokenBatch, p: float) -> tuple[set, set]:
    """L+ and L−: the top ⌈P·|T±|⌉ (≥ 1, the authors' 1e-6 tolerance) of T± by surprisal."""
    A, out = b.token_advantages(), []
    for sign in (1, -1):
        cand = [(i, t) for i in range(A.shape[0]) for t in range(A.shape[1]) if b.mask[i, t] > 0 and sign * A[i, t] > 0]
        k = min(max(1, int(len(cand) * p + 0.999999)), len(cand)) if cand and p > 0 else 0
        ranked = sorted(cand, key=lambda it: (float(b.logp[it].detach()), it))  # lowest log π = highest surprisal
        out.append(set(ranked[:k]))
    return out[0], out[1]


def hand_stare(b: ef.TokenBatch, agg: str, variant: str, p: float, w: float, m: float, target: float):
    logp = b.logp.detach().clone().requires_grad_(True)
    A = b.token_advantages()
    gate = mean_entropy(b, agg) < target
    plus, minus = hand_sets(b, p)
    rows = []
    for i in range(A.shape[0]):
        terms = []
        for t in range(A.shape[1]):
            if b.mask[i, t] == 0:
                continue
            r = torch.exp(logp[i, t] - b.old_logp[i, t])
            ell = torch.maximum(-A[i, t] * r, -A[i, t] * r.clamp(0.8, 1.2))
            omega = 1.0
            if gate and (i, t) in plus:
                omega = w
            elif gate and variant == "C2" and (i, t) in minus:
                omega = m
            terms.append(omega * ell)
        rows.append(terms)
    return rows_loss_and_grad(rows, agg, logp)


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("variant", ["O1", "C2"])
@pytest.mark.parametrize("p", [0.1, 0.3, 1.0])
def test_stare_against_the_reference(gen, p, variant, agg):
    b = grpo_batch(gen)
    params = dict(variant=variant, top_p_ratio=p, reweight_w=1.3, reweight_m=0.6, target_entropy=10.0)
    loss, grad = ours(b, ef.get_method("stare", **params), agg=agg)
    assert_matches_hand((loss, grad), hand_stare(b, agg, variant, p, 1.3, 0.6, 10.0))
    plain, _ = ours(b, "grpo", agg=agg)
    assert not torch.isclose(loss, plain)  # the weights changed the loss


@pytest.mark.parametrize("agg", AGGS)
def test_above_the_target_entropy_stare_is_grpo(gen, agg):
    b = grpo_batch(gen)
    H = mean_entropy(b, agg)
    m = ef.get_method("stare", variant="C2", target_entropy=H - 1e-9)  # H̄ ≥ H_tgt: gate off
    loss, grad = ours(b, m, agg=agg)
    plain, grad_plain = ours(b, "grpo", agg=agg)
    assert torch.equal(loss, plain) and torch.equal(grad, grad_plain)
    out = ef.policy_loss(b, m, ef.LossSpec(agg=agg))
    assert out.metrics["stare/gate_on"] == 0.0
    assert out.metrics["stare/entropy"] == pytest.approx(H, rel=1e-12)
    on = ef.policy_loss(b, ef.get_method("stare", target_entropy=H + 1e-9), ef.LossSpec(agg=agg))
    assert on.metrics["stare/gate_on"] == 1.0


def test_the_selection_count_and_its_tolerance(gen):
    b = grpo_batch(gen)
    A = b.token_advantages()
    n_pos = int(((A > 0) & b.valid).sum())
    for p in (0.0, 1e-4, 0.1, 0.5, 1.0):
        out = ef.policy_loss(b, ef.get_method("stare", top_p_ratio=p, target_entropy=10.0))
        want = 0 if p == 0 else min(max(1, int(n_pos * p + 0.999999)), n_pos)
        assert round(out.metrics["stare/plus_frac"] * int(b.valid.sum())) == want
    # 100 candidates at P = 0.07: seven tokens, where an exact ceil of 100·0.07 = 7.000000000000001 gives eight
    logp = -torch.rand(10, 10, generator=gen, dtype=torch.float64) * 3
    flat = ef.TokenBatch(logp, logp, torch.ones(10), torch.ones(10, 10), old_entropy=torch.zeros(10, 10))
    out = ef.policy_loss(flat, ef.get_method("stare", top_p_ratio=0.07))
    assert 100 * 0.07 > 7 and out.metrics["stare/plus_frac"] == 0.07


@pytest.mark.parametrize("agg", AGGS)
def test_micro_batches_with_prepared_statistics_sum_to_the_whole_batch(gen, agg):
    b = grpo_batch(gen)
    m = ef.get_method("stare", variant="C2", top_p_ratio=0.2, target_entropy=10.0)
    loss, grad = ours(b, m, agg=agg)
    spec = ef.LossSpec(agg=agg)
    logp = b.logp.detach().clone().requires_grad_(True)
    fields = ("old_logp", "advantages", "mask", "entropy", "old_entropy", "ref_logp", "rewards", "group_index")
    micro = [
        dataclasses.replace(b, logp=logp[s], **{f: getattr(b, f)[s] for f in fields})
        for s in (slice(0, 6), slice(6, 16))
    ]
    stats = ef.prepare_statistics([dataclasses.replace(x, logp=x.logp.detach()) for x in micro], m, spec)
    total = sum(ef.policy_loss(x, m, spec, stats=s).loss for x, s in zip(micro, stats, strict=True))
    (g,) = torch.autograd.grad(total, logp)
    torch.testing.assert_close(total.detach(), loss, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(g, grad, rtol=1e-12, atol=1e-14)


def test_the_adaptive_schedule_moves_w_and_m_and_is_saved():
    m = ef.get_method("stare", adaptive=True, alpha=0.1, reweight_w=1.1, reweight_m=0.9, w_max=1.3, m_min=0.75)
    w, mm = 1.1, 0.9
    for H in (0.1, 0.1, 0.1, 0.5, float("nan"), 0.3, 0.2):
        m.update({"entropy": H})
        if math.isfinite(H):  # the paper's adaptive schedule: W ← clip(W + α·sgn(H_tgt − H), 1, w_max)
            s = (H < 0.3) - (H > 0.3)
            w, mm = min(max(w + 0.1 * s, 1.0), 1.3), min(max(mm - 0.1 * s, 0.75), 1.0)
        assert (m.w_now, m.m_now) == pytest.approx((w, mm), abs=1e-12)
    saved = m.state_dict()
    fresh = ef.get_method("stare", adaptive=True, alpha=0.1, reweight_w=1.1, reweight_m=0.9, w_max=1.3, m_min=0.75)
    fresh.load_state_dict(saved)
    assert (fresh.w_now, fresh.m_now) == (m.w_now, m.m_now)
    with pytest.raises(MissingInputError, match="entropy"):
        m.update({"step": 3})


def test_static_stare_keeps_no_state_and_ignores_update():
    m = ef.get_method("stare")
    m.update({"entropy": 0.0})
    assert (m.w_now, m.m_now) == (1.1, 0.9)
    assert m.state_dict() == {} and not m.is_controller()


@pytest.mark.parametrize(
    ("param", "bad"),
    [("variant", "O3"), ("top_p_ratio", 1.5), ("reweight_w", 0.9), ("reweight_m", 0.0), ("target_entropy", -0.1)],
)
def test_bad_parameters_name_the_parameter(param, bad):
    assert_bad_parameter_is_named("stare", param, bad)


def test_stare_needs_an_entropy(gen):
    b = grpo_batch(gen)
    with pytest.raises(MissingInputError, match="old_entropy"):
        ef.policy_loss(dataclasses.replace(b, old_entropy=None, entropy=None), "stare")
