"""Clip_B (arXiv 2602.03392): drop the negative-advantage tokens whose update would lower the
entropy most, judged by an entropy-change score far below the batch's mean.

Per valid token, ``S_t = p_t·(H_t + log p_t)`` with p_t the rollout policy's probability of the
sampled token and H_t its entropy: the first-order change of the entropy per unit push down on
that token's logit (−∂H/∂z_t = p_t(log p_t + H_t)), so a rare token pushed down lowers the entropy
most. A negative-advantage token whose score lies more than μ standard deviations below the
batch mean, ``S_t − mean(S) < −μ·std(S)``, leaves the loss **and its denominator**
(``Method.token_mask``); positive and zero-advantage tokens always stay. mean and std are the
population statistics over the valid tokens of the batch (the whole optimisation batch with
``prepare_statistics``); when std < 1e-12 nothing is dropped. The advantages are GRPO's
(``(R − mean_g)/(std_g + ε)``, unbiased std; a group of one has mean 0 and std 1), as in
Trinity-RFT's ``ClipBAdvantageFn``, so ``clipb`` is an advantage replacer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entflow.core.batch import TokenBatch
from entflow.core.distributed import Reducer
from entflow.methods._util import ReportsShaping
from entflow.methods.base import NONNEG, LossContext, Method, param, register
from entflow.methods.group_baselines import group_moments, on_tokens

STD_FLOOR = 1e-12  # Trinity-RFT ClipBAdvantageFn: a batch whose scores do not spread keeps every token


@register
@dataclass(repr=False)
class ClipB(ReportsShaping, Method):
    """Clip_B: GRPO advantages, then negative-advantage tokens with ``S_t < mean(S) − μ·std(S)``
    leave the loss and its denominator; ``S_t = p_t·(H_t + log p_t)`` of the rollout policy.

    ``clipb/dropped_frac``: the share of valid tokens dropped; ``clipb/dropped_neg_frac``: the
    share of the negative-advantage tokens dropped.
    """

    name = "clipb"
    formula = (
        "A = (R − mean_g)/(std_g + ε);  drop t where A_t < 0 and S_t − mean(S) < −μ·std(S),  S_t = p_t(H_t + log p_t)"
    )
    paper = "Clip_B, arXiv 2602.03392 (one-sided entropy clip of negative tokens); Trinity-RFT clipb"
    replaces_advantages = True
    advantage_needs = ("rewards", "group_index")
    reads_entropy = True
    shaping_reads_entropy = False  # H is read by batch_statistics and token_mask, not by shape_advantages
    statistics_needs = ("old_logp", "old_entropy")

    mu: float = param(2.5, NONNEG, "drop below mean(S) − μ·std(S) (Trinity-RFT: 2.5)")
    epsilon: float = param(1e-6, NONNEG, "added to the group std of the advantages (Trinity-RFT: 1e-6)")

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        R, count, mean, std = group_moments(batch, self.name)
        lone = count < 2  # Trinity-RFT: a group of one has mean 0 and std 1
        a = (R - torch.where(lone, 0.0, mean)) / (torch.where(lone, 1.0, std) + self.epsilon)
        self._report(abs_mean=a.abs().mean())
        return on_tokens(a, adv, batch)

    def _score(self, ctx: LossContext) -> torch.Tensor:
        """``S_t = p_t·(H_t + log p_t)`` of the rollout policy, float64 ``[N, T]``, 0 off-mask."""
        valid = ctx.valid
        logp = ctx.batch.old_logp.detach().to(torch.float64).masked_fill(~valid, 0)
        H = ctx.batch.entropy_for_reading(self.name).to(torch.float64).masked_fill(~valid, 0)
        return (logp.exp() * (H + logp)).masked_fill(~valid, 0)  # arXiv 2602.03392: the entropy-change score

    def batch_statistics(self, ctxs: list[LossContext], reducer: Reducer) -> list[dict[str, torch.Tensor]]:
        """mean and std of S over the batch's valid tokens, and each context's drop decision
        (bool ``[N, T]``), so that the scores are computed once per step, not again in ``token_mask``."""
        scores = [self._score(c) for c in ctxs]
        n = reducer.sum([c.valid.sum().to(torch.float64) for c in ctxs]).clamp(min=1)
        mean = reducer.sum([s.sum() for s in scores]) / n
        var = reducer.sum([((s - mean) ** 2).masked_fill(~c.valid, 0).sum() for s, c in zip(scores, ctxs, strict=True)])
        std = (var / n).sqrt()  # population std, as Trinity-RFT
        spread = std >= STD_FLOOR
        return [
            {"mean": mean, "std": std, "drop": (c.adv < 0) & (s - mean < -self.mu * std) & spread & c.valid}
            for s, c in zip(scores, ctxs, strict=True)
        ]

    def token_mask(self, ctx: LossContext) -> torch.Tensor:
        st = ctx.stat(self)
        drop = st["drop"]
        neg = (ctx.adv < 0) & ctx.valid
        n_drop = drop.sum().to(torch.float64)
        ctx.metrics["clipb/dropped_frac"] = n_drop / ctx.valid.sum().clamp(min=1)
        ctx.metrics["clipb/dropped_neg_frac"] = n_drop / neg.sum().clamp(min=1)
        ctx.metrics["clipb/score_mean"] = st["mean"]
        ctx.metrics["clipb/score_std"] = st["std"]
        return ~drop
