"""Advantages from a group baseline other than GRPO's standardisation: MaxRL and AsymRE.

Both are advantage replacers (``replaces_advantages``): ``compute_advantages(batch, m)`` builds
one advantage per response from ``batch.rewards`` and its group (``batch.group_index``),
discarding the GRPO base, and puts it on every valid token. Computed in float64 with fixed-size
per-group buffers (N slots for at most N groups): no host synchronisation on the fast path.

==========  ====================================================================================
maxrl       A_i = (R_i − R̄_g) / (R̄_g + ε): divides by the pass rate instead of the std, so prompts
            the policy rarely solves weigh more (the gradient of a maximum-likelihood objective)
asymre      A_i = R_i − (R̄_g + δ): a shifted baseline; δ < 0 makes every advantage larger, so
            positive samples weigh more than negative ones
==========  ====================================================================================

Where the peers disagree, a parameter picks the form (docs/methods.md, "MaxRL"): SkyRL's
``maxrl`` (ε > 0, and a group of one keeps A = R) or prime-rl's ``max_rl`` (ε = 0: A = 0 when
R̄_g ≤ 0, a group of one gets A = 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entflow.core.batch import TokenBatch
from entflow.methods._util import ReportsShaping, group_inverse, require_all
from entflow.methods.base import NONNEG, Method, interval, param, register


def group_moments(batch: TokenBatch, needed_by: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per response ``[N]`` float64: its reward R, its group's size, mean reward and unbiased std
    (0 for a group of one)."""
    require_all(batch, ("rewards", "group_index"), needed_by)
    assert batch.rewards is not None and batch.group_index is not None
    R = batch.rewards.to(torch.float64)
    inv = group_inverse(batch.group_index.to(R.device))
    slots = torch.zeros(R.shape[0], dtype=torch.float64, device=R.device)  # N slots: at most N groups
    count = slots.index_add(0, inv, torch.ones_like(R))[inv]
    mean = slots.index_add(0, inv, R)[inv] / count
    dev2 = slots.index_add(0, inv, (R - mean) ** 2)[inv]
    std = (dev2 / (count - 1).clamp(min=1)).sqrt()
    return R, count, mean, std


def on_tokens(a: torch.Tensor, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
    """A response's advantage ``[N]`` on each of its valid tokens, ``[N, T]`` in ``adv``'s dtype."""
    return (a.unsqueeze(-1) * batch.valid.to(a.dtype)).to(adv.dtype)


@register
@dataclass(repr=False)
class MaxRL(ReportsShaping, Method):
    """MaxRL: the group mean divides the centred reward, ``A_i = (R_i − R̄_g)/(R̄_g + ε)``.

    With binary rewards R̄_g is the prompt's pass rate p, so a correct response gets
    ``(1 − p)/p`` and a prompt solved once in G samples weighs G − 1 times as much as GRPO's
    centred reward would give it: the gradient is that of a maximum-likelihood objective over the
    pass rate (arXiv 2602.02710). Meant for rewards ≥ 0.

    ``epsilon > 0`` is SkyRL's ``maxrl``: groups of two or more use ``(R − R̄)/(R̄ + ε)``, a group
    of one keeps ``A = R`` (its baseline is 0). ``epsilon = 0`` is prime-rl's ``max_rl``:
    ``(R − R̄)/R̄`` where ``R̄ > 0`` and ``A = 0`` where ``R̄ ≤ 0`` (a group that never succeeds
    carries no signal), a group of one included.
    """

    name = "maxrl"
    formula = "A_i = (R_i − mean_g R)/(mean_g R + ε);  ε = 0: A = 0 where mean_g R ≤ 0"
    paper = "MaxRL, arXiv 2602.02710 (mean-normalised group advantage); SkyRL maxrl, prime-rl max_rl"
    replaces_advantages = True
    advantage_needs = ("rewards", "group_index")

    epsilon: float = param(
        1e-6, NONNEG, "added to the group mean in the denominator (SkyRL: 1e-6); 0 = prime-rl's form"
    )

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        R, count, mean, _ = group_moments(batch, self.name)
        if self.epsilon > 0:  # SkyRL compute_maxrl_advantage
            a = torch.where(count > 1, (R - mean) / (mean + self.epsilon), R)
        else:  # prime-rl MaxRLAlgorithm: no signal where the mean reward is <= 0
            a = torch.where(mean > 0, (R - mean) / torch.where(mean > 0, mean, torch.ones_like(mean)), 0.0)
        self._report(abs_mean=a.abs().mean(), pass_rate_mean=mean.mean())
        return on_tokens(a, adv, batch)


@register
@dataclass(repr=False)
class AsymRE(ReportsShaping, Method):
    """AsymRE: REINFORCE with the group mean shifted by δ, ``A_i = R_i − (R̄_g + δ)``.

    No std division. δ < 0 (default −0.1) lowers the baseline, so every advantage rises by |δ|:
    positive samples count more than negative ones, which the paper shows keeps training stable
    off-policy (arXiv 2506.20520). A group of one has baseline 0 (``A = R``), as in Trinity-RFT's
    ``ASYMREGroupAdvantage``.
    """

    name = "asymre"
    formula = "A_i = R_i − (mean_g R + δ);  a group of one: A_i = R_i"
    paper = "AsymRE, arXiv 2506.20520 (asymmetric REINFORCE, baseline V + δ); Trinity-RFT asymre"
    replaces_advantages = True
    advantage_needs = ("rewards", "group_index")

    baseline_shift: float = param(-0.1, interval(), "δ added to the group mean reward (Trinity-RFT: −0.1)")

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        R, count, mean, _ = group_moments(batch, self.name)
        a = torch.where(count > 1, R - (mean + self.baseline_shift), R)  # AsymRE (arXiv 2506.20520): R − (V + δ)
        self._report(baseline_mean=(mean + self.baseline_shift).mean())
        return on_tokens(a, adv, batch)
