"""Advantages, PPO-clip, aggregation, policy_loss gradients and §8 metrics vs hand computation."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

import entflow as ef
from entflow.core.ppo import clip_indicator, ppo_clip_loss
from support.core_ref import make_batch_tensors

# ---------------------------------------------------------------------------------------------
# group_advantages
# ---------------------------------------------------------------------------------------------


def _hand_advantages(rewards: list[float], ids: list[int], scale: str, eps: float = 1e-6) -> list[float]:
    out = []
    batch_std = statistics.stdev(rewards)  # unbiased (n − 1), as torch.std
    for r, g in zip(rewards, ids, strict=True):
        grp = [rr for rr, gg in zip(rewards, ids, strict=True) if gg == g]
        mean = sum(grp) / len(grp)
        std = statistics.stdev(grp) if len(grp) > 1 else 0.0
        if std == 0:
            out.append(0.0)
        elif scale == "group":
            out.append((r - mean) / (std + eps))
        elif scale == "batch":
            out.append((r - mean) / (batch_std + eps))
        else:
            out.append(r - mean)
    return out


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_group_advantages_vs_hand(scale):
    # arbitrary, unsorted, non-contiguous group ids; group 11 has all-equal rewards
    ids = [7, 3, 7, 11, 3, 11, 7, 3, 11, 42, 42, 42]
    rewards = [1.0, 0.0, 0.0, 0.5, 1.0, 0.5, 1.0, 0.25, 0.5, 0.0, 0.3, 0.9]
    got = ef.group_advantages(torch.tensor(rewards, dtype=torch.float64), torch.tensor(ids), scale=scale)
    want = _hand_advantages(rewards, ids, scale)
    assert got.shape == (12,)
    for i, (g, w) in enumerate(zip(got.tolist(), want, strict=True)):
        assert math.isclose(g, w, rel_tol=1e-12, abs_tol=1e-12), (i, g, w)  # float64: 1e-12
    for i in (3, 5, 8):  # the all-equal group: exactly zero
        assert got[i].item() == 0.0


def test_group_advantages_eps_and_float32():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    ids = torch.tensor([5, 5, 5, 5])
    got = ef.group_advantages(rewards, ids, eps=0.5)
    std = statistics.stdev([1.0, 0.0, 1.0, 1.0])
    want = [(r - 0.75) / (std + 0.5) for r in (1.0, 0.0, 1.0, 1.0)]
    assert got.dtype == torch.float32
    assert torch.allclose(got.double(), torch.tensor(want, dtype=torch.float64), atol=1e-6)  # float32: 1e-6


def test_group_advantages_all_equal_everywhere_is_exactly_zero():
    got = ef.group_advantages(torch.full((6,), 0.7), torch.tensor([0, 0, 0, 1, 1, 1]))
    assert bool((got == 0).all())


# ---------------------------------------------------------------------------------------------
# PPO-clip per token and the clip indicator
# ---------------------------------------------------------------------------------------------


def _hand_ppo(a: float, r: float, lo: float, hi: float, dual: float | None) -> float:
    rc = min(max(r, 1 - lo), 1 + hi)
    ell = max(-a * r, -a * rc)
    if dual is not None and a < 0:
        ell = min(ell, -a * dual)
    return ell


@pytest.mark.parametrize("dual", [None, 3.0])
@pytest.mark.parametrize(("lo", "hi"), [(0.2, 0.2), (0.2, 0.28), (0.12, 0.2)])
def test_ppo_clip_loss_vs_hand(gen, lo, hi, dual):
    adv = torch.randn(40, generator=gen, dtype=torch.float64)
    ratio = torch.exp(torch.randn(40, generator=gen, dtype=torch.float64) * 0.8)  # many beyond every bound
    ratio[:4] = torch.tensor([4.0, 5.0, 0.1, 0.5], dtype=torch.float64)  # r > c = 3 etc.
    adv[:4] = torch.tensor([-1.0, 2.0, -0.5, 0.7], dtype=torch.float64)
    got = ppo_clip_loss(adv, ratio, lo, hi, dual)
    want = [_hand_ppo(a, r, lo, hi, dual) for a, r in zip(adv.tolist(), ratio.tolist(), strict=True)]
    assert torch.allclose(got, torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-12)  # float64
    if dual is not None:  # the dual clip binds on token 0 (A<0, r=4 > c=3): ℓ = −A·c
        assert got[0].item() == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("a", "r", "dual", "expected"),
    [
        (1.0, 1.1, None, 1.0),  # inside the clip
        (1.0, 1.25, None, 0.0),  # A>0, r > 1+ε_high: cut
        (1.0, 0.5, None, 1.0),  # A>0, r low: never cut
        (-1.0, 0.75, None, 0.0),  # A<0, r < 1−ε_low: cut
        (-1.0, 0.85, None, 1.0),
        (-1.0, 5.0, None, 1.0),  # A<0, r high without dual clip: gradient flows
        (-1.0, 5.0, 3.0, 0.0),  # ... with dual clip c=3: cut
        (-1.0, 2.0, 3.0, 1.0),
        (0.0, 9.0, None, 1.0),  # A=0: not cut (the gradient is 0 anyway)
    ],
)
def test_clip_indicator_cases(a, r, dual, expected):
    got = clip_indicator(torch.tensor([a]), torch.tensor([r]), 0.2, 0.2, dual)
    assert got.item() == expected


# ---------------------------------------------------------------------------------------------
# policy_loss gradients w.r.t. logp, by aggregation
# ---------------------------------------------------------------------------------------------


def _hand_indicator(a: torch.Tensor, r: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    out = torch.ones_like(r)
    for idx in range(r.numel()):
        av, rv = a.reshape(-1)[idx].item(), r.reshape(-1)[idx].item()
        if (av > 0 and rv > 1 + hi) or (av < 0 and rv < 1 - lo):
            out.view(-1)[idx] = 0.0
    return out


def _loss_and_grad(batch_tensors, agg, adv=None, lo=0.2, hi=0.2):
    logp, old_logp, adv1, mask, _entropy, old_entropy = batch_tensors
    x = logp.clone().requires_grad_(True)
    b = ef.TokenBatch(x, old_logp, adv1 if adv is None else adv, mask, old_entropy=old_entropy)
    out = ef.policy_loss(b, spec=ef.LossSpec(lo, hi, agg=agg))
    (g,) = torch.autograd.grad(out.loss, x)
    return out, g


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize(("lo", "hi"), [(0.2, 0.2), (0.1, 0.3)])
def test_policy_loss_gradient_vs_hand(gen, agg, lo, hi):
    bt = make_batch_tensors(gen, n=6, t=7, spread=0.6)
    logp, old_logp, adv, mask, _, _ = bt
    out, g = _loss_and_grad(bt, agg, lo=lo, hi=hi)
    A = adv.unsqueeze(-1).expand_as(logp)
    r = torch.exp(logp - old_logp)
    I = _hand_indicator(A, r, lo, hi)
    assert 0 < I[mask.bool()].sum() < mask.sum()  # some tokens clipped, some not
    # ℓ_t = −A r on the live branch → ∂ℓ_t/∂logp_t = −I_t A_t r_t
    dl = -I * A * r
    n_tok = mask.sum()
    lengths = mask.sum(-1)
    N, T = logp.shape
    if agg == "token-mean":  # L = Σ ℓ m / Σ m
        want = dl * mask / n_tok
    elif agg == "seq-mean-token-mean":  # L = (1/N') Σ_i (Σ_t ℓ m)/|o_i|, N' = responses with ≥1 token
        n_seq = (lengths > 0).sum()
        want = dl * mask / lengths.clamp(min=1).unsqueeze(-1) / n_seq
    else:  # L = Σ ℓ m / (N · T_max)
        want = dl * mask / (N * T)
    assert torch.allclose(g, want, rtol=0, atol=1e-12)  # float64 throughout: 1e-12
    # the loss value too
    ell = torch.maximum(-A * r, -A * r.clamp(1 - lo, 1 + hi))
    if agg == "token-mean":
        L = (ell * mask).sum() / n_tok
    elif agg == "seq-mean-token-mean":
        L = ((ell * mask).sum(-1) / lengths).mean()
    else:
        L = (ell * mask).sum() / (N * T)
    assert out.loss.item() == pytest.approx(L.item(), abs=1e-12)


def test_seq_mean_token_mean_skips_empty_responses(gen):
    """A zero-length response is skipped in the mean over responses (and counted by none)."""
    bt = list(make_batch_tensors(gen, n=4, t=5))
    bt[3] = bt[3].clone()
    bt[3][2] = 0  # response 2 has no valid token
    _, g = _loss_and_grad(tuple(bt), "seq-mean-token-mean")
    logp, old_logp, adv, mask = bt[0], bt[1], bt[2], bt[3]
    r = torch.exp(logp - old_logp)
    A = adv.unsqueeze(-1).expand_as(logp)
    want = -_hand_indicator(A, r, 0.2, 0.2) * A * r * mask / mask.sum(-1).clamp(min=1).unsqueeze(-1) / 3
    assert torch.allclose(g, want, atol=1e-12)


def test_advantages_n_and_nt_broadcast_equal(gen):
    bt = make_batch_tensors(gen)
    adv = bt[2]
    out1, g1 = _loss_and_grad(bt, "token-mean", adv=adv)
    out2, g2 = _loss_and_grad(bt, "token-mean", adv=adv.unsqueeze(-1).expand(-1, bt[0].shape[1]).clone())
    assert out1.loss.item() == out2.loss.item()
    assert torch.equal(g1, g2)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_off_mask_garbage_does_not_leak(gen, agg):
    logp, old_logp, adv, mask, entropy, old_entropy = make_batch_tensors(gen)
    clean_out, clean_g = _loss_and_grad((logp, old_logp, adv, mask, entropy, old_entropy), agg)
    off = ~mask.bool()
    assert off.any()
    bad_logp = logp.masked_fill(off, float("inf"))
    bad_old = old_logp.masked_fill(off, -float("inf"))
    bad_adv = adv.unsqueeze(-1).expand_as(logp).clone().masked_fill(off, float("nan"))
    bad_ent = old_entropy.masked_fill(off, 1e30)
    out, g = _loss_and_grad((bad_logp, bad_old, adv, mask, entropy, bad_ent), agg, adv=bad_adv)
    assert out.loss.item() == pytest.approx(clean_out.loss.item(), abs=1e-12)
    assert bool(torch.isfinite(g).all())
    assert bool((g[off] == 0).all())
    assert torch.allclose(g, clean_g, atol=1e-12)
    assert all(math.isfinite(v) for v in out.metrics.values()), out.metrics


# ---------------------------------------------------------------------------------------------
# §8 metrics
# ---------------------------------------------------------------------------------------------


def test_section8_metrics_vs_hand(gen):
    logp, old_logp, adv, mask, entropy, old_entropy = make_batch_tensors(gen, n=8, t=6, spread=0.6)
    batch = ef.TokenBatch(logp, old_logp, adv, mask, entropy=entropy, old_entropy=old_entropy)
    m = ef.policy_loss(batch, spec=ef.LossSpec(0.2, 0.2)).metrics
    valid = mask.bool()
    n = int(mask.sum())
    A = adv.unsqueeze(-1).expand_as(logp)
    r = torch.exp(logp - old_logp)
    high = (A > 0) & (r > 1.2) & valid
    low = (A < 0) & (r < 0.8) & valid
    assert high.any() and low.any()
    assert m["clip/frac_high"] == pytest.approx(high.sum().item() / n, abs=1e-12)
    assert m["clip/frac_low"] == pytest.approx(low.sum().item() / n, abs=1e-12)
    assert m["nll"] == pytest.approx(-(logp[valid]).sum().item() / n, abs=1e-9)
    # H from old_entropy (docs/design.md §1), not the (different) entropy field
    assert m["entropy"] == pytest.approx(old_entropy[valid].sum().item() / n, abs=1e-9)
    assert m["entropy"] != pytest.approx(entropy[valid].sum().item() / n, abs=1e-6)
    # OPEFO flow: ΔH = −I A r (1−p)² (log p + H)
    p = logp.exp()
    I = (~(high | low)).double()
    dh = (-I * A * r * (1 - p) ** 2 * (logp + old_entropy))[valid]
    s_pos = dh[dh > 0].sum().item()
    s_neg = -dh[dh < 0].sum().item()
    assert m["flow/S_pos"] == pytest.approx(s_pos, rel=1e-9)
    assert m["flow/S_neg"] == pytest.approx(s_neg, rel=1e-9)
    assert m["flow/lambda_star"] == pytest.approx((s_neg - s_pos) / (s_neg + s_pos), rel=1e-9)
    # what the clip removed: the unclipped estimate summed over the clipped tokens
    dh_free = -A * r * (1 - p) ** 2 * (logp + old_entropy)
    assert m["flow/dH_clipped_high"] == pytest.approx(dh_free[high].sum().item(), rel=1e-9)
    assert m["flow/dH_clipped_low"] == pytest.approx(dh_free[low].sum().item(), rel=1e-9)
    # quadrant fractions (thresholds 0.8 / 0.2 on p) and STEER-estimate sums
    steer = -I * A * r * (1 - p) * (logp + old_entropy)
    quads = {
        "I": (A > 0) & (p > 0.8),
        "II": (A > 0) & (p < 0.2),
        "III": (A < 0) & (p < 0.2),
        "IV": (A < 0) & (p > 0.8),
    }
    for q, qm in quads.items():
        qm = qm & valid
        assert m[f"quadrant/{q}/frac"] == pytest.approx(qm.sum().item() / n, abs=1e-12)
        assert m[f"quadrant/{q}/dH"] == pytest.approx(steer[qm].sum().item(), abs=1e-12)
    assert m["empty_batch"] == 0.0 and m["n_tokens"] == n
