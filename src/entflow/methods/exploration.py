"""Two entropy controls aimed at exploration (docs/methods.md, "Objectives aimed at pass@k"):
Entropy Ratio Clipping (arXiv 2512.05591) and Adaptive Entropy Regularization (arXiv 2510.10959).

``erc`` is a token weighter: it drops the gradient of a token whose entropy moved too far from the
rollout policy's, ``H_θ/H_old ∉ [1 − β_low, 1 + β_high]``, a trust region on the entropy next to
PPO's on the sampled token's ratio. ``aer`` is an entropy bonus with a per-response coefficient
``α·(1 − acc_g)`` (harder prompts explore more) whose global scale α is steered, once per step,
toward a target ``τ·H_0`` anchored on the first step's entropy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from entflow.core.batch import TokenBatch
from entflow.errors import MissingInputError, ParameterError
from entflow.methods._util import ReportsShaping, group_inverse, require_all, valid_mean
from entflow.methods.base import NONNEG, LossContext, Method, interval, optional, param, register

ENTROPY_FLOOR = 1e-8  # nats: below it on both sides an entropy "ratio" is taken as 1


@register
@dataclass(repr=False)
class EntropyRatioClip(Method):
    """Entropy Ratio Clipping (Su et al., arXiv 2512.05591): ``w_t = 1`` when the current policy's
    entropy at the token, relative to the rollout policy's, stays within
    ``[1 − β_low, 1 + β_high]``, else 0 (the token's gradient is dropped; it still counts in the
    loss's denominator). H_θ is ``batch.entropy`` read detached, H_old ``batch.old_entropy``; where
    both are below 1e-8 nats the ratio is 1."""

    name = "erc"
    formula = "ρ_t = H_θ,t / H_old,t; w_t = 1[1 − β_low ≤ ρ_t ≤ 1 + β_high] (detached)"
    paper = "Su et al. 2025, arXiv 2512.05591 (Entropy Ratio Clipping)"
    needs = ("entropy", "old_entropy")  # the current entropy (read detached) and the rollout's
    reads_entropy = True

    beta_low: float = param(0.05, interval(0, 1, lo_open=True, hi_open=True), "lower margin β_low of ρ")
    beta_high: float = param(0.05, interval(0, lo_open=True), "upper margin β_high of ρ")

    def token_weights(self, ctx: LossContext) -> torch.Tensor:
        b = ctx.batch
        H = b.require("entropy", self.name).detach()
        H_old = b.require("old_entropy", self.name).detach()
        both_zero = (H < ENTROPY_FLOOR) & (H_old < ENTROPY_FLOOR)
        rho = torch.where(both_zero, torch.ones_like(H), H / H_old.clamp(min=ENTROPY_FLOOR))
        keep = (rho >= 1 - self.beta_low) & (rho <= 1 + self.beta_high)  # arXiv 2512.05591 §3
        w = keep.to(ctx.adv.dtype)
        ctx.metrics["erc/kept_frac"] = valid_mean(w, ctx.valid)
        ctx.metrics["erc/ratio_mean"] = valid_mean(rho.to(ctx.adv.dtype), ctx.valid)
        return w


@register
@dataclass(repr=False)
class AER(ReportsShaping, Method):
    """Adaptive Entropy Regularization (arXiv 2510.10959): ``loss −= agg(c_i·H_{i,t})``, H with grad,
    ``c_i = α·(1 − acc_g)``, acc_g the share of correct responses (R > threshold) in response i's
    group. After each step α ← clip(α + η·(τ·H_0 − H), 0, α_max), H the step's mean rollout entropy
    and H_0 the first step's. The group accuracies are taken in ``compute_advantages`` (on whole
    groups; the advantages pass through unchanged) and looked up by ``group_index`` in the loss.
    State: ``alpha``, ``initial_entropy``."""

    name = "aer"
    formula = "loss −= agg(α·(1 − acc_g(i))·H_{i,t}); α ← clip(α + η·(τ·H_0 − H_k), 0, α_max), H_0 = H at step 1"
    paper = "arXiv 2510.10959 (AER: difficulty-aware coefficient, initial-anchored target, global adjustment)"
    needs = ("entropy", "group_index")
    advantage_needs = ("rewards", "group_index")
    state_fields = ("alpha", "initial_entropy")

    tau: float = param(0.5, interval(0, 1, lo_open=True, hi_open=True), "target entropy τ·H_0, as a fraction of H_0")
    eta: float = param(0.01, interval(0, lo_open=True), "step size η of the global coefficient")
    alpha0: float = param(0.0, NONNEG, "initial global coefficient α")
    alpha_max: float = param(0.05, NONNEG, "largest global coefficient")
    threshold: float = param(0.5, interval(), "a response is correct when R > threshold")
    initial: float | None = param(None, optional(interval(0, lo_open=True)), "H_0 (None: the first step's)")

    def validate(self) -> None:
        if self.alpha0 > self.alpha_max:
            raise ParameterError(self.name, "alpha0", f"must be <= alpha_max = {self.alpha_max}, got {self.alpha0}")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.alpha: float = self.alpha0
        self.initial_entropy: float | None = self.initial

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        require_all(batch, self.advantage_needs, self.name)
        assert batch.rewards is not None and batch.group_index is not None
        correct = (batch.rewards > self.threshold).to(torch.float64)
        inv = group_inverse(batch.group_index.to(correct.device))
        tot = torch.zeros_like(correct).index_add_(0, inv, correct)
        cnt = torch.zeros_like(correct).index_add_(0, inv, torch.ones_like(correct))
        acc = (tot / cnt.clamp(min=1))[inv]
        keys, order = torch.sort(batch.group_index)
        self._accuracy = (keys, acc[order])  # group id → accuracy, for the loss (looked up by id)
        self._report(difficulty_mean=(1 - acc).mean())
        return adv

    def difficulty(self, group_index: torch.Tensor) -> torch.Tensor:
        """1 − acc_g of each row's group ``[N]``, from the last ``compute_advantages``."""
        if not hasattr(self, "_accuracy"):
            raise MissingInputError(
                "rewards", "aer (group accuracies: call compute_advantages(batch, method) on the rollout first)"
            )
        keys, acc = self._accuracy
        pos = torch.searchsorted(keys, group_index.to(keys.device)).clamp(max=keys.numel() - 1)
        return 1 - acc[pos]

    def loss_terms(self, ctx: LossContext, agg: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        ctx.metrics.update(getattr(self, "_shaping_metrics", {}))
        b = ctx.batch
        H = b.require("entropy", self.name)
        d = self.difficulty(b.require("group_index", self.name)).to(H.dtype)
        c = self.alpha * d.unsqueeze(-1)  # arXiv 2510.10959: difficulty-aware coefficient
        ctx.metrics["aer/alpha"] = float(self.alpha)
        ctx.metrics["aer/coef_mean"] = valid_mean(c.expand_as(H), ctx.valid)
        return {"aer/loss": -agg(c * H)}

    def update(self, metrics: dict[str, Any]) -> None:
        if "entropy" not in metrics:
            raise MissingInputError("entropy", "aer.update (metrics of the rollout step)")
        H = float(metrics["entropy"])
        if self.initial_entropy is None:
            self.initial_entropy = H  # the initial-anchored target: τ·H_0
        target = self.tau * self.initial_entropy
        self.alpha = min(max(self.alpha + self.eta * (target - H), 0.0), self.alpha_max)
