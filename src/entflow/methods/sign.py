"""Interventions by the sign of the advantage (paper 002 §7, App. E.2; paper 000 Fig. 3d).

Positive-advantage tokens (reinforcing what the model already tends to say) are what drives
entropy down; negative-advantage tokens push it up. Reweighting the two sides controls entropy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from entflow.core.batch import TokenBatch
from entflow.core.distributed import Reducer
from entflow.errors import MissingInputError, ParameterError
from entflow.methods._util import global_count, select_smallest
from entflow.methods.base import (
    NONNEG,
    SEED,
    UNIT,
    LossContext,
    Method,
    Stochastic,
    integer,
    one_of,
    optional,
    param,
    register,
)


@register
@dataclass(repr=False)
class PosAdvReweight(Method):
    """Positive-Advantage Reweighting: loss weight λ on tokens with A > 0, 1 elsewhere.

    Schedules for λ (paper 002 §7.3; its formulas are lost in our copy, this is our reading):

    - ``constant``: λ = ``weight``.
    - ``stage``: λ = 0 for the first half of training, then linear 0 → 1:
      ``λ = clamp(2·step/(total_steps − 1) − 1, 0, 1)`` (step 0-based, from ``batch.step`` /
      ``batch.total_steps``; 1 at the last step).
    - ``epoch``: ``λ = (e − 1)/(E − 1)`` with E = ``epochs`` and the 1-based epoch
      ``e = min(⌊step·E / total_steps⌋, E − 1) + 1`` — total_steps split into E equal epochs,
      read from the batch (not from ``update``), so it is stateless and resumes trivially.
    - ``entropy`` (controller, docs/design.md §7): after each step, if H > target λ ← min(λ+δ, 1)
      (more weight on positives lowers entropy) else λ ← max(λ−δ, 0); starts at ``init``.
    """

    name = "pos_adv_reweight"
    formula = "w_t = λ if A_t > 0 else 1;  λ by schedule (constant / stage / epoch / entropy controller)"
    paper = "paper 002 §7.3 (Jin et al., Pos-Adv-Reweight)"
    state_fields = ("lam",)

    schedule: str = param("entropy", one_of("constant", "stage", "epoch", "entropy"), "how λ evolves")
    weight: float = param(1.0, NONNEG, "λ of the constant schedule")
    target: float = param(0.2, NONNEG, "entropy schedule: target entropy")
    delta: float = param(0.05, NONNEG, "entropy schedule: step of λ per rollout step")
    init: float = param(1.0, UNIT, "entropy schedule: initial λ")
    epochs: int | None = param(None, optional(integer(2)), "epoch schedule: number of epochs E (>= 2)")

    def validate(self) -> None:
        if self.schedule == "epoch" and self.epochs is None:
            raise ParameterError(self.name, "epochs", "is required by schedule='epoch': an integer >= 2")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.lam: float = self.init

    @property
    def reads_step(self) -> bool:  # type: ignore[override]
        return self.schedule in ("stage", "epoch")  # λ from batch.step / batch.total_steps

    def is_controller(self) -> bool:
        return self.schedule == "entropy"  # only this schedule advances λ in update

    def current_weight(self, batch: TokenBatch) -> float:
        """λ for this batch."""
        if self.schedule == "constant":
            return self.weight
        if self.schedule == "entropy":
            return self.lam
        if batch.total_steps is None:
            raise MissingInputError("total_steps", f"pos_adv_reweight(schedule={self.schedule!r})")
        S, s = int(batch.total_steps), int(batch.step)
        if self.schedule == "stage":  # ours: zero for the first half, then linear 0 → 1
            return min(max(2.0 * s / (S - 1) - 1.0, 0.0), 1.0) if S > 1 else 1.0
        assert self.epochs is not None
        E = self.epochs
        e = min(s * E // max(S, 1), E - 1) + 1  # 1-based epoch of this step
        return (e - 1) / (E - 1)  # paper 002 §7.3 (epoch-wise)

    def token_weights(self, ctx: LossContext) -> torch.Tensor:
        lam = self.current_weight(ctx.batch)
        ctx.metrics["pos_adv/weight"] = float(lam)
        return torch.where(ctx.adv > 0, lam, torch.ones_like(ctx.adv))  # paper 002 §7.3: λ on A>0 tokens

    def update(self, metrics: dict[str, Any]) -> None:
        if self.schedule != "entropy":
            return
        if "entropy" not in metrics:
            raise MissingInputError("entropy", "pos_adv_reweight.update (metrics of the rollout step)")
        if float(metrics["entropy"]) > self.target:  # docs/design.md §7
            self.lam = min(self.lam + self.delta, 1.0)
        else:
            self.lam = max(self.lam - self.delta, 0.0)


@dataclass(repr=False)
class _OneSignOnly(Method):
    """Train on the tokens of one advantage sign only: weight 0 on the valid tokens of the other
    (``drops_positive``: where A > 0, else where A < 0), counted in ``<name>/n_zeroed``."""

    drops_positive: ClassVar[bool]

    def token_weights(self, ctx: LossContext) -> torch.Tensor:
        zero = ((ctx.adv > 0) if self.drops_positive else (ctx.adv < 0)) & ctx.valid
        ctx.metrics[f"{self.name}/n_zeroed"] = zero.sum().to(torch.float64)
        return (~zero).to(ctx.adv.dtype)  # paper 000 Fig. 3d / 002 §7.2: drop one side's tokens


@register
@dataclass(repr=False)
class PositiveOnly(_OneSignOnly):
    """Train on non-negative-advantage tokens only (weight 0 where A < 0). Lowers entropy fast."""

    name = "positive_only"
    formula = "w_t = 0 if A_t < 0 else 1"
    paper = "paper 000 Fig. 3d (PSR); paper 002 §7.2"
    drops_positive = False


@register
@dataclass(repr=False)
class NegativeOnly(_OneSignOnly):
    """Train on non-positive-advantage tokens only (weight 0 where A > 0). Raises entropy."""

    name = "negative_only"
    formula = "w_t = 0 if A_t > 0 else 1"
    paper = "paper 000 Fig. 3d (NSR); paper 002 §7.2"
    drops_positive = True


@register
@dataclass(repr=False)
class RandPosClip(Stochastic, Method):
    """Rand-Pos-Clip: zero the loss of ``n = max(⌊ratio·N_valid⌋, 1)`` tokens drawn uniformly
    at random among the valid tokens with A > 0 (all of them if fewer).

    N_valid counts all valid tokens, so the number zeroed equals Clip-Cov's at the same ratio
    (paper 002 App. E.2: "the same proportion of tokens"). The draw is Clip-Cov's: one U(0, 1)
    key per token from the seeded generator in the state, the n smallest-key candidates picked.
    """

    name = "rand_pos_clip"
    formula = "w_t = 0 on n = max(⌊ratio·N⌋,1) random tokens with A_t > 0"
    paper = "paper 002 App. E.2 (Rand-Pos-Clip)"
    state_fields = ("generator",)

    ratio: float = param(2e-4, UNIT, "fraction of valid tokens to zero (drawn among A > 0)")
    seed: int = param(0, SEED, "seed of the selection generator")

    def batch_statistics(self, ctxs: list[LossContext], reducer: Reducer) -> list[dict[str, torch.Tensor]]:
        cands = [c.valid & (c.adv > 0) for c in ctxs]
        n = global_count(ctxs, reducer, self.ratio)
        keys = reducer.rand(self.generator(reducer.device, reducer.shared))
        return [{"selected": s} for s in select_smallest(keys, cands, n, reducer)]

    def token_weights(self, ctx: LossContext) -> torch.Tensor:
        sel = ctx.stat(self)["selected"]
        ctx.metrics["rand_pos_clip/n_selected"] = sel.sum().to(torch.float64)
        return (~sel).to(ctx.adv.dtype)  # paper 002 App. E.2: zero a random subset of A>0 tokens
