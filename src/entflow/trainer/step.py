"""One training step (docs/design.md §10), as its steps:

1. :func:`~entflow.trainer.collect.collect_rollout` — sample P prompts × G responses, score them,
   and take the rollout policy's token statistics from ``generate``'s own logits;
2. :func:`~entflow.trainer.collect.rollout_batch` + ``compute_advantages`` — the whole batch as a
   :class:`TokenBatch` and its advantages (GRPO base, then the method's shapers); then the extra
   rows a method asks for (``MethodNeeds.temperature_samples``,
   :func:`~entflow.trainer.collect.temperature_samples`, :func:`~entflow.trainer.collect.add_rows`);
3. :func:`policy_update` — ``ppo_epochs`` passes over ``mini_batches`` of ``policy_loss`` with the
   method, one optimizer step each (one step on the whole batch when strictly on-policy);
4. :func:`step_metrics` — the loss metrics averaged over the updates plus rollout metrics, then
   the estimators' scores against the true entropy change (:mod:`entflow.trainer.estimator_scores`)
   and, on validation steps, the §9 diagnostics (:mod:`entflow.trainer.diagnostics`).

What every step of a run needs from the method and the config — statistics, update passes, a
temperature sampler, the loss's :class:`~entflow.core.ppo.LossSpec` — is decided once per run by
:func:`plan_steps`. :func:`train_step` is those calls in that
order.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch

from entflow.core.batch import TokenBatch
from entflow.core.estimators import ESTIMATORS
from entflow.core.mismatch import QUARTILES, k3_mean, log_ratio, offpolicy_metrics, quartile_shares
from entflow.core.ppo import LossSpec
from entflow.core.token_stats import TokenStats
from entflow.methods import Method
from entflow.methods.needs import MethodNeeds, needs_of
from entflow.methods.objective import compute_advantages, policy_loss
from entflow.trainer.collect import (
    CollectedRollout,
    TrainRows,
    add_rows,
    collect_rollout,
    rollout_batch,
    rollout_stats,
    temperature_sampler,
    temperature_samples,
)
from entflow.trainer.config import TrainConfig
from entflow.trainer.diagnostics import rollout_diagnostics
from entflow.trainer.estimator_scores import score_estimators
from entflow.trainer.faults import kill_point
from entflow.trainer.rollout import Rollout, response_token_stats, response_topk_stats
from entflow.trainer.seeds import STEP, stream_seed

# --------------------------------------------------------------------------------------------
# once per run
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepPlan:
    """What every step of a run needs, decided once per run from the method and the config."""

    needs: MethodNeeds
    old_stats: tuple[str, ...]  # the rollout policy's statistics the method reads
    audited_old_stats: tuple[str, ...]  # … and those every estimator and the §9 diagnostics read
    update_stats: tuple[str, ...]  # the current policy's statistics of an update forward
    epochs: int  # passes over the rollout batch
    mini_batches: int  # optimizer steps per pass
    spec: LossSpec  # the loss's settings (TrainConfig.loss_spec), made once and carried whole to the loss
    sampler: Any = None  # the part asking for temperature samples (MethodNeeds.temperature_samples)
    # the rollout carries its sampler's log-probs (rollout_logp): a method reads them
    # (MethodNeeds.rollout_logp) or a mismatch is injected (TrainConfig.rollout_mismatch, its metrics)
    sampler_logp: bool = False

    def rollout_stats(self, audited: bool) -> tuple[str, ...]:
        """The rollout statistics of a step with (``audited``) or without estimator scores and diagnostics."""
        return self.audited_old_stats if audited else self.old_stats


def audit_due(cfg: TrainConfig, step: int, validation: bool) -> bool:
    """The audit of the true entropy change runs (``cfg.audit``) on every ``audit_every``-th step and
    on every validation step (``audit_every = 0``: validation steps only)."""
    return cfg.audit and (validation or (cfg.audit_every > 0 and step % cfg.audit_every == 0))


def update_passes(cfg: TrainConfig, needs: MethodNeeds) -> tuple[int, int]:
    """``(epochs, mini_batches)`` of the update: ``(1, 1)`` — one gradient step on the whole batch,
    r ≡ 1 — when the config or the method asks for strictly on-policy training (docs/design.md §6),
    else ``(ppo_epochs, mini_batches)``. The one place that decides it."""
    strict = cfg.strict_on_policy or needs.strict_on_policy
    return (1, 1) if strict else (cfg.ppo_epochs, cfg.mini_batches)


def plan_steps(method: Method, cfg: TrainConfig) -> StepPlan:
    """The :class:`StepPlan` of ``method`` under ``cfg`` (the method's ``MethodNeeds`` read once)."""
    needs = needs_of(method)
    epochs, chunks = update_passes(cfg, needs)
    return StepPlan(
        needs=needs,
        old_stats=needs.token_stats(),
        # the gradient-norm proxy of the diagnostics needs Σπ², which the tabular estimator's statistics include
        audited_old_stats=needs_of(method, ESTIMATORS).token_stats(),
        # the loss reads H from old_entropy; the current entropy only where a method differentiates it
        update_stats=needs.token_stats(entropy=False),
        epochs=epochs,
        mini_batches=chunks,
        spec=cfg.loss_spec(),
        sampler=temperature_sampler(method, needs.temperature_samples),
        sampler_logp=needs.rollout_logp or cfg.rollout_mismatch is not None,
    )


# --------------------------------------------------------------------------------------------
# 2. the rows of an update
# --------------------------------------------------------------------------------------------


def _rows(x: torch.Tensor | None, idx: torch.Tensor) -> torch.Tensor | None:
    return None if x is None else x[idx]


def current_stats(
    model: Any, roll: Rollout, idx: torch.Tensor, cfg: TrainConfig, plan: StepPlan
) -> tuple[TokenStats, torch.Tensor | None]:
    """The current policy's statistics ``plan.update_stats`` ``[n, T]`` of rows ``idx`` (with grad),
    and, when ``MethodNeeds.topk`` asks for them, the log-probs of each position's ``topk`` most
    probable tokens ``[n, T, topk]`` from the same logits (else ``None``)."""
    kw = dict(
        temperature=cfg.temperature,
        chunk_size=cfg.chunk_size,
        stats=plan.update_stats,
        entropy_top_p=plan.needs.entropy_top_p,  # a loss may differentiate the top-p entropy
        share_prompts=cfg.share_prompts,
    )
    if plan.needs.topk is not None:  # the top-K candidates are read from the logits
        return response_topk_stats(model, **roll.select(idx), **kw, topk=plan.needs.topk)
    # hidden_stats: from the last hidden state, no [N, T, V] logits
    return response_token_stats(model, **roll.select(idx), **kw, hidden_stats=cfg.hidden_stats), None


def mini_batch(
    full: TokenBatch, adv: torch.Tensor, idx: torch.Tensor, cur: TokenStats, topk_logp: torch.Tensor | None = None
) -> TokenBatch:
    """Rows ``idx`` of the rollout batch ``full`` with the current policy's ``logp`` (and entropy,
    where a method differentiates it) in ``cur``, the advantages ``adv[idx]`` and the current
    top-K log-probs ``topk_logp`` ``[n, T, K]`` (``MethodNeeds.topk``; None when not needed)."""
    return TokenBatch(
        logp=cur.logp,
        old_logp=full.old_logp[idx],
        advantages=adv[idx],
        mask=full.mask[idx],
        entropy=cur.entropy,
        old_entropy=full.old_entropy[idx],
        ref_logp=_rows(full.ref_logp, idx),
        rollout_logp=_rows(full.rollout_logp, idx),
        sum_p2=_rows(full.sum_p2, idx),
        sum_p2_logp=_rows(full.sum_p2_logp, idx),
        rewards=full.rewards[idx],
        group_index=full.group_index[idx],
        step=full.step,
        total_steps=full.total_steps,
        topk_logp=topk_logp,
    )


# --------------------------------------------------------------------------------------------
# 3. the update
# --------------------------------------------------------------------------------------------


@dataclass
class UpdateResult:
    """What the updates of one step leave behind."""

    loss_metrics: dict[str, float]  # each policy_loss metric averaged over the updates that reported it
    applied_weights: torch.Tensor  # [N, T] the method's token weights of the first epoch
    grad_norms: list[float] = field(default_factory=list)  # before clipping, one per update
    n_updates: int = 0


def policy_update(
    model: Any,
    optimizer: torch.optim.Optimizer,
    rows: TrainRows,
    method: Method,
    cfg: TrainConfig,
    step: int,
    plan: StepPlan,
) -> UpdateResult:
    """``plan.epochs`` passes, each over ``plan.mini_batches`` random row chunks (order seeded by
    (seed, step)), of ``policy_loss`` → backward → gradient clipping → optimizer step
    (:func:`update_passes`: one step on the whole batch when strictly on-policy, r ≡ 1)."""
    roll, full, adv = rows.collected.roll, rows.batch, rows.adv
    model.train()
    n = roll.rewards.shape[0]
    gen = torch.Generator().manual_seed(stream_seed(cfg.seed, STEP, step))
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    result = UpdateResult({}, torch.ones_like(roll.mask))
    for epoch in range(plan.epochs):
        order = torch.randperm(n, generator=gen)
        for idx in order.chunk(plan.mini_batches):
            cur, topk = current_stats(model, roll, idx, cfg, plan)
            out = policy_loss(mini_batch(full, adv, idx, cur, topk), method, plan.spec)
            optimizer.zero_grad(set_to_none=True)
            out.loss.backward()
            if cfg.grad_clip is not None:
                result.grad_norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)))
            optimizer.step()
            kill_point("update", step)  # a test hook (trainer/faults.py)
            result.n_updates += 1
            if epoch == 0:
                result.applied_weights[idx] = out.token_weights
            for k, v in out.metrics.items():
                if v is not None and not (isinstance(v, float) and math.isnan(v)):
                    sums[k] += float(v)
                    counts[k] += 1
    result.loss_metrics = {k: sums[k] / counts[k] for k in sums}
    return result


# --------------------------------------------------------------------------------------------
# 4. metrics
# --------------------------------------------------------------------------------------------


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x * mask).sum() / mask.sum().clamp(min=1))


def step_metrics(
    collected: CollectedRollout, adv: torch.Tensor, update: UpdateResult, tokenizer: Any, task: Any, cfg: TrainConfig
) -> dict[str, float]:
    """The step's metrics: loss metrics averaged over the updates, rewards, response lengths,
    degenerate groups, the rollout entropy, |A|, optimizer steps, the mean gradient norm and the
    task's own per-step metrics (``pop_metrics``, e.g. failed reward calls of a real task)."""
    roll, old = collected.roll, collected.old
    mask = roll.mask
    group_rewards = roll.rewards.view(cfg.prompts_per_step, cfg.group_size)
    metrics = dict(update.loss_metrics)
    metrics.update(
        {
            "reward/mean": float(roll.rewards.mean()),
            "reward/std": float(roll.rewards.std()),
            "response/len_mean": float(mask.sum(-1).mean()),
            "response/empty_frac": sum(1 for t in roll.texts if not t) / roll.rewards.shape[0],
            "response/truncated_frac": float((~(roll.response_ids == tokenizer.eos_token_id).any(-1)).float().mean()),
            "batch/degenerate_group_frac": float(
                (group_rewards.max(1).values == group_rewards.min(1).values).float().mean()
            ),
            "entropy": _masked_mean(old.entropy, mask),
            "adv/abs_mean": _masked_mean(adv.abs(), mask),
            "update/optimizer_steps": float(update.n_updates),
        }
    )
    if update.grad_norms:
        metrics["grad_norm"] = sum(update.grad_norms) / len(update.grad_norms)
    if hasattr(task, "pop_metrics"):  # e.g. reward calls that failed or timed out (entflow.hf.data.ChatTask)
        metrics.update(task.pop_metrics())
    return metrics


def mismatch_metrics(collected: CollectedRollout, weights: torch.Tensor) -> dict[str, float]:
    """The rollout–training mismatch of the step, when the rollout carries its sampler's log-probs
    (``rollout_logp``; else nothing), under ``mismatch/``: verl's off-policy diagnostics of
    π_old against π_rollout (``k3_kl``, ``kl``, the perplexities, χ²; :func:`~entflow.core.mismatch.offpolicy_metrics`),
    prime-rl's ``kl_ent_ratio`` (k3 KL over the mean rollout entropy), ``k3_kl_kept`` over the tokens
    the update kept (first-epoch token weight ≠ 0, ``weights`` ``[N, T]``), ``removed_frac`` and
    ``removed_frac_q1..q4``: the share of the valid tokens the update removed (weight 0, whatever
    part removed them), overall and in each quartile of the rollout's token entropy."""
    if collected.rollout_logp is None:
        return {}
    valid = collected.roll.mask.bool()
    old, sampled, H = collected.old.logp, collected.rollout_logp, collected.old.entropy
    out = {f"mismatch/{k}": v for k, v in offpolicy_metrics(old, sampled, valid).items()}
    log_rho = log_ratio(old, sampled, valid)
    kept = valid & (weights != 0)
    mean_h = (H * valid).sum() / valid.sum().clamp(min=1)
    out["mismatch/kl_ent_ratio"] = torch.where(mean_h > 0, out["mismatch/k3_kl"] / mean_h, torch.zeros_like(mean_h))
    out["mismatch/k3_kl_kept"] = k3_mean(log_rho, kept)
    out["mismatch/removed_frac"] = (valid & ~kept).sum() / valid.sum().clamp(min=1)
    shares = quartile_shares(valid & ~kept, H, valid)
    out.update({f"mismatch/removed_frac_{q}": shares[i] for i, q in enumerate(QUARTILES)})
    return {k: float(v) for k, v in out.items()}


def estimator_metrics(
    model: Any,
    collected: CollectedRollout,
    full: TokenBatch,
    adv: torch.Tensor,
    weights: torch.Tensor,
    cfg: TrainConfig,
    spec: LossSpec,
) -> dict[str, float]:
    """Re-run the forward after the update and score every estimator against the true ΔH per token
    (``audit/*``) under the loss's settings ``spec`` (the run's :attr:`StepPlan.spec`)."""
    with torch.no_grad():
        after = rollout_stats(model, collected.roll, cfg, ("entropy",))
    full.advantages = adv
    return score_estimators(after.entropy - collected.old.entropy, full, weights, spec)


def diagnostic_metrics(
    model: Any, collected: CollectedRollout, adv: torch.Tensor, weights: torch.Tensor, cfg: TrainConfig
) -> dict[str, float]:
    """The §9 diagnostics with w_t = A_t × the method's token weight (``[N, T]``)."""
    model.eval()
    w = adv * weights if adv.dim() == 2 else adv[:, None] * weights
    return rollout_diagnostics(model, collected.roll, collected.old, w, cfg)


# --------------------------------------------------------------------------------------------
# the step
# --------------------------------------------------------------------------------------------


def train_step(
    model: Any,
    tokenizer: Any,
    task: Any,
    method: Method,
    optimizer: torch.optim.Optimizer,
    cfg: TrainConfig,
    step: int,
    ref_model: Any = None,
    diagnose: bool = False,
    plan: StepPlan | None = None,
) -> tuple[dict[str, float], Rollout, dict[str, float]]:
    """Rollout → advantages (→ extra rows) → updates → metrics → estimator scores (→ §9 diagnostics
    when ``diagnose``). ``plan``: the run's :func:`plan_steps` (made here when None).
    Returns (metrics, rollout, timings); each ``time/*_s`` timing times what its name says."""
    plan = plan_steps(method, cfg) if plan is None else plan
    timings: dict[str, float] = {}
    audit = audit_due(cfg, step, diagnose)
    collected = collect_rollout(
        model, tokenizer, task, cfg, step, plan.rollout_stats(audit or diagnose), ref_model, timings, plan.sampler_logp
    )
    t0 = time.perf_counter()
    full = rollout_batch(collected, cfg, step)
    adv = compute_advantages(full, method, scale=cfg.adv_scale)
    timings["time/advantages_s"] = time.perf_counter() - t0

    rows = TrainRows(collected, full, adv)  # what the update trains on
    if plan.sampler is not None:
        t0 = time.perf_counter()
        extra = temperature_samples(
            model, tokenizer, task, plan.sampler, cfg, step, plan.old_stats, ref_model, plan.sampler_logp
        )
        rows = add_rows(rows, extra, cfg, step, tokenizer.pad_token_id)
        timings["time/temperature_samples_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    update = policy_update(model, optimizer, rows, method, cfg, step, plan)
    update.applied_weights = update.applied_weights[: adv.shape[0], : adv.shape[1]]  # the rollout's rows
    timings["time/update_s"] = time.perf_counter() - t0

    metrics = step_metrics(collected, adv, update, tokenizer, task, cfg)
    metrics.update(mismatch_metrics(collected, update.applied_weights))
    if audit:
        t0 = time.perf_counter()
        metrics.update(estimator_metrics(model, collected, full, adv, update.applied_weights, cfg, plan.spec))
        timings["time/audit_s"] = time.perf_counter() - t0
    if diagnose:
        t0 = time.perf_counter()
        metrics.update(diagnostic_metrics(model, collected, adv, update.applied_weights, cfg))
        timings["time/diag_s"] = time.perf_counter() - t0
    return metrics, collected.roll, timings
