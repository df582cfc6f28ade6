"""EntroPIC: entropy stabilisation with proportional-integral control (arXiv 2511.15248, Yang et
al.; docs/methods.md "Entropy controls from the field").

Positive samples lower the entropy, negative ones raise it, and the high-probability tokens
carry most of that effect. EntroPIC adds to the loss a term that moves the weight of the
high-probability tokens (p > ``p_high``) by ±α — positive ones up by α, negative ones down by α
(for α > 0; the other way for α < 0) — with α from a PI controller on the entropy error
``e = H − H*``: α = clip(K_p·e_k + K_i·Σ_{j<k} e_j, ±α_max).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from entflow.core.distributed import Reducer
from entflow.errors import MissingInputError
from entflow.methods._util import global_mean_entropy
from entflow.methods.base import NONNEG, LossContext, Method, interval, param, register


@register
@dataclass(repr=False)
class EntroPIC(Method):
    """EntroPIC: PI-controlled extra weight on high-probability positive and negative tokens.

    Loss term (arXiv 2511.15248, official loss ``compute_policy_loss_entropic``):
    ``α · agg(−r_t·|A_t|·1[p_t > p_high])`` with r_t = exp(logp − old_logp) **with grad** and
    p_t the current probability of the sampled token (detached comparison). Per token this is
    a weight 1 + α on the unclipped −A·r of a high-probability positive token and 1 − α on a
    negative one: α > 0 (entropy above target) sharpens the policy, α < 0 flattens it.

    Controller: ``e_k = H_k − H*`` with ``H_k`` the batch's mean old entropy over valid tokens
    (a batch statistic: over the whole optimisation batch with ``prepare_statistics``);
    ``α_k = clip(K_p·e_k + K_i·I_k, −α_max, α_max)`` in the loss, and after the step
    ``update(metrics)`` accumulates ``I_{k+1} = I_k + (metrics["entropy"] − H*)`` (the integral
    excludes the current error, as in the official code). State: ``integral``.
    """

    name = "entropic"
    formula = "loss += α·agg(−r·|A|·1[p > p_high]),  α = clip(K_p·(H−H*) + K_i·Σ_{past}(H−H*), ±α_max)"
    paper = "arXiv 2511.15248 (EntroPIC) §4, PI control of positive/negative sample weights; official code"
    reads_entropy = True
    statistics_needs = ("old_entropy",)  # the batch mean entropy H of the PI error
    state_fields = ("integral",)

    target: float = param(0.1, NONNEG, "target entropy H* (nats per token)")
    kp: float = param(1.0, NONNEG, "proportional gain K_p")
    ki: float = param(0.01, NONNEG, "integral gain K_i")
    p_high: float = param(0.95, interval(0, 1, lo_open=True, hi_open=True), "high-probability threshold on p_t")
    alpha_max: float = param(1.0, NONNEG, "bound on |α|")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.integral: float = 0.0  # Σ_{j<k} (H_j − H*)

    def batch_statistics(self, ctxs: list[LossContext], reducer: Reducer) -> list[dict[str, torch.Tensor]]:
        mean_H = global_mean_entropy(ctxs, reducer, "entropic")
        return [{"H": mean_H} for _ in ctxs]

    def alpha(self, H: torch.Tensor) -> torch.Tensor:
        """α for a batch of mean entropy ``H`` (0-d) under the current integral."""
        u = self.kp * (H - self.target) + self.ki * self.integral  # arXiv 2511.15248: PI control law
        return u.clamp(-self.alpha_max, self.alpha_max)

    def loss_terms(self, ctx: LossContext, agg: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        b = ctx.batch
        valid = ctx.valid
        H = ctx.stat(self)["H"]
        a = self.alpha(H)
        lp = b.logp.masked_fill(~valid, 0)  # padding may hold anything: fill before exp
        r = torch.exp(lp - b.old_logp.detach().masked_fill(~valid, 0))
        high = valid & (b.logp.detach() > math.log(self.p_high))
        adjust = torch.where(high, -r * ctx.adv.abs(), torch.zeros_like(r))  # official: −ratio·|A| on p > p_high
        adj = agg(adjust)
        term = a.to(adj.dtype) * adj
        ctx.metrics["entropic/alpha"] = a.detach()
        ctx.metrics["entropic/integral"] = float(self.integral)
        ctx.metrics["entropic/entropy"] = H
        ctx.metrics["entropic/high_frac"] = high.sum() / valid.sum().clamp(min=1)
        return {"entropic/loss": term}

    def update(self, metrics: dict[str, Any]) -> None:
        if "entropy" not in metrics:
            raise MissingInputError("entropy", "entropic.update (metrics of the rollout step)")
        self.integral += float(metrics["entropy"]) - self.target  # integral of e = H − H*
