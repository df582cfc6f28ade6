"""Advantage shapers through ``compute_advantages`` against per-response / per-token loops
written from docs/design.md §6 (float64, rtol 1e-10): w_reinforce, unlikeliness, entropy_advantage, gtpo,
edge_grpo, ppl_shaping, position_shaping; missing fields raise MissingInputError naming them."""

from __future__ import annotations

import math

import pytest
import torch

import entflow as ef
from entflow.errors import MissingInputError
from support.methods_ref import D, make_batch, ref_grpo


def _mean_valid(x, mask, i):
    v = x[i][mask[i]]
    return float(v.mean()) if v.numel() else 0.0


def _grpo_tokens(b):
    return ref_grpo(b.rewards, b.group_index).unsqueeze(-1).expand_as(b.logp) * b.mask


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_w_reinforce(gen):
    b = make_batch(gen)
    R = b.rewards.clone()
    R[1] = 0.7
    b = ef.TokenBatch(b.logp, b.old_logp, None, b.mask, rewards=R, group_index=b.group_index)
    adv = ef.compute_advantages(b, ef.get_method("w_reinforce", lam=0.2))
    exp = torch.tensor([0.2 if r > 0.5 else -1.0 for r in R.tolist()], dtype=D)
    _close(adv, exp.unsqueeze(-1).expand_as(adv) * b.mask)
    with pytest.raises(MissingInputError, match="rewards"):
        ef.compute_advantages(ef.TokenBatch(b.logp, b.old_logp, torch.zeros(8), b.mask), "w_reinforce")


def test_unlikeliness(gen):
    b = make_batch(gen, n=12, group=6)
    R = torch.tensor([1, 1, 0, 1, 1, 1, 0, 0, 1, 0, 1, 1], dtype=D)
    b = ef.TokenBatch(b.logp, b.old_logp, None, b.mask, rewards=R, group_index=b.group_index)
    mask = b.mask.bool()
    score = [_mean_valid(b.old_logp, mask, i) for i in range(12)]
    R2 = R.clone()
    for g in range(2):
        idx = list(range(6 * g, 6 * g + 6))
        order = sorted(idx, key=lambda i: (score[i], i))  # rank 0 = least likely
        for rank, i in enumerate(order):
            R2[i] = R[i] * (1 - 0.25 * rank / 6)
    exp = ref_grpo(R2, b.group_index)
    adv = ef.compute_advantages(b, "unlikeliness")
    _close(adv, exp.unsqueeze(-1).expand_as(adv) * b.mask)


def test_entropy_advantage(gen):
    b = make_batch(gen)
    A = _grpo_tokens(b)
    H = b.old_entropy
    exp = A + torch.minimum(0.4 * H, A.abs() / 2.0)
    _close(ef.compute_advantages(b, "entropy_advantage"), exp * b.mask)


def test_gtpo(gen):
    b = make_batch(gen, n=12, group=4)
    R = torch.tensor([1, 1, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1], dtype=D)  # group 1 all wrong, group 2 all right
    b = ef.TokenBatch(b.logp, b.old_logp, None, b.mask, old_entropy=b.old_entropy, rewards=R, group_index=b.group_index)
    mask = b.mask.bool()
    H = b.old_entropy
    n, t = mask.shape
    exp = torch.zeros(n, t, dtype=D)
    for g in range(3):
        idx = list(range(4 * g, 4 * g + 4))
        r = R[idx]
        mu, sd = float(r.mean()), float(r.std())
        for i in idx:
            for j in range(t):
                if not mask[i, j]:
                    continue
                Rp = float(R[i])
                if R[i] > 0.5:
                    act = [k for k in idx if R[k] > 0.5 and mask[k, j]]
                    Hbar = sum(float(H[k, j]) for k in act) / len(act)
                    Rp += 0.1 * float(H[i, j]) / Hbar
                exp[i, j] = 0.0 if sd == 0 else (Rp - mu) / (sd + 1e-6)
    _close(ef.compute_advantages(b, "gtpo"), exp)


def test_edge_grpo(gen):
    b = make_batch(gen)
    mask = b.mask.bool()
    A = _grpo_tokens(b)
    P = [_mean_valid(b.old_entropy, mask, i) for i in range(8)]
    exp = A.clone()
    for i in range(8):
        idx = (b.group_index == b.group_index[i]).nonzero().squeeze(1).tolist()
        Pbar = sum(P[k] for k in idx) / len(idx)
        exp[i] = A[i] / (P[i] / Pbar)
    _close(ef.compute_advantages(b, "edge_grpo"), exp)


def test_ppl_shaping(gen):
    b = make_batch(gen)
    mask = b.mask.bool()
    A = _grpo_tokens(b)
    lnppl = torch.tensor([-_mean_valid(b.old_logp, mask, i) for i in range(8)], dtype=D)
    exp = A.clone()
    for i in range(8):
        idx = (b.group_index == b.group_index[i]).nonzero().squeeze(1)
        mu, sd = lnppl[idx].mean(), lnppl[idx].std()
        w = (lnppl[i] - mu) / (sd + 1e-6)
        exp[i] = A[i] * (1 - 0.3 * w)
    _close(ef.compute_advantages(b, ef.get_method("ppl_shaping", alpha=0.3)), exp)
    with pytest.raises(MissingInputError, match="group_index"):
        ef.compute_advantages(ef.TokenBatch(b.logp, b.old_logp, b.advantages, b.mask), "ppl_shaping")


@pytest.mark.parametrize("d", [1, -1])
def test_position_shaping(gen, d):
    b = make_batch(gen)
    mask = b.mask.bool()
    A = _grpo_tokens(b)
    exp = A.clone()
    for i in range(8):
        L = int(mask[i].sum())
        for j in range(L):
            rel = j / (L - 1) if L > 1 else 0.0
            bonus = 0.2 * (1 / (1 + math.exp(-(d * 15 * (rel - 0.4)))))
            exp[i, j] = A[i, j] + math.copysign(1.0, float(A[i, j])) * bonus * float(A[i, j] != 0)
    got = ef.compute_advantages(b, ef.get_method("position_shaping", gamma=0.2, c=0.4, d=d))
    _close(got, exp)


def test_position_shaping_window(gen):
    b = make_batch(gen)
    m = ef.get_method("position_shaping", start=3, duration=2)
    base = _grpo_tokens(b)
    for step, on in [(0, False), (2, False), (3, True), (4, True), (5, False)]:
        bs = ef.TokenBatch(b.logp, b.old_logp, None, b.mask, rewards=b.rewards, group_index=b.group_index, step=step)
        changed = not torch.equal(ef.compute_advantages(bs, m), base)
        assert changed is on, step


def test_shaper_metrics_reach_the_loss(gen):
    b = make_batch(gen)
    m = ef.get_method("w_reinforce")
    adv = ef.compute_advantages(b, m)
    out = ef.policy_loss(ef.TokenBatch(b.logp, b.old_logp, adv, b.mask), m)
    frac = float((b.rewards > 0.5).to(D).mean())
    assert out.metrics["w_reinforce/frac_correct"] == pytest.approx(frac)


def test_shaping_metrics_of_a_composition_come_from_every_shaper(gen):
    b = make_batch(gen)
    m = ef.get_method("edge_grpo+ppl_shaping")
    assert m.shaping_metrics() == {}  # nothing shaped yet
    b.advantages = ef.compute_advantages(b, m)
    got = m.shaping_metrics()
    assert any(k.startswith("edge_grpo/") for k in got) and any(k.startswith("ppl_shaping/") for k in got)
    loss_metrics = ef.policy_loss(b, m).metrics  # policy_loss reports the same values
    for k, v in got.items():
        assert loss_metrics[k] == pytest.approx(float(v), rel=1e-12), k


# -- edge_grpo: a near-deterministic response must not get a ~1e5 advantage ------------------


def test_edge_grpo_factor_is_capped():
    n, t = 4, 5
    H = torch.full((n, t), 1.0, dtype=D)
    H[0] = 1e-5  # response 0 is almost deterministic: P_0 = 1e-5, mean_g P ≈ 0.75
    mask = torch.ones(n, t, dtype=D)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=D)
    b = ef.TokenBatch(
        torch.zeros(n, t, dtype=D), torch.zeros(n, t, dtype=D), adv, mask, old_entropy=H, group_index=torch.zeros(n)
    )
    out = ef.compute_advantages(b, ef.get_method("edge_grpo"))
    P = H.mean(-1)
    raw = P.mean() / P  # the uncapped EDGE-GRPO factor: ~7.5e4 for response 0
    assert float(raw[0]) > 1e4
    expected = adv * raw.clamp(max=10.0)
    torch.testing.assert_close(out, expected[:, None].expand(n, t), rtol=1e-12, atol=0)
    assert float(out.abs().max()) <= 10.0
    # a looser cap is a parameter
    out50 = ef.compute_advantages(b, ef.get_method("edge_grpo", max_factor=50.0))
    assert float(out50[0, 0]) == pytest.approx(50.0)
    with pytest.raises(ef.ParameterError, match="max_factor"):
        ef.get_method("edge_grpo", max_factor=0.5)


# -- entropy_advantage: κ > 1 (Cheng et al.) ---------------------------------------------------


@pytest.mark.parametrize("kappa", [1.0, 0.5, 0.1])
def test_entropy_advantage_rejects_kappa_at_most_one(kappa):
    with pytest.raises(ef.ParameterError, match="kappa"):
        ef.get_method("entropy_advantage", kappa=kappa)


def test_entropy_advantage_keeps_negative_advantages_negative():
    n, t = 3, 4
    adv = torch.tensor([-1.0, -0.01, 2.0], dtype=D)
    H = torch.full((n, t), 5.0, dtype=D)  # a large entropy: the bonus is at its cap |A|/κ
    b = ef.TokenBatch(torch.zeros(n, t, dtype=D), torch.zeros(n, t, dtype=D), adv, torch.ones(n, t), old_entropy=H)
    out = ef.compute_advantages(b, ef.get_method("entropy_advantage", kappa=1.01))
    assert bool((out[:2] < 0).all())
    torch.testing.assert_close(out[:, 0], adv + adv.abs() / 1.01)
