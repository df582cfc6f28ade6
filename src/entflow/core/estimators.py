"""First-order token entropy-change estimators (docs/design.md §5).

Each returns the estimated change ΔH_t of the entropy at token t's state for a unit step on
that token's objective term, positive when the update raises entropy, 0 where mask == 0.
With w_t = I_t · A_t · r_t, p = p_t (current, detached) and H the entropy at s_t
(``old_entropy`` first, else ``entropy``)::

    steer          −w (1 − p)(log p + H)                       STEER official code (Eq. 2 integrand)
    sampled_logit  −w p (1 − p)(log p + H)                     STEER Assumption 1, sampled token only
    opefo          −w (1 − p)² (log p + H)                     OPEFO Eq. 6
    tabular        −w [p (log p + H) − (Σπ² log π + H Σπ²)]     ours: exact first order, tabular softmax
    cov            −(log p − mean log p)(A − mean A)            Cui et al. Eq. 8 (batch means, valid tokens)
"""

from __future__ import annotations

import torch

from entflow.core.batch import TokenBatch
from entflow.core.clip_settings import CLIP_EPS
from entflow.core.estimator_names import ESTIMATORS
from entflow.core.ppo import clip_indicator
from entflow.errors import UnknownMethodError


def policy_weight(
    batch: TokenBatch, clip_low: float = CLIP_EPS, clip_high: float = CLIP_EPS, dual_clip: float | None = None
) -> torch.Tensor:
    """``w_t = I_t · A_t · r_t`` [N, T] (detached): the weight on ∇ log π of token t."""
    adv = batch.token_advantages()
    ratio = torch.exp(batch.logp.detach() - batch.old_logp.detach())
    return clip_indicator(adv, ratio, clip_low, clip_high, dual_clip) * adv * ratio


def covariance_sums(logp: torch.Tensor, adv: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``[Σ log p, Σ A, N_valid]`` over valid tokens (float64, ``[3]``): what the Cov means need;
    summed over micro-batches and ranks they give the global means."""
    lp = logp.detach().to(torch.float64).masked_fill(~valid, 0)
    a = adv.detach().to(torch.float64).masked_fill(~valid, 0)
    return torch.stack([lp.sum(), a.sum(), valid.sum().to(torch.float64)])


def centred_covariance(
    logp: torch.Tensor, adv: torch.Tensor, valid: torch.Tensor, sums: torch.Tensor | None = None
) -> torch.Tensor:
    """``(log p_t − mean log p)(A_t − mean A)`` [N, T], means over valid tokens; 0 elsewhere.

    ``sums``: :func:`covariance_sums` of the whole batch (global means); default this batch's.
    """
    if sums is None:
        sums = covariance_sums(logp, adv, valid)
    n = sums[2].clamp(min=1)
    mean_lp, mean_a = (sums[0] / n).to(logp.dtype), (sums[1] / n).to(adv.dtype)
    lp = logp.detach().masked_fill(~valid, 0)
    a = adv.masked_fill(~valid, 0)
    cov = (lp - mean_lp) * (a - mean_a)
    return cov.masked_fill(~valid, 0)


def entropy_change(
    estimator: str,
    batch: TokenBatch,
    clip_low: float = CLIP_EPS,
    clip_high: float = CLIP_EPS,
    dual_clip: float | None = None,
) -> torch.Tensor:
    """Estimated first-order entropy change per token, ``[N, T]`` (detached, 0 off-mask).

    Args:
        estimator: one of ``steer``, ``sampled_logit``, ``opefo``, ``tabular``, ``cov``.
        batch: needs ``logp``, ``old_logp``, ``advantages``, ``mask``; all but ``cov`` need
            ``old_entropy`` or ``entropy``; ``tabular`` also ``sum_p2`` and ``sum_p2_logp``.
        clip_low, clip_high, dual_clip: the clip that defines I_t in w_t = I_t·A_t·r_t.
    """
    if estimator not in ESTIMATORS:
        raise UnknownMethodError(estimator, list(ESTIMATORS), kind="estimator")
    valid = batch.valid
    if estimator == "cov":
        return -centred_covariance(batch.logp, batch.token_advantages(), valid)
    w = policy_weight(batch, clip_low, clip_high, dual_clip)
    logp = batch.logp.detach()
    p = logp.exp()
    H = batch.entropy_for_reading(f"entropy_change({estimator!r})")
    if estimator == "steer":
        est = -w * (1 - p) * (logp + H)
    elif estimator == "sampled_logit":
        est = -w * p * (1 - p) * (logp + H)
    elif estimator == "opefo":
        est = -w * (1 - p) ** 2 * (logp + H)
    else:  # tabular
        s2 = batch.require("sum_p2", "entropy_change('tabular')").detach()
        s2l = batch.require("sum_p2_logp", "entropy_change('tabular')").detach()
        est = -w * (p * (logp + H) - (s2l + H * s2))
    return est.masked_fill(~valid, 0)
