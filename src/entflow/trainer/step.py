"""One training step (docs/design.md §10), as its steps:

1. :func:`collect_rollout` — sample P prompts × G responses, score them, and take the rollout
   policy's token statistics from ``generate``'s own logits (no second forward);
2. :func:`rollout_batch` + ``compute_advantages`` — the whole batch as a :class:`TokenBatch` and
   its advantages (GRPO base, then the method's shapers);
   (for a method with ``MethodNeeds.temperature_samples``, AEPO: :func:`temperature_rows` draws
   extra responses at the method's temperature and :func:`append_rows` adds the kept ones);
3. :func:`policy_update` — ``ppo_epochs`` passes over ``mini_batches`` of ``policy_loss`` with the
   method, one optimizer step each;
4. :func:`step_metrics` — the loss metrics averaged over the updates plus rollout metrics, then
   the audit of the true entropy change (:mod:`entflow.trainer.audit`) and, on validation steps,
   the §9 diagnostics (:mod:`entflow.trainer.diagnostics`).

:func:`train_step` is those calls in that order.
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
from entflow.core.token_stats import TokenStats, token_stats
from entflow.methods import Method
from entflow.methods.needs import needs_of
from entflow.methods.objective import compute_advantages, policy_loss
from entflow.trainer.audit import audit_entropy_change
from entflow.trainer.config import TrainConfig
from entflow.trainer.diagnostics import rollout_diagnostics
from entflow.trainer.rollout import Rollout, response_token_stats, response_topk_stats, sample_rollout, step_seed


def method_step(step: int) -> int:
    """The trainer counts rollout steps 1…steps (step 0 is the warm-start evaluation); methods
    read ``batch.step`` 0-based in ``[0, total_steps)`` (docs/design.md §6 schedules), so step k is k − 1."""
    return step - 1


def schedule_steps(cfg: TrainConfig) -> int:
    """``total_steps`` that step-dependent schedules are laid over (anchored on resume)."""
    return cfg.schedule_steps if cfg.schedule_steps is not None else cfg.steps


# --------------------------------------------------------------------------------------------
# 1. rollout
# --------------------------------------------------------------------------------------------


@dataclass
class CollectedRollout:
    """A rollout with the rollout policy's token statistics ``[N, T]`` (and the reference policy's
    log-probs when the method reads them)."""

    roll: Rollout
    old: TokenStats
    ref_logp: torch.Tensor | None  # [N, T]


def collect_rollout(
    model: Any,
    tokenizer: Any,
    task: Any,
    method: Method,
    cfg: TrainConfig,
    step: int,
    ref_model: Any = None,
    diagnose: bool = False,
    timings: dict[str, float] | None = None,
) -> CollectedRollout:
    """Sample and score the step's responses, then compute only the old statistics that the method,
    the audit (every estimator, tabular too) and the §9 diagnostics read (the gradient-norm proxy
    needs Σπ², which the tabular estimator's statistics include). Records ``time/rollout_s``,
    ``time/verify_s`` (part of rollout_s) and ``time/reward_s`` into ``timings``."""
    timings = {} if timings is None else timings
    t0 = time.perf_counter()
    roll = sample_rollout(model, tokenizer, task, cfg, step)
    timings["time/rollout_s"] = time.perf_counter() - t0
    timings["time/verify_s"] = roll.verify_s

    t0 = time.perf_counter()
    with torch.no_grad():
        stats = needs_of(method, ESTIMATORS if (cfg.audit or diagnose) else ()).token_stats()
        if roll.logits is not None:  # the rollout policy's logits, from generate (no second forward)
            old = token_stats(
                roll.logits, roll.response_ids, temperature=cfg.temperature, chunk_size=cfg.chunk_size, stats=stats
            )
        else:
            old = _response_stats(model, roll, cfg, stats)
        ref_logp = None if ref_model is None else _response_stats(ref_model, roll, cfg, ("logp",)).logp
    timings["time/reward_s"] = time.perf_counter() - t0  # with the advantages (train_step adds them)
    return CollectedRollout(roll, old, ref_logp)


def _response_stats(model: Any, roll: Rollout, cfg: TrainConfig, stats: tuple[str, ...]) -> TokenStats:
    return response_token_stats(
        model,
        roll.prompt_ids,
        roll.prompt_mask,
        roll.response_ids,
        cfg.temperature,
        cfg.chunk_size,
        stats,
        hidden_stats=cfg.hidden_stats,
    )


# --------------------------------------------------------------------------------------------
# 2. the batch and its advantages
# --------------------------------------------------------------------------------------------


def rollout_batch(collected: CollectedRollout, cfg: TrainConfig, step: int) -> TokenBatch:
    """The whole rollout as a :class:`TokenBatch` at the rollout policy (logp = old_logp, r ≡ 1),
    without advantages yet: what ``compute_advantages`` and the audit read."""
    roll, old = collected.roll, collected.old
    return TokenBatch(
        logp=old.logp,
        old_logp=old.logp,
        advantages=None,
        mask=roll.mask,
        old_entropy=old.entropy,
        ref_logp=collected.ref_logp,
        sum_p2=old.sum_p2,
        sum_p2_logp=old.sum_p2_logp,
        rewards=roll.rewards,
        group_index=roll.group_index,
        step=method_step(step),
        total_steps=schedule_steps(cfg),
    )


def _rows(x: torch.Tensor | None, idx: torch.Tensor) -> torch.Tensor | None:
    return None if x is None else x[idx]


def mini_batch(full: TokenBatch, adv: torch.Tensor, idx: torch.Tensor, cur: TokenStats) -> TokenBatch:
    """Rows ``idx`` of the rollout batch ``full`` with the current policy's ``logp`` (and entropy,
    where a method differentiates it) in ``cur`` and the advantages ``adv[idx]``."""
    return TokenBatch(
        logp=cur.logp,
        old_logp=full.old_logp[idx],
        advantages=adv[idx],
        mask=full.mask[idx],
        entropy=cur.entropy,
        old_entropy=full.old_entropy[idx],
        ref_logp=_rows(full.ref_logp, idx),
        sum_p2=_rows(full.sum_p2, idx),
        sum_p2_logp=_rows(full.sum_p2_logp, idx),
        rewards=full.rewards[idx],
        group_index=full.group_index[idx],
        step=full.step,
        total_steps=full.total_steps,
    )


def _sampler(method: Method) -> Any:
    """The part that asks for temperature samples (``MethodNeeds.temperature_samples``)."""
    (name,) = needs_of(method).temperature_samples
    return next(p for p in method.parts if p.name == name)


def temperature_rows(
    model: Any,
    tokenizer: Any,
    task: Any,
    method: Method,
    cfg: TrainConfig,
    step: int,
    ref_model: Any = None,
) -> tuple[CollectedRollout, torch.Tensor] | None:
    """AEPO's REINFORCE rows (arXiv 2510.08141 §4; docs/methods.md "aepo"): the first
    ``n_prompts(P)`` of the step's prompts, G responses each at the method's ``temperature``,
    scored; ``reinforce_advantages`` keeps the rewarded ones. Their rollout statistics are those
    of the current policy at the training temperature ``cfg.temperature`` (as the rest of the
    batch), from ``generate``'s own raw logits.

    Returns the kept rows (group indices local to these samples) and their advantages ``[K, T]``,
    or ``None`` when none is kept.
    """
    sampler = _sampler(method)
    n_prompts = sampler.n_prompts(cfg.prompts_per_step)
    roll = sample_rollout(model, tokenizer, task, cfg, step, temperature=sampler.temperature, n_prompts=n_prompts)
    stats = needs_of(method).token_stats()
    with torch.no_grad():
        old = token_stats(
            roll.logits, roll.response_ids, temperature=cfg.temperature, chunk_size=cfg.chunk_size, stats=stats
        )
    probe = TokenBatch(
        logp=old.logp, old_logp=old.logp, advantages=None, mask=roll.mask, rewards=roll.rewards,
        group_index=roll.group_index,
    )  # fmt: skip
    adv, keep = sampler.reinforce_advantages(probe)
    idx = keep.nonzero().squeeze(1)
    if idx.numel() == 0:
        return None
    kept = Rollout(
        **roll.select(idx),
        mask=roll.mask[idx],
        texts=[roll.texts[i] for i in idx.tolist()],
        rewards=roll.rewards[idx],
        group_index=roll.group_index[idx],
        prompts=[roll.prompts[i] for i in idx.tolist()],
        verify_s=roll.verify_s,
    )
    old_kept = TokenStats(*(None if x is None else x[idx] for x in old))
    with torch.no_grad():
        ref_logp = None if ref_model is None else _response_stats(ref_model, kept, cfg, ("logp",)).logp
    return CollectedRollout(kept, old_kept, ref_logp), adv[idx]


def _pad(x: torch.Tensor | None, n: int, value: float | int = 0, left: bool = False) -> torch.Tensor | None:
    """``x`` ``[N, L]`` padded along dim 1 to length ``n`` (right, or left with ``left``)."""
    if x is None or x.shape[1] == n:
        return x
    pad = x.new_full((x.shape[0], n - x.shape[1]), value)
    return torch.cat([pad, x] if left else [x, pad], dim=1)


def _cat(a: torch.Tensor | None, b: torch.Tensor | None, value: float | int = 0, left: bool = False):
    if a is None or b is None:
        return None
    n = max(a.shape[1], b.shape[1])
    return torch.cat([_pad(a, n, value, left), _pad(b, n, value, left)])


def append_rows(
    collected: CollectedRollout, adv: torch.Tensor, extra: CollectedRollout, extra_adv: torch.Tensor, pad_id: int
) -> tuple[CollectedRollout, torch.Tensor]:
    """The rollout with ``extra``'s rows after its own, and their advantages ``[N + K, T']``.

    Prompts are left-padded and responses right-padded to the longer of the two (positions
    follow the attention mask, so padding changes no logit); per-token values are 0 on padding.
    The extra rows' groups come after the rollout's (``group_index + max + 1``)."""
    a, b = collected.roll, extra.roll
    roll = Rollout(
        prompt_ids=_cat(a.prompt_ids, b.prompt_ids, pad_id, left=True),
        prompt_mask=_cat(a.prompt_mask, b.prompt_mask, 0, left=True),
        response_ids=_cat(a.response_ids, b.response_ids, pad_id),
        mask=_cat(a.mask, b.mask),
        texts=a.texts + b.texts,
        rewards=torch.cat([a.rewards, b.rewards]),
        group_index=torch.cat([a.group_index, b.group_index + int(a.group_index.max()) + 1]),
        prompts=a.prompts + b.prompts,
        verify_s=a.verify_s + b.verify_s,
    )
    old = TokenStats(*(_cat(x, y) for x, y in zip(collected.old, extra.old, strict=True)))
    return CollectedRollout(roll, old, _cat(collected.ref_logp, extra.ref_logp)), _cat(adv, extra_adv)


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
    roll: Rollout,
    full: TokenBatch,
    adv: torch.Tensor,
    method: Method,
    cfg: TrainConfig,
    step: int,
) -> UpdateResult:
    """``ppo_epochs`` passes, each over ``mini_batches`` random row chunks (order seeded by
    (seed, step)), of ``policy_loss`` → backward → gradient clipping → optimizer step.
    With ``strict_on_policy`` exactly one step on the whole batch (r ≡ 1; OPEFO's setting)."""
    model.train()
    n = roll.rewards.shape[0]
    gen = torch.Generator().manual_seed(step_seed(cfg.seed, step))
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    result = UpdateResult({}, torch.ones_like(roll.mask))
    # the loss reads H from old_entropy; the current entropy only where a method differentiates it
    needs = needs_of(method)
    cur_stats = needs.token_stats(entropy=False)
    strict = cfg.strict_on_policy or needs.strict_on_policy  # a method may require it (docs/design.md §6)
    epochs, chunks = (1, 1) if strict else (cfg.ppo_epochs, cfg.mini_batches)
    for epoch in range(epochs):
        order = torch.randperm(n, generator=gen)
        for idx in order.chunk(chunks):
            kw = dict(temperature=cfg.temperature, chunk_size=cfg.chunk_size, stats=cur_stats)
            # SIREN: the loss differentiates the top-p entropy
            kw["entropy_top_p"] = needs.entropy_top_p
            topk = None
            if needs.topk is None:  # hidden_stats: from the last hidden state, no [N, T, V] logits
                cur = response_token_stats(model, **roll.select(idx), **kw, hidden_stats=cfg.hidden_stats)
            else:  # SimKO: the top-K candidates' log-probs too, from the same logits
                cur, topk = response_topk_stats(model, **roll.select(idx), **kw, topk=needs.topk)
            batch = mini_batch(full, adv, idx, cur)
            batch.topk_logp = topk
            out = policy_loss(batch, method, cfg.loss_spec())
            optimizer.zero_grad(set_to_none=True)
            out.loss.backward()
            if cfg.grad_clip is not None:
                result.grad_norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)))
            optimizer.step()
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


def audit_metrics(
    model: Any,
    collected: CollectedRollout,
    full: TokenBatch,
    adv: torch.Tensor,
    weights: torch.Tensor,
    cfg: TrainConfig,
) -> dict[str, float]:
    """Re-run the forward after the update and audit every estimator against the true ΔH per token."""
    with torch.no_grad():
        after = _response_stats(model, collected.roll, cfg, ("entropy",))
    full.advantages = adv
    return audit_entropy_change(after.entropy - collected.old.entropy, full, weights, cfg)


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
) -> tuple[dict[str, float], Rollout, dict[str, float]]:
    """Rollout → advantages → updates → metrics → audit (→ §9 diagnostics when ``diagnose``).
    Returns (metrics, rollout, timings)."""
    timings: dict[str, float] = {}
    collected = collect_rollout(model, tokenizer, task, method, cfg, step, ref_model, diagnose, timings)
    t0 = time.perf_counter()
    full = rollout_batch(collected, cfg, step)
    adv = compute_advantages(full, method, scale=cfg.adv_scale)
    timings["time/reward_s"] += time.perf_counter() - t0

    roll_u, full_u, adv_u = collected.roll, full, adv  # what the update trains on
    if needs_of(method).temperature_samples:  # AEPO: REINFORCE rows at the method's temperature
        t0 = time.perf_counter()
        extra = temperature_rows(model, tokenizer, task, method, cfg, step, ref_model)
        if extra is not None:
            merged, adv_u = append_rows(collected, adv, *extra, pad_id=tokenizer.pad_token_id)
            roll_u, full_u = merged.roll, rollout_batch(merged, cfg, step)
        timings["time/temperature_samples_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    update = policy_update(model, optimizer, roll_u, full_u, adv_u, method, cfg, step)
    update.applied_weights = update.applied_weights[: adv.shape[0], : adv.shape[1]]  # the rollout's rows
    timings["time/update_s"] = time.perf_counter() - t0

    metrics = step_metrics(collected, adv, update, tokenizer, task, cfg)
    if cfg.audit:
        t0 = time.perf_counter()
        metrics.update(audit_metrics(model, collected, full, adv, update.applied_weights, cfg))
        timings["time/audit_s"] = time.perf_counter() - t0
    if diagnose:
        t0 = time.perf_counter()
        metrics.update(diagnostic_metrics(model, collected, adv, update.applied_weights, cfg))
        timings["time/diag_s"] = time.perf_counter() - t0
    return metrics, collected.roll, timings
