"""Rollout–training mismatch corrections: the inference engine that sampled a rollout and the trainer
that scores it disagree on the sampled tokens' probabilities (``TokenBatch.rollout_logp`` vs
``old_logp``); these methods correct the update for it.

==============  ========================================================================  ==========
method          what it does (ρ_t = π_old/π_rollout, r_t = π_θ/π_rollout)                 kind
==============  ========================================================================  ==========
tis             token weight min(ρ, C), per token or per response (Π_t ρ_t)               weight
icepop          token weight ρ inside [lower, upper], 0 outside                          weight
rs_token        drop tokens whose k1/k2/k3 divergence leaves its bounds                  mask
rs_seq_sum      drop responses whose summed divergence leaves its bounds                 mask
rs_seq_mean     drop responses whose mean divergence leaves its bounds                   mask
rs_seq_max      drop responses whose largest token divergence exceeds its bound          mask
kpop            token weight ρ where max(forward, reverse) Bernoulli KL ≤ φ, else 0      weight
m2po            ℓ = −A·r; drop the largest (log r)² of the PPO-active tokens to M2 ≤ τ   ratio
ipo             ℓ = −[|Δp| ≤ τ]·A·r + kl_tau·(log r)²                                      ratio
==============  ========================================================================  ==========

``tis``, ``icepop`` and the four ``rs_*`` are verl 0.9.1's rollout correction
(``verl/trainer/ppo/rollout_corr_helper.py``, decoupled mode): weights and masks from π_old and
π_rollout once per rollout batch (the same in every epoch), the weights multiplying PPO-clip's
per-token loss as verl's ``rollout_is_weights`` do, the masks removing tokens from the loss and its
denominator as verl's modified ``response_mask`` does. verl's one option grid is split at its two
axes: the IS threshold's form picks ``tis`` (one upper bound) or ``icepop`` (``lower_upper``), each
with verl's ``level`` (``rollout_is``) and ``batch_normalize``; the rejection criterion's level is
the method (``rs_token`` … ``rs_seq_max``) and its divergence the ``statistic`` parameter, so verl's
chained ``rollout_rs="token_k1,seq_max_k2"`` is the composition ``rs_token+rs_seq_max`` (masks AND).
``kpop`` is AReaL's ``metric="binary_kl"`` rejection, ``m2po`` Trinity-RFT's M2PO loss, ``ipo``
prime-rl's IPO loss. Each reports verl's / the peer's metrics under its own prefix and, when the
batch carries an entropy, the share of the tokens it masked or truncated in each quartile of the
batch's token entropy (``<name>/masked_frac_q1`` … ``q4``; ``tis/truncated_frac_q*``).

Composition: a mask (``rs_*``) composes with anything; at most one part may reweight by
π_old/π_rollout or take its loss's ratio against π_rollout (``Method.rollout_correction``), and
``m2po`` / ``ipo`` replace the per-token loss, so they refuse a second loss replacer (kl_cov, gpg, …).
Formulas, parameters and sources: docs/methods.md, "Rollout–training mismatch".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from entflow.core.distributed import Reducer
from entflow.core.mismatch import (
    QUARTILES,
    SAFETY_BOUND,
    RSBounds,
    batch_normaliser,
    binary_kl,
    is_metrics,
    is_weights,
    k3_mean,
    log_ratio,
    normalise,
    quartile_shares,
    rs_keep,
    rs_metrics,
    rs_statistic,
)
from entflow.errors import ParameterError
from entflow.methods.base import LossContext, Method, interval, one_of, optional, param, register

POSITIVE = interval(0, lo_open=True)
NAMES = ("tis", "icepop", "rs_token", "rs_seq_sum", "rs_seq_mean", "rs_seq_max", "kpop", "m2po", "ipo")


def _all_valid(ctx: LossContext) -> torch.Tensor:
    """The valid tokens of the batch as given, before any part dropped some (verl computes its
    weights and their metrics on the response mask as it comes)."""
    return ctx.valid if ctx.dropped is None else ctx.valid | ctx.dropped


def _rho_log(ctx: LossContext, valid: torch.Tensor) -> torch.Tensor:
    """``log ρ = old_logp − rollout_logp`` on ``valid``, detached, 0 elsewhere."""
    return log_ratio(ctx.batch.old_logp, ctx.batch.require("rollout_logp", "the mismatch corrections"), valid)


def _report(ctx: LossContext, name: str, metrics: dict[str, torch.Tensor]) -> None:
    for k, v in metrics.items():
        ctx.metrics[f"{name}/{k}"] = v


def _quartiles(ctx: LossContext, name: str, kind: str, affected: torch.Tensor, valid: torch.Tensor) -> None:
    """``<name>/<kind>_frac_q1..q4``: the share of each entropy quartile's valid tokens in
    ``affected``; H is ``old_entropy``, else ``entropy`` (detached); nothing without either."""
    b = ctx.batch
    h = b.old_entropy if b.old_entropy is not None else b.entropy
    if h is None:
        return
    shares = quartile_shares(affected & valid, h.detach(), valid)
    for i, q in enumerate(QUARTILES):
        ctx.metrics[f"{name}/{kind}_frac_{q}"] = shares[i]


# --------------------------------------------------------------------------------------------
# Importance weights: TIS and IcePop (verl's rollout_is)
# --------------------------------------------------------------------------------------------


class _RolloutIS(Method):
    """verl's rollout importance weights as token weights; ``bounds()`` gives (upper, lower or None)."""

    needs: ClassVar[tuple[str, ...]] = ("rollout_logp",)
    statistics_needs: ClassVar[tuple[str, ...]] = ("old_logp", "rollout_logp")  # batch normalisation
    rollout_correction: ClassVar[str | None] = "weight"
    affected_kind: ClassVar[str] = "masked"

    level: str
    batch_normalize: bool

    def bounds(self) -> tuple[float, float | None]:
        raise NotImplementedError

    def _weights(self, ctx: LossContext, valid: torch.Tensor):
        upper, lower = self.bounds()
        return is_weights(_rho_log(ctx, valid), valid, self.level, upper, lower)

    def batch_statistics(self, ctxs: list[LossContext], reducer: Reducer) -> list[dict[str, torch.Tensor]] | None:
        """With ``batch_normalize``: verl's batch mean of the weights, over the whole batch."""
        if not self.batch_normalize:
            return None
        parts = [batch_normaliser(self._weights(c, _all_valid(c)).weights, _all_valid(c), self.level) for c in ctxs]
        total = reducer.sum([p[0] for p in parts])
        count = reducer.sum([p[1] for p in parts])
        return [{"total": total, "count": count} for _ in ctxs]

    def token_weights(self, ctx: LossContext) -> torch.Tensor:
        valid = _all_valid(ctx)
        upper, lower = self.bounds()
        w = self._weights(ctx, valid)
        metrics = is_metrics(w, valid, self.level, upper, lower)
        weights = w.weights
        if self.batch_normalize:
            st = ctx.stat(self)
            weights, metrics["batch_norm_factor"] = normalise(weights, st["total"], st["count"], self.level)
        _report(ctx, self.name, metrics)
        affected = (w.raw > upper) if lower is None else (w.weights == 0)
        _quartiles(ctx, self.name, self.affected_kind, affected, valid)
        return weights.detach()


@register
@dataclass(repr=False)
class TIS(_RolloutIS):
    """Truncated importance sampling: each token's loss weighted by the rollout ratio, truncated at C.

    ``w_t = min(ρ_t, C)`` with ``ρ_t = exp(clip(log π_old − log π_rollout, ±20))`` (``level="token"``),
    or ``w_t = min(Π_s ρ_s, C)`` on every token of the response (``level="sequence"``: the product
    over its valid tokens, clip on the log-sum). ``batch_normalize``: divide by the batch mean of
    the weights (over tokens, or over responses' mean weights), when it exceeds 1e-8. Detached;
    multiplies PPO-clip's per-token loss as verl's ``rollout_is_weights`` (decoupled mode).
    Equals verl 0.9.1's ``compute_rollout_correction_weights(rollout_is=level,
    rollout_is_threshold=C)`` (``verl/trainer/ppo/rollout_corr_helper.py``), metrics its
    ``compute_is_metrics`` under ``tis/`` (``tis/mean``, ``tis/eff_sample_size``, …);
    ``tis/truncated_frac_q1..q4``: tokens with ρ > C per entropy quartile. Default C = 2 and the
    token level: verl's ``decoupled_token_is`` preset (its config class's own default level is
    ``"sequence"``).
    """

    name = "tis"
    formula = "w_t = min(ρ_t, C),  ρ_t = π_old(o_t)/π_rollout(o_t)  (level=sequence: min(Π_s ρ_s, C))"
    paper = "Yao et al. 2025 (TIS); verl 0.9.1 rollout_corr_helper.compute_rollout_correction_weights"
    affected_kind = "truncated"

    level: str = param("token", one_of("token", "sequence"), "token: ρ_t per token; sequence: Π_t ρ_t per response")
    threshold: float = param(2.0, POSITIVE, "C: the weights are truncated at C (verl's rollout_is_threshold)")
    batch_normalize: bool = param(False, one_of(True, False), "divide the weights by their batch mean (verl's)")

    def bounds(self) -> tuple[float, float | None]:
        return self.threshold, None


@register
@dataclass(repr=False)
class IcePop(_RolloutIS):
    """IcePop: keep a token's rollout ratio as its weight only inside a band, else drop its gradient.

    ``w_t = ρ_t`` if ``lower ≤ ρ_t ≤ upper`` else 0 (``level="sequence"``: ``Π_s ρ_s`` per response).
    A token weight (the dropped tokens still count in the denominator, as in verl, which zeroes
    its ``rollout_is_weights``). Equals verl 0.9.1's ``compute_rollout_correction_weights`` with
    ``rollout_is_threshold="lower_upper"``; metrics its ``compute_is_metrics`` and ``oob_ratio``
    under ``icepop/``; ``icepop/masked_frac_q1..q4``: the zeroed tokens per entropy quartile.
    Defaults [0.5, 5]: verl's ``decoupled_token_icepop`` preset.
    """

    name = "icepop"
    formula = "w_t = ρ_t if lower ≤ ρ_t ≤ upper else 0,  ρ_t = π_old(o_t)/π_rollout(o_t)"
    paper = "IcePop (Ring-1T, arXiv 2510.18855); verl 0.9.1 rollout_corr_helper (rollout_is_threshold lower_upper)"

    level: str = param("token", one_of("token", "sequence"), "token: ρ_t per token; sequence: Π_t ρ_t per response")
    lower: float = param(0.5, POSITIVE, "tokens with ρ below it get weight 0")
    upper: float = param(5.0, POSITIVE, "tokens with ρ above it get weight 0")
    batch_normalize: bool = param(False, one_of(True, False), "divide the weights by their batch mean (verl's)")

    def validate(self) -> None:
        if self.lower > self.upper:
            raise ParameterError(self.name, "lower", f"must be <= upper = {self.upper}, got {self.lower}")

    def bounds(self) -> tuple[float, float | None]:
        return self.upper, self.lower


# --------------------------------------------------------------------------------------------
# Rejection sampling (verl's rollout_rs)
# --------------------------------------------------------------------------------------------

HALF_LN2_SQUARED = 0.5 * math.log(2.0) ** 2  # k2 bound ⇔ |log ρ| ≤ ln 2, ρ ∈ [1/2, 2]


class _Rejection(Method):
    """verl's rejection criterion at one level: a token mask (rejected tokens leave the loss and its
    denominator, as verl's modified ``response_mask``)."""

    needs: ClassVar[tuple[str, ...]] = ("rollout_logp",)
    rollout_correction: ClassVar[str | None] = "mask"
    level: ClassVar[str] = ""
    # (statistic, upper, lower) used when ``threshold`` is None
    default: ClassVar[tuple[str, float, float | None]] = ("k1", 2.0, None)

    statistic: str
    threshold: float | None
    threshold_lower: float | None

    def validate(self) -> None:
        if self.level == "seq_max" and self.statistic == "k1":
            raise ParameterError(self.name, "statistic", "must be 'k2' or 'k3' (verl has no seq_max_k1), got 'k1'")
        if self.threshold is None and self.statistic != self.default[0]:
            raise ParameterError(
                self.name,
                "threshold",
                f"is required with statistic={self.statistic!r}: the default bound belongs to "
                f"statistic={self.default[0]!r} (k1 bounds a ratio, k2 and k3 a divergence)",
            )
        if self.threshold_lower is not None:
            if self.statistic != "k1":
                why = f"applies to statistic='k1' only (a ratio band), got {self.statistic!r}"
                raise ParameterError(self.name, "threshold_lower", why)
            if self.threshold is not None and self.threshold_lower > self.threshold:
                raise ParameterError(
                    self.name, "threshold_lower", f"must be <= threshold = {self.threshold}, got {self.threshold_lower}"
                )

    def bounds(self) -> RSBounds:
        """The criterion's bounds as verl compares them (k1: log ratio bounds; lower None → 1/upper)."""
        if self.threshold is None:
            stat, upper, lower = self.default
            return RSBounds.of(stat, upper, lower)
        return RSBounds.of(self.statistic, self.threshold, self.threshold_lower)

    def token_mask(self, ctx: LossContext) -> torch.Tensor:
        valid = ctx.valid
        stat, seq = rs_statistic(_rho_log(ctx, valid), valid, self.level, self.statistic)
        bounds = self.bounds()
        keep = rs_keep(stat, bounds)
        _report(ctx, self.name, rs_metrics(stat, seq, keep, valid, bounds))
        _quartiles(ctx, self.name, "masked", ~keep, valid)
        return keep


_STATISTIC = one_of("k1", "k2", "k3")
_THRESHOLD_HELP = "upper bound (k1: on the ratio ρ; k2/k3: on the divergence); None: the default statistic's bound"
_LOWER_HELP = "k1 only: lower bound on the ratio ρ; None: 1/threshold (verl's reading of one number)"


@register
@dataclass(repr=False)
class RSToken(_Rejection):
    """Rejection sampling per token: drop the tokens whose divergence from the rollout policy leaves
    its bounds. Statistic on log ρ (clipped to ±20): ``k1 = −log ρ`` kept in ``[log lower, log upper]``
    (ρ ∈ [1/upper, 1/lower]), ``k2 = ½(log ρ)²`` or ``k3 = ρ − 1 − log ρ`` kept ≤ threshold.
    verl 0.9.1's ``compute_rollout_rejection_mask(rollout_rs="token_<statistic>")``; metrics its
    ``compute_rs_metrics`` under ``rs_token/``. Default k1 in [0.5, 2] (ours: verl gives no
    default; its rule infers lower = 1/upper from a single bound).
    """

    name = "rs_token"
    formula = "keep t iff k(log ρ_t) within bounds;  k1 = −log ρ, k2 = ½(log ρ)², k3 = ρ − 1 − log ρ"
    paper = "verl 0.9.1 rollout_corr_helper.compute_rollout_rejection_mask (token_k1/k2/k3)"
    level = "token"
    default = ("k1", 2.0, None)

    statistic: str = param("k1", _STATISTIC, "k1 = −log ρ, k2 = ½(log ρ)², k3 = ρ − 1 − log ρ")
    threshold: float | None = param(None, optional(POSITIVE), _THRESHOLD_HELP)
    threshold_lower: float | None = param(None, optional(POSITIVE), _LOWER_HELP)


@register
@dataclass(repr=False)
class RSSeqSum(_Rejection):
    """Rejection sampling per response on the sum of its tokens' divergences (k1: −Σ log ρ = the log
    of the inverse sequence ratio, kept in ``[log lower, log upper]``; k2 / k3: ≤ threshold); a
    rejected response leaves the loss whole. verl's ``seq_sum_<statistic>``. Default k1 in [0.5, 2]:
    verl's ``decoupled_seq_is_rs`` preset (``rs_threshold="0.5_2.0"``)."""

    name = "rs_seq_sum"
    formula = "keep response i iff Σ_t k(log ρ_t) within bounds"
    paper = "verl 0.9.1 rollout_corr_helper.compute_rollout_rejection_mask (seq_sum_k1/k2/k3)"
    level = "seq_sum"
    default = ("k1", 2.0, 0.5)

    statistic: str = param("k1", _STATISTIC, "k1 = −log ρ, k2 = ½(log ρ)², k3 = ρ − 1 − log ρ")
    threshold: float | None = param(None, optional(POSITIVE), _THRESHOLD_HELP)
    threshold_lower: float | None = param(None, optional(POSITIVE), _LOWER_HELP)


@register
@dataclass(repr=False)
class RSSeqMean(_Rejection):
    """Rejection sampling per response on the mean of its tokens' divergences (k1: the geometric
    mean ratio, verl's "Geo-RS"; k3: the mean k3 KL, verl's "K3-RS"). verl's ``seq_mean_<statistic>``.
    Default k3 ≤ 0.01: verl's ``decoupled_k3_rs`` preset."""

    name = "rs_seq_mean"
    formula = "keep response i iff mean_t k(log ρ_t) within bounds"
    paper = "verl 0.9.1 rollout_corr_helper.compute_rollout_rejection_mask (seq_mean_k1/k2/k3)"
    level = "seq_mean"
    default = ("k3", 0.01, None)

    statistic: str = param("k3", _STATISTIC, "k1 = −log ρ, k2 = ½(log ρ)², k3 = ρ − 1 − log ρ")
    threshold: float | None = param(None, optional(POSITIVE), _THRESHOLD_HELP)
    threshold_lower: float | None = param(None, optional(POSITIVE), _LOWER_HELP)


@register
@dataclass(repr=False)
class RSSeqMax(_Rejection):
    """Rejection sampling per response on its largest token divergence (k2 or k3; verl has no
    ``seq_max_k1``). verl's ``seq_max_<statistic>``. Default k2 ≤ ½·ln²2 (ours: verl gives no
    default): a response is dropped when any of its tokens has ρ outside [1/2, 2]."""

    name = "rs_seq_max"
    formula = "keep response i iff max_t k(log ρ_t) ≤ threshold"
    paper = "verl 0.9.1 rollout_corr_helper.compute_rollout_rejection_mask (seq_max_k2/k3)"
    level = "seq_max"
    default = ("k2", HALF_LN2_SQUARED, None)

    statistic: str = param("k2", _STATISTIC, "k2 = ½(log ρ)², k3 = ρ − 1 − log ρ")
    threshold: float | None = param(None, optional(POSITIVE), _THRESHOLD_HELP)
    threshold_lower: float | None = param(None, optional(POSITIVE), "not used: seq_max takes k2 or k3")


# --------------------------------------------------------------------------------------------
# KPop (AReaL), M2PO (Trinity-RFT), IPO (prime-rl)
# --------------------------------------------------------------------------------------------


@register
@dataclass(repr=False)
class KPop(Method):
    """KPop: AReaL's rejection sampling with ``metric="binary_kl"`` (action ``mask``, token level).

    Each token is a Bernoulli "this token or another" under the trainer (p = π_old(o_t)) and under
    the engine (q = π_rollout(o_t)), both clamped to [1e-8, 1 − 1e-8]; the token is masked when
    ``max(KL(Bern p ‖ Bern q), KL(Bern q ‖ Bern p)) > φ``. A kept token's loss is weighted by the
    behaviour ratio ρ_t = exp(log p − log q) (unclipped; a non-finite log-ratio counts as 0), a
    masked one gets weight 0 and still counts in the denominator — AReaL's decoupled PPO loss
    multiplies by its ``behave_imp_weight`` and divides by the token count before rejection.
    Implemented from ``apply_rejection_sampling`` / ``compute_binary_kl_divergence`` and
    ``ppo_actor_loss_fn`` in AReaL's ``areal/utils/functional/functional.py``. Default φ = 0.1
    (ours: no default of AReaL's for this metric could be read here): at π_rollout = 0.5 a token is
    kept while π_old ∈ [0.287, 0.713], at 0.1 while π_old ∈ [0.017, 0.257].
    ``kpop/masked_frac`` and ``kpop/masked_frac_q1..q4`` (per entropy quartile).
    """

    name = "kpop"
    formula = "w_t = ρ_t·[max(KL(Bern π_old‖Bern π_rollout), KL(Bern π_rollout‖Bern π_old)) ≤ φ]"
    paper = "AReaL, areal/utils/functional/functional.py (rejection_sampling metric='binary_kl', KPop)"
    needs = ("rollout_logp",)
    rollout_correction = "weight"

    threshold: float = param(0.1, POSITIVE, "φ: tokens whose larger Bernoulli KL exceeds it are masked")

    def token_weights(self, ctx: LossContext) -> torch.Tensor:
        valid = _all_valid(ctx)
        b = ctx.batch
        old = torch.where(valid, b.old_logp.detach(), torch.zeros_like(b.old_logp))
        roll = torch.where(valid, b.require("rollout_logp", "kpop").detach(), torch.zeros_like(old))
        lr = old - roll
        lr = torch.where(torch.isfinite(lr), lr, torch.zeros_like(lr))
        divergence = torch.maximum(binary_kl(old, roll), binary_kl(roll, old))
        keep = (divergence <= self.threshold) & valid
        w = torch.where(keep, torch.exp(lr), torch.zeros_like(lr))
        n = valid.sum().clamp(min=1).to(torch.float64)
        ctx.metrics["kpop/masked_frac"] = (valid & ~keep).sum().to(torch.float64) / n
        ctx.metrics["kpop/binary_kl_mean"] = torch.where(valid, divergence, torch.zeros_like(lr)).sum() / n
        _quartiles(ctx, self.name, "masked", ~keep, valid)
        return w


@register
@dataclass(repr=False)
class M2PO(Method):
    """M2PO: second-moment trust region instead of PPO's clip.

    ``log r_t = log π_θ − log π_rollout`` (the behaviour policy is the engine that sampled). The
    PPO-active tokens — those where a clip would act, ``A > 0 and log r > 0`` or ``A < 0 and
    log r < 0`` — are sorted by ``(log r)²``; when their mean exceeds τ the largest are dropped
    until the mean of the rest is ≤ τ (ties: the earlier token first). The loss is
    ``ℓ_t = −A_t·r_t`` with ``r = exp(clip(log r, ±20))`` (the clip straight-through) and no PPO clip;
    dropped tokens get weight 0 and still count in the denominator (the paper's footnote 2).
    The selection is over the batch of the call, or over the whole optimisation batch with
    ``prepare_statistics`` (Trinity computes it over the global mini-batch). Implemented from
    Trinity-RFT's ``trinity/algorithm/policy_loss_fn/m2po_policy_loss.py`` (``_compute_m2po_mask``,
    ``M2POPolicyLossFn``); τ = 0.04 is its default. Metrics ``m2po/m2_before``, ``m2_after``,
    ``masked_fraction``, ``trust_region_fraction``, ``masked_frac_q1..q4``.
    """

    name = "m2po"
    formula = "ℓ_t = −A_t·r_t·M_t, r = π_θ/π_rollout;  M drops the largest (log r)² of {A·log r > 0} until mean ≤ τ"
    paper = "M2PO (openreview IIgl5MWelz); Trinity-RFT trinity/algorithm/policy_loss_fn/m2po_policy_loss.py"
    needs = ("rollout_logp",)
    statistics_needs = ("logp", "rollout_logp")
    rollout_correction = "ratio"

    threshold: float = param(0.04, interval(0), "τ: bound on the mean (log r)² of the PPO-active tokens")

    @staticmethod
    def _log_r(ctx: LossContext) -> torch.Tensor:
        b, valid = ctx.batch, ctx.valid
        roll = b.require("rollout_logp", "m2po").detach().masked_fill(~valid, 0)
        return b.logp.masked_fill(~valid, 0) - roll

    @staticmethod
    def _ppo_active(ctx: LossContext, lr: torch.Tensor) -> torch.Tensor:
        """Where a PPO clip would act: A > 0 and r > 1, or A < 0 and r < 1 (valid tokens)."""
        return ctx.valid & (((ctx.adv > 0) & (lr > 0)) | ((ctx.adv < 0) & (lr < 0)))

    def batch_statistics(self, ctxs: list[LossContext], reducer: Reducer) -> list[dict[str, torch.Tensor]]:
        lrs = [self._log_r(c).detach() for c in ctxs]
        cands = [self._ppo_active(c, lr) for c, lr in zip(ctxs, lrs, strict=True)]
        m2 = reducer.cat_tokens([lr.square() for lr in lrs])
        cand = reducer.cat_tokens(cands)
        n_cand = cand.sum()
        keys = torch.where(cand, m2, torch.full_like(m2, torch.inf))
        order = torch.sort(keys, stable=True).indices
        ranks = torch.empty_like(order)
        ranks[order] = torch.arange(order.numel(), device=order.device)
        ordered = torch.where(cand[order], m2[order], torch.zeros_like(m2))
        positions = torch.arange(1, m2.numel() + 1, device=m2.device, dtype=m2.dtype)
        prefix = torch.cumsum(ordered, 0) / positions  # ascending values: prefix means never decrease
        within = (prefix <= self.threshold) & (positions <= n_cand.to(m2.dtype))
        keep_n = within.sum()
        dropped = cand & (ranks >= keep_n)
        total = torch.where(cand, m2, torch.zeros_like(m2)).sum()
        kept_total = torch.where(cand & ~dropped, m2, torch.zeros_like(m2)).sum()
        n_valid = reducer.sum([c.valid.sum() for c in ctxs]).to(torch.float64).clamp(min=1)
        shared = {
            "m2_before": total / n_cand.clamp(min=1).to(m2.dtype),
            "m2_after": kept_total / keep_n.clamp(min=1).to(m2.dtype),
            "masked_fraction": dropped.sum().to(torch.float64) / n_valid,
            "trust_region_fraction": n_cand.to(torch.float64) / n_valid,
        }
        return [{"dropped": d, **shared} for d in reducer.split_tokens(dropped)]

    def token_loss(self, loss: torch.Tensor, ctx: LossContext) -> torch.Tensor:
        lr = self._log_r(ctx)
        lr = lr + (lr.clamp(-SAFETY_BOUND, SAFETY_BOUND) - lr).detach()  # Trinity's straight-through clip
        return -ctx.adv * torch.exp(lr)

    def token_weights(self, ctx: LossContext) -> torch.Tensor:
        st = ctx.stat(self)
        dropped = st["dropped"]
        for k in ("m2_before", "m2_after", "masked_fraction", "trust_region_fraction"):
            ctx.metrics[f"m2po/{k}"] = st[k]
        _quartiles(ctx, self.name, "masked", dropped, ctx.valid)
        return (~dropped).to(ctx.adv.dtype)


@register
@dataclass(repr=False)
class IPO(Method):
    """IPO: a symmetric trust region on the probability, the policy gradient through the ratio to the
    rollout policy, and a squared-log-ratio penalty.

    ``r_t = π_θ/π_rollout`` (with grad), ``M_t = [|π_θ(o_t) − π_rollout(o_t)| ≤ τ]`` (detached):
    ``ℓ_t = −M_t·adv_tau·A_t·r_t + kl_tau·(log r_t)²`` — the penalty on every valid token, masked
    or not; no PPO clip. Implemented from prime-rl's ``ipo_loss_fn`` (``src/prime_rl/trainer/rl/loss.py``);
    defaults τ = 0.1, adv_tau = 1, kl_tau = 1e-3 are its ``IPOLossConfig``'s
    (``packages/prime-rl-configs/src/prime_rl/configs/trainer.py``). Metrics as prime-rl's:
    ``ipo/masked_frac`` (its ``is_masked``), ``ipo/masked_mismatch_kl`` and
    ``ipo/unmasked_mismatch_kl`` (k3 of log r over masked / kept tokens), ``ipo/masked_frac_q1..q4``.
    """

    name = "ipo"
    formula = "ℓ_t = −[|π_θ − π_rollout| ≤ τ]·adv_tau·A_t·r_t + kl_tau·(log r_t)²,  r = π_θ/π_rollout"
    paper = "prime-rl src/prime_rl/trainer/rl/loss.py (ipo_loss_fn)"
    needs = ("rollout_logp",)
    rollout_correction = "ratio"

    threshold: float = param(0.1, interval(0), "τ: tokens whose probability moved more than τ lose the gradient term")
    adv_tau: float = param(1.0, interval(0), "scale of the advantage term")
    kl_tau: float = param(1e-3, interval(0), "coefficient of the (log r)² penalty")

    def token_loss(self, loss: torch.Tensor, ctx: LossContext) -> torch.Tensor:
        b, valid = ctx.batch, ctx.valid
        logp = b.logp.masked_fill(~valid, 0)
        roll = b.require("rollout_logp", "ipo").detach().masked_fill(~valid, 0)
        lr = logp - roll
        masked = (torch.exp(logp.detach()) - torch.exp(roll)).abs() > self.threshold
        keep = valid & ~masked
        n = valid.sum().clamp(min=1).to(torch.float64)
        ctx.metrics["ipo/masked_frac"] = (masked & valid).sum().to(torch.float64) / n
        ctx.metrics["ipo/masked_mismatch_kl"] = k3_mean(lr.detach(), masked & valid)
        ctx.metrics["ipo/unmasked_mismatch_kl"] = k3_mean(lr.detach(), keep)
        _quartiles(ctx, self.name, "masked", masked, valid)
        pg = keep.to(lr.dtype) * self.adv_tau * ctx.adv * torch.exp(lr)
        return -pg + self.kl_tau * lr.square()
