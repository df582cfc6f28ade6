"""The pieces of the TRL adapter's loss hook, as functions of tensors and TRL's batch dict:
TRL's batch → :class:`TokenBatch`, the rewards of a generation batch → entflow's advantage
inputs, the rollout pass for the tabular estimator, the factor from ``policy_loss`` to TRL's
normalisation, and the ``policy_loss`` call itself (docs/design.md §4, §12).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import torch

from entflow.core.batch import TokenBatch
from entflow.core.distributed import StepStatistics
from entflow.core.hidden_stats import token_stats_from_hidden
from entflow.core.lm_head import hidden_head_reason, last_hidden_state
from entflow.core.ppo import LossSpec
from entflow.core.token_stats import TokenStats, token_stats
from entflow.errors import ConfigError
from entflow.integrations.trl.compat import (
    causal_lm,
    completion_mask,
    forward_inputs,
    lm_head_tensors,
    sampling_logps,
)
from entflow.methods.base import Method
from entflow.methods.objective import LossOutput, policy_loss

# TRL's batch key → TokenBatch field, for the rollout values the adapter stores in the batch dict
ROLLOUT_KEYS = {
    "old_per_token_logps": "old_logp",
    "ef_old_entropy": "old_entropy",
    "ef_sum_p2": "sum_p2",
    "ef_sum_p2_logp": "sum_p2_logp",
}


# --------------------------------------------------------------------------------------------
# Batches
# --------------------------------------------------------------------------------------------


def token_batch(
    inputs: dict[str, Any],
    logp: torch.Tensor,
    entropy: torch.Tensor,
    *,
    entropy_is_rollout: bool,
    max_len: int | None,
    step: int,
    total_steps: int | None,
) -> TokenBatch:
    """TRL's micro-batch ``inputs`` as a :class:`TokenBatch` with log-probs ``logp`` ``[B, T]``.

    ``old_logp``: TRL's (or the rollout pass's) when computed, else ``logp`` detached (no
    optimizer step since generation). ``old_entropy``: read once per generation batch, else
    ``entropy`` detached when ``entropy_is_rollout`` (no optimizer step since generation).
    ``rollout_logp``: the sampler's log-probs (vLLM's or a ``rollout_func``'s, ``compat.sampling_logps``)
    when TRL has them.
    ``max_len``: Dr. GRPO's constant; columns past it are cut (they must be padding).
    """
    mask = completion_mask(inputs)
    old_logp = inputs.get("old_per_token_logps")
    old_logp = logp.detach() if old_logp is None else old_logp
    old_entropy = inputs.get("ef_old_entropy")
    if old_entropy is None and entropy_is_rollout:
        old_entropy = entropy.detach()
    fields = dict(
        logp=logp,
        old_logp=old_logp,
        advantages=inputs["advantages"],
        mask=mask,
        entropy=entropy,
        old_entropy=old_entropy,
        ref_logp=inputs.get("ref_per_token_logps"),
        rollout_logp=sampling_logps(inputs, old_logp),
        sum_p2=inputs.get("ef_sum_p2"),
        sum_p2_logp=inputs.get("ef_sum_p2_logp"),
    )
    if max_len is not None and mask.shape[1] > max_len:  # padded past the limit (pad_to_multiple_of)
        if bool(mask[:, max_len:].any()):
            raise ConfigError("max_completion_length", f"completions longer than {max_len} tokens reached the loss")
        fields = {k: None if v is None else v[:, :max_len] for k, v in fields.items()}
    return TokenBatch(**fields, step=step, total_steps=total_steps, validate=False)


def scored_rewards(
    rewards_per_func: torch.Tensor, reward_weights: torch.Tensor, group_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(rewards [N], group_index [N], unscorable [N] bool)`` of a generation batch.

    ``rewards_per_func`` ``[N, F]`` (NaN where a function returned None) is summed with the
    weights; groups are ``group_size`` consecutive completions. A completion that every function
    left unscored gets reward 0 in a group of its own, so it leaves its group's baseline alone
    (and the caller gives it advantage 0, as TRL).
    """
    rewards = (rewards_per_func * reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    n = rewards.shape[0]
    index = torch.arange(n, device=rewards.device)
    group = torch.where(unscorable, n + index, index // group_size)
    return rewards.masked_fill(unscorable, 0.0), group, unscorable


def advantage_batch(
    mask: torch.Tensor,
    rollout: dict[str, torch.Tensor],
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    step: int,
    total_steps: int | None,
) -> TokenBatch:
    """The generation batch as ``compute_advantages`` reads it: ``mask`` ``[N, T]``, the rollout
    values it has (``rollout``: TokenBatch field → ``[N, T]``; ``old_logp`` zeros if absent, for
    shapers that read none) and the rewards and groups ``[N]``."""
    fields = dict(rollout)
    old_logp = fields.pop("old_logp", torch.zeros(mask.shape, dtype=torch.float32, device=mask.device))
    return TokenBatch(
        logp=old_logp,
        old_logp=old_logp,
        advantages=None,
        mask=mask,
        rewards=rewards.to(mask.device),
        group_index=group_index.to(mask.device),
        step=step,
        total_steps=total_steps,
        **fields,
    )


# --------------------------------------------------------------------------------------------
# Token statistics of the rollout
# --------------------------------------------------------------------------------------------


def rollout_token_stats(
    model: torch.nn.Module,
    inputs: dict[str, Any],
    temperature: float,
    batch_size: int,
    chunk_size: int | None,
    autocast: Any,
) -> TokenStats:
    """logp, entropy, Σπ², Σπ² log π ``[N, T]`` of the generation batch, in forwards of
    ``batch_size`` rows (the body under ``autocast()``). Call without grad.

    From the hidden states and the LM head's weight (:func:`token_stats_from_hidden`: the
    ``[N, V]`` logits never exist, as in TRL's fused head) when the head is a plain linear layer;
    otherwise (soft-capping, a logit scale, …: :func:`hidden_head_reason`) from the model's full
    logits, with a warning naming the reason.
    """
    lm = causal_lm(model)
    reason = hidden_head_reason(lm)
    if reason is None:
        return rollout_token_stats_from_hidden(lm, inputs, temperature, batch_size, autocast)
    warnings.warn(
        f"entflow: the rollout statistics of the tabular estimator are computed from full [N, T, V] logits "
        f"(not from the hidden states) because {reason}",
        stacklevel=2,
    )
    return rollout_token_stats_from_logits(model, inputs, temperature, batch_size, chunk_size, autocast)


def _rollout_rows(
    inputs: dict[str, Any], batch_size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor, int, torch.Tensor]]:
    """``(input_ids, attention_mask, T, completion_ids)`` slices of ``batch_size`` rows."""
    input_ids, attention_mask, keep, extra = forward_inputs(inputs)
    if extra:
        raise ConfigError("entflow_method", "the tabular estimator is not supported with multimodal inputs")
    completion_ids = inputs["completion_ids"]
    for start in range(0, input_ids.size(0), batch_size):
        sl = slice(start, start + batch_size)
        yield input_ids[sl], attention_mask[sl], keep, completion_ids[sl]


def _cat(rows: list[TokenStats]) -> TokenStats:
    return TokenStats(*(torch.cat([getattr(r, f) for r in rows]) for f in TokenStats._fields))


def rollout_token_stats_from_hidden(
    model: torch.nn.Module, inputs: dict[str, Any], temperature: float, batch_size: int, autocast: Any
) -> TokenStats:
    """:func:`rollout_token_stats` from the body's last hidden state ``[B, T, D]`` and the head
    ``W [V, D]`` (+ bias): one body forward per ``batch_size`` rows, then
    :func:`token_stats_from_hidden` (float32 accumulation, outside autocast) in its default tiles
    (1,024 rows × 8,192 vocabulary entries, 32 MiB: smaller row tiles read W more often and cost
    time, docs/benchmarks.md "hidden_passes"; the adapter's ``entflow_chunk_size`` bounds the
    fallback's softmax rows only). ``model`` is a plain causal LM (not PEFT-wrapped) whose head is plain."""
    head = model.get_output_embeddings()
    rows = []
    with lm_head_tensors(head) as (weight, bias):
        for input_ids, attention_mask, keep, completion_ids in _rollout_rows(inputs, batch_size):
            with autocast():
                hidden = last_hidden_state(model, input_ids=input_ids, attention_mask=attention_mask)
            hidden = hidden[:, -keep - 1 : -1].to(weight.device)  # position t predicts token t + 1
            rows.append(token_stats_from_hidden(hidden, weight, completion_ids, bias, temperature))
    return _cat(rows)


def rollout_token_stats_from_logits(
    model: torch.nn.Module,
    inputs: dict[str, Any],
    temperature: float,
    batch_size: int,
    chunk_size: int | None,
    autocast: Any,
) -> TokenStats:
    """:func:`rollout_token_stats` from the model's full logits ``[B, T, V]`` (the fallback for
    heads that are not plain linear layers): ``token_stats`` in chunks of ``chunk_size`` rows."""
    rows = []
    for input_ids, attention_mask, keep, completion_ids in _rollout_rows(inputs, batch_size):
        with autocast():
            logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep + 1).logits
        rows.append(token_stats(logits[:, :-1].float(), completion_ids, temperature, chunk_size))
    return _cat(rows)


# --------------------------------------------------------------------------------------------
# The loss
# --------------------------------------------------------------------------------------------


def step_segment(step: int, accumulation_steps: int, generate_every: int) -> range:
    """The micro-steps that share global statistics with micro-step ``step``: those of its
    optimizer step (``accumulation_steps`` micro-steps) that read its generation batch (one
    generation every ``generate_every`` micro-steps). When ``generate_every`` is a multiple of
    ``accumulation_steps`` this is the whole optimizer step; otherwise a step can span two
    generation batches, the second generated only when the step reaches it, and each part is a
    segment of its own."""
    step_start, gen_start = step - step % accumulation_steps, step - step % generate_every
    return range(max(step_start, gen_start), min(step_start + accumulation_steps, gen_start + generate_every))


def loss_scale(
    mask: torch.Tensor,
    num_items_in_batch: torch.Tensor,
    loss_type: str,
    accumulation_steps: int,
    world: int,
    steps_per_generation: int,
    train: bool,
) -> float | torch.Tensor:
    """Per-call mode: the factor from ``policy_loss`` (one micro-batch) to TRL's loss.

    TRL's trainer sums micro-batch gradients over gradient accumulation and averages over
    processes. ``dapo``: token mean over TRL's normaliser (the generation batch's token count
    per optimizer step, all processes: ``num_items_in_batch``); ``grpo`` / ``dr_grpo`` /
    ``bnpo``: the micro-batch value divided by the accumulation steps (1 in eval).
    """
    ga = accumulation_steps if train else 1
    if loss_type != "dapo":
        return 1.0 / ga
    normaliser = num_items_in_batch.clamp(min=1.0) / world
    if train:
        normaliser = normaliser * ga / steps_per_generation
    return mask.sum() / normaliser


def trl_loss(
    batch: TokenBatch,
    method: Method,
    spec: LossSpec,
    scale: float | torch.Tensor,
    stats: StepStatistics | None = None,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, LossOutput]:
    """``policy_loss`` on one micro-batch, times ``scale`` (TRL's normalisation): with ``stats``
    (global statistics and denominators of the whole optimizer step, from
    ``prepare_statistics``), the summed micro-batch losses are the full-batch loss and ``scale``
    is the process count (DDP averages gradients over processes); without, see :func:`loss_scale`.
    ``token_weights``: TRL's vLLM importance-sampling ratio ρ ``[N, T]`` or ``[N, 1]`` (detached),
    ℓ_t ← ρ_t·ℓ_t exactly where TRL applies it (not on the KL or entropy terms)."""
    out = policy_loss(batch, method, spec, token_weights=token_weights, stats=stats)
    return out.loss * scale, out
