"""STEER: token reweighting by estimated entropy change (paper 000 §5, Eq. 3, App. E.3).

Ω_t is the first-order entropy change token t's update would cause (the ``steer`` estimator by
default). Tokens with a large |Ω| — in either direction — get a smaller loss weight, so no
single token moves the entropy much: the entropy changes smoothly instead of collapsing or
exploding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from entflow.core.estimators import ESTIMATORS
from entflow.errors import MissingInputError, ParameterError
from entflow.methods._util import group_inverse, masked_extreme, quantile
from entflow.methods.base import UNIT, LossContext, Method, interval, one_of, param, register


@register
@dataclass(repr=False)
class Steer(Method):
    """STEER token weights λ_t ∈ [λ_min, 1] decreasing in |Ω_t|.

    ``exp`` (the paper's Eq. 3 with α = ln λ_min, as the official code):
    ``λ_t = clamp(exp(ln λ_min · |Ω_t| / max(max |Ω|, floor)), λ_min, 1)``.
    ``linear`` (App. E.3): ``λ_t = λ_max − (λ_max − λ_min)(|Ω_t| − min|Ω|)/(max|Ω| − min|Ω|)``.
    ``binary`` (App. E.3): ``λ_min`` on tokens with |Ω_t| above the ``1 − top_frac`` quantile
    of |Ω|, else 1. Max, min and quantile are over the valid tokens of the ``scope``: the whole
    batch (paper), each prompt's group (needs ``group_index``), or each response. Ω uses
    H = old_entropy (else entropy, detached) and the current p (detached); weights detached.
    """

    name = "steer"
    formula = "λ_t = clamp(exp(ln(λ_min)·|Ω_t| / max(max|Ω|, floor)), λ_min, 1)"
    paper = "paper 000 Eq. 3, App. E.3 (STEER); official code (α = ln λ_min, floor 0.02)"
    reads_entropy = True

    lambda_min: float = param(0.8, interval(0, 1, lo_open=True), "smallest weight λ_min")
    floor: float = param(0.02, interval(0, lo_open=True), "lower bound on the normaliser max|Ω| (exp mapping)")
    mapping: str = param("exp", one_of("exp", "linear", "binary"), "how |Ω| maps to a weight")
    lambda_max: float = param(1.2, interval(0, lo_open=True), "largest weight of the linear mapping")
    top_frac: float = param(0.2, UNIT, "binary mapping: fraction of tokens (largest |Ω|) given λ_min")
    estimator: str = param("steer", one_of(*ESTIMATORS), "entropy-change estimator that gives Ω")
    scope: str = param("batch", one_of("batch", "group", "sequence"), "tokens over which max/min/quantile run")

    def validate(self) -> None:
        if self.mapping == "linear" and self.lambda_max < self.lambda_min:
            raise ParameterError(self.name, "lambda_max", f"must be >= lambda_min = {self.lambda_min}")

    def _scope_ids(self, ctx: LossContext) -> torch.Tensor | None:
        if self.scope == "batch":
            return None
        if self.scope == "sequence":
            return torch.arange(ctx.adv.shape[0], device=ctx.adv.device)
        g = ctx.batch.group_index
        if g is None:
            raise MissingInputError("group_index", "steer(scope='group')")
        return group_inverse(g.to(ctx.adv.device))[0]

    def token_weights(self, ctx: LossContext) -> torch.Tensor:
        valid = ctx.valid
        omega = ctx.estimate(self.estimator).abs()  # |Ω_t|, paper 000 Eq. 2 integrand
        ids = self._scope_ids(ctx)
        if self.mapping == "exp":
            denom = masked_extreme(omega, valid, ids, largest=True).clamp(min=self.floor)
            lam = torch.exp(math.log(self.lambda_min) * omega / denom)  # paper 000 Eq. 3, α = ln λ_min
            lam = lam.clamp(self.lambda_min, 1.0)
        elif self.mapping == "linear":
            hi = masked_extreme(omega, valid, ids, largest=True)
            lo = masked_extreme(omega, valid, ids, largest=False)
            frac = (omega - lo) / (hi - lo).clamp(min=1e-12)  # paper 000 App. E.3 (linear)
            lam = self.lambda_max - (self.lambda_max - self.lambda_min) * frac
        else:
            thr = self._quantiles(omega, valid, ids)
            lam = torch.where(omega > thr, self.lambda_min, torch.ones_like(omega))  # App. E.3 (binary)
        lam = lam.masked_fill(~valid, 1.0)
        w = lam[valid]
        ctx.metrics["steer/weight_mean"] = float(w.mean()) if w.numel() else 1.0
        ctx.metrics["steer/weight_min"] = float(w.min()) if w.numel() else 1.0
        ctx.metrics["steer/weight_max"] = float(w.max()) if w.numel() else 1.0
        ctx.metrics["steer/omega_absmax"] = float(omega[valid].max()) if w.numel() else 0.0
        return lam.detach()

    def _quantiles(self, omega: torch.Tensor, valid: torch.Tensor, ids: torch.Tensor | None) -> torch.Tensor:
        """The ``1 − top_frac`` quantile of |Ω| per scope, broadcast to ``[N, T]``."""
        q = 1.0 - self.top_frac
        if ids is None:
            return quantile(omega[valid], q).expand_as(omega)
        out = torch.zeros(omega.shape[0], dtype=omega.dtype, device=omega.device)
        for k in torch.unique(ids).tolist():
            rows = ids == k
            vals = omega[rows][valid[rows]]
            out[rows] = quantile(vals, q) if vals.numel() else 0.0
        return out.unsqueeze(-1).expand_as(omega)
