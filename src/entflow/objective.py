"""The policy objective: advantages and the loss, with any method (SPEC §2, §4, §6, §8).

``compute_advantages`` turns rewards into per-token advantages (GRPO by default, then the
method's shapers left to right); ``policy_loss`` evaluates PPO-clip with the method's clip
bounds, token weights, per-token loss and extra terms, and reports the §8 statistics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from entflow.core.advantages import group_advantages
from entflow.core.batch import TokenBatch
from entflow.core.flow import update_statistics
from entflow.core.ppo import AGG_MODES, aggregate, check_clip_bounds, clip_indicator, ppo_clip_loss
from entflow.errors import ParameterError
from entflow.methods.base import LossContext, Method, resolve_method


@dataclass
class LossOutput:
    """``loss``: scalar with grad; ``token_weights``: ``[N, T]`` detached (0 off-mask);
    ``metrics``: floats (§8 statistics and each method's own, under its prefix)."""

    loss: torch.Tensor
    token_weights: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


def compute_advantages(
    batch: TokenBatch, method: str | Method | None = None, scale: str = "group", eps: float = 1e-6
) -> torch.Tensor:
    """Per-token advantages ``[N, T]`` for ``batch`` under ``method``.

    The base is :func:`group_advantages` of ``batch.rewards`` over ``batch.group_index``
    (or ``batch.advantages`` when no rewards are given), broadcast over tokens; the method's
    advantage shapers then apply left to right. Returned detached, 0 off-mask.
    """
    method = resolve_method(method)
    if batch.rewards is not None:
        group = batch.require("group_index", "compute_advantages (rewards given)")
        base = group_advantages(batch.rewards, group, scale=scale, eps=eps)
        base = base.unsqueeze(-1).expand_as(batch.logp).to(batch.logp.dtype)
    else:
        base = batch.token_advantages()
    adv = method.shape_advantages(base.detach().clone(), batch)
    return adv.detach().masked_fill(~batch.valid, 0)


def policy_loss(
    batch: TokenBatch,
    method: str | Method | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    agg: str = "token-mean",
) -> LossOutput:
    """PPO-clip policy loss with an entflow method (``None`` = plain GRPO).

    Args:
        batch: a :class:`TokenBatch`; ``logp`` carries the gradient, ``advantages`` are
            ``[N]`` or ``[N, T]`` (e.g. from :func:`compute_advantages`).
        method: a method, a registered name or composition ``"a+b"``, or None.
        clip_low, clip_high: ε_low, ε_high (a method that sets clip bounds overrides them).
        dual_clip: optional dual-clip constant c > 1 for A < 0.
        agg: ``"token-mean"`` | ``"seq-mean-token-mean"`` | ``"seq-mean-token-sum-norm"``.

    Returns:
        :class:`LossOutput`. Its loss is ``agg(w_t · ℓ_t) + Σ method terms``; its gradient
        w.r.t. ``logp`` is ``−w_t·I_t·A_t·r_t·m_t / Σm`` for token-mean. A batch without a
        valid token gives loss 0 (still attached to the graph) and ``empty_batch = 1``.
    """
    method = resolve_method(method)
    check_clip_bounds("policy_loss", clip_low, clip_high, dual_clip)
    if agg not in AGG_MODES:  # checked up front so that an empty batch does not skip it
        raise ParameterError("policy_loss", "agg", f"must be one of {AGG_MODES}, got {agg!r}")
    clip_low, clip_high = method.clip_bounds() or (clip_low, clip_high)
    for name in method.needs:
        batch.require(name, f"method {method.name!r}")
    valid = batch.valid
    if not bool(valid.any()):
        zero = batch.logp.masked_fill(~valid, 0).sum()  # 0 with a graph, even if padding holds inf
        return LossOutput(zero, torch.zeros_like(batch.logp).detach(), {"empty_batch": 1.0, "n_tokens": 0.0})

    adv = batch.token_advantages().to(batch.logp.dtype)
    # padding may hold anything (even inf): fill it before exp so no NaN reaches the gradient
    ratio = torch.exp(batch.logp.masked_fill(~valid, 0) - batch.old_logp.detach().masked_fill(~valid, 0))
    ctx = LossContext(
        batch=batch,
        adv=adv,
        ratio=ratio.detach(),
        indicator=clip_indicator(adv, ratio, clip_low, clip_high, dual_clip),
        clip_low=clip_low,
        clip_high=clip_high,
        dual_clip=dual_clip,
    )
    token_loss = method.token_loss(ppo_clip_loss(adv, ratio, clip_low, clip_high, dual_clip), ctx)
    weights = method.token_weights(ctx)
    weights = torch.ones_like(adv) if weights is None else weights.detach()
    weights = weights.masked_fill(~valid, 0)
    # zero the off-mask loss so that padding garbage (even inf) cannot leak into the sum
    token_loss = torch.where(valid, token_loss, torch.zeros_like(token_loss))

    def agg_fn(x: torch.Tensor) -> torch.Tensor:
        return aggregate(torch.where(valid, x, torch.zeros_like(x)), batch.mask, agg)

    pg_loss = agg_fn(weights * token_loss)
    loss = pg_loss
    metrics = {"empty_batch": 0.0, "n_tokens": float(batch.n_valid), "pg_loss": float(pg_loss.detach())}
    for term_name, term in method.loss_terms(ctx, agg_fn).items():
        loss = loss + term
        metrics[term_name] = float(term.detach())
    metrics["loss"] = float(loss.detach())
    metrics.update(update_statistics(batch, clip_low, clip_high, dual_clip))
    metrics.update(ctx.metrics)
    return LossOutput(loss, weights, metrics)
