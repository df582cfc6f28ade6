"""TOPR (methods/topr.py): against a float64 hand formula (token and sequence ratio) and against
Trinity-RFT 0.6.0's ``TOPRPolicyLossFn`` on the same tensors (the token ratio, as Trinity and ROLL
use it): loss and gradient w.r.t. the log-probs to 1e-6 relative, token-mean and seq-mean-token-mean,
ragged masks, an all-zero and an all-equal group (advantage 0: no gradient from those rows).
"""

from __future__ import annotations

import math

import pytest
import torch

import entflow as ef
from entflow.errors import ConfigError, ParameterError
from entflow.lab.config import LabConfig
from support.field_peers import (
    AGGS,
    ATOL,
    RTOL,
    assert_matches_hand,
    grpo_batch,
    ours,
    rows_loss_and_grad,
    trinity_loss,
)
from support.peers import trinity


def hand_topr(b: ef.TokenBatch, agg: str, level: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Σ over responses and tokens of −α·A·log π with Python loops, reduced by ``agg``; autograd."""
    logp = b.logp.detach().clone().requires_grad_(True)
    A, old, m = b.token_advantages(), b.old_logp, b.mask
    rows = []
    for i in range(logp.shape[0]):
        ts = [t for t in range(logp.shape[1]) if m[i, t] > 0]
        seq_log_ratio = sum(float(logp[i, t].detach() - old[i, t]) for t in ts)
        terms = []
        for t in ts:
            rho = seq_log_ratio if level == "sequence" else float(logp[i, t].detach() - old[i, t])
            alpha = 1.0 if A[i, t] >= 0 else min(math.exp(rho), 1.0)  # arXiv 2503.14286: the taper
            terms.append(-alpha * A[i, t] * logp[i, t])
        rows.append(terms)
    return rows_loss_and_grad(rows, agg, logp)


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_topr_against_the_hand_formula(gen, level, agg):
    b = grpo_batch(gen)
    loss, grad = ours(b, ef.get_method("topr", importance_sampling_level=level), agg=agg)
    assert_matches_hand((loss, grad), hand_topr(b, agg, level))
    A = b.token_advantages()
    assert torch.all(grad[4:12] == 0)  # the all-zero and all-equal groups: A = 0
    pos = (A > 0) & b.valid
    # positive tokens: the full REINFORCE gradient −A/denominator, whatever the ratio
    denom = b.mask.sum() if agg == "token-mean" else (b.mask.sum(-1, keepdim=True) * b.mask.shape[0]).expand_as(A)
    torch.testing.assert_close(grad[pos], (-A / denom)[pos], rtol=1e-12, atol=0)


def test_topr_tapers_only_negative_tokens_above_ratio_one(gen):
    b = grpo_batch(gen)
    _, grad = ours(b, "topr")
    A, r = b.token_advantages(), (b.logp - b.old_logp).detach().exp()
    neg_low = (A < 0) & (r < 1) & b.valid
    neg_high = (A < 0) & (r >= 1) & b.valid
    assert neg_low.any() and neg_high.any()
    full = -A / b.mask.sum()
    torch.testing.assert_close(grad[neg_high], full[neg_high], rtol=1e-12, atol=0)  # clip(r, 0, 1) = 1
    torch.testing.assert_close(grad[neg_low], (full * r)[neg_low], rtol=1e-12, atol=0)  # tapered by r < 1


@pytest.mark.parametrize("agg", AGGS)
def test_topr_equals_trinity(gen, agg):
    mod = trinity("algorithm.policy_loss_fn.topr_policy_loss")
    b = grpo_batch(gen)
    loss, grad = ours(b, "topr", agg=agg)
    loss_p, grad_p = trinity_loss(mod.TOPRPolicyLossFn(loss_agg_mode=agg), b, b.token_advantages())
    torch.testing.assert_close(loss, loss_p, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(grad, grad_p, rtol=RTOL, atol=ATOL)
    assert grad.abs().sum() > 0


def test_topr_ignores_the_clip_and_reports_no_clipping(gen):
    b = grpo_batch(gen)
    wide, _ = ours(b, "topr", clip_low=0.01, clip_high=0.01)
    narrow, _ = ours(b, "topr")
    assert torch.equal(wide, narrow)
    out = ef.policy_loss(b, "topr")
    assert out.metrics["clip/frac_high"] == 0.0 and out.metrics["clip/frac_low"] == 0.0
    assert 0 < out.metrics["topr/neg_weight_mean"] < 1


def test_an_unknown_importance_sampling_level_names_the_parameter():
    with pytest.raises(ParameterError, match="importance_sampling_level"):
        ef.get_method("topr", importance_sampling_level="sentence")
    with pytest.raises(ConfigError, match="importance_sampling_level"):
        LabConfig(method="topr", method_params={"importance_sampling_level": "geometric"}).validate()
