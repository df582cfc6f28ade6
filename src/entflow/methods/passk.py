"""Pass@k objectives (docs/methods.md, "Objectives aimed at pass@k"): two that set the advantages,
Pass@k Training (Chen et al., arXiv 2508.10751) and PKPO (Walder & Karkhanis, arXiv 2505.15201),
and SimKO's per-token loss (Peng et al., arXiv 2510.14807), at the end of the file.

Both read a group's rewards as a set of n samples and ask what a subset of k of them achieves:
its maximum (pass@k for 0/1 rewards, max@k otherwise). Over the C(n, k) subsets of a group, with
its rewards sorted ascending g_(1) ≤ … ≤ g_(n) (ties in any order: the maximum's value is the same):

- the subset mean of the maximum, E[max] = Σ_i g_(i)·C(i−1, k−1)/C(n, k) (PKPO §3, the unbiased
  estimator of max@k; for 0/1 rewards 1 − C(n−c, k)/C(n, k)), and its variance likewise;
- the mean of the maximum over the subsets that contain sample i,
  s_(i) = [C(i−1, k−1)·g_(i) + Σ_{j>i} C(j−2, k−2)·g_(j)] / C(n−1, k−1)
  (for 0/1 rewards: 1 for a correct sample, 1 − C(n−c−1, k−1)/C(n−1, k−1) for a wrong one), whose
  group mean is E[max].

Pass@k Training's analytic advantage is (s_i − E[max]) / σ, σ the std of the maximum over the
subsets; PKPO's transformed reward is s_i (times k/n, a constant GRPO's normalisation removes),
normalised like GRPO's rewards. For k = 1, s_i = g_i and both are GRPO's own advantages.
Everything is float64 with fixed-size per-group buffers: no host synchronisation unless the batch
is validated (then a group smaller than k raises).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entflow.core.advantages import group_advantages
from entflow.core.batch import TokenBatch
from entflow.core.ppo import ppo_clip_loss
from entflow.errors import ParameterError
from entflow.methods._util import ReportsShaping, group_inverse, require_all, valid_mean
from entflow.methods.base import LossContext, Method, integer, interval, optional, param, register

STD_EPS = 1e-6  # docs/design.md §1: a division by a std is by (std + 1e-6), as GRPO's


def _log_binom(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log C(a, b), whether C(a, b) > 0), elementwise in float64; C = 0 unless 0 ≤ b ≤ a."""
    ok = (b >= 0) & (b <= a)
    a_, b_ = a.clamp(min=0), b.clamp(min=0)
    out = torch.lgamma(a_ + 1) - torch.lgamma(b_ + 1) - torch.lgamma((a_ - b_).clamp(min=0) + 1)
    return out, ok


def _ratio(num: tuple[torch.Tensor, torch.Tensor], den: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """C_num / C_den from two ``_log_binom`` results (0 where either is 0)."""
    ok = num[1] & den[1]
    return torch.where(ok, torch.exp(num[0] - den[0]), torch.zeros_like(num[0]))


@dataclass
class SubsetMax:
    """Per response ``[N]``: ``s`` (mean max over the k-subsets containing it), ``mean`` = E[max]
    and ``var`` = Var[max] over its group's k-subsets (exactly 0 when the group's rewards are all
    equal), ``n`` its group size, ``subsets`` = C(n, k)."""

    s: torch.Tensor
    mean: torch.Tensor
    var: torch.Tensor
    n: torch.Tensor
    subsets: torch.Tensor


def subset_max(rewards: torch.Tensor, group_index: torch.Tensor, k: int | torch.Tensor) -> SubsetMax:
    """The k-subset maximum statistics of each group (module docstring), float64, ``[N]`` each.
    A group smaller than k has no k-subset: its ``s``, ``mean`` and ``var`` are 0."""
    g = rewards.to(torch.float64)
    n_rows = g.numel()
    inv = group_inverse(group_index.to(g.device))
    k = torch.as_tensor(k, dtype=torch.float64, device=g.device)
    size = torch.zeros(n_rows, dtype=torch.long, device=g.device).index_add_(0, inv, torch.ones_like(inv))
    start = torch.cumsum(size, 0) - size
    o1 = torch.argsort(g, stable=True)
    order = o1[torch.argsort(inv[o1], stable=True)]  # by group, then ascending reward
    pos = torch.empty_like(order)
    pos[order] = torch.arange(n_rows, device=g.device)
    i = (pos - start[inv] + 1).to(torch.float64)  # 1-based rank in the group
    n = size[inv].to(torch.float64)
    c_nk = _log_binom(n, k)
    p_max = _ratio(_log_binom(i - 1, k - 1), c_nk)  # P(sample i is a k-subset's maximum)  PKPO Eq. 7
    mean = torch.zeros(n_rows, dtype=torch.float64, device=g.device).index_add_(0, inv, g * p_max)[inv]
    dev2 = ((g - mean) ** 2) * p_max  # Var[max] = Σ_i P_i (g_(i) − E[max])², centred for accuracy
    var = torch.zeros(n_rows, dtype=torch.float64, device=g.device).index_add_(0, inv, dev2)[inv]
    lo = torch.full((n_rows,), torch.inf, dtype=torch.float64, device=g.device).scatter_reduce(0, inv, g, "amin")
    hi = torch.full((n_rows,), -torch.inf, dtype=torch.float64, device=g.device).scatter_reduce(0, inv, g, "amax")
    tied = (hi - lo)[inv] == 0  # every subset has the same maximum
    c_n1k1 = _log_binom(n - 1, k - 1)
    own = _ratio(_log_binom(i - 1, k - 1), c_n1k1) * g
    u = _ratio(_log_binom(i - 2, k - 2), c_n1k1) * g  # sample i as the maximum of a subset with a lower one
    csum = torch.cumsum(u[order], 0)  # in sorted order
    end = (start + size - 1).clamp(min=0)
    after = csum[end[inv]] - csum[pos]  # Σ over the group's higher-ranked samples j > i
    s = own + after  # PKPO §3 / Chen et al. §3.3: mean max over the subsets that contain i
    s = torch.where(tied, g, s)  # all equal: exactly the common reward (no rounding between samples)
    has = c_nk[1]
    zero = torch.zeros_like(g)
    return SubsetMax(
        torch.where(has, s, zero),
        torch.where(has, mean, zero),
        torch.where(has & ~tied, var, zero),
        n,
        torch.where(has, torch.exp(c_nk[0]), zero),
    )


def _check_k(batch: TokenBatch, owner: str, k: int) -> None:
    """With validation on (a host read): k may not exceed a group's size."""
    if not batch.validate:
        return
    assert batch.group_index is not None
    inv = group_inverse(batch.group_index)
    size = torch.zeros_like(inv).index_add_(0, inv, torch.ones_like(inv))[inv]
    if int(size.min()) < k:
        raise ParameterError(owner, "k", f"must be <= the group size, got k = {k} with a group of {int(size.min())}")


@register
@dataclass(repr=False)
class PassKTraining(ReportsShaping, Method):
    """Pass@k Training with the analytic advantage (Chen et al., arXiv 2508.10751 §3.3): the reward
    of a k-subset is its maximum (pass@k for 0/1 rewards), and a response's advantage is the mean
    over the subsets that contain it of the subset's GRPO advantage,
    ``A_i = (s_i − E[max]) / (σ + 1e-6)``, σ² the variance of the maximum over the C(n, k) subsets,
    Bessel-corrected (× M/(M−1), M = C(n, k)) so that k = 1 gives GRPO's own advantages. A group
    whose subsets all have the same maximum (all correct, all wrong, k = n) gets A = 0."""

    name = "passk_training"
    formula = (
        "s_i = mean_{S∋i,|S|=k} max_S R; A_i = (s_i − E_S[max_S R]) / (σ_S + 1e-6), "
        "σ_S² = Var_S[max_S R]·M/(M−1), M = C(n, k); 0/1 rewards: A_pos = (1 − R̄)/σ, "
        "A_neg = (1 − R̄ − C(n_neg−1, k−1)/C(n−1, k−1))/σ"
    )
    paper = "Chen et al. 2025, arXiv 2508.10751 §3.3 (Pass@k Training, analytic derivation)"
    replaces_advantages = True
    advantage_needs = ("rewards", "group_index")

    k: int = param(4, integer(1), "subset size k (1 = GRPO); at most the group size")

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        require_all(batch, self.advantage_needs, self.name)
        assert batch.rewards is not None and batch.group_index is not None
        _check_k(batch, self.name, self.k)
        st = subset_max(batch.rewards, batch.group_index, self.k)
        m = st.subsets
        bessel = torch.where(m > 1, m / (m - 1).clamp(min=1e-300), torch.zeros_like(m))
        std = (st.var * bessel).sqrt()
        a = (st.s - st.mean) / (std + STD_EPS)  # arXiv 2508.10751 Eq. 12–13
        a = torch.where(std > 0, a, torch.zeros_like(a))
        self._report(group_pass_at_k_mean=st.mean.mean())
        return (a.unsqueeze(-1) * batch.valid.to(a.dtype)).to(adv.dtype)


@register
@dataclass(repr=False)
class PKPO(ReportsShaping, Method):
    """PKPO (Walder & Karkhanis, arXiv 2505.15201 §3): the unbiased per-sample transform of the
    rewards for max@k (pass@k for 0/1 rewards), ``s_i`` = the mean maximum over the k-subsets that
    contain sample i (the paper's r_i up to the constant k/n), then GRPO's group normalisation of
    the transformed rewards: ``A = (s − mean_g s)/(std_g s + 1e-6)``. k = 1 is GRPO. ``k_end``
    anneals k linearly over training, k_t = round(k + (k_end − k)·step/(total_steps − 1))."""

    name = "pkpo"
    formula = "s_i = mean_{S∋i,|S|=k} max_S R (unbiased max@k transform); A = (s − mean_g s)/(std_g s + 1e-6)"
    paper = "Walder & Karkhanis 2025, arXiv 2505.15201 §3 (PKPO), k annealing §5"
    replaces_advantages = True
    advantage_needs = ("rewards", "group_index")

    k: int = param(4, integer(1), "subset size k (1 = GRPO); at most the group size")
    k_end: int | None = param(None, optional(integer(1)), "anneal k linearly to this value over total_steps")

    @property
    def reads_step(self) -> bool:  # type: ignore[override]
        return self.k_end is not None

    def k_at(self, step: int, total_steps: int | None) -> int:
        """k at training step ``step`` (0-based) of ``total_steps``."""
        if self.k_end is None or not total_steps or total_steps <= 1:
            return self.k
        frac = min(max(step / (total_steps - 1), 0.0), 1.0)
        return round(self.k + (self.k_end - self.k) * frac)

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        require_all(batch, self.advantage_needs, self.name)
        assert batch.rewards is not None and batch.group_index is not None
        k = self.k_at(batch.step, batch.total_steps)
        _check_k(batch, self.name, k)
        st = subset_max(batch.rewards, batch.group_index, k)
        a = group_advantages(st.s, batch.group_index, scale="group", eps=STD_EPS, validate=False)
        self._report(k=float(k), transformed_reward_mean=st.s.mean())
        return (a.unsqueeze(-1) * batch.valid.to(a.dtype)).to(adv.dtype)


@register
@dataclass(repr=False)
class SimKO(Method):
    """SimKO (Peng et al., arXiv 2510.14807 §4): at a response's high-entropy tokens (H above the
    ``tau`` quantile of its valid tokens' entropies), a positive-advantage response spreads part α
    of its gradient over the K most probable candidates, and a negative-advantage response whose
    sampled token is the top-1 candidate is pushed down λ times harder. Per token,

    ``r̃ = (1 − αw)·r + (αw/K)·sg(r)·Σ_{b∈top-K} π_θ(b)/sg(π_θ(b))`` (A > 0; value r, gradient
    (1 − αw)·r·∇log π(y) + (αw/K)·r·Σ_b ∇log π(b)), ``Ã = λ·A`` where A < 0, w = 1 and y is the
    top-1 candidate; then PPO-clip ``max(−Ã·r̃, −Ã·clip(r̃, 1 − ε_low, 1 + ε_high))``. It replaces
    the per-token loss. Reads ``topk_logp`` (``MethodNeeds.topk``) and H detached."""

    name = "simko"
    formula = (
        "w = 1[H_t > Q_τ(H of the response)]; A>0: r̃ = (1−αw)·r + (αw/K)·sg(r)·Σ_{b∈topK} π(b)/sg π(b); "
        "A<0, w=1, y = top-1: Ã = λA; ℓ = max(−Ã·r̃, −Ã·clip(r̃, 1−ε_low, 1+ε_high))"
    )
    paper = "Peng et al. 2025, arXiv 2510.14807 §4 (SimKO); official code"
    needs = ("topk_logp",)
    reads_entropy = True

    top_k: int = param(3, integer(1), "K candidates whose probabilities correct responses raise")
    alpha: float = param(0.01, interval(0, 1), "share α of the gradient spread over the top-K (mix_topk_coef)")
    lam: float = param(1.1, interval(0), "λ: the stronger push on a wrong response's top-1 token")
    tau: float = param(0.8, interval(0, 1, lo_open=True, hi_open=True), "entropy quantile τ within a response")

    @property
    def token_topk(self) -> int:
        return self.top_k

    def token_loss(self, loss: torch.Tensor, ctx: LossContext) -> torch.Tensor:
        b = ctx.batch
        top = b.require("topk_logp", self.name)
        if top.shape[-1] < self.top_k:
            raise ParameterError(self.name, "top_k", f"is {self.top_k} but the batch has {top.shape[-1]} candidates")
        top = top[..., : self.top_k]
        valid = ctx.valid
        H = b.entropy_for_reading(self.name).to(top.dtype)
        w = (H > _response_quantile(H, valid, self.tau)) & valid  # arXiv 2510.14807 §4: high-entropy tokens
        r = torch.exp(b.logp.masked_fill(~valid, 0) - b.old_logp.detach().masked_fill(~valid, 0))
        spread = torch.exp(top - top.detach()).sum(-1) / self.top_k  # value 1, gradient mean_b ∇log π(b)
        a_w = self.alpha * w.to(r.dtype)
        r_tilde = torch.where(ctx.adv > 0, (1 - a_w) * r + a_w * r.detach() * spread, r)
        top1 = b.logp.detach() >= top[..., 0].detach() - 1e-6  # the sampled token is the top-1 candidate
        push = (ctx.adv < 0) & w & top1
        adv = torch.where(push, self.lam * ctx.adv, ctx.adv)
        ctx.metrics["simko/high_entropy_frac"] = valid_mean(w.to(r.dtype), valid)
        ctx.metrics["simko/pushed_frac"] = valid_mean(push.to(r.dtype), valid)
        return ppo_clip_loss(adv, r_tilde, ctx.clip_low, ctx.clip_high, ctx.dual_clip)


def _response_quantile(H: torch.Tensor, valid: torch.Tensor, q: float) -> torch.Tensor:
    """The ``q`` quantile (linear interpolation, as ``torch.quantile``) of each response's valid-token
    values ``[N, T]`` → ``[N, 1]``; an empty response gets +inf (nothing selected). Sort-based, no sync."""
    n_valid = valid.sum(-1, keepdim=True)
    x = torch.where(valid, H, torch.full_like(H, torch.inf)).sort(-1).values  # valid values first
    pos = (n_valid - 1).clamp(min=0).to(H.dtype) * q
    lo = pos.floor().long()
    hi = (lo + 1).clamp(max=(n_valid - 1).clamp(min=0))
    x_lo, x_hi = x.gather(-1, lo), x.gather(-1, hi)
    frac = pos - lo.to(H.dtype)
    out = torch.where(hi > lo, x_lo + frac * (x_hi - x_lo), x_lo)
    return torch.where(n_valid > 0, out, torch.full_like(out, torch.inf))
