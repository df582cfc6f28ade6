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

from entflow.core.distributed import Reducer
from entflow.core.estimators import ESTIMATORS
from entflow.core.selection import dense_ids, scoped_extreme, scoped_quantile
from entflow.errors import MissingInputError, ParameterError
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
    statistics_needs = ("logp", "old_logp", "old_entropy")  # |Ω| of the estimator over the batch

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

    def batch_statistics(self, ctxs: list[LossContext], reducer: Reducer) -> list[dict[str, torch.Tensor]]:
        """The normaliser of each token's |Ω|: max (exp), max and min (linear) or the
        ``1 − top_frac`` quantile (binary) over the valid tokens of its scope."""
        omegas = [c.estimate(self.estimator).abs() for c in ctxs]  # |Ω_t|, paper 000 Eq. 2 integrand
        valids = [c.valid for c in ctxs]
        if self.scope == "batch" and self.mapping != "binary":
            hi = reducer.amax([o.masked_fill(~v, -torch.inf).amax() for o, v in zip(omegas, valids, strict=True)])
            lo = reducer.amin([o.masked_fill(~v, torch.inf).amin() for o, v in zip(omegas, valids, strict=True)])
            hi = torch.where(torch.isfinite(hi), hi, torch.zeros_like(hi))
            lo = torch.where(torch.isfinite(lo), lo, torch.zeros_like(lo))
            return [{"hi": hi.expand_as(o), "lo": lo.expand_as(o)} for o in omegas]
        # per scope or quantile: on the global token vector (same code per call and globally)
        flat_o = reducer.cat_tokens(omegas)
        flat_v = reducer.cat_tokens(valids)
        scope = None if self.scope == "batch" else dense_ids(reducer.cat_tokens(self._scope_ids(ctxs, reducer)))
        if self.mapping == "binary":
            thr = scoped_quantile(flat_o, flat_v, 1.0 - self.top_frac, scope)
            return [{"thr": t} for t in reducer.split_tokens(thr)]
        hi = reducer.split_tokens(scoped_extreme(flat_o, flat_v, scope, largest=True))
        lo = reducer.split_tokens(scoped_extreme(flat_o, flat_v, scope, largest=False))
        return [{"hi": h, "lo": lw} for h, lw in zip(hi, lo, strict=True)]

    def _scope_ids(self, ctxs: list[LossContext], reducer: Reducer) -> list[torch.Tensor]:
        """Each token's raw scope id ``[N_i, T_i]``: its response's global row, or its group id."""
        if self.scope == "sequence":
            rows = reducer.global_rows()
        else:
            rows = []
            for c in ctxs:
                g = c.batch.group_index
                if g is None:
                    raise MissingInputError("group_index", "steer(scope='group')")
                rows.append(g.to(c.adv.device))
        return [r.unsqueeze(-1).expand_as(c.adv) for r, c in zip(rows, ctxs, strict=True)]

    def token_weights(self, ctx: LossContext) -> torch.Tensor:
        valid = ctx.valid
        omega = ctx.estimate(self.estimator).abs()  # |Ω_t|, paper 000 Eq. 2 integrand
        st = ctx.stat(self)
        if self.mapping == "exp":
            denom = st["hi"].clamp(min=self.floor)
            lam = torch.exp(math.log(self.lambda_min) * omega / denom)  # paper 000 Eq. 3, α = ln λ_min
            lam = lam.clamp(self.lambda_min, 1.0)
        elif self.mapping == "linear":
            hi, lo = st["hi"], st["lo"]
            frac = (omega - lo) / (hi - lo).clamp(min=1e-12)  # paper 000 App. E.3 (linear)
            lam = self.lambda_max - (self.lambda_max - self.lambda_min) * frac
        else:
            lam = torch.where(omega > st["thr"], self.lambda_min, torch.ones_like(omega))  # App. E.3 (binary)
        lam = lam.masked_fill(~valid, 1.0)
        n = valid.sum()
        any_valid = n > 0
        one = torch.ones((), dtype=lam.dtype, device=lam.device)
        ctx.metrics["steer/weight_mean"] = torch.where(
            any_valid, lam.masked_fill(~valid, 0).sum() / n.clamp(min=1), one
        )
        ctx.metrics["steer/weight_min"] = torch.where(any_valid, lam.masked_fill(~valid, torch.inf).amin(), one)
        ctx.metrics["steer/weight_max"] = torch.where(any_valid, lam.masked_fill(~valid, -torch.inf).amax(), one)
        ctx.metrics["steer/omega_absmax"] = torch.where(any_valid, omega.masked_fill(~valid, 0).amax(), 0 * one)
        return lam.detach()
