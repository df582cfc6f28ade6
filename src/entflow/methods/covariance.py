"""Covariance-based interventions: Clip-Cov and KL-Cov (Cui et al., paper 003 §4, Alg. 1).

Both rank tokens by the centred cross-product ``Cov_t = (log p_t − mean log p)(A_t − mean A)``
(means over the valid tokens of the batch, paper 003 Eq. 8). A large positive Cov_t marks a
confident token reinforced (or an unlikely token punished): the updates that drive entropy
down. Clip-Cov removes a few of them at random from the gradient; KL-Cov puts a KL leash on
the top ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entflow.core.distributed import Reducer
from entflow.core.estimators import centred_covariance, covariance_sums
from entflow.core.ppo import NO_CLIP
from entflow.core.selection import smallest_mask
from entflow.errors import ParameterError
from entflow.methods._util import global_count, select_smallest
from entflow.methods.base import (
    NONNEG,
    SEED,
    UNIT,
    LossContext,
    Method,
    Stochastic,
    interval,
    one_of,
    param,
    register,
)


def global_covariance(ctxs: list[LossContext], reducer: Reducer) -> list[torch.Tensor]:
    """``Cov_t`` [N_i, T_i] of each context with the means of the whole batch (paper 003 Eq. 8)."""
    sums = reducer.sum([covariance_sums(c.batch.logp, c.adv, c.valid) for c in ctxs])
    return [centred_covariance(c.batch.logp, c.adv, c.valid, sums) for c in ctxs]


@register
@dataclass(repr=False)
class ClipCov(Stochastic, Method):
    """Clip-Cov: zero the loss of ``n = max(⌊ratio·N_valid⌋, 1)`` tokens drawn uniformly at
    random among the candidates (valid, not already clipped, ``cov_low < Cov_t < cov_high``).

    Fewer candidates than ``n``: all of them. The draw: one U(0, 1) key per token from the
    method's seeded generator (on the batch's device, in the state); the n candidates with the
    smallest keys are picked. Zeroed tokens still count in the aggregation denominator
    (official code). Raises entropy (removes strongly entropy-lowering updates).
    """

    name = "clip_cov"
    statistics_needs = ("logp", "old_logp")  # Cov_t of logp and A, the clip indicator I_t
    formula = "w_t = 0 on n = max(⌊ratio·N⌋,1) random tokens with I_t=1, ω_low < Cov_t < ω_high"
    paper = "paper 003 Eq. 9–10, Alg. 1 (Cui et al., Clip-Cov)"
    state_fields = ("generator",)

    ratio: float = param(2e-4, UNIT, "fraction of valid tokens to clip")
    cov_low: float = param(1.0, interval(), "ω_low: candidates have Cov_t > ω_low")
    cov_high: float = param(5.0, interval(), "ω_high: candidates have Cov_t < ω_high")
    seed: int = param(0, SEED, "seed of the selection generator")

    def validate(self) -> None:
        if not self.cov_low < self.cov_high:
            raise ParameterError(self.name, "cov_low", f"must be < cov_high = {self.cov_high}, got {self.cov_low}")

    def batch_statistics(self, ctxs: list[LossContext], reducer: Reducer) -> list[dict[str, torch.Tensor]]:
        covs = global_covariance(ctxs, reducer)  # paper 003 Eq. 8
        cands = [
            c.valid & (c.indicator > 0) & (cov > self.cov_low) & (cov < self.cov_high)  # Eq. 9
            for c, cov in zip(ctxs, covs, strict=True)
        ]
        n = global_count(ctxs, reducer, self.ratio)
        keys = reducer.rand(self.generator(reducer.device, reducer.shared))
        sel = select_smallest(keys, cands, n, reducer)
        return [{"selected": s, "candidates": c} for s, c in zip(sel, cands, strict=True)]

    def token_weights(self, ctx: LossContext) -> torch.Tensor:
        st = ctx.stat(self)
        sel = st["selected"]
        ctx.metrics["clip_cov/n_candidates"] = st["candidates"].sum().to(torch.float64)
        ctx.metrics["clip_cov/n_selected"] = sel.sum().to(torch.float64)
        return (~sel).to(ctx.adv.dtype)  # Eq. 10: selected tokens detached (weight 0)


@register
@dataclass(repr=False)
class KLCov(Method):
    """KL-Cov: on the top ``k = max(⌊ratio·N_valid⌋, 1)`` tokens by Cov_t add
    ``β·|logp_t − old_logp_t|`` to the loss; all tokens use the unclipped ``−A_t·r_t``
    (Eq. 12) unless ``keep_ppo_clip``. Ties in Cov: the earlier token (row-major order over the
    batch) ranks first.

    The penalty is zero on the first mini-batch after a rollout (logp = old_logp there), so with
    one update per rollout (strict on-policy) KL-Cov reduces to unclipped policy gradient.
    """

    name = "kl_cov"
    statistics_needs = ("logp",)  # Cov_t of logp and A (no clip: Eq. 12)
    formula = "ℓ_t = −A_t·r_t + β·|logp_t − old_logp_t|·[t ∈ top-k Cov],  k = max(⌊ratio·N⌋,1)"
    paper = "paper 003 Eq. 11–12, Alg. 1 (Cui et al., KL-Cov)"

    ratio: float = param(2e-3, UNIT, "fraction of valid tokens penalised (top by Cov)")
    beta: float = param(1.0, NONNEG, "KL coefficient β")
    keep_ppo_clip: bool = param(False, one_of(False, True), "keep the PPO clip instead of Eq. 12's unclipped loss")

    def clip_bounds(self) -> tuple[float, float] | None:
        return None if self.keep_ppo_clip else (NO_CLIP, NO_CLIP)  # Eq. 12: no clipping at all

    def pins_clip(self) -> bool:
        return not self.keep_ppo_clip

    def batch_statistics(self, ctxs: list[LossContext], reducer: Reducer) -> list[dict[str, torch.Tensor]]:
        covs = global_covariance(ctxs, reducer)  # paper 003 Eq. 8
        k, k_max = global_count(ctxs, reducer, self.ratio)
        neg_cov = [(-cov).masked_fill(~c.valid, torch.inf) for cov, c in zip(covs, ctxs, strict=True)]
        flat_v = reducer.cat_tokens([c.valid for c in ctxs])
        top = smallest_mask(reducer.cat_tokens(neg_cov), k, k_max) & flat_v  # Eq. 11: the top k by Cov
        return [{"selected": s} for s in reducer.split_tokens(top)]

    def token_loss(self, loss: torch.Tensor, ctx: LossContext) -> torch.Tensor:
        b, valid = ctx.batch, ctx.valid
        sel = ctx.stat(self)["selected"]
        kl = (b.logp - b.old_logp.detach()).masked_fill(~valid, 0).abs()
        n_sel = sel.sum()
        ctx.metrics["kl_cov/n_selected"] = n_sel.to(torch.float64)
        ctx.metrics["kl_cov/kl_mean"] = kl.detach().masked_fill(~sel, 0).sum() / n_sel.clamp(min=1)
        return loss + self.beta * kl * sel.to(kl.dtype)  # Eq. 12
