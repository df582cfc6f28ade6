"""OPEFO: balance the entropy flow of each batch (paper 001 §5, Eq. 7–9, Fig. 3, Table 2).

Each token's update either raises entropy (ΔH_t > 0, set S+) or lowers it (S−). OPEFO
scales the two sets by (1 + λ) and (1 − λ) with λ chosen so that the weighted sum of ΔH is
zero: the batch as a whole neither collapses nor inflates entropy. ``opefo_target`` (ours)
shifts λ so the flow pushes toward a target entropy instead of zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entflow.core.distributed import Reducer
from entflow.core.estimators import ESTIMATORS
from entflow.core.flow import balance, flow_sums
from entflow.errors import ParameterError
from entflow.methods._util import global_mean_entropy
from entflow.methods.base import NONNEG, LossContext, Method, interval, one_of, optional, param, register


def flow_weights(
    dH: torch.Tensor, valid: torch.Tensor, lam_pos: torch.Tensor | float, lam_neg: torch.Tensor | float
) -> torch.Tensor:
    """``[N, T]`` weights ``1 + lam_pos`` where ΔH > 0, ``1 − lam_neg`` where ΔH < 0, else 1."""
    w = torch.ones_like(dH)
    w = torch.where((dH > 0) & valid, 1.0 + lam_pos, w)  # paper 001 Eq. 7, S+ term
    return torch.where((dH < 0) & valid, 1.0 - lam_neg, w)  # Eq. 7, S− term


def global_flow(ctxs: list[LossContext], reducer: Reducer, estimator: str) -> list[dict[str, torch.Tensor]]:
    """S+ and S− of the ``estimator``'s ΔH over the whole batch (paper 001 Eq. 9), per context."""
    sums = [torch.stack(flow_sums(c.estimate(estimator), c.valid)).to(torch.float64) for c in ctxs]
    s = reducer.sum(sums)
    return [{"S_pos": s[0], "S_neg": s[1]} for _ in ctxs]


@register
@dataclass(repr=False)
class OPEFO(Method):
    """OPEFO token weights from the batch's entropy flow.

    ΔH_t by ``estimator`` (default ``opefo``: −w(1−p)²(log p + H)); S+ = Σ_{ΔH>0} ΔH,
    S− = Σ_{ΔH<0} |ΔH|, λ* = (S− − S+)/max(S− + S+, 1e-12). Variants (Table 2):
    ``adaptive`` weights S+ by (1+λ*) and S− by (1−λ*); ``static`` uses the fixed ``lam``
    instead of λ*; ``pos_only`` only scales S+ by (1+λ*); ``neg_only`` only S− by (1−λ*).
    Designed for strict on-policy training (r ≡ 1), but works off-policy with w = I·A·r.
    """

    name = "opefo"
    statistics_needs = ("logp", "old_logp", "old_entropy")  # S± = flow sums of the estimator's ΔH
    formula = "w_t = 1+λ* if ΔH_t>0, 1−λ* if ΔH_t<0;  λ* = (S− − S+)/(S− + S+)"
    paper = "paper 001 Eq. 7–9, Fig. 3, Table 2 (OPEFO)"
    reads_entropy = True

    variant: str = param("adaptive", one_of("adaptive", "static", "pos_only", "neg_only"), "how λ is applied")
    lam: float = param(0.001, interval(-1, 1), "fixed λ of the static variant")
    estimator: str = param("opefo", one_of(*ESTIMATORS), "entropy-change estimator that gives ΔH")

    def batch_statistics(self, ctxs: list[LossContext], reducer: Reducer) -> list[dict[str, torch.Tensor]]:
        return global_flow(ctxs, reducer, self.estimator)

    def token_weights(self, ctx: LossContext) -> torch.Tensor:
        valid = ctx.valid
        dH = ctx.estimate(self.estimator)
        st = ctx.stat(self)
        s_pos, s_neg = st["S_pos"], st["S_neg"]
        lam_star = balance(s_pos, s_neg)  # paper 001 Eq. 9
        lam = torch.full_like(lam_star, self.lam) if self.variant == "static" else lam_star
        lam_pos = 0.0 if self.variant == "neg_only" else lam
        lam_neg = 0.0 if self.variant == "pos_only" else lam
        ctx.metrics["opefo/lambda"] = lam
        ctx.metrics["opefo/lambda_star"] = lam_star
        ctx.metrics["opefo/S_pos"] = s_pos
        ctx.metrics["opefo/S_neg"] = s_neg
        return flow_weights(dH, valid, lam_pos, lam_neg)


@register
@dataclass(repr=False)
class OPEFOTarget(Method):
    """OPEFO with a target entropy (*ours*, generalises paper 001 Eq. 8).

    ``f = clamp(k·(H* − H)/H*, −f_max, f_max)`` with H the batch mean old entropy over valid
    tokens, ``λ = clamp(λ* + f, −λ_max, λ_max)``; weights (1+λ) on ΔH>0 and (1−λ) on ΔH<0
    (ΔH by the ``opefo`` estimator). Below target, λ > λ*: the net flow is positive and
    entropy rises toward H*; above target, it falls. Stateless apart from H*.
    """

    name = "opefo_target"
    statistics_needs = ("logp", "old_logp", "old_entropy")  # S± and the batch mean H
    formula = "λ = clamp(λ* + clamp(k·(H*−H)/H*, ±f_max), ±λ_max); w = 1±λ by sign of ΔH"
    paper = "ours, generalising paper 001 Eq. 8 (OPEFO)"
    reads_entropy = True

    target: float | None = param(None, optional(interval(0, lo_open=True)), "target entropy H* (required)")
    k: float = param(1.0, NONNEG, "gain on the relative entropy error")
    f_max: float = param(0.5, NONNEG, "bound on the shift f")
    lam_max: float = param(0.95, interval(0, 1), "bound on |λ| (keeps weights ≥ 1 − λ_max)")

    def validate(self) -> None:
        if self.target is None:
            raise ParameterError(self.name, "target", "is required: the target entropy H*, a number in (0, inf]")

    def batch_statistics(self, ctxs: list[LossContext], reducer: Reducer) -> list[dict[str, torch.Tensor]]:
        flows = global_flow(ctxs, reducer, "opefo")
        mean_H = global_mean_entropy(ctxs, reducer, "opefo_target")
        return [dict(f, H=mean_H) for f in flows]

    def token_weights(self, ctx: LossContext) -> torch.Tensor:
        valid = ctx.valid
        dH = ctx.estimate("opefo")
        st = ctx.stat(self)
        s_pos, s_neg, H = st["S_pos"], st["S_neg"], st["H"]
        lam_star = balance(s_pos, s_neg)  # paper 001 Eq. 9
        assert self.target is not None
        f = (self.k * (self.target - H) / self.target).clamp(-self.f_max, self.f_max)  # ours
        lam = (lam_star + f).clamp(-self.lam_max, self.lam_max)  # ours, shifts Eq. 8's balance point
        ctx.metrics.update(
            {
                "opefo_target/lambda": lam,
                "opefo_target/lambda_star": lam_star,
                "opefo_target/f": f,
                "opefo_target/entropy": H,
                "opefo_target/S_pos": s_pos,
                "opefo_target/S_neg": s_neg,
            }
        )
        return flow_weights(dH, valid, lam, lam)
