"""entflow methods as verl policy losses: the registry path and the loss-function path.

1. **Registry path** — :func:`registered_policy_loss` is registered in
   ``verl.trainer.ppo.core_algos`` under ``entflow`` and ``entflow.<name>`` for every method.
   verl's own ``ppo_loss`` calls it per micro-batch with ``old_log_prob, log_prob, advantages,
   response_mask`` and rollout importance weights: enough for every method that reads nothing
   else (see :func:`entflow.integrations.verl.spec.registry_blockers`).
2. **Loss-function path** — :func:`entflow_ppo_loss` replaces verl's whole ``ppo_loss`` on the
   actor workers (the entflow trainer installs it with ``set_loss_fn``). It receives the model
   output, with the current entropy when ``calculate_entropy`` is on, and the whole micro-batch,
   where verl's old-log-prob pass left the old-policy ``entropy``; so every method runs.

Both evaluate :func:`entflow.policy_loss` and rescale its loss to verl's normalisation: verl
divides by the size of the whole mini-batch over all data-parallel ranks (``batch_num_tokens``,
``global_batch_size``) and multiplies by ``dp_size`` because FSDP averages gradients over ranks;
entflow divides by the size of the batch it is given. The factor is exact for every aggregation
(:func:`verl_scale`), so the gradient equals verl's for the same per-token loss.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from verl.trainer.ppo.core_algos import agg_loss, kl_penalty, register_policy_loss
from verl.utils import tensordict_utils as tu
from verl.utils.metric import AggregationType, Metric
from verl.workers.utils.padding import no_padding_2_padding

from entflow.core.batch import TokenBatch
from entflow.core.clip_settings import CLIP_EPS
from entflow.core.ppo import LossSpec
from entflow.errors import ConfigError
from entflow.integrations.verl.spec import (
    GENERIC_MODE,
    KEY,
    WORKER_METHODS,
    MethodSpec,
    loss_mode_for,
    needs_ref_logp,
    registry_blockers,
    spec_from_policy_loss,
)
from entflow.methods import Method, list_methods
from entflow.methods.objective import LossOutput, policy_loss, prepare_statistics

# verl's loss_agg_mode → entflow's agg (the rescaling in verl_scale makes up the difference)
VERL_AGG = {
    "token-mean": "token-mean",
    "token-sum": "token-mean",
    "seq-mean-token-mean": "seq-mean-token-mean",
    "seq-mean-token-sum-norm": "seq-mean-token-sum-norm",
    "seq-mean-token-sum": "seq-mean-token-sum-norm",
}
METRIC_PREFIX = "entflow/"


def verl_scale(loss_agg_mode: str, mask: torch.Tensor, global_batch_info: Mapping[str, Any] | None) -> float:
    """Factor from entflow's loss (normalised over this micro-batch) to verl's ``agg_loss``
    (normalised over the global mini-batch, times ``dp_size``).

    ``global_batch_info`` holds verl's ``dp_size``, ``batch_num_tokens``, ``global_batch_size``
    and ``loss_scale_factor``; a missing entry means "this micro-batch" (verl's single-process rule).
    """
    info = dict(global_batch_info or {})
    dp = int(info.get("dp_size") or 1)
    m = mask.bool()
    n_tok = float(m.sum())
    n_rows, horizon = m.shape
    n_seq = float((m.sum(-1) > 0).sum())  # verl counts only responses with a valid token

    def ratio(num: float, den: Any, fallback: float) -> float:
        den = fallback if den is None else float(den)
        return num / den if den > 0 else 0.0

    if loss_agg_mode == "token-mean":  # Σℓ/n_local → Σℓ/batch_num_tokens·dp
        return ratio(n_tok, info.get("batch_num_tokens"), n_tok) * dp
    if loss_agg_mode == "token-sum":  # Σℓ/n_local → Σℓ·dp
        return n_tok * dp
    if loss_agg_mode == "seq-mean-token-mean":  # Σ_seq mean/n_seq → Σ_seq mean/global_batch_size·dp
        return ratio(n_seq, info.get("global_batch_size"), n_seq) * dp
    if loss_agg_mode in ("seq-mean-token-sum-norm", "seq-mean-token-sum"):  # Σℓ/(N·T) → Σℓ/(gbs·lsf)·dp
        lsf = 1.0
        if loss_agg_mode == "seq-mean-token-sum-norm":
            lsf = float(info.get("loss_scale_factor") or horizon)
        return ratio(n_rows * horizon, info.get("global_batch_size"), n_seq) / lsf * dp
    raise ConfigError(
        "actor_rollout_ref.actor.loss_agg_mode", f"must be one of {tuple(VERL_AGG)}, got {loss_agg_mode!r}"
    )


def clip_settings(config: Any, spec: MethodSpec, method: Method) -> tuple[float, float, float | None]:
    """(ε_low, ε_high, dual clip c) from verl's actor config, as its ``vanilla`` loss reads them."""
    clip = config.get("clip_ratio", CLIP_EPS)  # verl's default ε is PPO's too
    low = config.get("clip_ratio_low")
    high = config.get("clip_ratio_high")
    low = clip if low is None else low
    high = clip if high is None else high
    pinned = any(p.pins_clip() for p in method.parts)
    dual = float(config.get("clip_ratio_c", 3.0)) if spec.dual_clip and not pinned else None
    return float(low), float(high), dual


def global_scale(
    loss_agg_mode: str, mask: torch.Tensor, global_batch_info: Mapping[str, Any] | None, group: Any
) -> float:
    """Factor from entflow's loss with global statistics to verl's normalisation.

    With ``stats``, entflow divides each rank's micro-batch by the size of this micro-batch step
    over all ranks (tokens / non-empty responses / responses × horizon), so the losses of the
    ranks sum to the step's mean. verl divides by the whole mini-batch (``batch_num_tokens`` /
    ``global_batch_size``) and multiplies by ``dp_size`` (FSDP averages gradients over ranks).
    One ``all_reduce`` of three numbers over ``group``.
    """
    info = dict(global_batch_info or {})
    dp = int(info.get("dp_size") or 1)
    m = mask.bool()
    sizes = torch.tensor([m.sum(), (m.sum(-1) > 0).sum(), m.shape[0]], dtype=torch.float64, device=m.device)
    if group is not None:
        dist.all_reduce(sizes, group=group)
    n_tok, n_seq, n_rows = (float(x) for x in sizes.cpu())

    def ratio(num: float, den: Any) -> float:
        return 1.0 if den is None else (num / float(den) if float(den) > 0 else 0.0)

    if loss_agg_mode == "token-mean":
        return ratio(n_tok, info.get("batch_num_tokens")) * dp
    if loss_agg_mode == "seq-mean-token-mean":
        return ratio(n_seq, info.get("global_batch_size")) * dp
    if loss_agg_mode == "seq-mean-token-sum-norm":
        return ratio(n_rows, info.get("global_batch_size")) * dp
    raise ConfigError(
        "actor_rollout_ref.actor.loss_agg_mode",
        f"global statistics support token-mean, seq-mean-token-mean and seq-mean-token-sum-norm, got {loss_agg_mode!r}",
    )


def compute_policy_loss(
    method: Method,
    spec: MethodSpec,
    config: Any,
    loss_agg_mode: str,
    *,
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    old_entropy: torch.Tensor | None = None,
    ref_log_prob: torch.Tensor | None = None,
    rollout_log_prob: torch.Tensor | None = None,
    step: int | None = None,
    total_steps: int | None = None,
    group: Any = None,
) -> tuple[torch.Tensor, LossOutput, float]:
    """``(loss in verl's normalisation, entflow's LossOutput, the factor between them)``. Tensors ``[N, T]``.

    ``spec.statistics == "global"``: batch-level statistics over this micro-batch on every rank of
    ``group`` (:func:`entflow.prepare_statistics`; collective, every rank calls it once per
    micro-batch, as verl's engines run the same number of micro-batches on every rank).
    The batch is built on entflow's fast path (``validate=False``: no host syncs for checks;
    verl's tensors are consistent by construction). ``rollout_log_prob``: the rollout engine's
    log-probs (verl's ``rollout_log_probs``), the ``rollout_logp`` of the mismatch corrections; a
    correction that reweights by the rollout ratio refuses verl's own ``rollout_is_weights`` (the
    mismatch would be corrected twice).
    """
    if loss_agg_mode not in VERL_AGG:
        raise ConfigError(
            "actor_rollout_ref.actor.loss_agg_mode", f"must be one of {tuple(VERL_AGG)}, got {loss_agg_mode!r}"
        )
    clip_low, clip_high, dual = clip_settings(config, spec, method)
    loss_spec = LossSpec(clip_low, clip_high, dual, VERL_AGG[loss_agg_mode]).for_method(method)
    if loss_spec.agg != VERL_AGG[loss_agg_mode]:
        # a sequence-level loss (geo_mean, luspo) fixes its aggregation, whatever loss_agg_mode says (as
        # verl's geo_mean); it is normalised as verl normalises that aggregation (docs/integrations.md)
        loss_agg_mode = loss_spec.agg
    reweighting = [p.name for p in method.parts if p.rollout_correction in ("weight", "ratio")]
    if rollout_is_weights is not None and reweighting:
        raise ConfigError(
            "algorithm.rollout_correction.rollout_is",
            f"must be null: {', '.join(reweighting)} corrects the rollout–training mismatch itself; verl's "
            "rollout_is_weights on top would correct it twice",
        )
    mask = response_mask.bool()
    fields = dict(
        old_logp=old_log_prob,
        advantages=advantages,
        mask=mask,
        entropy=entropy,
        old_entropy=old_entropy,
        ref_logp=ref_log_prob,
        rollout_logp=rollout_log_prob,
        step=int(step or 0),
        total_steps=total_steps,
        validate=False,
    )
    batch = TokenBatch(logp=log_prob, **fields)
    # verl's rollout-correction weights multiply the per-token policy-gradient loss (detached), as in its own losses
    weights = None if rollout_is_weights is None else rollout_is_weights.detach()
    info = config.get("global_batch_info")
    if spec.statistics == "global":
        if loss_spec.agg == "seq-mean-token-sum-norm":
            loss_spec = dataclasses.replace(loss_spec, max_len=config.get("loss_scale_factor"))
        detached = TokenBatch(logp=log_prob.detach(), **fields)
        (stats,) = prepare_statistics([detached], method, loss_spec, group=group)
        out = policy_loss(batch, method, loss_spec, token_weights=weights, stats=stats)
        scale = global_scale(loss_agg_mode, mask, info, group)
    else:
        out = policy_loss(batch, method, loss_spec, token_weights=weights)
        scale = verl_scale(loss_agg_mode, mask, info)
    return out.loss * scale, out, scale


def _rank(group: Any = None) -> int:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group) if group is not None else dist.get_rank()
    return 0


def _prefixed(metrics: Mapping[str, float]) -> dict[str, float]:
    return {METRIC_PREFIX + k: float(v) for k, v in metrics.items()}


# --------------------------------------------------------------------------------------------
# 1. Registry path
# --------------------------------------------------------------------------------------------


def registered_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl's ``PolicyLossFn`` for every entflow loss mode (the method comes from ``config.policy_loss``).

    Returns ``(loss, metrics)``; the metrics are entflow's under ``entflow/``, which verl's
    ``ppo_loss`` averages over micro-batches and ranks.
    """
    if config is None or config.get("policy_loss") is None:
        raise ConfigError(KEY, "entflow's policy losses read the actor config (verl passes it); got none")
    spec = spec_from_policy_loss(config.policy_loss)
    if spec is None:
        raise ConfigError(f"{KEY}.loss_mode", f"is {config.policy_loss.get('loss_mode')!r}, not an entflow loss mode")
    if spec.statistics != "micro_batch":
        raise ConfigError(
            f"{KEY}.statistics",
            "global statistics need the data-parallel group, which a registered loss does not receive; "
            "use trainer.v1.trainer_mode=entflow (the loss-function path)",
        )
    # a registered loss does not see the data-parallel group; tensor/sequence-parallel peers hold the
    # same micro-batch and must draw the same numbers, so every process uses the stream of rank 0
    method = WORKER_METHODS.get(spec, rank=0, device=log_prob.device)
    blockers = registry_blockers(method)
    if blockers:
        raise ConfigError(
            f"{KEY}.loss_mode",
            f"{method.name} cannot run as a registered verl loss: {'; '.join(blockers)}. "
            "Run it with trainer.v1.trainer_mode=entflow, which installs entflow's loss function",
        )
    loss, out, _ = compute_policy_loss(
        method,
        spec,
        config,
        loss_agg_mode,
        log_prob=log_prob,
        old_log_prob=old_log_prob,
        advantages=advantages,
        response_mask=response_mask,
        rollout_is_weights=rollout_is_weights,
    )
    return loss, _prefixed(out.metrics)


def register_all() -> list[str]:
    """Register :func:`registered_policy_loss` under ``entflow`` and ``entflow.<name>`` for every
    method; returns the loss modes registered."""
    modes = [GENERIC_MODE] + [loss_mode_for(n) for n in list_methods()]
    for mode in modes:
        register_policy_loss(mode)(registered_policy_loss)
    return modes


# --------------------------------------------------------------------------------------------
# 2. Loss-function path
# --------------------------------------------------------------------------------------------


def _metric_aggregation(key: str) -> AggregationType:
    tail = key.rsplit("/", 1)[-1]
    if tail.endswith("_min") or tail == "min":
        return AggregationType.MIN
    if tail.endswith("_max") or tail == "max":
        return AggregationType.MAX
    return AggregationType.MEAN


def entflow_ppo_loss(config: Any, model_output: Mapping[str, Any], data: Any, dp_group: Any = None):
    """Drop-in replacement of verl's ``verl.workers.utils.losses.ppo_loss`` running an entflow method.

    Reads from ``model_output``: ``log_probs`` (with grad) and ``entropy`` (current, with grad;
    present when the update pass runs with ``calculate_entropy``). Reads from ``data`` (one
    micro-batch): ``response_mask``, ``old_log_probs``, ``advantages``, the old-policy ``entropy``
    that verl's old-log-prob pass stores in the batch, ``ref_log_prob``, ``rollout_is_weights`` and
    the rollout engine's ``rollout_log_probs`` (``rollout.calculate_log_probs``) when present, and
    the entflow trainer's ``entflow_step`` / ``entflow_total_steps`` / ``entflow_state`` (controller
    state). verl's own entropy bonus (``entropy_coeff``) and KL loss
    (``use_kl_loss``, unless the method has ``kl_ref``) are added as in ``ppo_loss``.

    Returns ``(loss, metrics)`` with verl ``Metric`` objects: ``actor/pg_loss`` and entflow's
    metrics under ``entflow/`` (mean over micro-batches and ranks; ``*_min`` / ``*_max`` keys by min / max).
    """
    spec = spec_from_policy_loss(config.policy_loss)
    if spec is None:
        raise ConfigError(f"{KEY}.loss_mode", "entflow's loss function needs loss_mode 'entflow' or 'entflow.<name>'")
    log_prob = no_padding_2_padding(model_output["log_probs"], data)
    entropy = model_output.get("entropy", None)
    if entropy is not None:
        entropy = no_padding_2_padding(entropy, data)

    info = config.global_batch_info
    info["dp_size"] = data["dp_size"]
    info["batch_num_tokens"] = data["batch_num_tokens"]
    info["global_batch_size"] = data["global_batch_size"]
    info["loss_scale_factor"] = config.loss_scale_factor
    globally_normalised = (
        info["dp_size"] > 1
        or info["batch_num_tokens"] is not None
        or info["global_batch_size"] is not None
        or config.loss_scale_factor is not None
    )
    loss_aggregation = AggregationType.SUM if globally_normalised else AggregationType.MEAN

    step = tu.get_non_tensor_data(data, "entflow_step", None)
    total_steps = tu.get_non_tensor_data(data, "entflow_total_steps", None)
    state = tu.get_non_tensor_data(data, "entflow_state", None)
    method = WORKER_METHODS.get(spec, rank=_rank(dp_group), step=step, state=state, device=log_prob.device)

    fields = ["response_mask", "old_log_probs", "advantages"]
    fields += [f for f in ("rollout_is_weights", "ref_log_prob", "entropy", "rollout_log_probs") if f in data.keys()]
    batch = data.select(*fields).to_padded_tensor()
    mask = batch["response_mask"].to(bool)
    has_kl_ref = needs_ref_logp(method)  # kl_ref, or a method with its own KL (archer)
    loss, out, scale = compute_policy_loss(
        method,
        spec,
        config,
        config.loss_agg_mode,
        log_prob=log_prob,
        old_log_prob=batch["old_log_probs"],
        advantages=batch["advantages"],
        response_mask=mask,
        rollout_is_weights=batch.get("rollout_is_weights", None),
        entropy=entropy,
        old_entropy=batch.get("entropy", None),
        ref_log_prob=batch.get("ref_log_prob", None) if has_kl_ref else None,
        rollout_log_prob=batch.get("rollout_log_probs", None),
        step=step,
        total_steps=total_steps,
        group=dp_group,
    )
    metrics: dict[str, Any] = {
        "actor/pg_loss": Metric(value=out.metrics.get("pg_loss", 0.0) * scale, aggregation=loss_aggregation)
    }
    for k, v in _prefixed(out.metrics).items():
        metrics[k] = Metric(value=v, aggregation=_metric_aggregation(k))

    if entropy is not None and config.entropy_coeff != 0:  # verl's own entropy bonus, as ppo_loss
        entropy_loss = agg_loss(loss_mat=entropy, loss_mask=mask, loss_agg_mode=config.loss_agg_mode, **info)
        loss = loss - config.entropy_coeff * entropy_loss
        metrics["actor/entropy_loss"] = Metric(value=entropy_loss.detach().item(), aggregation=loss_aggregation)
    if config.use_kl_loss and not has_kl_ref:  # verl's own KL loss, as ppo_loss
        kld = kl_penalty(logprob=log_prob, ref_logprob=batch["ref_log_prob"], kl_penalty=config.kl_loss_type)
        kl_loss = agg_loss(loss_mat=kld, loss_mask=mask, loss_agg_mode=config.loss_agg_mode, **info)
        loss = loss + kl_loss * config.kl_loss_coef
        metrics["kl_loss"] = Metric(value=kl_loss.detach().item(), aggregation=loss_aggregation)
        metrics["kl_coef"] = config.kl_loss_coef
    return loss, metrics
