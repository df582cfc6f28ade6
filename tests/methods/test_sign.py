"""pos_adv_reweight (every schedule; the entropy controller step by step with state
round trip), positive_only / negative_only, rand_pos_clip (conditions, count, seed, state,
uniformity), all against hand computations (float64, exact or rtol 1e-10)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import entflow as ef
from entflow.errors import MissingInputError, ParameterError
from support.methods_ref import floor_count, loss_grad, make_batch, ppo_grad_weight, token_adv


def _with_step(b, step, total):
    return ef.TokenBatch(b.logp, b.old_logp, b.advantages, b.mask, step=step, total_steps=total)


def _expected(b, lam):
    A = token_adv(b)
    return torch.where(A > 0, torch.full_like(A, lam), torch.ones_like(A)) * b.mask


def test_pos_adv_constant_weights_and_gradient(gen):
    b = make_batch(gen)
    out, g = loss_grad(b, ef.get_method("pos_adv_reweight", schedule="constant", weight=0.3))
    w = _expected(b, 0.3)
    torch.testing.assert_close(out.token_weights, w, rtol=0, atol=0)
    torch.testing.assert_close(g, w * ppo_grad_weight(b) / b.mask.sum(), rtol=1e-10, atol=1e-14)
    assert out.metrics["pos_adv/weight"] == 0.3


def test_pos_adv_stage_schedule(gen):
    b = make_batch(gen)
    m = ef.get_method("pos_adv_reweight", schedule="stage")
    S = 11
    seen = []
    for s in range(S):
        lam = 0.0 if s <= 5 else (s - 5) / 5  # 0 for the first half, then linear to 1 at the last step
        out = ef.policy_loss(_with_step(b, s, S), m)
        assert out.metrics["pos_adv/weight"] == pytest.approx(lam, abs=1e-12)
        torch.testing.assert_close(out.token_weights, _expected(b, lam), rtol=0, atol=1e-15)
        seen.append(out.metrics["pos_adv/weight"])
    assert seen[0] == 0 and seen[-1] == pytest.approx(1.0)
    with pytest.raises(MissingInputError, match="total_steps"):
        ef.policy_loss(b, m)


def test_pos_adv_epoch_schedule(gen):
    b = make_batch(gen)
    m = ef.get_method("pos_adv_reweight", schedule="epoch", epochs=4)
    S = 20  # 5 steps per epoch
    for s in range(S):
        e = s // 5 + 1
        out = ef.policy_loss(_with_step(b, s, S), m)
        assert out.metrics["pos_adv/weight"] == pytest.approx((e - 1) / 3, abs=1e-12)
    with pytest.raises(ParameterError, match="epochs"):
        ef.get_method("pos_adv_reweight", schedule="epoch")


def test_pos_adv_entropy_controller_and_resume(gen):
    b = make_batch(gen)
    m = ef.get_method("pos_adv_reweight", target=0.5, delta=0.3, init=0.5)
    Hs = [0.6, 0.6, 0.1, 0.1, 0.1, 0.1, 0.9, 0.5, 0.7]
    lam = 0.5
    for k, H in enumerate(Hs):
        out = ef.policy_loss(b, m)
        assert out.metrics["pos_adv/weight"] == lam
        m.update({"entropy": H, "step": k})
        lam = min(lam + 0.3, 1.0) if H > 0.5 else max(lam - 0.3, 0.0)
        assert m.lam == pytest.approx(lam, abs=1e-15)
        if k == 3:
            saved, rest = copy.deepcopy(m.state_dict()), Hs[k + 1 :]
    fresh = ef.get_method("pos_adv_reweight", target=0.5, delta=0.3, init=0.5)
    fresh.load_state_dict(saved)
    for k, H in enumerate(rest):
        fresh.update({"entropy": H, "step": k})
    assert fresh.state_dict() == m.state_dict()
    # the other schedules ignore update
    c = ef.get_method("pos_adv_reweight", schedule="constant", weight=0.4)
    c.update({"step": 0})
    assert ef.policy_loss(b, c).metrics["pos_adv/weight"] == 0.4


def test_positive_and_negative_only(gen):
    b = make_batch(gen)
    A = token_adv(b)
    for name, zero in (("positive_only", A < 0), ("negative_only", A > 0)):
        out, g = loss_grad(b, name)
        w = (~zero).to(A.dtype) * b.mask
        torch.testing.assert_close(out.token_weights, w, rtol=0, atol=0)
        torch.testing.assert_close(g, w * ppo_grad_weight(b) / b.mask.sum(), rtol=1e-10, atol=1e-14)
        assert out.metrics[f"{name}/n_zeroed"] == int((zero & b.mask.bool()).sum())


def test_rand_pos_clip_conditions_count_seed_and_resume(gen):
    b = make_batch(gen, n=16, t=20)
    mask = b.mask.bool()
    pos = (token_adv(b) > 0) & mask
    n = floor_count(0.05, int(mask.sum()))
    assert int(pos.sum()) > n
    m = ef.get_method("rand_pos_clip", ratio=0.05, seed=4)
    twin = ef.get_method("rand_pos_clip", ratio=0.05, seed=4)
    for _ in range(3):
        out, g = loss_grad(b, m)
        sel = (out.token_weights == 0) & mask
        assert int(sel.sum()) == n == out.metrics["rand_pos_clip/n_selected"]
        assert bool((sel <= pos).all())
        torch.testing.assert_close(g, ppo_grad_weight(b) * b.mask * (~sel) / b.mask.sum(), rtol=1e-10, atol=1e-14)
        assert torch.equal(ef.policy_loss(b, twin).token_weights, out.token_weights)
    state = copy.deepcopy(m.state_dict())
    fresh = ef.get_method("rand_pos_clip", ratio=0.05, seed=99)
    fresh.load_state_dict(state)
    for _ in range(3):
        assert torch.equal(ef.policy_loss(b, fresh).token_weights, ef.policy_loss(b, m).token_weights)
    # minimum one token
    assert ef.policy_loss(b, ef.get_method("rand_pos_clip", ratio=0.0)).metrics["rand_pos_clip/n_selected"] == 1


def test_rand_pos_clip_uniform_over_positive_tokens(gen):
    b = make_batch(gen, n=8, t=10)
    mask = b.mask.bool()
    pos = (token_adv(b) > 0) & mask
    m = ef.get_method("rand_pos_clip", ratio=0.05, seed=0)
    n = floor_count(0.05, int(mask.sum()))
    trials = 1500
    counts = torch.zeros_like(b.mask)
    for _ in range(trials):
        counts += ((ef.policy_loss(b, m).token_weights == 0) & mask).to(counts.dtype)
    p = n / int(pos.sum())
    sd = math.sqrt(p * (1 - p) / trials)
    assert float((counts[pos] / trials - p).abs().max()) < 5 * sd
    assert float(counts[~pos].sum()) == 0
