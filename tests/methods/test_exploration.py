"""Entropy Ratio Clipping (arXiv 2512.05591) and AER (arXiv 2510.10959) against float64 hand references.

ERC: the loss and its gradient w.r.t. logp are PPO-clip's with the tokens whose entropy ratio
H/H_old leaves [1 − β_low, 1 + β_high] removed (weight 0, still in the denominator), computed here
with explicit loops. AER: the added term −Σ c_i·H_{i,t}/Σm (token-mean) with c_i = α·(1 − acc_g), its
gradient w.r.t. the entropy, the controller's trajectory written out by hand, and the state round
trip. Tolerance 1e-12 (float64).
"""

from __future__ import annotations

import math

import pytest
import torch

import entflow as ef
from entflow.errors import MissingInputError, ParameterError

D = torch.float64


def toy(seed: int = 0, n: int = 6, t: int = 5):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(n, t, generator=g, dtype=D) * 2).requires_grad_(True)
    old = (logp.detach() + 0.3 * torch.randn(n, t, generator=g, dtype=D)).clamp(max=-1e-3)
    H_old = torch.rand(n, t, generator=g, dtype=D) + 0.2
    H = (H_old * (1 + 0.1 * torch.randn(n, t, generator=g, dtype=D))).requires_grad_(True)
    mask = torch.ones(n, t, dtype=D)
    mask[1, 3:] = 0
    mask[4, 1:] = 0
    rewards = torch.tensor([1.0, 0, 0, 1, 1, 1], dtype=D)[:n]
    gi = torch.tensor([7, 7, 7, 2, 2, 2])[:n]
    return logp, old, H, H_old, mask, rewards, gi


def ppo_token(A: float, r: float, lo: float = 0.2, hi: float = 0.2) -> float:
    return max(-A * r, -A * min(max(r, 1 - lo), 1 + hi))


# --------------------------------------------------------------------------------------------
# erc
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("bl", "bh"), [(0.05, 0.05), (0.1, 0.02)])
def test_erc_loss_and_gradient_by_hand(bl, bh):
    logp, old, H, H_old, mask, _R, _gi = toy()
    A = torch.tensor([1.0, -0.5, 0.7, -1.2, 0.3, 2.0], dtype=D)
    out = ef.policy_loss(
        ef.TokenBatch(logp, old, A, mask, entropy=H, old_entropy=H_old), ef.get_method("erc", beta_low=bl, beta_high=bh)
    )
    out.loss.backward()
    n, t = mask.shape
    den = float(mask.sum())
    loss, grad, kept = 0.0, torch.zeros(n, t, dtype=D), 0
    for i in range(n):
        for j in range(t):
            if not mask[i, j]:
                continue
            rho = float(H.detach()[i, j]) / float(H_old[i, j])
            if not (1 - bl <= rho <= 1 + bh):
                continue
            kept += 1
            r = math.exp(float(logp.detach()[i, j]) - float(old[i, j]))
            a = float(A[i])
            loss += ppo_token(a, r) / den
            unclipped = -a * r >= -a * min(max(r, 0.8), 1.2)  # the max picks the unclipped term
            inside = 0.8 <= r <= 1.2
            grad[i, j] = (-a * r / den) if (unclipped or inside) else 0.0
    assert 0 < kept < int(den)  # the clip acts on some tokens and not on others
    assert abs(float(out.loss.detach()) - loss) <= 1e-12
    assert torch.allclose(logp.grad, grad, atol=1e-12, rtol=0)
    assert abs(out.metrics["erc/kept_frac"] - kept / den) <= 1e-12


def test_erc_on_policy_keeps_every_token_and_is_grpo():
    logp, old, _H, H_old, mask, _R, _gi = toy()
    A = torch.linspace(-1, 1, 6, dtype=D)
    b = ef.TokenBatch(logp, old, A, mask, entropy=H_old.clone(), old_entropy=H_old)
    w = ef.policy_loss(b, "erc").token_weights
    assert torch.equal(w, mask)
    zero = torch.zeros_like(H_old)
    assert torch.equal(
        ef.policy_loss(ef.TokenBatch(logp, old, A, mask, entropy=zero, old_entropy=zero), "erc").token_weights, mask
    )


def test_erc_needs_both_entropies_and_valid_margins():
    logp, old, H, _H_old, mask, *_ = toy()
    with pytest.raises(MissingInputError, match="old_entropy"):
        ef.policy_loss(ef.TokenBatch(logp, old, torch.ones(6, dtype=D), mask, entropy=H), "erc")
    for bad in ({"beta_low": 0.0}, {"beta_low": 1.0}, {"beta_high": 0.0}, {"beta_high": -0.1}):
        with pytest.raises(ParameterError, match=next(iter(bad))):
            ef.get_method("erc", **bad)


# --------------------------------------------------------------------------------------------
# aer
# --------------------------------------------------------------------------------------------


def aer_batch(adv=None):
    logp, old, H, H_old, mask, R, gi = toy()
    full = ef.TokenBatch(logp.detach(), old, None, mask, old_entropy=H_old, rewards=R, group_index=gi)
    return full, logp, old, H, H_old, mask, R, gi


def test_aer_term_and_entropy_gradient_by_hand():
    full, logp, old, H, _H_old, mask, _R, gi = aer_batch()
    m = ef.get_method("aer", alpha0=0.03, alpha_max=0.1)
    adv = ef.compute_advantages(full, m)
    assert torch.equal(adv, ef.compute_advantages(full, "grpo"))  # the advantages pass through
    # acc: group 7 has 1 of 3 correct, group 2 has 3 of 3: c = 0.03·(2/3) and 0
    perm = torch.tensor([3, 0, 5, 1, 4, 2])  # a mini-batch in another order: looked up by group id
    b = ef.TokenBatch(logp[perm], old[perm], adv[perm], mask[perm], entropy=H[perm], group_index=gi[perm])
    out = ef.policy_loss(b, m)
    grpo = ef.policy_loss(ef.TokenBatch(logp[perm], old[perm], adv[perm], mask[perm]), "grpo")
    den = float(mask.sum())
    c = {7: 0.03 * 2 / 3, 2: 0.0}
    term = -sum(c[int(gi[i])] * float(H.detach()[i, j]) for i in range(6) for j in range(5) if mask[i, j]) / den
    assert abs(out.metrics["aer/loss"] - term) <= 1e-12
    assert abs(float(out.loss.detach()) - float(grpo.loss.detach()) - term) <= 1e-12
    out.loss.backward()
    want = torch.zeros_like(H)
    for i in range(6):
        want[i] = -c[int(gi[i])] * mask[i] / den
    assert torch.allclose(H.grad, want, atol=1e-14, rtol=0)


def test_aer_controller_trajectory_and_state():
    m = ef.get_method("aer", tau=0.5, eta=0.1, alpha_max=0.05)
    entropies = [1.0, 0.8, 0.2, 0.1, 0.9]
    alpha, want = 0.0, []
    for h in entropies:  # H_0 = 1.0 (the first step's), target 0.5
        alpha = min(max(alpha + 0.1 * (0.5 - h), 0.0), 0.05)
        want.append(alpha)
    got = []
    for h in entropies:
        m.update({"entropy": h, "step": 0})
        got.append(m.alpha)
    assert got == pytest.approx(want, abs=1e-15) and 0 < max(got) == 0.05 and got[-1] < 0.05
    state = m.state_dict()
    assert state == {"alpha": m.alpha, "initial_entropy": 1.0}
    m2 = ef.get_method("aer", tau=0.5, eta=0.1, alpha_max=0.05)
    m2.load_state_dict(state)
    m.update({"entropy": 0.2})
    m2.update({"entropy": 0.2})
    assert m2.alpha == m.alpha and m2.initial_entropy == 1.0
    assert ef.get_method("aer", initial=2.0).initial_entropy == 2.0


def test_aer_reads_rewards_and_groups_only():
    full, *_ = aer_batch()
    m = ef.get_method("aer")
    m.shape_advantages(full.token_advantages() if full.advantages is not None else torch.zeros_like(full.logp), full)
    base = m.difficulty(full.group_index).clone()
    import dataclasses

    for f, v in (("old_entropy", full.old_entropy * 3), ("old_logp", full.old_logp - 1), ("logp", full.logp - 1)):
        m.shape_advantages(torch.zeros_like(full.logp), dataclasses.replace(full, **{f: v}))
        assert torch.equal(m.difficulty(full.group_index), base), f
    m.shape_advantages(torch.zeros_like(full.logp), dataclasses.replace(full, rewards=1 - full.rewards))
    assert not torch.equal(m.difficulty(full.group_index), base)
    with pytest.raises(MissingInputError, match="rewards"):
        ef.get_method("aer").difficulty(full.group_index)  # no compute_advantages yet


def test_aer_bad_parameters():
    for bad in ({"tau": 0.0}, {"tau": 1.0}, {"eta": 0.0}, {"alpha0": -1.0}, {"alpha0": 0.2, "alpha_max": 0.1}):
        with pytest.raises(ParameterError, match=next(iter(bad))):
            ef.get_method("aer", **bad)
