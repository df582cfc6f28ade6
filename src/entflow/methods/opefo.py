"""OPEFO: balance the entropy flow of each batch (paper 001 §5, Eq. 7–9, Fig. 3, Table 2).

Each token's update either raises entropy (ΔH_t > 0, set S+) or lowers it (S−). OPEFO
scales the two sets by (1 + λ) and (1 − λ) with λ chosen so that the weighted sum of ΔH is
zero: the batch as a whole neither collapses nor inflates entropy. ``opefo_target`` (ours)
shifts λ so the flow pushes toward a target entropy instead of zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entflow.core.estimators import ESTIMATORS
from entflow.core.flow import flow_balance
from entflow.errors import ParameterError
from entflow.methods._util import valid_mean
from entflow.methods.base import NONNEG, LossContext, Method, interval, one_of, optional, param, register


def flow_weights(dH: torch.Tensor, valid: torch.Tensor, lam_pos: float, lam_neg: float) -> torch.Tensor:
    """``[N, T]`` weights ``1 + lam_pos`` where ΔH > 0, ``1 − lam_neg`` where ΔH < 0, else 1."""
    w = torch.ones_like(dH)
    w = torch.where((dH > 0) & valid, 1.0 + lam_pos, w)  # paper 001 Eq. 7, S+ term
    return torch.where((dH < 0) & valid, 1.0 - lam_neg, w)  # Eq. 7, S− term


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
    formula = "w_t = 1+λ* if ΔH_t>0, 1−λ* if ΔH_t<0;  λ* = (S− − S+)/(S− + S+)"
    paper = "paper 001 Eq. 7–9, Fig. 3, Table 2 (OPEFO)"
    reads_entropy = True

    variant: str = param("adaptive", one_of("adaptive", "static", "pos_only", "neg_only"), "how λ is applied")
    lam: float = param(0.001, interval(-1, 1), "fixed λ of the static variant")
    estimator: str = param("opefo", one_of(*ESTIMATORS), "entropy-change estimator that gives ΔH")

    def token_weights(self, ctx: LossContext) -> torch.Tensor:
        valid = ctx.valid
        dH = ctx.estimate(self.estimator)
        s_pos, s_neg, lam_star = flow_balance(dH, valid)  # paper 001 Eq. 9
        lam = self.lam if self.variant == "static" else lam_star
        lam_pos = 0.0 if self.variant == "neg_only" else lam
        lam_neg = 0.0 if self.variant == "pos_only" else lam
        ctx.metrics["opefo/lambda"] = float(lam)
        ctx.metrics["opefo/lambda_star"] = float(lam_star)
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

    def token_weights(self, ctx: LossContext) -> torch.Tensor:
        valid = ctx.valid
        dH = ctx.estimate("opefo")
        s_pos, s_neg, lam_star = flow_balance(dH, valid)  # paper 001 Eq. 9
        H = valid_mean(ctx.batch.entropy_for_reading("opefo_target"), valid)
        assert self.target is not None
        f = min(max(self.k * (self.target - H) / self.target, -self.f_max), self.f_max)  # ours
        lam = min(max(lam_star + f, -self.lam_max), self.lam_max)  # ours, shifts Eq. 8's balance point
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
