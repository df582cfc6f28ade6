"""Loss-term regularisers: entropy bonus, adaptive entropy bonus, KL to a reference (docs/design.md §6, §7).

These add a scalar to the loss instead of reweighting tokens. The entropy bonus is the one
place in entflow that differentiates the entropy: it reads ``batch.entropy`` (with grad).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from entflow.errors import MissingInputError, ParameterError
from entflow.methods._util import valid_mean
from entflow.methods.base import NONNEG, LossContext, Method, integer, one_of, optional, param, register

ENTROPY_SCHEDULES = ("constant", "linear", "cosine", "step")


def entropy_coef_at(schedule: str, c: float, c_end: float | None, steps: int | None, t: int) -> float:
    """The entropy-bonus coefficient c(t) at the 0-based training step ``t`` (``TokenBatch.step``).

    With s = min(max(t, 0), steps) (the step clamped to [0, steps]):

    - ``constant``: c(t) = c;
    - ``linear``:   c(t) = c + (c_end − c) · s / steps;
    - ``cosine``:   c(t) = c_end + (c − c_end) · (1 + cos(π · s / steps)) / 2;
    - ``step``:     c(t) = c for t < steps, then c_end.

    Each starts at c (t = 0) and holds c_end from t = steps on. A pure function of t, so a
    resumed run continues exactly.
    """
    if schedule == "constant":
        return c
    assert c_end is not None and steps is not None
    if t >= steps:  # every schedule: c_end from t = steps on (exactly, not to round-off)
        return c_end
    if schedule == "step":
        return c
    s = max(t, 0)
    if schedule == "linear":
        return c + (c_end - c) * s / steps
    if schedule == "cosine":
        return c_end + (c - c_end) * (1 + math.cos(math.pi * s / steps)) / 2
    raise ParameterError("entropy_bonus", "schedule", f"must be one of {ENTROPY_SCHEDULES}, got {schedule!r}")


@register
@dataclass(repr=False)
class EntropyBonus(Method):
    """Entropy regularisation: subtract ``c(t) · mean_t H_t`` from the loss.

    ``H_t`` is ``batch.entropy`` **with grad** (the current policy's full-vocabulary entropy),
    averaged with the loss's own aggregation. Raises entropy; strength grows with the coefficient.

    The coefficient follows ``schedule`` over the training step t = ``batch.step`` — 0-based, the
    rollout step as every scheduled method reads it (the generic trainer's step k of
    ``metrics.jsonl`` is t = k − 1; TRL's generation step; verl's ``global_steps`` − 1) — from
    ``c`` at t = 0 to ``c_end`` at t = ``steps`` and after (s = min(t, steps)):

    - ``constant`` (default): c(t) = c, the static bonus (``c_end`` and ``steps`` unset);
    - ``linear``: c(t) = c + (c_end − c) · s / steps;
    - ``cosine``: c(t) = c_end + (c − c_end) · (1 + cos(π · s / steps)) / 2;
    - ``step``: c(t) = c while t < steps, c_end from t = steps on.

    Stateless: c(t) is a pure function of t (:func:`entropy_coef_at`), so ``--resume`` continues
    exactly. ``steps`` counts rollout steps, whatever the run's length: past it the coefficient
    stays at ``c_end``.
    """

    name = "entropy_bonus"
    formula = (
        "loss −= c(t) · mean_t H_t   (H with grad);  c(t) = c (constant), or from c to c_end over steps: "
        "linear, cosine, step"
    )
    paper = "paper 000 Table 6 (entropy regularisation; Schulman et al. 2017)"
    needs = ("entropy",)

    c: float = param(0.001, NONNEG, "bonus coefficient c (the start coefficient of a schedule)")
    schedule: str = param("constant", one_of(*ENTROPY_SCHEDULES), "how the coefficient moves from c to c_end")
    c_end: float | None = param(None, optional(NONNEG), "coefficient reached at t = steps (not with constant)")
    steps: int | None = param(
        None, optional(integer(1)), "rollout steps from c to c_end (step: c_end from this 0-based step on)"
    )

    def validate(self) -> None:
        if isinstance(self.c_end, int):  # c_end=0 from a command line or JSON: a float like c
            self.c_end = float(self.c_end)
        if self.schedule == "constant":
            for key in ("c_end", "steps"):
                if getattr(self, key) is not None:
                    raise ParameterError(
                        self.name,
                        key,
                        f"is {getattr(self, key)!r}, but schedule='constant' keeps c fixed: "
                        "set schedule to 'linear', 'cosine' or 'step', or leave it unset",
                    )
            return
        if self.c_end is None:
            raise ParameterError(self.name, "c_end", f"is required by schedule={self.schedule!r}: a number in [0, inf]")
        if self.steps is None:
            raise ParameterError(self.name, "steps", f"is required by schedule={self.schedule!r}: an integer >= 1")

    @property
    def reads_step(self) -> bool:  # type: ignore[override]
        return self.schedule != "constant"  # c(t) from batch.step

    def coef_at(self, step: int) -> float:
        """c(t) at the 0-based training step ``step``."""
        return entropy_coef_at(self.schedule, self.c, self.c_end, self.steps, int(step))

    def loss_terms(self, ctx: LossContext, agg: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        H = ctx.batch.require("entropy", "entropy_bonus")
        mean_H = agg(H)
        c = self.coef_at(ctx.batch.step)
        ctx.metrics["entropy_bonus/coef"] = c
        ctx.metrics["entropy_bonus/entropy"] = mean_H.detach()
        return {"entropy_bonus/loss": -c * mean_H}  # paper 000 Table 6: L − c·H


@register
@dataclass(repr=False)
class AdaptiveEntropy(Method):
    """Entropy bonus whose coefficient is steered toward a target entropy (docs/design.md §7).

    After each rollout step, with H the batch mean old entropy: if H < target the coefficient
    grows by ``delta`` (capped at ``c_max``) and the bonus is on; otherwise it shrinks by
    ``delta`` (floored at ``c_min``) and the bonus is off. The new value applies from the next
    step. State: ``coef``, ``active`` (starts on, at ``c0``).
    """

    name = "adaptive_entropy"
    formula = "loss −= c_k · mean_t H_t if on;  c_{k+1} = clip(c_k ± δ, c_min, c_max), on ⇔ H_k < target"
    paper = "Skywork-OR1 adaptive entropy control; paper 002 §3.2 / App. E.2"
    needs = ("entropy",)
    state_fields = ("coef", "active")

    target: float = param(0.2, NONNEG, "target entropy H* (nats per token)")
    delta: float = param(1e-4, NONNEG, "coefficient step per rollout step")
    c_min: float = param(0.0, NONNEG, "lowest coefficient")
    c_max: float = param(0.005, NONNEG, "highest coefficient")
    c0: float = param(0.0, NONNEG, "initial coefficient")

    def validate(self) -> None:
        if self.c_min > self.c_max:
            raise ParameterError(self.name, "c_min", f"must be <= c_max = {self.c_max}, got {self.c_min}")
        if not self.c_min <= self.c0 <= self.c_max:
            raise ParameterError(self.name, "c0", f"must be in [c_min, c_max] = [{self.c_min}, {self.c_max}]")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.coef: float = self.c0
        self.active: bool = True

    def loss_terms(self, ctx: LossContext, agg: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        H = ctx.batch.require("entropy", "adaptive_entropy")
        c = self.coef if self.active else 0.0
        ctx.metrics["adaptive_entropy/coef"] = float(self.coef)
        ctx.metrics["adaptive_entropy/active"] = float(self.active)
        return {"adaptive_entropy/loss": -c * agg(H)}  # Skywork-OR1 / paper 002 §3.2: −c_k·H when on

    def update(self, metrics: dict[str, Any]) -> None:
        if "entropy" not in metrics:
            raise MissingInputError("entropy", "adaptive_entropy.update (metrics of the rollout step)")
        H = float(metrics["entropy"])
        if H < self.target:  # Skywork-OR1: raise c while below target, bonus on
            self.coef = min(self.coef + self.delta, self.c_max)
            self.active = True
        else:
            self.coef = max(self.coef - self.delta, self.c_min)
            self.active = False


@register
@dataclass(repr=False)
class KLRef(Method):
    """KL penalty to a frozen reference policy with the k3 estimator (GRPO).

    ``k3_t = exp(ref_t − logp_t) − (ref_t − logp_t) − 1`` ≥ 0, averaged with the loss's
    aggregation and scaled by ``beta``. Pulls the policy toward the reference (usually keeps
    entropy nearer the reference's). Needs ``ref_logp`` (one extra forward of the reference).
    """

    name = "kl_ref"
    formula = "loss += β · mean_t [exp(ref−logp) − (ref−logp) − 1]"
    paper = "GRPO (Shao et al. 2024) Eq. 4, k3 estimator"
    needs = ("ref_logp",)

    beta: float = param(0.001, NONNEG, "KL coefficient β")

    def loss_terms(self, ctx: LossContext, agg: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        b = ctx.batch
        valid = ctx.valid
        ref = b.require("ref_logp", "kl_ref").detach()
        d = (ref - b.logp).masked_fill(~valid, 0)  # fill padding before exp: no NaN in the gradient
        k3 = torch.exp(d) - d - 1  # GRPO Eq. 4 (k3)
        ctx.metrics["kl_ref/kl"] = valid_mean(k3, valid)
        return {"kl_ref/loss": self.beta * agg(k3)}
