"""Advantage builders that start again from the rewards (docs/design.md §6, "Adv."): W-REINFORCE,
Unlikeliness reward, GTPO.

They run in ``compute_advantages`` and discard the GRPO advantages they are given
(``replaces_advantages``), so in a composition each must come first among the shapers and at
most one may be used. Their fields are checked when they run (``advantage_needs``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entflow.core.advantages import group_advantages, group_stats
from entflow.core.batch import TokenBatch
from entflow.methods._util import ReportsShaping, group_inverse, require_all, response_mean
from entflow.methods.base import NONNEG, Method, interval, param, register

CORRECT = 0.5  # gtpo: a response is correct when R > 0.5 (rewards are 1/0)
STD_EPS = 1e-6  # docs/design.md §1: a division by a std is by (std + 1e-6)


@register
@dataclass(repr=False)
class WReinforce(ReportsShaping, Method):
    """W-REINFORCE: ``A_i = λ`` for a correct response (R_i > threshold), ``−1`` otherwise; no
    baseline, no std. Small λ down-weights positive samples, which keeps entropy up."""

    name = "w_reinforce"
    formula = "A_i = λ if R_i > threshold else −1"
    paper = "Zhu et al. 2025 (W-REINFORCE), official code; paper 000 Table 6"
    replaces_advantages = True
    advantage_needs = ("rewards",)

    lam: float = param(0.1, NONNEG, "advantage λ of a correct response")
    threshold: float = param(0.5, interval(), "a response is correct when R > threshold")

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        require_all(batch, self.advantage_needs, "w_reinforce")
        assert batch.rewards is not None
        correct = batch.rewards > self.threshold
        a = torch.where(correct, self.lam, torch.full_like(adv[:, 0], -1.0))  # Zhu et al.: λ·PSR + NSR
        self._report(frac_correct=correct.to(torch.float64).mean())
        return a.unsqueeze(-1).expand_as(adv).clone()


@register
@dataclass(repr=False)
class Unlikeliness(ReportsShaping, Method):
    """Unlikeliness reward: within each group rank responses by mean ``old_logp`` (rank 0 = the
    least likely; ties by position in the batch), ``R_i ← R_i·(1 − β·rank_i/G)``, then GRPO
    advantages (group std). Favours correct but unlikely answers, which keeps entropy up."""

    name = "unlikeliness"
    formula = "R_i ← R_i·(1 − β·rank_i/G)  (rank 0 = least likely by mean old_logp), then GRPO"
    paper = "He et al. 2025 (unlikeliness reward), official code; paper 000 Table 6"
    replaces_advantages = True
    advantage_needs = ("rewards", "group_index", "old_logp")  # ranks by mean old_logp

    beta: float = param(0.25, NONNEG, "penalty β per rank step")

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        require_all(batch, self.advantage_needs, "unlikeliness")
        assert batch.rewards is not None and batch.group_index is not None
        R = batch.rewards.to(torch.float64)
        g = batch.group_index
        inv = group_inverse(g.to(R.device))
        score = response_mean(batch.old_logp.detach().to(torch.float64), batch.valid)
        rank, size = _rank_in_group(score, inv)
        R2 = R * (1 - self.beta * rank / size)  # He et al.: unlikeliness reward
        a = group_advantages(R2, g, scale="group", eps=STD_EPS, validate=batch.validate)
        self._report(reward_mean=R2.mean())
        return a.to(adv.dtype).unsqueeze(-1).expand_as(adv).clone()


def _rank_in_group(score: torch.Tensor, inv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Ascending rank of ``score`` [N] within each group (ties by index) and the group sizes, ``[N]`` each.

    ``inv``: dense group ids (0..K−1). Sort-based, with fixed-size buffers: no host sync.
    """
    n = score.numel()
    o1 = torch.argsort(score, stable=True)
    order = o1[torch.argsort(inv[o1], stable=True)]  # sorted by group, then score, then index
    size = torch.zeros(n, dtype=torch.long, device=score.device).index_add_(0, inv, torch.ones_like(inv))
    start = torch.cumsum(size, 0) - size  # where each group's run begins in ``order``
    pos = torch.empty_like(order)
    pos[order] = torch.arange(n, device=score.device)
    rank = pos - start[inv]
    return rank.to(score.dtype), size[inv].to(score.dtype)


@register
@dataclass(repr=False)
class GTPO(ReportsShaping, Method):
    """GTPO token-level reward shaping (the form of paper 000 Table 6 we adopt).

    For a correct response i (R_i > 0.5): ``R'_{i,t} = R_i + α·H_{i,t} / H̄_{g,t}`` where
    ``H̄_{g,t}`` is the mean entropy at position t over the correct responses of the same group
    that have a token at t; incorrect responses keep ``R'_{i,t} = R_i``. Then
    ``A_{i,t} = (R'_{i,t} − mean_g R)/(std_g R + 1e-6)`` with the group statistics of the
    unshaped rewards; a group with all-equal rewards gets A = 0 (docs/design.md §4). H: old_entropy
    first, detached. High-entropy tokens of correct answers get more credit (entropy up).
    """

    name = "gtpo"
    formula = "R'_{i,t} = R_i + α·H_{i,t}/mean_{k∈g correct, active at t} H_{k,t} (correct i); A = (R' − μ_g)/(σ_g+ε)"
    paper = "paper 000 Table 6 (GTPO, the form we adopt)"
    reads_entropy = True
    replaces_advantages = True
    advantage_needs = ("rewards", "group_index")

    alpha: float = param(0.1, NONNEG, "entropy bonus scale α")

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        require_all(batch, self.advantage_needs, "gtpo")
        assert batch.rewards is not None and batch.group_index is not None
        H = batch.entropy_for_reading("gtpo").to(torch.float64)
        R = batch.rewards.to(torch.float64)
        valid = batch.valid
        inv = group_inverse(batch.group_index.to(H.device))
        k = inv.numel()  # at most N groups: fixed-size buffers, no sync
        mean, std = group_stats(R, batch.group_index)
        active = (R > CORRECT).unsqueeze(-1) & valid  # correct responses' tokens
        Hm = H.masked_fill(~active, 0)
        tot = torch.zeros(k, H.shape[1], dtype=H.dtype, device=H.device).index_add_(0, inv, Hm)
        cnt = torch.zeros(k, H.shape[1], dtype=H.dtype, device=H.device).index_add_(0, inv, active.to(H.dtype))
        Hbar = (tot / cnt.clamp(min=1))[inv]  # mean over correct, active responses of the group at t
        ok = active & (Hbar > 0)
        bonus = torch.where(ok, self.alpha * Hm / Hbar.clamp(min=1e-30), torch.zeros_like(H))  # Table 6 (GTPO)
        R2 = R.unsqueeze(-1) + bonus
        a = (R2 - mean.unsqueeze(-1)) / (std.unsqueeze(-1) + STD_EPS)
        a = torch.where((std > 0).unsqueeze(-1), a, torch.zeros_like(a))  # docs/design.md §4: equal rewards → 0
        self._report(bonus_mean=bonus.masked_fill(~ok, 0).sum() / ok.sum().clamp(min=1))
        return a.to(adv.dtype)
