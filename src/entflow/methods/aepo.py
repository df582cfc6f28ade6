"""AEPO: arbitrary entropy policy optimisation (arXiv 2510.08141, Wang et al.; docs/methods.md
"Entropy controls from the field").

Instead of an entropy bonus, AEPO adds a REINFORCE term on responses sampled at an adjusted
temperature: ``∇J_AEPO = ∇J_GRPO + α·E_{o∼π_θ^T}[R(q, o)·∇ log π_θ(o|q)]`` with ``T = T_high``
while the entropy is at or below the target H and ``T = T_low`` above it. Reinforcing good
answers drawn from a flatter (T > 1) distribution raises the policy's entropy; from a sharper
one (T < 1) lowers it.

The temperature-T samples are extra rollouts, which only a trainer can draw. Here:
:class:`AEPO` is the controller (which T, how many samples; checkpointed), and
:meth:`AEPO.reinforce_advantages` gives those samples their REINFORCE advantages; the trainer
appends the kept rows to the update batch, whose loss is then the ordinary ``policy_loss``.
On the regular batch the method is plain GRPO. docs/methods.md spells out the trainer change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from entflow.core.advantages import group_advantages
from entflow.core.batch import TokenBatch
from entflow.errors import MissingInputError, ParameterError
from entflow.methods.base import NONNEG, LossContext, Method, integer, interval, param, register


@register
@dataclass(repr=False)
class AEPO(Method):
    """AEPO controller and REINFORCE advantages for temperature-adjusted samples.

    Controller (arXiv 2510.08141 §4; official code): with ``H`` the entropy of the last step
    (``update(metrics)`` stores ``metrics["entropy"]``; none yet counts as 0, so the first step
    samples hot, as the official code), ``temperature = t_high`` if H ≤ ``target`` else
    ``t_low``, and ``sample_budget = n_samples`` (raising) or ``n_samples // 2`` (lowering).
    State: ``last_entropy``.

    REINFORCE rows (:meth:`reinforce_advantages`): for a batch of responses sampled at
    ``temperature`` (groups of G per prompt, rewards scored), a response is *rewarded* when its
    GRPO advantage within its temperature-T group exceeds ``threshold``; the first
    min(#rewarded, n_samples) of them (halved when lowering the entropy) in batch order are
    kept with advantage α on every token — the REINFORCE term α·R·∇log π_θ(o) with R = 1 for
    the kept responses and no baseline. The kept rows join the regular batch (log-probs under
    π_θ at temperature 1, as the rest) and ``policy_loss`` treats them as any other row.
    """

    name = "aepo"
    formula = "∇J = ∇J_GRPO + α·E_{o∼π^T}[R·∇log π(o)],  T = T_high if H ≤ H* else T_low"
    paper = "arXiv 2510.08141 (AEPO) §4, REINFORCE on temperature-adjusted samples; official code"
    state_fields = ("last_entropy",)
    draws_temperature_samples = True  # MethodNeeds.temperature_samples: the trainer draws the REINFORCE rows
    advantage_needs = ()  # the regular batch: plain GRPO; reinforce_advantages needs rewards, group_index

    target: float = param(0.5, NONNEG, "target entropy H (the official code's entropy_base)")
    t_high: float = param(1.2, interval(0, lo_open=True), "sampling temperature while H ≤ target")
    t_low: float = param(0.8, interval(0, lo_open=True), "sampling temperature while H > target")
    alpha: float = param(1.0, NONNEG, "REINFORCE advantage α given to each kept response")
    n_samples: int = param(60, integer(1), "REINFORCE samples per step (halved above target)")
    threshold: float = param(0.05, NONNEG, "a temperature sample is rewarded when its group advantage exceeds this")
    prompt_fraction: float = param(0.25, interval(0, 1, lo_open=True), "share of the step's prompts resampled at T")

    def validate(self) -> None:
        if self.t_low > self.t_high:
            raise ParameterError(self.name, "t_low", f"must be <= t_high = {self.t_high}, got {self.t_low}")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.last_entropy: float | None = None

    # -- controller ---------------------------------------------------------------------------
    @property
    def raising(self) -> bool:
        """True while the entropy is at or below target (sample hot; official: entropy ≤ base)."""
        return (0.0 if self.last_entropy is None else self.last_entropy) <= self.target

    @property
    def temperature(self) -> float:
        """The temperature to draw this step's REINFORCE samples at."""
        return self.t_high if self.raising else self.t_low  # arXiv 2510.08141: T_high / T_low switch

    @property
    def sample_budget(self) -> int:
        """The most REINFORCE responses kept this step."""
        return self.n_samples if self.raising else self.n_samples // 2

    def n_prompts(self, n_step_prompts: int) -> int:
        """How many of the step's prompts to resample at ``temperature``: max(⌊fraction·P⌋, 1)."""
        return max(int(self.prompt_fraction * n_step_prompts), 1)

    def update(self, metrics: dict[str, Any]) -> None:
        if "entropy" not in metrics:
            raise MissingInputError("entropy", "aepo.update (metrics of the rollout step)")
        self.last_entropy = float(metrics["entropy"])

    # -- the REINFORCE rows ---------------------------------------------------------------------
    def reinforce_advantages(self, batch: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """REINFORCE advantages of responses sampled at :attr:`temperature`.

        Args:
            batch: the temperature-T responses, with ``rewards`` and ``group_index`` ([N]).

        Returns:
            ``(advantages [N, T], keep [N] bool)``: α on every valid token of a kept response, 0
            elsewhere. Append the rows with ``keep`` to the update batch (with these advantages);
            drop the others (the official code does not train on them).
        """
        rewards = batch.require("rewards", "aepo.reinforce_advantages")
        group = batch.require("group_index", "aepo.reinforce_advantages")
        A = group_advantages(rewards, group, validate=batch.validate)  # GRPO within the temperature-T groups
        rewarded = A > self.threshold
        rank = torch.cumsum(rewarded.to(torch.long), 0)  # 1-based rank among the rewarded, batch order
        budget = rewarded.sum().clamp(max=self.n_samples)
        if not self.raising:
            budget = budget // 2  # official: min(n, #rewarded) // 2 above target
        keep = rewarded & (rank <= budget)
        adv = (self.alpha * keep.to(batch.logp.dtype)).unsqueeze(-1).expand_as(batch.logp)
        self._shaping_metrics = {
            "aepo/n_rewarded": rewarded.sum().to(torch.float64),
            "aepo/n_kept": keep.sum().to(torch.float64),
        }
        return adv.masked_fill(~batch.valid, 0), keep  # R = 1 for kept responses: α·R·∇log π

    def loss_terms(self, ctx: LossContext, agg: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        ctx.metrics["aepo/temperature"] = float(self.temperature)
        ctx.metrics["aepo/sample_budget"] = float(self.sample_budget)
        ctx.metrics.update(getattr(self, "_shaping_metrics", {}))
        return {}
