"""Advantage shapers that modify the advantages they are given (docs/design.md §6, "Adv."): entropy
advantage, EDGE-GRPO, PPL shaping, position shaping.

They run in ``compute_advantages`` after the GRPO advantages (or after a reward-based builder),
left to right in a composition. All statistics they read are detached.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entflow.core.advantages import group_stats
from entflow.core.batch import TokenBatch
from entflow.methods._util import ReportsShaping, group_inverse, require_all, response_mean
from entflow.methods.base import NONNEG, UNIT, Method, integer, interval, one_of, optional, param, register

STD_EPS = 1e-6  # docs/design.md §1


@register
@dataclass(repr=False)
class EntropyAdvantage(ReportsShaping, Method):
    """Entropy advantage: ``A'_t = A_t + min(α·H_t, |A_t|/κ)``, H detached (old_entropy first).

    The bonus is capped by |A|/κ with κ > 1 (Cheng et al.'s condition), so it never flips the
    sign of a negative advantage (κ ≤ 1 would let A + |A|/κ ≥ 0 for A < 0). Favours
    high-entropy ("forking") tokens; paper 002 finds it can *lower* entropy in practice.
    """

    name = "entropy_advantage"
    formula = "A'_t = A_t + min(α·H_t, |A_t|/κ)"
    paper = "Cheng et al. 2025 (entropy advantage); paper 000 Table 6"
    reads_entropy = True

    alpha: float = param(0.4, NONNEG, "entropy scale α")
    kappa: float = param(2.0, interval(1, lo_open=True), "cap divisor κ (> 1: the paper's condition)")

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        H = batch.entropy_for_reading("entropy_advantage").to(adv.dtype)
        bonus = torch.minimum(self.alpha * H, adv.abs() / self.kappa)  # Cheng et al. Eq. (ψ(H))
        self._report(bonus_mean=bonus.masked_fill(~batch.valid, 0).sum() / batch.valid.sum().clamp(min=1))
        return adv + bonus


@register
@dataclass(repr=False)
class EdgeGRPO(ReportsShaping, Method):
    """EDGE-GRPO entropy-normalised advantages: ``Â_i = A_i / (P_i / mean_g P)``.

    ``P_i`` = mean token entropy of response i (old_entropy first, detached); ``mean_g P`` over
    the non-empty responses of i's group. *Our reading*: group mean and detached P (the
    official code uses a global, un-detached mean). Confident responses get larger |A|.

    *Ours*: the factor ``mean_g P / P_i`` is capped at ``max_factor`` (default 10): a nearly
    deterministic response (P_i → 0) would otherwise get an advantage ~10⁵ times its group's
    (the earlier 1e-6 floor on P_i allowed exactly that). A group whose mean P is 0 keeps its
    advantages.
    """

    name = "edge_grpo"
    formula = "Â_i = A_i · min(mean_g P / P_i, max_factor),  P_i = mean_t H_{i,t}"
    paper = "paper 000 Table 6 (EDGE-GRPO; group mean and detach are our reading)"
    reads_entropy = True
    advantage_needs = ("group_index",)

    max_factor: float = param(10.0, interval(1), "cap on the factor mean_g P / P_i (ours)")

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        g = batch.require("group_index", "edge_grpo")
        valid = batch.valid
        H = batch.entropy_for_reading("edge_grpo").to(torch.float64)
        P = response_mean(H, valid)
        nonempty = valid.any(-1).to(torch.float64)
        inv = group_inverse(g.to(P.device))
        k = inv.numel()  # at most N groups: fixed-size buffers, no sync
        tot = torch.zeros(k, dtype=P.dtype, device=P.device).index_add_(0, inv, P * nonempty)
        cnt = torch.zeros(k, dtype=P.dtype, device=P.device).index_add_(0, inv, nonempty)
        Pbar = (tot / cnt.clamp(min=1))[inv]
        ratio = (Pbar / P.clamp(min=1e-300)).clamp(max=self.max_factor)  # Table 6 (EDGE-GRPO); cap: ours
        factor = torch.where(Pbar > 0, ratio, torch.ones_like(P))
        self._report(factor_mean=factor.mean(), factor_max=factor.max())
        return adv * factor.to(adv.dtype).unsqueeze(-1)


@register
@dataclass(repr=False)
class PPLShaping(ReportsShaping, Method):
    """PPL-based shaping: ``A'_{i,t} = A_{i,t}·(1 − α·w_i)``, ``w_i = (lnPPL_i − μ_g)/(σ_g + 1e-6)``,
    ``lnPPL_i = −mean_t old_logp`` (group mean, unbiased std). Low-perplexity (confident)
    responses get larger |A|, high-perplexity ones smaller (paper 004 §5)."""

    name = "ppl_shaping"
    formula = "A'_{i,t} = A_{i,t}(1 − α·w_i),  w_i = z-score of lnPPL_i = −mean_t old_logp in its group"
    paper = "paper 004 Eq. 7, 9 (Deng et al., PPL-based shaping)"
    advantage_needs = ("group_index", "old_logp")

    alpha: float = param(0.01, NONNEG, "shaping strength α")

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        require_all(batch, self.advantage_needs, "ppl_shaping")
        assert batch.group_index is not None
        lnppl = -response_mean(batch.old_logp.detach().to(torch.float64), batch.valid)  # paper 004 Eq. 7
        mu, sd = group_stats(lnppl, batch.group_index)
        w = (lnppl - mu) / (sd + STD_EPS)
        self._report(w_absmax=w.abs().max())
        return adv * (1 - self.alpha * w).to(adv.dtype).unsqueeze(-1)  # paper 004 Eq. 9


@register
@dataclass(repr=False)
class PositionShaping(ReportsShaping, Method):
    """Position-based shaping: ``A'_t = A_t + sign(A_t)·γ·σ(d·m·(l_t − c))``,
    ``l_t = t/(|o_i| − 1)`` the relative position of token t among response i's valid tokens
    (0 for a one-token response). With ``d = +1`` late tokens get larger |A| (paper 004).
    *Our reading*: the paper prints n = −0.5 for the shift; we centre at ``c = 0.5``.
    Active only for ``start <= batch.step < start + duration`` when those are given
    (``start`` None with a duration means 0; ``duration`` None means forever).
    """

    name = "position_shaping"
    formula = "A'_t = A_t + sign(A_t)·γ·σ(d·m·(l_t − c)),  l_t = t/(|o|−1)"
    paper = "paper 004 Eq. 8, 10 (Deng et al., position-based shaping)"

    gamma: float = param(0.1, NONNEG, "bonus scale γ")
    m: float = param(15.0, NONNEG, "sigmoid steepness m")
    c: float = param(0.5, UNIT, "centre c of the sigmoid in relative position")
    d: int = param(1, one_of(1, -1), "direction: +1 favours late tokens, −1 early ones")
    start: int | None = param(None, optional(integer(0)), "first step at which shaping is on (None: 0)")
    duration: int | None = param(None, optional(integer(1)), "number of steps it stays on (None: forever)")

    @property
    def reads_step(self) -> bool:  # type: ignore[override]
        return self.start is not None or self.duration is not None  # on for a window of steps

    def active(self, step: int) -> bool:
        s0 = self.start or 0
        return step >= s0 and (self.duration is None or step < s0 + self.duration)

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        on = self.active(int(batch.step))
        self._report(active=float(on))
        if not on:
            return adv
        valid = batch.valid
        t = torch.cumsum(valid.to(adv.dtype), -1) - 1
        n = valid.to(adv.dtype).sum(-1, keepdim=True)
        rel = t / (n - 1).clamp(min=1)  # paper 004 Eq. 8; one-token response: 0
        b = self.gamma * torch.sigmoid(self.d * self.m * (rel - self.c))  # paper 004 Eq. 10
        return adv + torch.sign(adv) * b
