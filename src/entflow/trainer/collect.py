"""The rows a step trains on (docs/design.md §10): the sampled rollout with the rollout policy's
token statistics, as one :class:`TokenBatch`, and the extra rows at another temperature that a
method asks for through ``MethodNeeds.temperature_samples``.

- :func:`collect_rollout` — sample P prompts × G responses, score them, and take the rollout
  policy's token statistics from ``generate``'s own logits (no second forward);
- :func:`rollout_batch` — the whole rollout as a :class:`TokenBatch` at the rollout policy;
- :func:`temperature_samples` — for a method whose ``MethodNeeds.temperature_samples`` names a
  part (a *sampler*: ``temperature``, ``n_prompts(P)``, ``reinforce_advantages(batch)``), draw G
  responses for the first ``n_prompts(P)`` prompts at the sampler's temperature and keep the rows
  it gives an advantage; :func:`add_rows` appends them to the rollout's rows (:func:`append_rows`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from entflow.core.batch import TokenBatch
from entflow.core.token_stats import TokenStats, token_stats
from entflow.methods import Method
from entflow.trainer.config import TrainConfig
from entflow.trainer.faults import kill_point
from entflow.trainer.rollout import (
    Rollout,
    engine_logp,
    response_logits,
    response_token_stats,
    sample_rollout,
    sampling_mismatch,
)


def method_step(step: int) -> int:
    """The trainer counts rollout steps 1…steps (step 0 is the warm-start evaluation); methods
    read ``batch.step`` 0-based in ``[0, total_steps)`` (docs/design.md §6 schedules), so step k is k − 1."""
    return step - 1


def schedule_steps(cfg: TrainConfig) -> int:
    """``total_steps`` that step-dependent schedules are laid over (anchored on resume)."""
    return cfg.schedule_steps if cfg.schedule_steps is not None else cfg.steps


@dataclass
class CollectedRollout:
    """A rollout with the rollout policy's token statistics ``[N, T]`` (and the reference policy's
    log-probs when the method reads them; the sampler's own log-probs, ``rollout_logp``, when a
    method reads them or a mismatch is injected)."""

    roll: Rollout
    old: TokenStats
    ref_logp: torch.Tensor | None  # [N, T]
    rollout_logp: torch.Tensor | None = None  # [N, T], the law the tokens were drawn from


def rollout_stats(model: Any, roll: Rollout, cfg: TrainConfig, stats: tuple[str, ...]) -> TokenStats:
    """Token statistics ``stats`` ``[N, T]`` of the rollout's responses under ``model`` at the
    training temperature, from one forward over ``[prompt | response]``."""
    return response_token_stats(
        model,
        roll.prompt_ids,
        roll.prompt_mask,
        roll.response_ids,
        cfg.temperature,
        cfg.chunk_size,
        stats,
        hidden_stats=cfg.hidden_stats,
        share_prompts=cfg.share_prompts,
    )


def sampler_logp(
    model: Any, roll: Rollout, cfg: TrainConfig, temperature: float, old_logp: torch.Tensor
) -> torch.Tensor:
    """The rollout's ``rollout_logp`` ``[N, T]``: the drawn tokens' log-probs under the law the
    sampler drew them from — at ``temperature``, perturbed by ``cfg.rollout_mismatch`` when set
    (:func:`~entflow.trainer.rollout.engine_logp`, from ``generate``'s raw logits). Without a
    mismatch, at the training temperature, that law is the trainer's: ``old_logp`` itself."""
    mismatch = sampling_mismatch(cfg.rollout_mismatch)
    if mismatch is None and temperature == cfg.temperature:
        return old_logp
    with torch.no_grad():
        logits = roll.logits
        if logits is None:
            logits = response_logits(model, roll.prompt_ids, roll.prompt_mask, roll.response_ids, cfg.share_prompts)
        return engine_logp(logits, roll.response_ids, temperature, mismatch, cfg.chunk_size)


def _old_stats(
    model: Any, roll: Rollout, cfg: TrainConfig, stats: tuple[str, ...], ref_model: Any, with_sampler_logp: bool
) -> CollectedRollout:
    """The rollout with its rollout-policy statistics: from ``generate``'s own raw logits when it
    kept them (no second forward), else from a forward; the reference's log-probs; the sampler's
    (:func:`sampler_logp`) when ``with_sampler_logp``."""
    with torch.no_grad():
        if roll.logits is not None:
            old = token_stats(
                roll.logits, roll.response_ids, temperature=cfg.temperature, chunk_size=cfg.chunk_size, stats=stats
            )
        else:
            old = rollout_stats(model, roll, cfg, stats)
        ref_logp = None if ref_model is None else rollout_stats(ref_model, roll, cfg, ("logp",)).logp
    sampled = sampler_logp(model, roll, cfg, cfg.temperature, old.logp) if with_sampler_logp else None
    return CollectedRollout(roll, old, ref_logp, sampled)


def collect_rollout(
    model: Any,
    tokenizer: Any,
    task: Any,
    cfg: TrainConfig,
    step: int,
    stats: tuple[str, ...],
    ref_model: Any = None,
    timings: dict[str, float] | None = None,
    with_sampler_logp: bool = False,
) -> CollectedRollout:
    """Sample and score the step's responses, then compute the rollout policy's statistics
    ``stats`` (what the method, the audit and the §9 diagnostics read) and, with
    ``with_sampler_logp``, the sampler's own log-probs (:func:`sampler_logp`). Records into ``timings``:
    ``time/rollout_s`` (generation and scoring), ``time/verify_s`` (the scoring alone, part of
    rollout_s) and ``time/old_stats_s`` (the rollout and reference policies' token statistics)."""
    timings = {} if timings is None else timings
    t0 = time.perf_counter()
    roll = sample_rollout(model, tokenizer, task, cfg, step)
    kill_point("rollout", step)  # a test hook (trainer/faults.py)
    timings["time/rollout_s"] = time.perf_counter() - t0
    timings["time/verify_s"] = roll.verify_s
    t0 = time.perf_counter()
    collected = _old_stats(model, roll, cfg, stats, ref_model, with_sampler_logp)
    timings["time/old_stats_s"] = time.perf_counter() - t0
    return collected


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
        rollout_logp=collected.rollout_logp,
        sum_p2=old.sum_p2,
        sum_p2_logp=old.sum_p2_logp,
        rewards=roll.rewards,
        group_index=roll.group_index,
        step=method_step(step),
        total_steps=schedule_steps(cfg),
    )


# --------------------------------------------------------------------------------------------
# Extra rows at another temperature (MethodNeeds.temperature_samples)
# --------------------------------------------------------------------------------------------


@dataclass
class TrainRows:
    """What the update trains on: the rows, their batch and their advantages ``[N', T']``."""

    collected: CollectedRollout
    batch: TokenBatch
    adv: torch.Tensor


def temperature_sampler(method: Method, samplers: tuple[str, ...]) -> Any:
    """The part of ``method`` named in ``MethodNeeds.temperature_samples`` (at most one), or None."""
    if not samplers:
        return None
    (name,) = samplers
    return next(p for p in method.parts if p.name == name)


def temperature_samples(
    model: Any,
    tokenizer: Any,
    task: Any,
    sampler: Any,
    cfg: TrainConfig,
    step: int,
    stats: tuple[str, ...],
    ref_model: Any = None,
    with_sampler_logp: bool = False,
) -> tuple[CollectedRollout, torch.Tensor] | None:
    """The sampler's rows: the first ``sampler.n_prompts(P)`` of the step's prompts, G responses
    each at ``sampler.temperature``, scored; ``sampler.reinforce_advantages`` keeps some (e.g.
    AEPO's rewarded ones, arXiv 2510.08141 §4; docs/methods.md "aepo"). Their rollout statistics
    ``stats`` are those of the current policy at the training temperature ``cfg.temperature`` (as
    the rest of the batch), from ``generate``'s own raw logits.

    ``with_sampler_logp``: also their sampler's log-probs, at the temperature they were drawn at
    (:func:`sampler_logp`).

    Returns the kept rows (group indices local to these samples) and their advantages ``[K, T]``,
    or ``None`` when none is kept.
    """
    n_prompts = sampler.n_prompts(cfg.prompts_per_step)
    roll = sample_rollout(model, tokenizer, task, cfg, step, temperature=sampler.temperature, n_prompts=n_prompts)
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
        ref_logp = None if ref_model is None else rollout_stats(ref_model, kept, cfg, ("logp",)).logp
    sampled = sampler_logp(model, roll, cfg, sampler.temperature, old.logp)[idx] if with_sampler_logp else None
    return CollectedRollout(kept, old_kept, ref_logp, sampled), adv[idx]


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
    merged = CollectedRollout(
        roll, old, _cat(collected.ref_logp, extra.ref_logp), _cat(collected.rollout_logp, extra.rollout_logp)
    )
    return merged, _cat(adv, extra_adv)


def add_rows(
    rows: TrainRows, extra: tuple[CollectedRollout, torch.Tensor] | None, cfg: TrainConfig, step: int, pad_id: int
) -> TrainRows:
    """``rows`` with ``extra``'s rows and advantages (e.g. :func:`temperature_samples`) appended after
    them (:func:`append_rows`) and the batch rebuilt over all of them; ``rows`` itself when
    ``extra`` is None (none kept)."""
    if extra is None:
        return rows
    merged, adv = append_rows(rows.collected, rows.adv, *extra, pad_id=pad_id)
    return TrainRows(merged, rollout_batch(merged, cfg, step), adv)
