"""quadrant (presets, per-quadrant specs, seeded Bernoulli selection checked exactly and
statistically, state round trip) and forking_tokens (threshold = torch.quantile of valid
entropies; weights and gradient), against hand computations."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import entflow as ef
from entflow.errors import ParameterError
from support.methods_ref import loss_grad, make_batch, ppo_grad_weight, token_adv


def _quadrants(b, hi=0.8, lo=0.2):
    A = token_adv(b)
    p = b.logp.detach().exp()
    m = b.mask.bool()
    return {
        "I": m & (A > 0) & (p > hi),
        "II": m & (A > 0) & (p < lo),
        "III": m & (A < 0) & (p < lo),
        "IV": m & (A < 0) & (p > hi),
    }


def _big_batch(gen):
    # peaked logits so that all four quadrants are populated
    return make_batch(gen, n=32, t=40, vocab=4, logit_scale=4.0)


@pytest.mark.parametrize(
    "preset,actions",
    [
        ("uplift", {"I": 0.0, "II": 2.0, "III": 0.0, "IV": 2.0}),
        ("suppress", {"I": 2.0, "II": 0.0, "III": 2.0, "IV": 0.0}),
    ],
)
def test_quadrant_presets_select_only_inside_quadrants(gen, preset, actions):
    b = _big_batch(gen)
    qs = _quadrants(b)
    assert all(int(q.sum()) > 20 for q in qs.values())
    out, g = loss_grad(b, ef.get_method("quadrant", preset=preset, seed=5))
    w = out.token_weights
    inside = torch.zeros_like(b.mask, dtype=torch.bool)
    for q, val in actions.items():
        sel = qs[q] & (w != 1)
        assert bool((w[sel] == val).all())
        assert out.metrics[f"quadrant/{q}/n_selected"] == int(sel.sum())
        inside |= qs[q]
    assert bool((w[b.mask.bool() & ~inside] == 1).all())
    torch.testing.assert_close(g, w * ppo_grad_weight(b) / b.mask.sum(), rtol=1e-10, atol=1e-14)


def test_quadrant_seeded_draw_is_exact_and_resumable(gen):
    b = _big_batch(gen)
    qs = _quadrants(b)
    m = ef.get_method("quadrant", II="boost:0.3", IV="mask:0.5", seed=11)
    # independent re-implementation of the draw: one U(0,1) per token from the seeded generator
    g = torch.Generator().manual_seed(11)
    for _ in range(2):
        u = torch.rand(b.logp.shape, generator=g, dtype=torch.float64)
        w = torch.ones_like(u)
        w[qs["II"] & (u < 0.3)] = 2.0
        w[qs["IV"] & (u < 0.5)] = 0.0
        torch.testing.assert_close(ef.policy_loss(b, m).token_weights, w * b.mask, rtol=0, atol=0)
    state = copy.deepcopy(m.state_dict())
    fresh = ef.get_method("quadrant", II="boost:0.3", IV="mask:0.5", seed=0)
    fresh.load_state_dict(state)
    for _ in range(2):
        assert torch.equal(ef.policy_loss(b, fresh).token_weights, ef.policy_loss(b, m).token_weights)


def test_quadrant_fraction_is_right_statistically(gen):
    b = _big_batch(gen)
    qs = _quadrants(b)
    m = ef.get_method("quadrant", preset="uplift", I="mask:0.25", seed=2)  # override one preset entry
    hits = {q: 0 for q in qs}
    trials = 200
    for _ in range(trials):
        w = ef.policy_loss(b, m).token_weights
        for q in qs:
            hits[q] += int((qs[q] & (w != 1)).sum())
    for q, f in {"I": 0.25, "II": 0.1, "III": 0.1, "IV": 0.1}.items():
        n = int(qs[q].sum()) * trials
        sd = math.sqrt(f * (1 - f) / n)
        assert abs(hits[q] / n - f) < 5 * sd, q


def test_quadrant_spec_validation():
    for bad in ("mask", "boost:1.5", "drop:0.1", 0.1, "mask:x"):
        with pytest.raises(ParameterError, match="'II'"):
            ef.get_method("quadrant", II=bad)
    with pytest.raises(ParameterError, match="preset"):
        ef.get_method("quadrant", preset="up")
    assert ef.get_method("quadrant", III="mask:0").actions() == {"III": ("mask", 0.0)}


@pytest.mark.parametrize("rho", [0.2, 0.5, 1.0])
def test_forking_tokens(gen, rho):
    b = make_batch(gen, n=12, t=16)
    mask = b.mask.bool()
    H = b.old_entropy
    q = torch.quantile(H[mask], 1 - rho)
    w = ((H >= q) & mask).to(H.dtype)
    out, g = loss_grad(b, ef.get_method("forking_tokens", rho=rho))
    torch.testing.assert_close(out.token_weights, w, rtol=0, atol=0)
    torch.testing.assert_close(g, w * ppo_grad_weight(b) / b.mask.sum(), rtol=1e-10, atol=1e-14)
    assert out.metrics["forking_tokens/threshold"] == pytest.approx(float(q), rel=1e-12)
    assert abs(out.metrics["forking_tokens/kept_frac"] - rho) < 1.0 / int(mask.sum()) + 1e-12
