"""verl 0.9.1's advantage estimators as entflow methods that set the advantages (docs/methods.md,
"Advantage estimators of verl").

Each one is an advantage replacer (``replaces_advantages``): ``compute_advantages(batch, m)``
builds A from ``batch.rewards`` (one outcome reward per response, which verl places on the last
response token) and the groups, discarding the GRPO base, exactly as verl's
``core_algos.get_adv_estimator_fn(name)`` does on the same inputs (tests/integrations/test_verl_advantages.py
compares them in float64). Parameters carry verl's names and defaults. Everything is computed in
float64 with fixed-size per-group buffers (N slots for at most N groups): no host synchronisation
on the fast path. Where verl treats a group of one response specially we do the same (its
baseline is 0), which is not what ``grpo`` does (docs/design.md §4: a lone response gets A = 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entflow.core.batch import TokenBatch
from entflow.errors import ShapeError
from entflow.methods._util import ReportsShaping, group_inverse, require_all
from entflow.methods.base import NONNEG, Method, interval, one_of, param, register

WHITEN_EPS = 1e-8  # verl.utils.torch_functional.masked_whiten: (x − μ)·rsqrt(σ² + 1e-8)

# --------------------------------------------------------------------------------------------
# Shared pieces: group sums over fixed-size buffers, verl's whitening, token returns
# --------------------------------------------------------------------------------------------


def _per_group(x: torch.Tensor, inv: torch.Tensor) -> torch.Tensor:
    """Sum of ``x`` ``[N, ...]`` over each group → ``[N slots, ...]`` (slot = dense group id)."""
    out = torch.zeros((inv.numel(), *x.shape[1:]), dtype=x.dtype, device=x.device)
    return out.index_add_(0, inv, x)


def _groups(batch: TokenBatch, needed_by: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(R [N] float64, dense group ids [N], group size per response [N], group mean per response [N])."""
    require_all(batch, ("rewards", "group_index"), needed_by)
    assert batch.rewards is not None and batch.group_index is not None
    R = batch.rewards.to(torch.float64)
    inv = group_inverse(batch.group_index.to(R.device))
    count = _per_group(torch.ones_like(R), inv)[inv]
    mean = _per_group(R, inv)[inv] / count
    return R, inv, count, mean


def _lone_zero(count: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """A group baseline per response ``[N]``, 0 for a response alone in its group (verl's rule)."""
    return torch.where(count > 1, base, torch.zeros_like(base))


def _unbiased_std(R: torch.Tensor, inv: torch.Tensor, count: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
    """The group's unbiased std (``torch.std``) per response ``[N]``; 0 for a group of one."""
    dev2 = _per_group((R - mean) ** 2, inv)[inv]
    return (dev2 / (count - 1).clamp(min=1)).sqrt()


def masked_whiten(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """verl's ``masked_whiten`` over every valid token of the batch: ``(x − μ)·rsqrt(σ² + 1e-8)``,
    σ² the Bessel-corrected variance over the valid tokens. ``[N, T]`` → ``[N, T]``, 0 off-mask.
    verl raises on fewer than two valid tokens; there the variance is 0 here."""
    m = valid.to(x.dtype)
    n = m.sum()
    mean = (x * m).sum() / (n + WHITEN_EPS)
    var = (((x - mean) ** 2) * m).sum() / (n + WHITEN_EPS)
    var = var * torch.where(n > 1, n / (n - 1).clamp(min=1), torch.ones_like(n))
    return ((x - mean) * torch.rsqrt(var + WHITEN_EPS)) * m


def _broadcast(a: torch.Tensor, adv: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Sequence advantages ``[N]`` on every valid token, in the input's dtype."""
    return (a.unsqueeze(-1) * valid.to(a.dtype)).to(adv.dtype)


def _check_group_sizes(batch: TokenBatch, count: torch.Tensor, least: int, owner: str, why: str) -> None:
    """With validation on (a host read), refuse groups smaller than ``least``."""
    if batch.validate and bool((count < least).any()):
        raise ShapeError(
            "group_index", f"groups of at least {least} responses ({owner}: {why})", f"a group of {int(count.min())}"
        )


class _VerlEstimator(ReportsShaping, Method):
    """Common declarations: builds A from rewards and groups, discarding its input."""

    replaces_advantages = True
    advantage_needs: tuple[str, ...] = ("rewards", "group_index")


# --------------------------------------------------------------------------------------------
# The estimators
# --------------------------------------------------------------------------------------------


@register
@dataclass(repr=False)
class RLOO(_VerlEstimator):
    """RLOO: the leave-one-out baseline, ``A_i = R_i − mean_{j≠i} R_j = n/(n−1)·(R_i − mean_g R)``;
    a lone response keeps ``A = R`` (verl ``compute_rloo_outcome_advantage``)."""

    name = "rloo"
    formula = "A_i = R_i − mean_{j∈g, j≠i} R_j = n/(n−1)·(R_i − R̄_g); n = 1: A = R"
    paper = "Ahmadian et al. 2024, arXiv 2402.14740 (RLOO); verl 0.9.1 adv_estimator=rloo"

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        R, _, count, mean = _groups(batch, self.name)
        a = torch.where(count > 1, count / (count - 1).clamp(min=1) * (R - mean), R)  # arXiv 2402.14740 Eq. 6
        self._report(abs_mean=a.abs().mean())
        return _broadcast(a, adv, batch.valid)


@register
@dataclass(repr=False)
class ReinforcePlusPlus(_VerlEstimator):
    """REINFORCE++: discounted reward-to-go, whitened over every valid token of the batch
    (verl ``compute_reinforce_plus_plus_outcome_advantage``); no group baseline."""

    name = "reinforce_plus_plus"
    formula = "G_t = γ^{#valid tokens after t}·R_i; A = whiten_batch(G) = (G − μ)/√(σ² + 1e-8)"
    paper = "Hu 2025, arXiv 2501.03262 (REINFORCE++); verl 0.9.1 adv_estimator=reinforce_plus_plus"
    advantage_needs = ("rewards",)

    gamma: float = param(1.0, interval(0, 1), "discount γ (verl algorithm.gamma)")

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        require_all(batch, self.advantage_needs, self.name)
        assert batch.rewards is not None
        R = batch.rewards.to(torch.float64)
        valid = batch.valid
        m = valid.to(torch.float64)
        after = m.sum(-1, keepdim=True) - m.cumsum(-1)  # valid tokens strictly after t
        G = R.unsqueeze(-1) * torch.pow(torch.full_like(m, self.gamma), after) * m  # arXiv 2501.03262 §3
        a = masked_whiten(G, valid)
        self._report(return_mean=(G.sum() / m.sum().clamp(min=1)))
        return a.to(adv.dtype)


@register
@dataclass(repr=False)
class ReinforcePlusPlusBaseline(_VerlEstimator):
    """REINFORCE++ with the group-mean baseline, then whitened over the batch's valid tokens
    (verl ``compute_reinforce_plus_plus_baseline_outcome_advantage``); a lone response's baseline is 0."""

    name = "reinforce_plus_plus_baseline"
    formula = "A = whiten_batch(R_i − R̄_g) over valid tokens; n = 1: R̄_g = 0"
    paper = "Hu 2025, arXiv 2501.03262 (REINFORCE++-baseline); verl 0.9.1 adv_estimator=reinforce_plus_plus_baseline"

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        R, _, count, mean = _groups(batch, self.name)
        base = _lone_zero(count, mean)
        a = masked_whiten((R - base).unsqueeze(-1) * batch.valid.to(R.dtype), batch.valid)
        return a.to(adv.dtype)


@register
@dataclass(repr=False)
class OPO(_VerlEstimator):
    """OPO: the length-weighted group mean as baseline, ``b_g = Σ_j |o_j| R_j / Σ_j |o_j|``
    (verl ``compute_opo_outcome_advantage``); a lone response's baseline is 0."""

    name = "opo"
    formula = "A_i = R_i − Σ_{j∈g} |o_j|·R_j / Σ_{j∈g} |o_j|; n = 1: A = R"
    paper = "Hao et al. 2025, arXiv 2505.23585 (OPO); verl 0.9.1 adv_estimator=opo"

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        R, inv, count, _ = _groups(batch, self.name)
        L = batch.valid.to(torch.float64).sum(-1)
        num, den = _per_group(L * R, inv)[inv], _per_group(L, inv)[inv]
        base = _lone_zero(count, num / den)  # arXiv 2505.23585 Eq. 5
        return _broadcast(R - base, adv, batch.valid)


@register
@dataclass(repr=False)
class GPGAdvantage(_VerlEstimator):
    """GPG's advantage: ``A_i = α·(R_i − R̄_g)/F_norm`` with ``α = N / #{R ≠ 0}`` over the whole
    batch (verl ``compute_gpg_outcome_advantage``, registered there as ``gpg``; entflow's name
    ``gpg`` is verl's GPG policy loss). A lone response's baseline is 0."""

    name = "gpg_advantage"
    formula = "A_i = α·(R_i − R̄_g)/F_norm, α = N/max(#{i: R_i ≠ 0}, 1) over the batch; n = 1: R̄_g = 0"
    paper = "Chu et al. 2025, arXiv 2504.02546 (GPG) Eq. 8; verl 0.9.1 adv_estimator=gpg"

    f_norm: float = param(1.0, interval(0, lo_open=True), "normaliser F_norm (verl's f_norm)")

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        R, _, count, mean = _groups(batch, self.name)
        alpha = R.numel() / (R != 0).sum().clamp(min=1).to(R.dtype)  # arXiv 2504.02546 Eq. 8
        base = _lone_zero(count, mean)
        self._report(alpha=alpha)
        return _broadcast(alpha * (R - base) / self.f_norm, adv, batch.valid)


@register
@dataclass(repr=False)
class GRPOPassK(_VerlEstimator):
    """GRPO pass@k: only each group's best response gets a non-zero advantage, ``R_max − R_2nd``
    (divided by the group's std + ε when ``norm_adv_by_std_in_grpo``); verl
    ``compute_grpo_passk_outcome_advantage``. Groups need at least two responses (verl raises
    too). Among tied maxima the advantage is 0 whichever one is "best"."""

    name = "grpo_passk"
    formula = "A_best = (R_max − R_2nd)/(σ_g + ε) (or without σ_g), every other response 0"
    paper = "Mahdavi et al. 2025, arXiv 2503.19595; verl 0.9.1 adv_estimator=grpo_passk"

    norm_adv_by_std_in_grpo: bool = param(True, one_of(True, False), "divide by the group's unbiased std + ε")
    epsilon: float = param(1e-6, NONNEG, "ε added to the std")

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        R, inv, count, mean = _groups(batch, self.name)
        _check_group_sizes(batch, count, 2, self.name, "the best response is compared with the second best")
        n = R.numel()
        o1 = torch.argsort(R, descending=True, stable=True)
        order = o1[torch.argsort(inv[o1], stable=True)]  # by group, best first, ties by index
        size = _per_group(torch.ones_like(R), inv).long()
        start = torch.cumsum(size, 0) - size
        pos = torch.empty_like(order)
        pos[order] = torch.arange(n, device=R.device)
        rank = pos - start[inv]  # 0 = the group's best
        second = order[(start[inv] + 1).clamp(max=n - 1)]  # the group's second best (when it has one)
        gap = R - R[second]
        if self.norm_adv_by_std_in_grpo:
            gap = gap / (_unbiased_std(R, inv, count, mean) + self.epsilon)
        a = torch.where((rank == 0) & (count > 1), gap, torch.zeros_like(gap))
        return _broadcast(a, adv, batch.valid)


@register
@dataclass(repr=False)
class GDPO(_VerlEstimator):
    """GDPO with entflow's one reward per response: GRPO's group-normalised reward (verl's GRPO:
    a lone response has mean 0 and std 1), then whitened over the batch's valid tokens (verl
    ``compute_gdpo_outcome_advantage`` with no ``gdpo_reward_keys``, which falls back to the summed
    reward). With several reward components GDPO normalises each before summing; a
    :class:`TokenBatch` carries one reward, so that is the case covered here."""

    name = "gdpo"
    formula = "A' = (R_i − R̄_g)/(σ_g + ε) (or R_i − R̄_g); A = whiten_batch(A') over valid tokens"
    paper = "arXiv 2601.05242 (GDPO); verl 0.9.1 adv_estimator=gdpo"

    norm_adv_by_std_in_grpo: bool = param(True, one_of(True, False), "divide by the group's unbiased std + ε")
    epsilon: float = param(1e-6, NONNEG, "ε added to the std")

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        R, inv, count, mean = _groups(batch, self.name)
        lone = count <= 1
        mu = torch.where(lone, torch.zeros_like(mean), mean)
        std = torch.where(lone, torch.ones_like(mean), _unbiased_std(R, inv, count, mean))
        a = (R - mu) / (std + self.epsilon) if self.norm_adv_by_std_in_grpo else R - mu
        valid = batch.valid
        return masked_whiten(a.unsqueeze(-1) * valid.to(a.dtype), valid).to(adv.dtype)


@register
@dataclass(repr=False)
class ReMax(_VerlEstimator):
    """ReMax: the reward of the prompt's greedy response as the baseline, ``A_i = R_i − R_greedy``
    (verl ``compute_remax_outcome_advantage``). The greedy rollout is drawn by the host; the batch
    carries its rewards as ``reward_baselines`` ``[N]`` (``MethodNeeds.greedy_baseline``). A host that
    cannot draw it refuses the method."""

    name = "remax"
    formula = "A_i = R_i − R(greedy response to the same prompt)"
    paper = "Li et al. 2023, arXiv 2310.10505 (ReMax) Alg. 1; verl 0.9.1 adv_estimator=remax"
    advantage_needs = ("rewards", "reward_baselines")
    draws_greedy_baseline = True

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        require_all(batch, self.advantage_needs, self.name)
        assert batch.rewards is not None and batch.reward_baselines is not None
        R = batch.rewards.to(torch.float64)
        b = batch.reward_baselines.to(torch.float64)
        self._report(baseline_mean=b.mean())
        return _broadcast(R - b, adv, batch.valid)  # arXiv 2310.10505 Alg. 1


@register
@dataclass(repr=False)
class OptimalTokenBaseline(_VerlEstimator):
    """Optimal token baseline: a per-position baseline per group weighted by the cumulative path
    variance proxy ``W_t = Σ_{j≤t} (1 − 2π_j + Σπ²_j)`` of the rollout policy,
    ``B_t = Σ_i G_{i,t} W_{i,t} / (Σ_i W_{i,t} + ε)`` over the group's responses active at t
    (verl ``compute_optimal_token_baseline_advantage``, without rollout importance weights).
    ``handle_zero_tail``: a group's single longest response gets baseline 0 beyond the
    second-longest length. A lone response's baseline is 0."""

    name = "optimal_token_baseline"
    formula = (
        "w_t = 1 − 2π_t + Σπ²_t (rollout policy); W_t = Σ_{j≤t} w_j m_j; "
        "B_{g,t} = Σ_{i∈g} G_{i,t} W_{i,t} m_{i,t} / (Σ_{i∈g} W_{i,t} m_{i,t} + ε); A = (G − B)·m"
    )
    paper = "verl 0.9.1 adv_estimator=optimal_token_baseline (core_algos.compute_optimal_token_baseline_advantage)"
    advantage_needs = ("rewards", "group_index", "old_logp", "sum_p2")

    handle_zero_tail: bool = param(
        True, one_of(True, False), "baseline 0 on the single longest response's unshared tail"
    )
    epsilon: float = param(1e-8, NONNEG, "ε in the baseline's denominator")

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        require_all(batch, self.advantage_needs, self.name)
        R, inv, count, _ = _groups(batch, self.name)
        assert batch.sum_p2 is not None
        valid = batch.valid
        m = valid.to(torch.float64)
        pi = batch.old_logp.detach().to(torch.float64).masked_fill(~valid, 0).exp()
        w = 1 - 2 * pi + batch.sum_p2.detach().to(torch.float64).masked_fill(~valid, 0)
        W = (w * m).cumsum(-1)
        # G_t: reward-to-go of the outcome reward on the last valid token = R up to that token
        last = torch.where(valid, torch.arange(m.shape[1], device=m.device), -1).amax(-1)
        G = R.unsqueeze(-1) * (torch.arange(m.shape[1], device=m.device) <= last.unsqueeze(-1)).to(R.dtype)
        num = _per_group(G * W * m, inv)[inv]
        den = _per_group(W * m, inv)[inv] + self.epsilon
        B = torch.where((count > 1).unsqueeze(-1), num / den, torch.zeros_like(num))
        if self.handle_zero_tail:
            B = B.masked_fill(_unshared_tail(m.sum(-1), inv, count, m.shape[1]), 0)
        a = (G - B) * m
        return a.to(adv.dtype)


def _unshared_tail(lengths: torch.Tensor, inv: torch.Tensor, count: torch.Tensor, t: int) -> torch.Tensor:
    """Boolean ``[N, T]``: positions at or beyond the second-longest length of the group, on the
    group's longest response when it is the only one of that length (groups of ≥ 2)."""
    slots = inv.numel()
    longest = torch.full((slots,), -1.0, dtype=lengths.dtype, device=lengths.device)
    longest = longest.scatter_reduce(0, inv, lengths, "amax")[inv]
    is_max = lengths == longest
    n_max = _per_group(is_max.to(lengths.dtype), inv)[inv]
    shorter = torch.where(is_max, torch.full_like(lengths, -1.0), lengths)
    second = torch.full((slots,), -1.0, dtype=lengths.dtype, device=lengths.device)
    second = second.scatter_reduce(0, inv, shorter, "amax")[inv]
    alone = is_max & (n_max == 1) & (count > 1) & (second >= 0)
    pos = torch.arange(t, device=lengths.device).to(lengths.dtype)
    return alone.unsqueeze(-1) & (pos.unsqueeze(0) >= second.unsqueeze(-1))
