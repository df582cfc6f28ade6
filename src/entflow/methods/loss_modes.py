"""The policy losses verl 0.9.1 and TRL 1.16 ship that the five papers do not: GMPO, DPPO, GPG,
DRO, VESPO, LUSPO and DeepSeek-V3.2's off-policy sequence mask.

==================  ===========================================================================
geo_mean            GMPO: one ratio per response, the geometric mean of the token ratios
                    clipped in log space; a sequence loss (the aggregation is the response mean)
dppo_tv, dppo_kl    DPPO: REINFORCE with a truncated, detached IS weight; a token is dropped when
                    its probability moved beyond a total-variation / binary-KL trust region
gpg                 GPG: plain policy gradient −A·log π (no ratio, no clip)
dro                 DRO: −A·log π plus a quadratic penalty ½β·(log r)²
vespo               VESPO: −sg(φ(w))·A·log π, φ a gamma-shaped weight of the sequence ratio w
luspo               LUSPO: GSPO's clipped sequence ratio, each response's loss times its length
off_policy_mask     OPSM: drop responses with A < 0 whose mean KL(π_old‖π_θ) exceeds δ
==================  ===========================================================================

All read only ``logp``, ``old_logp`` and the advantages. The first six replace PPO-clip's
per-token loss (``token_loss``: at most one per composition); ``off_policy_mask`` is a token
weighter and composes with any of them. ``geo_mean`` and ``luspo`` are sequence-level losses:
their per-token value is the response's loss (with its gradient) and they fix the aggregation to
the mean over responses (the ``aggregation`` hook, docs/architecture.md §3), so the loss is the
mean of the sequence losses whatever ``agg`` the caller gives — as verl's ``geo_mean`` and TRL's
``luspo`` do. Parameters carry the peers' names and defaults; TRL's ``delta`` (INTELLECT-2's
two-sided clip) is entflow's ``dual_clip`` of the loss, not a method (docs/methods.md). Readings
and differences from the peers: docs/methods.md, "Policy losses of verl and TRL".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from entflow.core.ppo import ppo_clip_loss
from entflow.errors import ParameterError
from entflow.methods._util import valid_mean
from entflow.methods.base import LossContext, Method, interval, optional, param, register
from entflow.methods.policy_loss_variants import LOG_RATIO_BOUND, POSITIVE, _frac, log_ratio

SEQUENCE_MEAN = "seq-mean-token-mean"  # the aggregation of a sequence-level loss: the mean over responses
# verl's guard inside DPPO's binary KL, log((1 − p_old + g)/(1 − p + g)): finite at p = 1
BINARY_KL_GUARD = 1e-8
# TRL's bounds on VESPO's log sequence ratio (grpo_trainer.get_gamma_weights): w ∈ [1e-8, e^20]
VESPO_LOG_W_MIN = math.log(1e-8)
VESPO_LOG_W_MAX = 20.0


def _response_sum(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Σ over each response's valid tokens of ``x`` [N, T] → ``[N]``."""
    return x.masked_fill(~valid, 0).sum(-1)


def _lengths(valid: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """|y_i|: each response's number of valid tokens ``[N]`` (at least 1, so an empty row divides by 1)."""
    return valid.sum(-1).to(dtype).clamp(min=1)


def _logp(ctx: LossContext) -> torch.Tensor:
    """``log π_t`` with grad, 0 off-mask ``[N, T]``."""
    return ctx.batch.logp.masked_fill(~ctx.valid, 0)


@register
@dataclass(repr=False)
class GeoMean(Method):
    """GMPO: the geometric mean of the token ratios, each clipped in log space, per response.

    ``ρ_i = exp((1/|y_i|)·Σ_t c_t)`` with ``c_t = min(log r_t, ε_high)`` where A_t > 0,
    ``max(log r_t, −ε_low)`` where A_t < 0 and 0 where A_t = 0 (the clip is on log r: the ratio
    range is (e^−ε_low, e^ε_high)); the response's loss is ``L_i = −Ā_i·ρ_i`` with Ā_i its
    advantages' mean, and the loss is the mean of L_i over responses (a sequence loss: the method
    fixes ``agg`` to ``seq-mean-token-mean``, whatever the caller gives, as verl's ``geo_mean``
    ignores ``loss_agg_mode``). The bounds are the loss's ``clip_low`` / ``clip_high`` (verl's
    ``clip_ratio_low`` / ``clip_ratio_high``; the paper uses 0.4). No dual clip. Token weights of
    other parts scale L_i by their mean over the response. ``geo_mean/clip_frac``: share of valid
    tokens whose log-ratio was clipped.
    """

    name = "geo_mean"
    formula = (
        "L_i = −Ā_i·exp(mean_t c_t),  c_t = min(log r_t, ε_high) if A>0, max(log r_t, −ε_low) if A<0;  "
        "loss = mean_i L_i"
    )
    paper = "GMPO, arXiv 2507.20673 (geometric-mean objective, token-level clip in log space); verl's geo_mean"

    def aggregation(self) -> str:
        return SEQUENCE_MEAN

    def token_loss(self, loss: torch.Tensor, ctx: LossContext) -> torch.Tensor:
        A, valid = ctx.adv, ctx.valid
        lr = log_ratio(ctx)
        zero = torch.zeros_like(lr)
        # token-level clip of log r by the advantage's sign (GMPO, arXiv 2507.20673)
        c = torch.where(A > 0, lr.clamp(max=ctx.clip_high), torch.where(A < 0, lr.clamp(min=-ctx.clip_low), zero))
        n = _lengths(valid, A.dtype)
        rho = torch.exp(_response_sum(c, valid) / n)  # ρ_i, the geometric mean of the clipped ratios
        a_bar = _response_sum(A, valid) / n
        ctx.metrics["geo_mean/clip_frac"] = _frac((c != lr) & (A != 0), valid)
        ctx.metrics["geo_mean/seq_ratio_mean"] = valid_mean(rho.detach().unsqueeze(-1).expand_as(A), valid)
        return (-a_bar * rho).unsqueeze(-1).expand_as(A)  # L_i on every token of response i


class _DPPO(Method):
    """DPPO's shared loss: ``ℓ_t = −A_t·sg(min(r_t, c))·log π_t·M_t`` with the trust-region mask M."""

    def keep(self, ctx: LossContext, p: torch.Tensor, p_old: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def token_loss(self, loss: torch.Tensor, ctx: LossContext) -> torch.Tensor:
        A, valid = ctx.adv, ctx.valid
        r = torch.exp(log_ratio(ctx).detach().clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
        # truncated IS weight (arXiv 2602.04879 §5.4): c = the loss's dual_clip (verl's clip_ratio_c)
        w = r if ctx.dual_clip is None else r.clamp(max=ctx.dual_clip)
        p = ctx.batch.logp.detach().masked_fill(~valid, 0).exp()
        p_old = ctx.batch.old_logp.detach().masked_fill(~valid, 0).exp()
        keep = self.keep(ctx, p, p_old)
        ctx.metrics[f"{self.name}/masked_frac"] = _frac(~keep, valid)
        ctx.metrics[f"{self.name}/truncated_frac"] = _frac((w != r) & keep, valid)
        return -A * w * _logp(ctx) * keep.to(A.dtype)


@register
@dataclass(repr=False)
class DPPOTV(_DPPO):
    """DPPO-Binary-TV: a token keeps its gradient while its probability stays in a
    total-variation trust region.

    ``ℓ_t = −A_t·sg(min(r_t, c))·log π_t·M_t``, ``M_t = [π_t − π_old,t ≤ δ_high]`` where A_t > 0,
    else ``[π_t − π_old,t ≥ −δ_low]``. The thresholds δ are the loss's ``clip_low`` / ``clip_high``
    (verl reads ``clip_ratio_low`` / ``clip_ratio_high`` as the divergence thresholds); the IS
    weight's truncation c is the loss's ``dual_clip`` (verl's ``clip_ratio_c``; None: untruncated).
    The gradient w.r.t. ``logp`` is ``−A·min(r, c)·M``. ``dppo_tv/masked_frac``: share of valid
    tokens outside the trust region; ``truncated_frac``: kept tokens whose weight was truncated.
    """

    name = "dppo_tv"
    formula = "ℓ_t = −A_t·sg(min(r_t, c))·log π_t·M_t,  M_t = [π−π_old ≤ δ_high] if A>0 else [π−π_old ≥ −δ_low]"
    paper = "DPPO, arXiv 2602.04879 (binary-TV trust region; truncated IS, §5.4); verl's dppo_tv"

    def keep(self, ctx: LossContext, p: torch.Tensor, p_old: torch.Tensor) -> torch.Tensor:
        d = p - p_old  # the binary total variation |π − π_old| with its sign (DPPO, arXiv 2602.04879)
        return torch.where(ctx.adv > 0, d <= ctx.clip_high, d >= -ctx.clip_low)


@register
@dataclass(repr=False)
class DPPOKL(_DPPO):
    """DPPO-Binary-KL: as ``dppo_tv`` with the binary KL as the divergence.

    ``D_t = π_old·log(π_old/π) + (1 − π_old)·log((1 − π_old)/(1 − π))`` (the KL between the
    Bernoulli laws "this token or another"; verl adds 1e-8 inside the second log, and so do we).
    ``M_t = [D_t ≤ δ_high or π ≤ π_old]`` where A_t > 0, else ``[D_t ≤ δ_low or π ≥ π_old]``:
    only a move in the direction the advantage pushes leaves the region. Thresholds and the
    truncation c as ``dppo_tv``.
    """

    name = "dppo_kl"
    formula = (
        "ℓ_t = −A_t·sg(min(r_t, c))·log π_t·M_t,  M_t = [D_KL^bin ≤ δ_high or π ≤ π_old] if A>0 "
        "else [D_KL^bin ≤ δ_low or π ≥ π_old]"
    )
    paper = "DPPO, arXiv 2602.04879 (binary-KL trust region; truncated IS, §5.4); verl's dppo_kl"

    def keep(self, ctx: LossContext, p: torch.Tensor, p_old: torch.Tensor) -> torch.Tensor:
        b = ctx.batch
        logp = b.logp.detach().masked_fill(~ctx.valid, 0)
        old = b.old_logp.detach().masked_fill(~ctx.valid, 0)
        g = BINARY_KL_GUARD
        kl = p_old * (old - logp) + (1 - p_old) * torch.log((1 - p_old + g) / (1 - p + g))  # arXiv 2602.04879
        return torch.where(ctx.adv > 0, (kl <= ctx.clip_high) | (p <= p_old), (kl <= ctx.clip_low) | (p >= p_old))


@register
@dataclass(repr=False)
class GPG(Method):
    """GPG: the plain policy gradient, ``ℓ_t = −A_t·log π_t`` — no ratio, no clip, no KL.

    The gradient w.r.t. ``logp`` is ``−A_t`` whatever the ratio (with several epochs per rollout it
    is off-policy REINFORCE). The paper's advantage (a group baseline rescaled by the share of
    responses with signal) is an advantage estimator, not this loss; this is verl's ``gpg`` loss mode.
    """

    name = "gpg"
    formula = "ℓ_t = −A_t·log π_t"
    paper = "GPG, arXiv 2504.02546 (the policy-gradient objective without surrogate or clip); verl's gpg"

    def token_loss(self, loss: torch.Tensor, ctx: LossContext) -> torch.Tensor:
        return -ctx.adv * _logp(ctx)


@register
@dataclass(repr=False)
class DRO(Method):
    """DRO: the policy gradient with a quadratic penalty on the log-ratio.

    ``ℓ_t = −(A_t·log π_t − ½β·(log r_t)²)``; the gradient w.r.t. ``logp`` is ``−A_t + β·log r_t``,
    pulling the policy back toward the rollout policy in proportion to how far it moved. ``dro_beta``
    (β, verl's name) has no default, as in verl, which refuses a missing or non-positive one.
    """

    name = "dro"
    formula = "ℓ_t = −(A_t·log π_t − ½·β·(log r_t)²)"
    paper = "DRO, arXiv 2405.19107 (quadratic log-ratio regulariser); verl's dro"

    dro_beta: float | None = param(None, optional(POSITIVE), "β: coefficient of the ½(log r)² penalty (required, > 0)")

    def validate(self) -> None:
        if self.dro_beta is None:
            raise ParameterError(self.name, "dro_beta", "is required: the penalty coefficient β, a number in (0, inf]")

    def token_loss(self, loss: torch.Tensor, ctx: LossContext) -> torch.Tensor:
        assert self.dro_beta is not None
        lr = log_ratio(ctx)
        ctx.metrics["dro/log_ratio_sq_mean"] = valid_mean(lr.detach().square(), ctx.valid)
        return -(ctx.adv * _logp(ctx) - 0.5 * self.dro_beta * lr.square())


@register
@dataclass(repr=False)
class VESPO(Method):
    """VESPO: REINFORCE with a smooth gamma-shaped weight of the sequence ratio.

    ``w_i = exp(clip(Σ_t clip(log r_t, ±20), log 1e-8, 20))`` (the product of the response's
    ratios, TRL's bounds), ``φ(w) = e^λ·w^k·e^{−λw}`` (φ(1) = 1, maximal at w = k/λ), with
    (k, λ) = (k_pos, λ_pos) where A_t ≥ 0, else (k_neg, λ_neg); ``ℓ_t = −sg(φ(w_i))·A_t·log π_t``.
    No hard clip: φ fades both too-small and too-large ratios. A non-finite φ is 0 (TRL). TRL
    aggregates it as its ``dapo`` (token mean over the step): pass that ``agg``.
    """

    name = "vespo"
    formula = "ℓ_t = −sg(φ(w_i))·A_t·log π_t,  φ(w) = e^λ·w^k·e^{−λw},  w_i = Π_t r_i,t"
    paper = "VESPO, arXiv 2602.10693 (gamma weighting of the sequence importance weight); TRL's vespo"

    k_pos: float = param(2.0, interval(0), "k on A ≥ 0: power on w (how hard small ratios are damped)")
    lambda_pos: float = param(3.0, POSITIVE, "λ on A ≥ 0: decay rate in w (how hard large ratios are damped)")
    k_neg: float = param(3.0, interval(0), "k on A < 0")
    lambda_neg: float = param(2.0, POSITIVE, "λ on A < 0")

    def token_loss(self, loss: torch.Tensor, ctx: LossContext) -> torch.Tensor:
        A, valid = ctx.adv, ctx.valid
        lr = log_ratio(ctx).detach().clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
        log_w = _response_sum(lr, valid).clamp(VESPO_LOG_W_MIN, VESPO_LOG_W_MAX).unsqueeze(-1)
        nonneg = A >= 0
        k = torch.full_like(A, self.k_neg).masked_fill(nonneg, self.k_pos)
        lam = torch.full_like(A, self.lambda_neg).masked_fill(nonneg, self.lambda_pos)
        # log φ(w) = λ + k·log w − λ·w (VESPO, arXiv 2602.10693), detached
        phi = torch.exp(lam + k * log_w - lam * log_w.exp()).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
        ctx.metrics["vespo/phi_mean"] = valid_mean(phi, valid)
        return -phi * A * _logp(ctx)


@register
@dataclass(repr=False)
class LUSPO(Method):
    """LUSPO: GSPO's clipped sequence ratio, each response's loss scaled by its length.

    ``s_i = exp((1/|y_i|)·Σ_t log r_t)`` (with its gradient through every token of the response),
    ``L_i = Σ_t max(−A_t·s_i, −A_t·clip(s_i, 1 − ε_low, 1 + ε_high))`` (= |y_i|·GSPO's loss for a
    per-response A; the loss's dual clip, TRL's ``delta``, caps A < 0 as in PPO), and the loss is
    the mean of L_i over responses: a sequence loss, so the method fixes ``agg`` to the response
    mean (TRL: ``(ℓ·mask).sum(-1).mean()``). Longer responses weigh more, undoing GSPO's
    length normalisation. ``luspo/clip_frac``: share of valid tokens whose response ratio is clipped.
    """

    name = "luspo"
    formula = (
        "L_i = Σ_t max(−A_t·s_i, −A_t·clip(s_i, 1−ε_low, 1+ε_high)),  s_i = exp(mean_t log r_t);  loss = mean_i L_i"
    )
    paper = "LUSPO, arXiv 2602.05261 (length-unbiased sequence objective); TRL's luspo (sequence-level IS)"

    def aggregation(self) -> str:
        return SEQUENCE_MEAN

    def token_loss(self, loss: torch.Tensor, ctx: LossContext) -> torch.Tensor:
        A, valid = ctx.adv, ctx.valid
        n = _lengths(valid, A.dtype)
        s = torch.exp(_response_sum(log_ratio(ctx), valid) / n).unsqueeze(-1).expand_as(A)  # s_i, with grad
        per_token = ppo_clip_loss(A, s, ctx.clip_low, ctx.clip_high, ctx.dual_clip)
        sd = s.detach()
        cut = ((A > 0) & (sd > 1 + ctx.clip_high)) | ((A < 0) & (sd < 1 - ctx.clip_low))
        ctx.metrics["luspo/clip_frac"] = _frac(cut, valid)
        # under the response mean of token means, |y_i|·ℓ_t sums the response's tokens (LUSPO, arXiv 2602.05261)
        return n.unsqueeze(-1) * per_token


@register
@dataclass(repr=False)
class OffPolicyMask(Method):
    """Off-policy sequence masking (DeepSeek-V3.2): drop the negative samples the policy has
    moved away from.

    ``w_t = 0`` where ``A_t < 0`` and the response's mean KL estimate
    ``(1/|y_i|)·Σ_t (log π_old − log π_θ)`` exceeds δ = ``threshold``; else 1 (detached). TRL's
    ``off_policy_mask_threshold``. A token weighter: it composes with any loss. Masked tokens still
    count in the loss's denominator (TRL multiplies its per-token loss). TRL reads the sampler's
    log-probs when vLLM gives them; entflow reads ``old_logp``, the same without vLLM.
    ``off_policy_mask/masked_frac``: share of valid tokens dropped.
    """

    name = "off_policy_mask"
    formula = "w_t = 0 if A_t < 0 and mean_t(log π_old − log π_θ) > δ, else 1"
    paper = "DeepSeek-V3.2, arXiv 2512.02556 (Eq. 9: off-policy sequence masking); TRL's off_policy_mask_threshold"

    threshold: float | None = param(
        None, optional(POSITIVE), "δ: responses with A < 0 and mean KL(π_old‖π_θ) above it are dropped (required, > 0)"
    )

    def validate(self) -> None:
        if self.threshold is None:
            raise ParameterError(self.name, "threshold", "is required: the KL threshold δ, a number in (0, inf]")

    def token_weights(self, ctx: LossContext) -> torch.Tensor:
        A, valid = ctx.adv, ctx.valid
        b = ctx.batch
        d = b.old_logp.detach().masked_fill(~valid, 0) - b.logp.detach().masked_fill(~valid, 0)
        kl = (_response_sum(d, valid) / _lengths(valid, d.dtype)).unsqueeze(-1)  # arXiv 2512.02556 Eq. 9
        keep = (A >= 0) | (kl <= self.threshold)
        ctx.metrics["off_policy_mask/masked_frac"] = _frac(~keep, valid)
        return keep.to(A.dtype)
