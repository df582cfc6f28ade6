"""STARE, Surprisal-guided Token-level Advantage Reweighting for policy Entropy stability
(arXiv 2606.19236; read against the authors' pipeline in their README and their verl code,
``compute_stare_token_weights`` and ``STAREController``).

Among the positive-advantage tokens of the batch, the top ``P`` fraction by surprisal
``s_t = −log π_t`` (the entropy-critical set L+) get their loss multiplied by ``W > 1``; in the
two-sided variant ``C2`` the top ``P`` of the negative-advantage tokens (L−) by ``M < 1``. The
weights apply only while the batch's mean entropy is below a target (the closed-loop gate);
above it STARE is plain GRPO. Pushing up a rare token raises the entropy and pushing down a
rare token lowers it, so W on L+ and M on L− both push the entropy up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from entflow.core.distributed import Reducer
from entflow.core.ppo import aggregation_count
from entflow.errors import MissingInputError
from entflow.methods._util import select_smallest
from entflow.methods.base import NONNEG, UNIT, LossContext, Method, interval, one_of, param, register

VARIANTS = ("O1", "C2")
CEIL_TOLERANCE = 0.999999  # k = ⌈P·|T±|⌉ with the authors' tolerance: 30·0.1 counts 3, not 4


@register
@dataclass(repr=False)
class STARE(Method):
    """STARE: ``w_t = W`` on L+, ``M`` on L− (``C2``), 1 elsewhere, while ``H̄ < H_tgt``.

    L± = the ``k± = max(1, ⌈top_p_ratio·|T±|⌉)`` tokens of T± = {valid, ±A > 0} with the highest
    surprisal −log π (current policy, detached; ties: the earlier token), over the call's batch
    or, with ``prepare_statistics``, the whole optimisation batch. ``H̄``: the batch's entropy
    (the rollout's ``old_entropy`` when given) aggregated as the loss aggregates; the weights
    apply only when ``H̄ < target_entropy`` (``stare/gate_on``). The weight multiplies the PPO-clip
    token loss, so a token keeps its gradient's sign. ``adaptive`` (the paper's adaptive schedule):
    after each step, ``W ← clip(W + α·sgn(H_tgt − H), 1, w_max)`` and
    ``M ← clip(M − α·sgn(H_tgt − H), m_min, 1)`` with the step's ``entropy`` metric; the
    authors' code applies that step's update before its own loss, entflow from the next step on.
    """

    name = "stare"
    formula = "w_t = W (t ∈ L+), M (t ∈ L−, C2), 1 else, when H̄ < H_tgt;  L± = top-P of ±A > 0 by −log π"
    paper = "STARE, arXiv 2606.19236 (surprisal-quantile reweighting, target-entropy gate); TRL PR, unmerged"
    reads_entropy = True
    statistics_needs = ("logp", "old_entropy")

    variant: str = param("O1", one_of(*VARIANTS), "O1: W on L+ only; C2: also M on L−")
    top_p_ratio: float = param(0.1, UNIT, "P, the fraction of T+ (and T−) by surprisal that forms L+ (L−)")
    reweight_w: float = param(1.1, interval(1), "W ≥ 1, the weight on L+ (the authors: 1.1; 1.05 at 14B/32B)")
    reweight_m: float = param(0.9, interval(0, 1, lo_open=True), "M in (0, 1], the weight on L− (C2)")
    target_entropy: float = param(0.3, NONNEG, "H_tgt: the weights apply while the batch entropy is below it")
    adaptive: bool = param(
        False, one_of(True, False), "move W and M by ±alpha each step (the paper's adaptive schedule)"
    )
    alpha: float = param(0.01, NONNEG, "step of the adaptive schedule")
    w_max: float = param(1.5, interval(1), "upper bound of the adaptive W")
    m_min: float = param(0.5, interval(0, 1, lo_open=True), "lower bound of the adaptive M")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.w_now = self.reweight_w  # the weights in force (move only when adaptive)
        self.m_now = self.reweight_m

    @property
    def state_fields(self) -> tuple[str, ...]:  # type: ignore[override]
        return ("w_now", "m_now") if self.adaptive else ()

    def is_controller(self) -> bool:
        return self.adaptive

    def update(self, metrics: dict[str, Any]) -> None:
        if not self.adaptive:
            return
        if "entropy" not in metrics:
            raise MissingInputError("entropy", "stare.update (metrics of the rollout step, adaptive=True)")
        H = float(metrics["entropy"])
        if not math.isfinite(H):
            return  # the authors' controller skips a non-finite entropy
        sign = (H < self.target_entropy) - (H > self.target_entropy)  # sgn(H_tgt − H)
        self.w_now = min(max(self.w_now + self.alpha * sign, 1.0), self.w_max)
        self.m_now = min(max(self.m_now - self.alpha * sign, self.m_min), 1.0)

    def _critical(self, ctxs: list[LossContext], reducer: Reducer, positive: bool) -> list[torch.Tensor]:
        """L+ (or L−) per context: the top-P candidates by surprisal over the whole batch."""
        cands = [c.valid & ((c.adv > 0) if positive else (c.adv < 0)) for c in ctxs]
        if self.top_p_ratio == 0:
            return [torch.zeros_like(c) for c in cands]
        count = reducer.sum([c.sum().to(torch.float64) for c in cands])
        k = torch.floor(count * self.top_p_ratio + CEIL_TOLERANCE).clamp(min=1)
        k = torch.minimum(k, count).clamp(min=1).to(torch.long)
        bound = min(reducer.n_tokens, math.floor(self.top_p_ratio * reducer.n_tokens + CEIL_TOLERANCE) + 1)
        keys = [c.batch.logp.detach().to(torch.float64) for c in ctxs]  # smallest log π = highest surprisal
        return select_smallest(keys, cands, (k, max(bound, 1)), reducer)

    def _entropy(self, ctxs: list[LossContext], reducer: Reducer) -> torch.Tensor:
        """H̄ over the batch, aggregated as the loss aggregates (the authors: the loss's agg mode)."""
        agg = ctxs[0].agg
        parts = []
        for c in ctxs:
            H = c.batch.entropy_for_reading(self.name).to(torch.float64).masked_fill(~c.valid, 0)
            if agg == "seq-mean-token-mean":
                parts.append((H.sum(-1) / c.valid.sum(-1).clamp(min=1)).sum())
            else:
                parts.append(H.sum())
        num = reducer.sum(parts)
        den = reducer.sum([aggregation_count(c.valid, agg).to(torch.float64) for c in ctxs])
        if agg == "seq-mean-token-sum-norm":
            den = den * (ctxs[0].max_len if ctxs[0].max_len is not None else reducer.max_len)
        return num / den.clamp(min=1)

    def batch_statistics(self, ctxs: list[LossContext], reducer: Reducer) -> list[dict[str, torch.Tensor]]:
        H = self._entropy(ctxs, reducer)
        plus = self._critical(ctxs, reducer, positive=True)
        minus = self._critical(ctxs, reducer, positive=False) if self.variant == "C2" else None
        return [
            {"entropy": H, "plus": p, **({"minus": minus[i]} if minus is not None else {})} for i, p in enumerate(plus)
        ]

    def token_weights(self, ctx: LossContext) -> torch.Tensor:
        st = ctx.stat(self)
        gate = st["entropy"] < self.target_entropy  # the closed-loop gate, a 0-d bool on the device
        one = torch.ones_like(ctx.adv)
        w = torch.where(st["plus"], one * self.w_now, one)
        if self.variant == "C2":
            w = torch.where(st["minus"], one * self.m_now, w)
        w = torch.where(gate, w, one)
        n = ctx.valid.sum().clamp(min=1)
        ctx.metrics["stare/gate_on"] = gate.to(torch.float64)
        ctx.metrics["stare/entropy"] = st["entropy"]
        ctx.metrics["stare/plus_frac"] = (st["plus"] & ctx.valid).sum().to(torch.float64) / n
        if self.variant == "C2":
            ctx.metrics["stare/minus_frac"] = (st["minus"] & ctx.valid).sum().to(torch.float64) / n
        ctx.metrics["stare/w"] = self.w_now
        ctx.metrics["stare/m"] = self.m_now
        return w
