"""Clip_B (methods/clipb.py) and the ``token_mask`` hook it runs on: against a float64 hand formula,
against Trinity-RFT 0.6.0's ``ClipBAdvantageFn`` followed by its PPO loss on the mask it returns
(loss and gradient w.r.t. the log-probs to 1e-6 relative, token-mean and seq-mean-token-mean,
ragged masks, an all-zero and an all-equal group), and over micro-batches (``prepare_statistics``)
against the whole batch.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

import entflow as ef
from support.field_peers import (
    AGGS,
    ATOL,
    GROUPS,
    REWARDS,
    RTOL,
    assert_bad_parameter_is_named,
    assert_matches_hand,
    field_batch,
    ours,
    rows_loss_and_grad,
    trinity_loss,
    trinity_ppo,
)
from support.methods_ref import D, rows
from support.peers import trinity


def clipb_batch(gen, **extra):
    b = field_batch(gen, **extra)
    m = ef.get_method("clipb", **{k: v for k, v in extra.items() if k in ("mu", "epsilon")})
    return dataclasses.replace(b, advantages=ef.compute_advantages(b, m))


def hand_keep(b: ef.TokenBatch, mu: float) -> torch.Tensor:
    """Tokens kept, by loops: S = p(H + log p) of the rollout policy, population mean/std over the
    valid tokens; drop A < 0 with S − mean < −μ·std."""
    valid = [(i, t) for i in range(b.logp.shape[0]) for t in range(b.logp.shape[1]) if b.mask[i, t] > 0]
    S = {(i, t): math.exp(b.old_logp[i, t]) * (float(b.old_entropy[i, t]) + float(b.old_logp[i, t])) for i, t in valid}
    mean = sum(S.values()) / len(S)
    std = math.sqrt(sum((s - mean) ** 2 for s in S.values()) / len(S))
    keep = torch.zeros_like(b.mask, dtype=torch.bool)
    A = b.token_advantages()
    for i, t in valid:
        keep[i, t] = not (A[i, t] < 0 and S[(i, t)] - mean < -mu * std)
    return keep


def hand_ppo(b: ef.TokenBatch, keep: torch.Tensor, agg: str) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO-clip (0.2) over the kept tokens only, its denominators counted over them; autograd."""
    logp = b.logp.detach().clone().requires_grad_(True)
    A = b.token_advantages()
    rows = []
    for i in range(logp.shape[0]):
        terms = []
        for t in range(logp.shape[1]):
            if keep[i, t]:
                r = torch.exp(logp[i, t] - b.old_logp[i, t])
                terms.append(torch.maximum(-A[i, t] * r, -A[i, t] * r.clamp(0.8, 1.2)))
        if terms:
            rows.append(terms)
    return rows_loss_and_grad(rows, agg, logp)


def test_clipb_advantages_are_grpo_with_its_epsilon_and_a_lone_group_standardised_by_one(gen):
    R = torch.cat([REWARDS, torch.tensor([1.0], dtype=D)])
    b = field_batch(gen, R, torch.cat([GROUPS, torch.tensor([9])]))
    a = ef.compute_advantages(b, ef.get_method("clipb", epsilon=0.01))[:, 0]
    for k in range(4):
        rs = R[4 * k : 4 * k + 4]
        std = float(rs.std()) if float(rs.std()) > 0 else 0.0
        want = [(float(r) - float(rs.mean())) / (std + 0.01) for r in rs]
        assert a[4 * k : 4 * k + 4].tolist() == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert a[16].item() == pytest.approx(1 / 1.01, rel=1e-12)  # Trinity-RFT: mean 0, std 1 for a group of one


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("mu", [0.2, 0.5])
def test_clipb_against_the_hand_formula(gen, mu, agg):
    b = clipb_batch(gen)
    keep = hand_keep(b, mu)
    assert (~keep & b.valid).sum() >= 2, "the batch drops tokens"
    loss, grad = ours(b, ef.get_method("clipb", mu=mu), agg=agg)
    assert_matches_hand((loss, grad), hand_ppo(b, keep, agg))
    assert torch.all(grad[~keep] == 0)
    # a weight of 0 would keep the dropped tokens in the denominator: a different loss
    _, grad_w = hand_ppo(b, b.valid, agg)
    assert not torch.allclose(grad[keep & b.valid], grad_w[keep & b.valid])


def test_clipb_reports_what_it_dropped(gen):
    b = clipb_batch(gen)
    keep = hand_keep(b, 0.3)
    out = ef.policy_loss(b, ef.get_method("clipb", mu=0.3))
    dropped = int((~keep & b.valid).sum())
    neg = int(((b.token_advantages() < 0) & b.valid).sum())
    assert out.metrics["clipb/dropped_frac"] == pytest.approx(dropped / int(b.valid.sum()), rel=1e-12)
    assert out.metrics["clipb/dropped_neg_frac"] == pytest.approx(dropped / neg, rel=1e-12)
    assert out.metrics["n_tokens"] == int(b.valid.sum()) - dropped  # the dropped tokens left the batch
    assert torch.all(out.token_weights[~keep] == 0)


def test_scores_without_spread_drop_nothing(gen):
    b = clipb_batch(gen)
    b = dataclasses.replace(b, old_logp=torch.zeros_like(b.old_logp), old_entropy=torch.zeros_like(b.old_entropy))
    out = ef.policy_loss(b, ef.get_method("clipb", mu=0.0))  # p = 1, H = 0: S ≡ 0, std 0 < 1e-12
    assert out.metrics["clipb/dropped_frac"] == 0.0
    assert out.metrics["n_tokens"] == int(b.valid.sum())


def trinity_clipb(b: ef.TokenBatch, mu: float, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Trinity-RFT's ``ClipBAdvantageFn`` on a verl ``DataProto`` → (advantages, clipped mask)."""
    mod = trinity("algorithm.advantage_fn.clipb_advantage")
    from verl import DataProto

    token_rewards = torch.zeros_like(b.mask)
    token_rewards[torch.arange(b.mask.shape[0]), b.mask.sum(-1).long() - 1] = b.rewards
    exps = DataProto.from_dict(
        tensors={
            "token_level_rewards": token_rewards,
            "response_mask": b.mask.clone(),
            "rollout_log_probs": b.old_logp.clone(),
            "entropys": b.old_entropy.clone(),
        },
        non_tensors={"uid": np.array([str(int(g)) for g in b.group_index], dtype=object)},
    )
    out, _ = mod.ClipBAdvantageFn(epsilon=eps, mu=mu)(exps)
    return out.batch["advantages"], out.batch["response_mask"]


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize(("mu", "eps"), [(0.2, 1e-6), (0.4, 0.01), (2.5, 1e-6)])
def test_clipb_equals_trinity(gen, mu, eps, agg):
    b = field_batch(gen)
    method = ef.get_method("clipb", mu=mu, epsilon=eps)
    adv = ef.compute_advantages(b, method)
    adv_p, mask_p = trinity_clipb(b, mu, eps)
    torch.testing.assert_close(adv, adv_p.to(D), rtol=RTOL, atol=ATOL)
    b = dataclasses.replace(b, advantages=adv)
    keep = hand_keep(b, mu)
    assert torch.equal(mask_p.bool(), keep & b.valid)  # the same tokens dropped
    loss, grad = ours(b, method, agg=agg, dual_clip=3.0)  # Trinity's PPO loss keeps its dual clip c = 3
    loss_p, grad_p = trinity_loss(trinity_ppo(agg), b, adv_p.to(D), mask=mask_p)
    torch.testing.assert_close(loss, loss_p, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(grad, grad_p, rtol=RTOL, atol=ATOL)
    assert grad.abs().sum() > 0


@pytest.mark.parametrize("agg", [*AGGS, "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("method", ["clipb", "clipb+chord+positive_nll", "clipb+clip_cov"])
def test_micro_batches_with_prepared_statistics_sum_to_the_whole_batch(gen, method, agg):
    b = clipb_batch(gen, expert_mask=torch.arange(16) % 5 == 0)
    params = {"clipb.mu": 0.3} if "+" in method else {"mu": 0.3}
    if "clip_cov" in method:
        params.update({"clip_cov.ratio": 0.2, "cov_low": -5.0, "cov_high": 5.0})
    whole = ef.get_method(method, **params)
    loss, grad = ours(b, whole, agg=agg)
    split = ef.get_method(method, **params)
    spec = ef.LossSpec(agg=agg)
    logp = b.logp.detach().clone().requires_grad_(True)
    parts = [slice(0, 5), slice(5, 11), slice(11, 16)]
    micro = [rows(b, s, logp=logp[s]) for s in parts]
    stats = ef.prepare_statistics([dataclasses.replace(m, logp=m.logp.detach()) for m in micro], split, spec)
    total = sum(ef.policy_loss(m, split, spec, stats=s).loss for m, s in zip(micro, stats, strict=True))
    (g,) = torch.autograd.grad(total, logp)
    torch.testing.assert_close(total.detach(), loss, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(g, grad, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(("param", "bad"), [("mu", -0.5), ("epsilon", -1e-6), ("mu", "2")])
def test_bad_parameters_name_the_parameter(param, bad):
    assert_bad_parameter_is_named("clipb", param, bad)


def test_clipb_needs_the_rollout_statistics(gen):
    b = clipb_batch(gen)
    with pytest.raises(ef.MissingInputError, match="old_entropy"):
        ef.policy_loss(dataclasses.replace(b, old_entropy=None, entropy=None), "clipb")
