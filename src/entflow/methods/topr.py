"""TOPR, Tapered Off-Policy REINFORCE (arXiv 2503.14286): REINFORCE whose negative samples are
weighted by a truncated importance ratio.

``ℓ_t = −sg(α)·A_t·log π_t`` with ``α = 1`` where ``A_t ≥ 0`` and ``α = clip(ρ, 0, 1)`` where
``A_t < 0``. Positive samples are pushed up at full strength whatever their ratio (no clip that
would cut their gradient); negative samples are pushed down only as far as the current policy
still produces them (ρ < 1 tapers them), which keeps the update stable off-policy without a
KL term. ``importance_sampling_level`` chooses ρ: the token ratio ``r_t = π_t/μ_t`` (Trinity-RFT's
``TOPRPolicyLossFn``, ROLL) or the paper's sequence ratio ``π(y)/μ(y) = exp(Σ_t log r_t)`` over the
response's valid tokens. The advantages are whatever the batch carries: the group advantages by
default, Trinity-RFT's "baseline trick"; the paper weighs by the raw reward R (pass the rewards as
``advantages`` for that form).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entflow.core.ppo import NO_CLIP
from entflow.methods._util import valid_mean
from entflow.methods.base import LossContext, Method, one_of, param, register

LEVELS = ("token", "sequence")


@register
@dataclass(repr=False)
class TOPR(Method):
    """TOPR: ``ℓ_t = −sg(α)·A_t·log π_t``; ``α = 1`` on ``A ≥ 0``, ``clip(ρ, 0, 1)`` on ``A < 0``.

    The gradient w.r.t. ``logp`` is ``−α·A``. ``ρ``: the token ratio r_t (``"token"``, the
    default, as Trinity-RFT and ROLL) or the response's ratio exp(Σ_t log r_t) (``"sequence"``,
    the paper's TOPR gradient). PPO's clip does not apply: the method fixes the clip
    bounds to none (the §8 clip statistics read 0), and a dual clip is ignored.
    ``topr/neg_weight_mean``: the mean α over negative-advantage tokens.
    """

    name = "topr"
    formula = "ℓ_t = −sg(α)·A_t·log π_t,  α = 1 (A ≥ 0), clip(ρ, 0, 1) (A < 0);  ρ = r_t or π(y)/μ(y)"
    paper = "TOPR, arXiv 2503.14286 (Tapered Off-Policy REINFORCE gradient); Trinity-RFT topr, ROLL"

    importance_sampling_level: str = param(
        "token", one_of(*LEVELS), "ρ is the token ratio (Trinity-RFT, ROLL) or the sequence ratio (the paper)"
    )

    def clip_bounds(self) -> tuple[float, float]:
        return (NO_CLIP, NO_CLIP)  # the taper replaces PPO's clip

    def pins_clip(self) -> bool:
        return True

    def token_loss(self, loss: torch.Tensor, ctx: LossContext) -> torch.Tensor:
        valid = ctx.valid
        b = ctx.batch
        log_r = (b.logp.detach().masked_fill(~valid, 0) - b.old_logp.detach().masked_fill(~valid, 0)).to(ctx.adv.dtype)
        if self.importance_sampling_level == "sequence":
            log_r = log_r.sum(-1, keepdim=True).expand_as(log_r)  # log π(y)/μ(y) over the valid tokens
        taper = torch.exp(log_r.clamp(max=0))  # clip(ρ, 0, 1), never overflowing
        alpha = torch.where(ctx.adv < 0, taper, torch.ones_like(taper))  # arXiv 2503.14286: the TOPR gradient
        neg = (ctx.adv < 0) & valid
        ctx.metrics["topr/neg_weight_mean"] = valid_mean(alpha, neg)
        ctx.metrics["topr/neg_frac"] = neg.sum().to(torch.float64) / valid.sum().clamp(min=1)
        logp = b.logp.masked_fill(~valid, 0)
        return -alpha * ctx.adv * logp
