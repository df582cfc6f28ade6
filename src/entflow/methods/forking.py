"""Forking tokens: learn only from the high-entropy minority (Wang et al. 2025; paper 000 Table 6)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entflow.core.distributed import Reducer
from entflow.core.selection import scoped_quantile
from entflow.methods.base import LossContext, Method, interval, param, register


@register
@dataclass(repr=False)
class ForkingTokens(Method):
    """Loss weight 0 on tokens whose entropy is below the ``1 − ρ`` quantile (linear
    interpolation, as ``torch.quantile``) of the valid tokens' entropies in the batch; the top
    ρ ("forking" tokens) keep weight 1. H: old_entropy first, detached. Zeroed tokens still
    count in the aggregation denominator (official code).
    """

    name = "forking_tokens"
    formula = "w_t = 1 if H_t ≥ Q_{1−ρ}(H over valid tokens) else 0"
    paper = "Wang et al. 2025 (80/20 forking tokens); paper 000 Table 6"
    reads_entropy = True
    statistics_needs = ("old_entropy",)  # the 1 − ρ quantile of H

    rho: float = param(0.2, interval(0, 1, lo_open=True), "fraction ρ of highest-entropy tokens kept")

    def batch_statistics(self, ctxs: list[LossContext], reducer: Reducer) -> list[dict[str, torch.Tensor]]:
        """The ``1 − ρ`` quantile of the valid tokens' entropies over the whole batch."""
        H = reducer.cat_tokens([c.batch.entropy_for_reading("forking_tokens") for c in ctxs])
        valid = reducer.cat_tokens([c.valid for c in ctxs])
        thr = scoped_quantile(H, valid, 1.0 - self.rho)[:1].reshape(()) if H.numel() else H.new_zeros(())
        return [{"threshold": thr} for _ in ctxs]  # Wang et al.: top-ρ entropy tokens

    def token_weights(self, ctx: LossContext) -> torch.Tensor:
        valid = ctx.valid
        H = ctx.batch.entropy_for_reading("forking_tokens")
        thr = ctx.stat(self)["threshold"]
        keep = (H >= thr) | ~valid
        ctx.metrics["forking_tokens/threshold"] = thr
        ctx.metrics["forking_tokens/kept_frac"] = (keep & valid).sum().to(torch.float64) / valid.sum().clamp(min=1)
        return keep.to(ctx.adv.dtype)
