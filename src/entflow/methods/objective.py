"""The policy objective: advantages and the loss, with any method (docs/design.md §2, §4, §6, §8).

``compute_advantages`` turns rewards into per-token advantages (GRPO by default, then the
method's shapers left to right); ``policy_loss`` evaluates PPO-clip with the method's clip
bounds, token weights, per-token loss and extra terms, and reports the §8 statistics.
``prepare_statistics`` takes every batch-level statistic over the whole optimisation batch
(all micro-batches of one optimizer step, on all data-parallel ranks) for ``policy_loss(...,
stats=...)``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from entflow.core.advantages import group_advantages
from entflow.core.batch import TokenBatch
from entflow.core.distributed import Reducer, StepStatistics, read_metrics
from entflow.core.flow import update_statistics
from entflow.core.ppo import (
    LossSpec,
    aggregate,
    aggregation_count,
    check_max_len,
    clip_indicator,
    ppo_clip_loss,
)
from entflow.errors import ParameterError, ShapeError
from entflow.methods.base import LossContext, Method, resolve_method

METRICS_MODES = ("float", "tensor", "none")


@dataclass
class LossOutput:
    """``loss``: scalar with grad; ``token_weights``: ``[N, T]`` detached (0 off-mask);
    ``metrics``: the §8 statistics and each method's own, under its prefix — floats with
    ``metrics="float"``, 0-d detached tensors with ``metrics="tensor"`` (read them once per
    step with :func:`entflow.read_metrics`), empty with ``metrics="none"``."""

    loss: torch.Tensor
    token_weights: torch.Tensor
    metrics: dict[str, Any] = field(default_factory=dict)


def compute_advantages(
    batch: TokenBatch, method: str | Method | None = None, scale: str = "group", eps: float = 1e-6
) -> torch.Tensor:
    """Per-token advantages ``[N, T]`` for ``batch`` under ``method``.

    The base is :func:`group_advantages` of ``batch.rewards`` over ``batch.group_index``
    (or ``batch.advantages`` when no rewards are given), broadcast over tokens; the method's
    advantage shapers then apply left to right. Returned detached, 0 off-mask. Group statistics
    need whole groups: call it on the rollout batch (every response of each prompt), before
    splitting into micro-batches. With ``batch.validate`` False it makes no host sync.
    """
    method = resolve_method(method)
    if batch.rewards is not None:
        group = batch.require("group_index", "compute_advantages (rewards given)")
        base = group_advantages(batch.rewards, group, scale=scale, eps=eps, validate=batch.validate)
        base = base.unsqueeze(-1).expand_as(batch.logp).to(batch.logp.dtype)
    else:
        base = batch.token_advantages()
    adv = method.shape_advantages(base.detach().clone(), batch)
    return adv.detach().masked_fill(~batch.valid, 0)


def _check_spec(spec: LossSpec) -> LossSpec:
    if not isinstance(spec, LossSpec):  # e.g. a clip bound passed where the spec goes
        raise ParameterError("policy_loss", "spec", f"must be a LossSpec, got {type(spec).__name__} {spec!r}")
    return spec


def _weights(method: Method, ctx: LossContext, token_weights: torch.Tensor | None) -> torch.Tensor | None:
    """The method's token weights times the caller's ``token_weights`` (detached), or None."""
    weights = method.token_weights(ctx)
    if token_weights is None:
        return weights
    try:
        extra = token_weights.detach().to(ctx.adv.dtype).expand_as(ctx.adv)
    except RuntimeError as e:
        expected = f"[N, T] or [N, 1] with [N, T] = {list(ctx.adv.shape)}"
        raise ShapeError("token_weights", expected, list(token_weights.shape)) from e
    return extra if weights is None else weights * extra


def _loss_context(batch: TokenBatch, method: Method, spec: LossSpec) -> tuple[LossContext, torch.Tensor]:
    """The context the method hooks see, and the ratio r (with grad). ``spec``: the spec the loss
    runs under (``LossSpec.for_method``'s), carried whole into the context."""
    for name in method.needs:
        batch.require(name, f"method {method.name!r}")
    valid = batch.valid
    adv = batch.token_advantages().to(batch.logp.dtype)
    # padding may hold anything (even inf): fill it before exp so no NaN reaches the gradient
    ratio = torch.exp(batch.logp.masked_fill(~valid, 0) - batch.old_logp.detach().masked_fill(~valid, 0))
    ctx = LossContext(
        batch=batch,
        adv=adv,
        ratio=ratio.detach(),
        indicator=clip_indicator(adv, ratio, *spec.clip),
        spec=spec,
    )
    return ctx, ratio


def _method_statistics(parts: list[Method], ctxs: list[LossContext], reducer: Reducer) -> list[dict[str, dict]]:
    """Each part's ``batch_statistics`` → per context ``{part name: stats}``."""
    out: list[dict[str, dict]] = [{} for _ in ctxs]
    for part in parts:
        stats = part.batch_statistics(ctxs, reducer)
        if stats is not None:
            for o, s in zip(out, stats, strict=True):
                o[part.name] = s
    return out


def _droppers(method: Method) -> list[Method]:
    """The parts whose ``token_mask`` removes tokens from the loss (they run first)."""
    return [p for p in method.parts if p.overrides("token_mask")]


def _others(method: Method) -> list[Method]:
    """The parts that are not droppers (their statistics see the kept tokens)."""
    return [p for p in method.parts if not p.overrides("token_mask")]


def _drop_tokens(batch: TokenBatch, method: Method, ctx: LossContext) -> tuple[TokenBatch, torch.Tensor | None]:
    """The batch whose mask keeps only what ``method.token_mask(ctx)`` keeps, and the valid tokens
    it dropped (bool ``[N, T]``; None when no part drops anything). Dropped tokens leave every
    later step: the other hooks, the aggregation's denominator and the metrics."""
    keep = method.token_mask(ctx)
    if keep is None:
        return batch, None
    try:
        keep = keep.to(torch.bool).expand_as(batch.mask)
    except RuntimeError as e:
        raise ShapeError("token_mask", f"[N, T] = {list(batch.mask.shape)}", list(keep.shape)) from e
    valid = batch.valid
    mask = torch.where(keep, batch.mask, torch.zeros_like(batch.mask))
    kept = dataclasses.replace(batch, mask=mask, validate=False)  # the rest of the batch was validated already
    kept.validate = batch.validate
    return kept, valid & ~keep


def _after_drop(batch: TokenBatch, method: Method, ctx: LossContext) -> tuple[TokenBatch, LossContext]:
    """Apply the droppers' masks. The new context shares the advantages, ratio and clip indicator
    (their values on the kept tokens are unchanged; dropped ones are masked out downstream) and
    keeps the metrics and statistics gathered so far; the estimates are taken anew on the kept mask."""
    batch, dropped = _drop_tokens(batch, method, ctx)
    new = dataclasses.replace(
        ctx, batch=batch, dropped=dropped, metrics=dict(ctx.metrics), stats=dict(ctx.stats), _estimates={}
    )
    return batch, new


def prepare_statistics(
    micro_batches: list[TokenBatch],
    method: str | Method | None = "grpo",
    spec: LossSpec = LossSpec(),
    group: Any = None,
) -> list[StepStatistics]:
    """Every batch-level statistic of ``method`` over the whole optimisation batch → one
    :class:`StepStatistics` per micro-batch, for ``policy_loss(micro_batches[i], ..., stats=s[i])``.

    Args:
        micro_batches: this rank's micro-batches of ONE optimizer step, in order. ``logp`` may
            be detached, but its values must be those the loss will see (for the first PPO
            epoch: ``old_logp``; otherwise a no-grad forward of the current policy).
        method: the method object the loss will use (its random draws advance here).
        spec: the :class:`LossSpec` given to ``policy_loss``. For ``seq-mean-token-sum-norm``
            without ``spec.max_len`` the longest micro-batch is used.
        group: a ``torch.distributed`` process group to reduce over ranks (every rank calls this
            with its own micro-batches), or None for this process only (gradient accumulation).

    The global batch is rank 0's micro-batches in order, then rank 1's, …; the statistics equal
    those of one process on that concatenation (random selections included: they come from the
    method's shared stream, seeded ``seed`` on every rank). The loss of each micro-batch is
    divided by the global denominator, so the SUM of the micro-batch losses over micro-batches
    and ranks is the full-batch loss and the summed gradients are the full-batch gradient.
    A trainer that averages gradients over W ranks (DDP) or divides the loss by the number of
    accumulation steps must multiply the loss back by those factors.

    Collectives (with ``group``): one ``all_gather_object`` of the micro-batch shapes, then a
    few ``all_reduce`` / ``all_gather`` per statistic; reading the shapes is the only host sync.
    """
    method = resolve_method(method)
    if not micro_batches:
        raise ShapeError("micro_batches", "a non-empty list of TokenBatch", "an empty list")
    spec = _check_spec(spec).for_method(method)  # the method's clip bounds and aggregation, where it fixes them
    device = micro_batches[0].logp.device
    reducer = Reducer([tuple(b.logp.shape) for b in micro_batches], device, group=group, shared=True)
    if spec.max_len is not None:
        check_max_len(spec.max_len, reducer.max_len)
    ctxs = [_loss_context(b, method, spec)[0] for b in micro_batches]
    droppers = _droppers(method)
    per_ctx: list[dict[str, dict]] = [{} for _ in ctxs]
    if droppers:  # token masks first: the other parts' statistics and the denominator see the kept tokens
        per_ctx = _method_statistics(droppers, ctxs, reducer)
        for c, s in zip(ctxs, per_ctx, strict=True):
            c.stats = s
        kept = [_after_drop(b, method, c) for b, c in zip(micro_batches, ctxs, strict=True)]
        micro_batches, ctxs = [k[0] for k in kept], [k[1] for k in kept]
    for m, s in zip(per_ctx, _method_statistics(_others(method), ctxs, reducer), strict=True):
        m.update(s)
    denom = reducer.sum([aggregation_count(b.mask, spec.agg) for b in micro_batches])
    fixed_len = spec.max_len
    if fixed_len is None and spec.agg == "seq-mean-token-sum-norm":
        fixed_len = reducer.max_len
    return [
        StepStatistics(
            spec=spec,
            shape=tuple(b.logp.shape),
            denominator=denom,
            methods=m,
            max_len=fixed_len,
            method=method.name,
        )
        for b, m in zip(micro_batches, per_ctx, strict=True)
    ]


def policy_loss(
    batch: TokenBatch,
    method: str | Method | None = "grpo",
    spec: LossSpec = LossSpec(),
    token_weights: torch.Tensor | None = None,
    metrics: str = "float",
    stats: StepStatistics | None = None,
) -> LossOutput:
    """PPO-clip policy loss with an entflow method (``None`` = plain GRPO).

    Args:
        batch: a :class:`TokenBatch`; ``logp`` carries the gradient, ``advantages`` are
            ``[N]`` or ``[N, T]`` (e.g. from :func:`compute_advantages`).
        method: a method object, or a registered name / composition ``"a+b"``, or None. Pass
            stateful or stochastic methods as objects (by name they are rebuilt every call;
            that warns once).
        spec: the loss's settings, a :class:`LossSpec` (ε_low, ε_high — a method that sets clip
            bounds overrides them —, dual clip, aggregation, Dr. GRPO's ``max_len``); the
            default is GRPO's (a method that fixes its aggregation, a sequence-level
            loss, overrides ``spec.agg``: :meth:`LossSpec.for_method`).
        token_weights: optional per-token weights ``[N, T]`` (or ``[N, 1]``), detached, that
            multiply the method's token weights, e.g. a trainer's importance-sampling
            correction (TRL's vLLM ratio, verl's ``rollout_is_weights``). They weight the
            policy-gradient term only, not the method's extra loss terms.
        metrics: ``"float"`` (default: floats, one host sync at the end), ``"tensor"`` (0-d
            detached tensors on the batch's device, no sync) or ``"none"`` (skip the §8
            statistics and method metrics).
        stats: this micro-batch's :class:`StepStatistics` from :func:`prepare_statistics`;
            None = every batch-level statistic is taken over this call's batch alone.

    Returns:
        :class:`LossOutput`. Its loss is ``agg(w_t · ℓ_t) + Σ method terms`` (w_t: the method's
        token weights times ``token_weights``); its gradient
        w.r.t. ``logp`` is ``−w_t·I_t·A_t·r_t·m_t / Σm`` for token-mean. A batch without a
        valid token gives loss 0 (still attached to the graph) and ``empty_batch = 1``.

    With ``batch.validate`` False and ``metrics`` ``"tensor"`` or ``"none"`` the call makes no
    device-to-host synchronisation (tests/core/test_fast_path.py counts them).
    """
    method = resolve_method(method)
    if metrics not in METRICS_MODES:
        raise ParameterError("policy_loss", "metrics", f"must be one of {METRICS_MODES}, got {metrics!r}")
    spec = _check_spec(spec).for_method(method)  # the method's clip bounds and aggregation, where it fixes them
    max_len = spec.max_len
    if stats is not None:
        _check_stats(stats, batch, method, spec)
        max_len = stats.max_len
    check_max_len(max_len, batch.logp.shape[-1])
    if max_len != spec.max_len:  # the prepared statistics' fixed length: the hooks see the one the loss uses
        spec = dataclasses.replace(spec, max_len=max_len)
    ctx, ratio = _loss_context(batch, method, spec)
    droppers = _droppers(method)
    reducer = Reducer([tuple(batch.logp.shape)], batch.logp.device)
    if stats is not None:
        ctx.stats = stats.methods
    elif droppers:
        ctx.stats = _method_statistics(droppers, [ctx], reducer)[0]
    if droppers:  # dropped tokens leave the loss and its denominator (Method.token_mask)
        batch, ctx = _after_drop(batch, method, ctx)
    if stats is None:
        ctx.stats.update(_method_statistics(_others(method), [ctx], reducer)[0])
    valid = batch.valid
    adv = ctx.adv
    token_loss = method.token_loss(ppo_clip_loss(adv, ratio, *spec.clip), ctx)
    weights = _weights(method, ctx, token_weights)
    weights = torch.ones_like(adv) if weights is None else weights.detach()
    weights = weights.masked_fill(~valid, 0)
    # zero the off-mask loss so that padding garbage (even inf) cannot leak into the sum
    token_loss = torch.where(valid, token_loss, torch.zeros_like(token_loss))
    denominator = None if stats is None else stats.denominator

    def agg_fn(x: torch.Tensor) -> torch.Tensor:
        return aggregate(torch.where(valid, x, torch.zeros_like(x)), batch.mask, spec.agg, spec.max_len, denominator)

    pg_loss = agg_fn(weights * token_loss)
    loss = pg_loss
    terms = method.loss_terms(ctx, agg_fn)
    for term in terms.values():
        loss = loss + term
    if metrics == "none":
        return LossOutput(loss, weights, {})
    n_tokens = valid.sum().to(torch.float64)
    out: dict[str, Any] = {
        "empty_batch": (n_tokens == 0).to(torch.float64),
        "n_tokens": n_tokens,
        "pg_loss": pg_loss.detach(),
    }
    for term_name, term in terms.items():
        out[term_name] = term.detach()
    out["loss"] = loss.detach()
    out.update(update_statistics(batch, *spec.clip))
    out.update(ctx.metrics)
    if metrics == "float":
        out = read_metrics(out)
    return LossOutput(loss, weights, out)


def _check_stats(stats: StepStatistics, batch: TokenBatch, method: Method, spec: LossSpec) -> None:
    """``stats`` were prepared for this micro-batch, ``method`` and ``spec`` (the spec the loss runs under)."""
    if not isinstance(stats, StepStatistics):
        raise ParameterError(
            "policy_loss", "stats", f"must be a StepStatistics from prepare_statistics, got {type(stats).__name__}"
        )
    if stats.method != method.name:
        raise ParameterError("policy_loss", "stats", f"were prepared for method {stats.method!r}, not {method.name!r}")
    if tuple(batch.logp.shape) != tuple(stats.shape):
        raise ShapeError("stats", f"statistics of a micro-batch of shape {tuple(stats.shape)}", tuple(batch.logp.shape))
    if stats.spec.agg != spec.agg:
        raise ParameterError(
            "policy_loss", "agg", f"is {spec.agg!r} but the statistics were prepared for {stats.spec.agg!r}"
        )
    if spec.max_len is not None and spec.max_len != stats.max_len:
        raise ParameterError(
            "policy_loss", "max_len", f"is {spec.max_len} but the statistics were prepared with {stats.max_len}"
        )
    if spec.clip != stats.spec.clip:
        raise ParameterError(
            "policy_loss", "clip_low", f"clip bounds {spec.clip} differ from the prepared ones {stats.spec.clip}"
        )
