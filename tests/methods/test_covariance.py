"""clip_cov and kl_cov against hand computations: candidate conditions, counts
max(⌊ratio·N⌋, 1), seeded reproducibility and uniformity (statistical), generator state
round trip, top-k by covariance and the KL-Cov gradient (float64, rtol 1e-10)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import entflow as ef
from entflow.errors import CompositionError
from support.methods_ref import floor_count, loss_grad, make_batch, ppo_grad_weight, ref_cov, ref_indicator, token_adv


def _wide_cov_batch(gen, n=16, t=24):
    # big advantages so that a healthy number of tokens has 0.05 < Cov < 0.8
    b = make_batch(gen, n=n, t=t, group=4)
    return b


def _candidates(b, low, high):
    A = token_adv(b)
    r = torch.exp(b.logp.detach() - b.old_logp)
    cov = ref_cov(b)
    return b.mask.bool() & (ref_indicator(A, r) > 0) & (cov > low) & (cov < high)


def test_clip_cov_selection_conditions_count_and_gradient(gen):
    b = _wide_cov_batch(gen)
    low, high, ratio = 0.05, 0.8, 0.02
    cand = _candidates(b, low, high)
    n_valid = int(b.mask.sum())
    n = floor_count(ratio, n_valid)
    assert int(cand.sum()) > n  # the test batch has enough candidates
    m = ef.get_method("clip_cov", ratio=ratio, cov_low=low, cov_high=high, seed=3)
    out, g = loss_grad(b, m)
    sel = out.token_weights == 0
    sel &= b.mask.bool()
    assert int(sel.sum()) == n == out.metrics["clip_cov/n_selected"]
    assert out.metrics["clip_cov/n_candidates"] == int(cand.sum())
    assert bool((sel <= cand).all())  # every selected token is a candidate
    # gradient: zero on selected tokens, plain PPO elsewhere; denominator still Σm (all valid)
    expected = ppo_grad_weight(b) * b.mask * (~sel) / b.mask.sum()
    torch.testing.assert_close(g, expected, rtol=1e-10, atol=1e-14)


def test_clip_cov_minimum_one_and_all_if_few(gen):
    b = _wide_cov_batch(gen)
    out = ef.policy_loss(b, ef.get_method("clip_cov", ratio=0.0, cov_low=0.05, cov_high=0.8))
    assert out.metrics["clip_cov/n_selected"] == 1  # max(⌊0⌋, 1)
    cand = _candidates(b, 0.05, 0.8)
    out = ef.policy_loss(b, ef.get_method("clip_cov", ratio=1.0, cov_low=0.05, cov_high=0.8))
    assert out.metrics["clip_cov/n_selected"] == int(cand.sum())  # fewer candidates than n: all
    assert torch.equal((out.token_weights == 0) & b.mask.bool(), cand)


def test_clip_cov_same_seed_same_selection_and_state_resume(gen):
    b = _wide_cov_batch(gen)
    kw = dict(ratio=0.01, cov_low=0.05, cov_high=0.8)
    a, c = ef.get_method("clip_cov", seed=7, **kw), ef.get_method("clip_cov", seed=7, **kw)
    wa = [ef.policy_loss(b, a).token_weights for _ in range(3)]
    wc = [ef.policy_loss(b, c).token_weights for _ in range(3)]
    assert all(torch.equal(x, y) for x, y in zip(wa, wc, strict=True))
    assert not all(torch.equal(wa[0], x) for x in wa[1:])  # the generator advances
    other = ef.policy_loss(b, ef.get_method("clip_cov", seed=8, **kw)).token_weights
    assert not torch.equal(other, wa[0])
    # resume: a fresh method loaded from a's state continues exactly as a
    state = copy.deepcopy(a.state_dict())
    fresh = ef.get_method("clip_cov", seed=0, **kw)
    fresh.load_state_dict(state)
    for _ in range(3):
        assert torch.equal(ef.policy_loss(b, fresh).token_weights, ef.policy_loss(b, a).token_weights)


def test_clip_cov_selection_is_uniform_over_candidates(gen):
    b = _wide_cov_batch(gen)
    kw = dict(ratio=0.01, cov_low=0.05, cov_high=0.8, seed=1)
    m = ef.get_method("clip_cov", **kw)
    cand = _candidates(b, 0.05, 0.8)
    n = floor_count(0.01, int(b.mask.sum()))
    trials = 1500
    counts = torch.zeros_like(b.mask)
    for _ in range(trials):
        counts += (ef.policy_loss(b, m).token_weights == 0).to(counts.dtype) * b.mask
    p = n / int(cand.sum())
    freq = counts[cand] / trials
    sd = math.sqrt(p * (1 - p) / trials)
    assert float((freq - p).abs().max()) < 5 * sd  # every candidate ~ n/|cand|
    assert float(counts[~cand].sum()) == 0


def test_kl_cov_topk_and_gradient(gen):
    b = make_batch(gen, n=8, t=12)
    ratio, beta = 0.05, 0.7
    m = b.mask.bool()
    k = floor_count(ratio, int(m.sum()))
    cov = ref_cov(b)
    order = sorted(((float(cov[i, j]), i, j) for i, j in m.nonzero().tolist()), reverse=True)
    top = torch.zeros_like(m)
    for _, i, j in order[:k]:
        top[i, j] = True
    out, g = loss_grad(b, ef.get_method("kl_cov", ratio=ratio, beta=beta))
    assert out.metrics["kl_cov/n_selected"] == k
    A = token_adv(b)
    lp = b.logp.detach()
    r = torch.exp(lp - b.old_logp)
    # Eq. 12: ℓ = −A r + β |logp − old| on top-k; unclipped everywhere
    expected = (-A * r + beta * torch.sign(lp - b.old_logp) * top) * b.mask / b.mask.sum()
    torch.testing.assert_close(g, expected, rtol=1e-10, atol=1e-14)
    assert out.metrics["clip/frac_high"] == 0 and out.metrics["clip/frac_low"] == 0


def test_kl_cov_keep_ppo_clip(gen):
    b = make_batch(gen, n=8, t=12, off_policy=0.6)
    ratio, beta = 0.05, 0.7
    k = floor_count(ratio, int(b.mask.sum()))
    cov = ref_cov(b).masked_fill(~b.mask.bool(), -math.inf)
    top = torch.zeros(cov.numel(), dtype=torch.bool)
    top[torch.topk(cov.flatten(), k).indices] = True
    top = top.view_as(cov)
    _, g = loss_grad(b, ef.get_method("kl_cov", ratio=ratio, beta=beta, keep_ppo_clip=True))
    lp = b.logp.detach()
    expected = (ppo_grad_weight(b) + beta * torch.sign(lp - b.old_logp) * top) * b.mask / b.mask.sum()
    torch.testing.assert_close(g, expected, rtol=1e-10, atol=1e-14)


def test_kl_cov_is_plain_unclipped_pg_on_the_first_on_policy_minibatch(gen):
    b = make_batch(gen, off_policy=0.0)
    out_kl, g_kl = loss_grad(b, "kl_cov")
    out_free, g_free = loss_grad(b, "clip_free")
    torch.testing.assert_close(g_kl, g_free, rtol=0, atol=0)
    assert float(out_kl.loss.detach()) == float(out_free.loss.detach())


def test_kl_cov_composition_with_clip_methods():
    ef.get_method("clip_higher+kl_cov")  # kl_cov last: its unclipped bounds win
    with pytest.raises(CompositionError, match="kl_cov"):
        ef.get_method("kl_cov+clip_higher")
    ef.get_method("kl_cov+clip_higher", **{"kl_cov.keep_ppo_clip": True})
