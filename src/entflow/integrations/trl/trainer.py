"""entflow methods inside TRL's ``GRPOTrainer`` (docs/design.md §12, first bullet).

Change one import and one config field::

    from entflow.integrations.trl import EntflowGRPOConfig, EntflowGRPOTrainer

    args = EntflowGRPOConfig(output_dir="out", entflow_method="clip_higher+steer",
                             entflow_method_params={"lambda_min": 0.8})
    trainer = EntflowGRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=reward, args=args,
                                 train_dataset=dataset)
    trainer.train()

What the subclass changes in TRL 1.16's ``GRPOTrainer`` (everything else — generation, rewards,
vLLM, reference model, logging, checkpoints — is TRL's own):

- **advantages**: after TRL has scored a generation batch, the rewards (gathered over processes,
  groups of ``num_generations`` consecutive completions) go through :func:`entflow.compute_advantages`
  with the method, so sequence- and token-level advantage shaping sees whole groups;
- **loss**: :func:`entflow.policy_loss` with the method on TRL's per-token log-probs and entropies
  (fused LM head), the rollout entropy (read once per generation batch), ``ref_logp`` for
  ``kl_ref``, and ``sum_p2`` / ``sum_p2_logp`` for the ``tabular`` estimator; TRL's ``loss_type``
  maps to entflow's aggregation with TRL's normalisers (gradient accumulation, processes);
- **state**: ``method.update`` once per generation step on process-averaged metrics; the method
  state is saved in every checkpoint and restored by ``resume_from_checkpoint``;
- **metrics**: everything ``policy_loss`` reports goes through TRL's ``self._metrics`` (so to
  TensorBoard, W&B, …), under TRL's names where TRL reports the same quantity.

TRL options that cannot combine with a method are refused when the config is built, naming the
field (see :func:`check_compatibility`). ``docs/integrations.md`` has the full table.
"""

from __future__ import annotations

import functools
import json
import math
import os
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch
from trl import GRPOConfig, GRPOTrainer
from trl.models.utils import disable_gradient_checkpointing

from entflow.core.advantages import SCALES
from entflow.core.batch import TokenBatch
from entflow.core.token_stats import token_stats
from entflow.errors import ConfigError, EntflowError
from entflow.methods.base import Composite, Method, get_method
from entflow.methods.objective import compute_advantages, policy_loss, prepare_statistics

# TRL loss_type → entflow aggregation (docs/design.md §4). ``dapo`` and ``bnpo`` are both token means; they
# differ in the denominator (global token count of the optimizer step vs the micro-batch's).
LOSS_TYPE_AGG = {
    "dapo": "token-mean",
    "bnpo": "token-mean",
    "grpo": "seq-mean-token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
}

# entflow metric → TRL's name for the same quantity (TRL's dashboards keep working)
TRL_METRIC_NAMES = {
    "entropy": "entropy",
    "clip/frac_high": "clip_ratio/high_mean",
    "clip/frac_low": "clip_ratio/low_mean",
    "kl_ref/kl": "kl",
    "pg_loss": "policy_loss",
}
# reported by TRL's Trainer itself (the scaled total loss), so not repeated from policy_loss
_NOT_LOGGED = ("loss",)

STATE_FILE = "entflow_state.pt"  # per checkpoint; ``entflow_state_{rank}.pt`` with several processes

# advantage shapers that read nothing but rewards, groups and the mask (no rollout forward pass)
_SHAPERS_WITHOUT_ROLLOUT_STATS = ("w_reinforce", "position_shaping")
# methods whose batch statistics read neither log-probs nor entropies (only masks, advantages, draws)
_STATS_WITHOUT_VALUES = ("quadrant", "rand_pos_clip")


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


@dataclass
class EntflowGRPOConfig(GRPOConfig):
    """``trl.GRPOConfig`` plus the entflow method.

    Validated when built: an unknown method or parameter, or a TRL option that cannot combine
    with the method, raises :class:`entflow.ConfigError` naming the field, before any model is
    loaded or any completion generated.
    """

    entflow_method: str = field(
        default="grpo",
        metadata={"help": "entflow method or composition 'a+b' (see `entflow methods`); 'grpo' = TRL's loss."},
    )
    entflow_method_params: dict | str | None = field(
        default=None,
        metadata={
            "help": "Parameters of the method, e.g. {'lambda_min': 0.8} or {'steer.lambda_min': 0.8} in a "
            "composition. A JSON string is accepted (command line)."
        },
    )
    entflow_global_stats: bool = field(
        default=True,
        metadata={
            "help": "Batch statistics (STEER max|Ω|, OPEFO S±, Cov means, quantiles, random draws) over all "
            "micro-batches of an optimizer step and all processes (True), or per micro-batch (False, as verl)."
        },
    )
    entflow_advantage_eps: float = field(
        default=1e-4,
        metadata={"help": "Added to the reward std in the advantages (TRL uses 1e-4; docs/design.md §1 uses 1e-6)."},
    )
    entflow_chunk_size: int | None = field(
        default=256,
        metadata={"help": "Token rows per softmax chunk in the rollout pass that the tabular estimator needs."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.entflow_method_params, str):
            try:
                self.entflow_method_params = json.loads(self.entflow_method_params)
            except json.JSONDecodeError as e:
                raise ConfigError("entflow_method_params", f"is not valid JSON: {e}") from e
        if self.entflow_method_params is None:
            self.entflow_method_params = {}
        if not isinstance(self.entflow_method_params, dict):
            raise ConfigError(
                "entflow_method_params",
                f"must be a dict (or JSON object), got {type(self.entflow_method_params).__name__}",
            )
        if not self.entflow_advantage_eps >= 0:
            raise ConfigError("entflow_advantage_eps", f"must be >= 0, got {self.entflow_advantage_eps}")
        if self.entflow_chunk_size is not None and self.entflow_chunk_size < 1:
            raise ConfigError("entflow_chunk_size", f"must be None or >= 1, got {self.entflow_chunk_size}")
        method = build_method(self)
        check_compatibility(self, method)
        kl = _part(method, "kl_ref")
        if kl is not None:
            # TRL loads the reference model and computes ref_logp only when beta != 0; the KL term
            # itself is entflow's kl_ref (TRL's own loss is not used).
            self.beta = kl.beta


def build_method(args: EntflowGRPOConfig) -> Method:
    """The method ``args`` names, built with its parameters (:class:`ConfigError` naming the field)."""
    name = args.entflow_method
    if not isinstance(name, str) or not name.strip():
        raise ConfigError("entflow_method", f"must be a method name or 'a+b' composition, got {name!r}")
    params = dict(args.entflow_method_params or {})
    try:
        return get_method(name, **params)
    except EntflowError as e:
        key = "entflow_method_params" if params and "unknown method" not in str(e) else "entflow_method"
        raise ConfigError(key, str(e)) from e


def _part(method: Method, name: str) -> Method | None:
    return next((p for p in method.parts if p.name == name), None)


def check_compatibility(args: GRPOConfig, method: Method) -> None:
    """Refuse TRL options that would silently change or be silently ignored by ``method``.

    Each refusal is a :class:`ConfigError` naming the TRL field and saying what to use instead.
    """
    m = method.name

    def refuse(key: str, why: str) -> None:
        raise ConfigError(key, f"{why} (entflow_method={m!r})")

    if args.loss_type not in LOSS_TYPE_AGG:
        refuse(
            "loss_type",
            f"{args.loss_type!r} is not a PPO-clip loss; entflow methods act on PPO-clip. "
            f"Use one of {', '.join(LOSS_TYPE_AGG)}",
        )
    if args.importance_sampling_level != "token":
        refuse("importance_sampling_level", "entflow methods are token-level; use 'token'")
    if args.multi_objective_aggregation != "sum_then_normalize":
        refuse(
            "multi_objective_aggregation",
            "entflow builds advantages from the weighted reward sum ('sum_then_normalize') and its groups",
        )
    if args.scale_rewards not in SCALES:
        refuse("scale_rewards", f"must be one of {SCALES}, got {args.scale_rewards!r}")
    if args.top_entropy_quantile < 1.0:
        refuse(
            "top_entropy_quantile",
            f"TRL's high-entropy token mask is entflow's 'forking_tokens'; write "
            f"entflow_method='{m}+forking_tokens' with entflow_method_params={{'rho': {args.top_entropy_quantile}}} "
            "and leave top_entropy_quantile=1.0",
        )
    if args.entropy_coef != 0.0 or args.use_adaptive_entropy:
        key = "use_adaptive_entropy" if args.use_adaptive_entropy else "entropy_coef"
        refuse(
            key,
            "TRL's entropy bonus would be dropped by the entflow loss; use entflow's 'entropy_bonus' (c) or "
            "'adaptive_entropy' (target, delta, c_min, c_max) in entflow_method and leave entropy_coef=0, "
            "use_adaptive_entropy=False",
        )
    if args.off_policy_mask_threshold is not None:
        refuse("off_policy_mask_threshold", "the off-policy sequence mask is not supported with entflow methods")
    kl = _part(method, "kl_ref")
    if args.beta != 0.0 and kl is None:
        refuse(
            "beta",
            f"TRL's KL penalty is entflow's 'kl_ref'; write entflow_method='{m}+kl_ref' with "
            f"entflow_method_params={{'kl_ref.beta': {args.beta}}} and leave beta=0.0",
        )
    if kl is not None:
        if args.beta != 0.0 and args.beta != kl.beta:
            refuse("beta", f"is {args.beta} but kl_ref.beta is {kl.beta}; set only kl_ref.beta")
        if kl.beta == 0.0:
            raise ConfigError("entflow_method_params", "kl_ref with beta = 0 adds nothing; drop kl_ref")
        if args.use_bias_correction_kl:
            refuse(
                "use_bias_correction_kl",
                "entflow's kl_ref is GRPO's k3 without the importance ratio (docs/design.md §6); "
                "set use_bias_correction_kl=False",
            )
    bounds = method.clip_bounds()
    eps_high = args.epsilon if args.epsilon_high is None else args.epsilon_high
    if bounds is not None and (args.epsilon != 0.2 or eps_high != args.epsilon):
        key = "epsilon" if args.epsilon != 0.2 else "epsilon_high"
        refuse(
            key,
            f"the method sets the clip bounds (ε_low, ε_high) = {bounds}, so epsilon={args.epsilon}, "
            f"epsilon_high={args.epsilon_high} would be ignored; leave them at the default or drop the clip setter",
        )
    ga = args.gradient_accumulation_steps
    if (
        getattr(args, "entflow_global_stats", False)
        and ga > 1
        and (args.steps_per_generation * args.num_iterations) % ga
    ):
        refuse(
            "steps_per_generation",
            f"global statistics need every optimizer step's {ga} micro-batches generated before its first one, "
            f"so steps_per_generation × num_iterations = {args.steps_per_generation * args.num_iterations} must be a "
            f"multiple of gradient_accumulation_steps = {ga}; change it or set entflow_global_stats=False",
        )
    if args.delta is not None:
        clip_high = bounds[1] if bounds is not None else eps_high
        if not args.delta > 1 + clip_high:
            refuse(
                "delta",
                f"TRL's two-sided clip delta={args.delta} is entflow's dual clip only when delta > 1 + ε_high "
                f"= {1 + clip_high}",
            )


# --------------------------------------------------------------------------------------------
# The vLLM importance-sampling correction as a token weight
# --------------------------------------------------------------------------------------------


@dataclass(repr=False)
class _SamplerCorrection(Method):
    """TRL's vLLM importance-sampling ratio ρ (detached, ``[N, T]`` or ``[N, 1]``) as a token
    weight: ℓ_t ← ρ_t·ℓ_t, exactly where TRL applies it (not on the KL or entropy terms)."""

    name = "vllm_is_correction"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.ratio: torch.Tensor | None = None

    def token_weights(self, ctx):
        if self.ratio is None:
            return None
        return self.ratio.detach().to(ctx.adv.dtype).expand_as(ctx.adv)


# --------------------------------------------------------------------------------------------
# Trainer
# --------------------------------------------------------------------------------------------


def _no_grad_forward(fn):
    """Run a trainer method's extra forward without grad and without gradient checkpointing (as
    TRL does for its own old-log-prob pass)."""

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            return fn(self, *args, **kwargs)

    return wrapper


class EntflowGRPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` whose advantages and loss are entflow's (see the module docstring).

    Takes exactly ``GRPOTrainer``'s arguments; ``args`` must be an :class:`EntflowGRPOConfig`.
    The method object is ``trainer.entflow_method`` (its state: ``trainer.entflow_method.state_dict()``).
    """

    def __init__(self, model, reward_funcs, args: EntflowGRPOConfig | None = None, *rest: Any, **kwargs: Any):
        if args is None:
            name = model if isinstance(model, str) else model.config._name_or_path
            args = EntflowGRPOConfig(f"{str(name).split('/')[-1]}-GRPO")
        if not isinstance(args, EntflowGRPOConfig):
            raise ConfigError("args", f"EntflowGRPOTrainer needs an EntflowGRPOConfig, got {type(args).__name__}")
        self.entflow_method = build_method(args)  # before TRL loads anything: bad input fails here
        check_compatibility(args, self.entflow_method)
        super().__init__(model, reward_funcs, args, *rest, **kwargs)

        parts = self.entflow_method.parts
        self._ef_agg = LOSS_TYPE_AGG[self.loss_type]
        self._ef_stateful = any(p.overrides("update") for p in parts)
        self._ef_reads_entropy = any(p.reads_entropy for p in parts) or self._ef_stateful
        self._ef_tabular = any(p.params().get("estimator") == "tabular" for p in parts)
        shapers = [p for p in parts if p.overrides("shape_advantages")]
        self._ef_shaper_needs_rollout = any(p.name not in _SHAPERS_WITHOUT_ROLLOUT_STATS for p in shapers)
        # global statistics: over every micro-batch of an optimizer step on every process
        self._ef_world = self.accelerator.num_processes
        self._ef_global = self.args.entflow_global_stats and (
            self.args.gradient_accumulation_steps > 1 or self._ef_world > 1
        )
        with_stats = [p for p in parts if p.overrides("batch_statistics")]
        self._ef_stats_need_values = self._ef_global and any(p.name not in _STATS_WITHOUT_VALUES for p in with_stats)
        self._ef_stats: list | None = None
        self._ef_group = None
        if self._ef_global and self._ef_world > 1:
            import torch.distributed as dist

            self._ef_group = dist.group.WORLD
        # TRL computes old log-probs at generation time exactly when the policy may change between
        # generation and the last micro-batch that uses it (same rule as GRPOTrainer)
        generate_every = self.args.steps_per_generation * self.num_iterations
        self._ef_generate_every = generate_every
        self._ef_trl_old_logps = self.args.gradient_accumulation_steps % generate_every != 0 or (
            self.use_vllm and self.vllm_importance_sampling_correction
        )
        self._ef_is_correction = (
            _SamplerCorrection() if self.use_vllm and self.vllm_importance_sampling_correction else None
        )
        self._ef_loss_method = (
            self.entflow_method if self._ef_is_correction is None else Composite([*parts, self._ef_is_correction])
        )
        self._ef_capture = False
        self._ef_captured_entropy: torch.Tensor | None = None
        self._ef_rewards_per_func: torch.Tensor | None = None
        self._ef_gen_step = 0  # generation (rollout) steps whose update() has run
        self._ef_sums: dict[str, float] = defaultdict(float)
        self._ef_counts: dict[str, int] = defaultdict(int)
        self._ef_entropy_sum = 0.0
        self._ef_entropy_count = 0.0

    # ---------------------------------------------------------------------------------------
    # generation: rewards → entflow advantages; rollout statistics the method needs
    # ---------------------------------------------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._ef_rewards_per_func = rewards_per_func  # [N_global, n_funcs], gathered over processes
        return rewards_per_func

    def _get_per_token_logps_and_entropies(self, model, *args: Any, **kwargs: Any):
        if self._ef_capture and model is self.model and not torch.is_grad_enabled():
            # TRL's old-log-prob pass at generation time: take the entropy from the same pass
            self._ef_capture = False
            kwargs["compute_entropy"] = True
            logps, entropies, aux = super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
            self._ef_captured_entropy = entropies
            return logps, None, aux
        return super()._get_per_token_logps_and_entropies(model, *args, **kwargs)

    def _generate_and_score_completions(self, inputs):
        mode = "train" if self.model.training else "eval"
        self._ef_captured_entropy = None
        wants = self._ef_reads_entropy or self._ef_shaper_needs_rollout or self._ef_stats_need_values
        self._ef_capture = self._ef_trl_old_logps and wants
        try:
            out = super()._generate_and_score_completions(inputs)
        finally:
            self._ef_capture = False
        mask = out["completion_mask"] if "tool_mask" not in out else out["completion_mask"] * out["tool_mask"]

        old_entropy = self._ef_captured_entropy
        if self._ef_tabular:
            stats = self._ef_rollout_token_stats(out)
            out["old_per_token_logps"] = stats.logp
            old_entropy = stats.entropy
            out["ef_sum_p2"], out["ef_sum_p2_logp"] = stats.sum_p2, stats.sum_p2_logp
        elif (self._ef_shaper_needs_rollout or self._ef_stats_need_values) and "old_per_token_logps" not in out:
            # the rollout values are needed before the first loss call (shaping, global statistics)
            logps, entropies = self._ef_rollout_logps(out)
            out["old_per_token_logps"] = logps
            old_entropy = entropies
        if old_entropy is not None:
            out["ef_old_entropy"] = old_entropy

        adv = self._ef_advantages(out, mask, mode)
        out["advantages"] = adv
        self._ef_rewards_per_func = None
        return out

    def _ef_forward_inputs(self, out: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, int, dict[str, Any]]:
        input_ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        attention_mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        extra = {
            k: out[k]
            for k in (
                "pixel_values",
                "image_grid_thw",
                "num_images",
                "pixel_attention_mask",
                "spatial_shapes",
                "num_tiles",
                "image_sizes",
                "token_type_ids",
                "mm_token_type_ids",
                "image_position_ids",
            )
            if out.get(k) is not None
        }
        return input_ids, attention_mask, out["completion_ids"].size(1), extra

    @_no_grad_forward
    def _ef_rollout_logps(self, out: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs and entropies of the generation batch under the current (= rollout) policy."""
        input_ids, attention_mask, keep, extra = self._ef_forward_inputs(out)
        bs = self.args.per_device_train_batch_size if self.model.training else self.args.per_device_eval_batch_size
        logps, entropies, _ = super()._get_per_token_logps_and_entropies(
            self.model, input_ids, attention_mask, keep, batch_size=bs, compute_entropy=True, **extra
        )
        return logps, entropies

    @_no_grad_forward
    def _ef_rollout_token_stats(self, out: dict[str, Any]):
        """logp, entropy, Σπ², Σπ² log π of the generation batch (full-vocabulary softmax, chunked)."""
        input_ids, attention_mask, keep, extra = self._ef_forward_inputs(out)
        if extra:
            raise ConfigError("entflow_method", "the tabular estimator is not supported with multimodal inputs")
        bs = self.args.per_device_train_batch_size if self.model.training else self.args.per_device_eval_batch_size
        rows = []
        completion_ids = out["completion_ids"]
        for start in range(0, input_ids.size(0), bs):
            sl = slice(start, start + bs)
            with self.accelerator.autocast():
                logits = self.model(
                    input_ids=input_ids[sl], attention_mask=attention_mask[sl], logits_to_keep=keep + 1
                ).logits[:, :-1]
            rows.append(token_stats(logits.float(), completion_ids[sl], self.temperature, self.args.entflow_chunk_size))
        return type(rows[0])(*(torch.cat([getattr(r, f) for r in rows]) for f in rows[0]._fields))

    def _ef_advantages(self, out: dict[str, Any], mask: torch.Tensor, mode: str) -> torch.Tensor:
        """entflow advantages ``[B_local, T]`` from the rewards of the whole (all-process) batch."""
        rpf = self._ef_rewards_per_func
        device = mask.device
        rewards = (rpf * self.reward_weights.to(rpf.device).unsqueeze(0)).nansum(dim=1)
        unscorable = torch.isnan(rpf).all(dim=1)  # every reward function returned None
        n_global = rewards.shape[0]
        G = self.num_generations if mode == "train" else self.num_generations_eval
        group = torch.arange(n_global, device=rewards.device) // G
        # an unscorable completion leaves its group's baseline alone and gets advantage 0 (as TRL)
        group = torch.where(unscorable, n_global + torch.arange(n_global, device=rewards.device), group)
        rewards = rewards.masked_fill(unscorable, 0.0)

        local_n = mask.shape[0]
        rank = self.accelerator.process_index
        fields = {"mask": mask}
        for k_out, k_batch in (
            ("old_per_token_logps", "old_logp"),
            ("ef_old_entropy", "old_entropy"),
            ("ef_sum_p2", "sum_p2"),
            ("ef_sum_p2_logp", "sum_p2_logp"),
        ):
            if k_out in out:
                fields[k_batch] = out[k_out]
        if self.accelerator.num_processes > 1:
            fields = {
                k: self.accelerator.gather(self.accelerator.pad_across_processes(v, dim=1, pad_index=0))
                for k, v in fields.items()
            }
        gmask = fields.pop("mask")
        placeholder = torch.zeros(gmask.shape, dtype=torch.float32, device=device)
        old_logp = fields.pop("old_logp", placeholder)
        batch = TokenBatch(
            logp=old_logp,
            old_logp=old_logp,
            advantages=None,
            mask=gmask,
            rewards=rewards.to(device),
            group_index=group.to(device),
            step=self._ef_gen_step,
            total_steps=self._ef_total_gen_steps(),
            **fields,
        )
        adv = compute_advantages(
            batch, self.entflow_method, scale=self.scale_rewards, eps=self.args.entflow_advantage_eps
        )
        adv = adv.masked_fill(unscorable.to(device).unsqueeze(1), 0.0)
        adv = adv[rank * local_n : (rank + 1) * local_n, : mask.shape[1]]
        self._ef_log_advantages(adv, gmask[rank * local_n : (rank + 1) * local_n, : mask.shape[1]], n_global)
        return adv

    def _ef_log_advantages(self, adv: torch.Tensor, mask: torch.Tensor, n_global: int) -> None:
        """Put entflow's per-completion advantages (token mean) into TRL's completions table."""
        log = self._logs["advantages"]
        seq = (adv * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        seq = self.accelerator.gather(seq) if self.accelerator.num_processes > 1 else seq
        for _ in range(min(n_global, len(log))):
            log.pop()
        log.extend(seq.tolist())

    def _ef_total_gen_steps(self) -> int | None:
        max_steps = getattr(self.state, "max_steps", 0) or 0
        if max_steps <= 0:
            return None
        return max(1, math.ceil(max_steps * self.args.gradient_accumulation_steps / self._ef_generate_every))

    # ---------------------------------------------------------------------------------------
    # loss
    # ---------------------------------------------------------------------------------------

    def _compute_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        ga = self.args.gradient_accumulation_steps
        use_stats = mode == "train" and self._ef_global and self.current_gradient_accumulation_steps == ga
        if use_stats and self._step % ga == 0:  # first micro-batch of an optimizer step
            self._ef_stats = self._ef_step_statistics()
        input_ids, attention_mask, keep, extra = self._ef_forward_inputs(inputs)
        logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            keep,
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            **extra,
        )
        if self._ef_is_correction is not None:
            self._ef_is_correction.ratio = inputs["importance_sampling_ratio"]
        batch = self._ef_token_batch(inputs, logps, entropies)
        clip = (self.epsilon_low, self.epsilon_high, self.args.delta)
        if use_stats:
            # statistics and denominators of the whole optimizer step on all processes: the summed
            # micro-batch losses are the full-batch loss; DDP averages gradients over processes
            stats = self._ef_stats[self._step % ga]
            out = policy_loss(batch, self._ef_loss_method, *clip, self._ef_agg, self._ef_max_len, stats=stats)
            loss = out.loss * self._ef_world
        else:
            out = policy_loss(batch, self._ef_loss_method, *clip, self._ef_agg, self._ef_max_len)
            loss = out.loss * self._ef_loss_scale(batch.mask, inputs, mode)

        if self.aux_loss_enabled:  # MoE load balancing, scaled as TRL does
            norm = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            loss = loss + self.router_aux_loss_coef * aux_loss / norm
            self._metrics[mode]["aux_loss"].append(self.accelerator.gather_for_metrics(aux_loss).mean().item())

        self._ef_log_metrics(out.metrics, batch, mode)
        if mode == "train":
            self._ef_after_micro_batch(out.metrics, batch)
        return loss

    @property
    def _ef_max_len(self) -> int | None:
        """Dr. GRPO's constant: TRL normalises by ``max_completion_length``, not the padded length."""
        return self.max_completion_length if self._ef_agg == "seq-mean-token-sum-norm" else None

    def _ef_token_batch(
        self, inputs: dict[str, Any], logp: torch.Tensor, entropy: torch.Tensor, rollout_entropy: bool = True
    ) -> TokenBatch:
        """The micro-batch ``inputs`` as a :class:`TokenBatch` with log-probs ``logp`` ``[B, T]``.

        ``old_logp``: TRL's (or the rollout pass's) when computed, else ``logp`` detached (no
        optimizer step since generation). ``old_entropy``: read once per generation batch, or
        the current entropy under the same condition (``rollout_entropy``).
        """
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        old_logp = inputs.get("old_per_token_logps")
        old_logp = logp.detach() if old_logp is None else old_logp
        old_entropy = inputs.get("ef_old_entropy")
        if old_entropy is None and not self._ef_trl_old_logps and rollout_entropy:
            old_entropy = entropy.detach()  # no optimizer step since generation: this is the rollout entropy
        fields = dict(
            logp=logp,
            old_logp=old_logp,
            advantages=inputs["advantages"],
            mask=mask,
            entropy=entropy,
            old_entropy=old_entropy,
            ref_logp=inputs.get("ref_per_token_logps"),
            sum_p2=inputs.get("ef_sum_p2"),
            sum_p2_logp=inputs.get("ef_sum_p2_logp"),
        )
        max_len = self._ef_max_len
        if max_len is not None and mask.shape[1] > max_len:  # padded past the limit (pad_to_multiple_of)
            if bool(mask[:, max_len:].any()):
                raise ConfigError("max_completion_length", f"completions longer than {max_len} tokens reached the loss")
            fields = {k: None if v is None else v[:, :max_len] for k, v in fields.items()}
        return TokenBatch(**fields, step=self._ef_gen_step, total_steps=self._ef_total_gen_steps(), validate=False)

    def _ef_step_statistics(self) -> list:
        """:func:`entflow.prepare_statistics` over this optimizer step's micro-batches.

        The log-prob values are those the loss will see: the rollout's on the first optimizer
        step after a generation (no update since), else one no-grad forward of the current policy
        (only when the method's statistics read log-probs).
        """
        ga, spg = self.args.gradient_accumulation_steps, self.args.steps_per_generation
        first_of_cycle = (self._step % self._ef_generate_every) < ga
        micro = []
        for j in range(ga):
            inputs = self._buffered_inputs[(self._step + j) % spg]
            old = inputs.get("old_per_token_logps")
            if old is None:
                values = torch.zeros_like(inputs["completion_mask"], dtype=torch.float32)
                inputs = {**inputs, "old_per_token_logps": values}  # the statistics read masks only
            elif first_of_cycle or not self._ef_stats_need_values:
                values = old
            else:
                values = self._ef_current_logps(inputs)
            # ``entropy`` only has to be present (hooks that need it with grad run in the loss); the
            # statistics read H as old_entropy, which is there whenever a statistic reads entropies
            h = inputs.get("ef_old_entropy")
            h = torch.zeros_like(values) if h is None else h
            micro.append(self._ef_token_batch(inputs, values, h, rollout_entropy=False))
        clip = (self.epsilon_low, self.epsilon_high, self.args.delta)
        return prepare_statistics(micro, self._ef_loss_method, *clip, self._ef_agg, self._ef_max_len, self._ef_group)

    @_no_grad_forward
    def _ef_current_logps(self, inputs: dict[str, Any]) -> torch.Tensor:
        input_ids, attention_mask, keep, extra = self._ef_forward_inputs(inputs)
        logps, _, _ = super()._get_per_token_logps_and_entropies(self.model, input_ids, attention_mask, keep, **extra)
        return logps

    def _ef_loss_scale(self, mask: torch.Tensor, inputs: dict[str, Any], mode: str) -> float | torch.Tensor:
        """Per-call mode: the factor from ``policy_loss`` (one micro-batch) to TRL's loss.

        TRL's trainer sums micro-batch gradients over gradient accumulation and averages over
        processes. ``dapo``: token mean over TRL's normaliser (the generation batch's token count
        per optimizer step, all processes); ``grpo`` / ``dr_grpo`` / ``bnpo``: the micro-batch
        value divided by the accumulation steps.
        """
        ga = self.current_gradient_accumulation_steps if mode == "train" else 1
        if self.loss_type != "dapo":
            return 1.0 / ga
        normaliser = inputs["num_items_in_batch"].clamp(min=1.0) / self._ef_world
        if mode == "train":
            normaliser = normaliser * ga / self.args.steps_per_generation
        return mask.sum() / normaliser

    # ---------------------------------------------------------------------------------------
    # metrics and the controller update
    # ---------------------------------------------------------------------------------------

    def _ef_log_metrics(self, metrics: dict[str, float], batch: TokenBatch, mode: str) -> None:
        named = {}
        for k, v in metrics.items():
            if k in _NOT_LOGGED or v is None:
                continue
            named[TRL_METRIC_NAMES.get(k, k)] = float(v)
        if "clip_ratio/high_mean" in named:
            named["clip_ratio/region_mean"] = named["clip_ratio/high_mean"] + named["clip_ratio/low_mean"]
        named.update(self._ef_seq_clip_extremes(batch))
        named = self._ef_process_mean(named)
        for k, v in named.items():
            self._metrics[mode][k].append(v)

    def _ef_seq_clip_extremes(self, batch: TokenBatch) -> dict[str, float]:
        """TRL's ``clip_ratio/low_min`` and ``clip_ratio/high_max``: per-completion clip fractions."""
        lo, hi = self._ef_loss_method.clip_bounds() or (self.epsilon_low, self.epsilon_high)
        valid = batch.valid
        adv = batch.token_advantages()
        r = torch.exp(batch.logp.detach() - batch.old_logp.detach())
        m = valid.float()
        n = m.sum(-1).clamp(min=1)
        low = (((r < 1 - lo) & (adv < 0) & valid).float().sum(-1) / n).detach()
        high = (((r > 1 + hi) & (adv > 0) & valid).float().sum(-1) / n).detach()
        if self.accelerator.num_processes > 1:
            low, high = self.accelerator.gather(low), self.accelerator.gather(high)
        return {"clip_ratio/low_min": float(low.min()), "clip_ratio/high_max": float(high.max())}

    def _ef_process_mean(self, values: dict[str, float]) -> dict[str, float]:
        """Mean of each value over processes (keys missing on a process are left out of its mean)."""
        if self.accelerator.num_processes == 1:
            return values
        from accelerate.utils import gather_object

        keys = sorted(set(gather_object(list(values))))
        local = torch.tensor(
            [[values.get(k, 0.0), float(k in values)] for k in keys],
            dtype=torch.float64,
            device=self.accelerator.device,
        )
        total = self.accelerator.reduce(local, reduction="sum")
        return {k: float(total[i, 0] / total[i, 1].clamp(min=1)) for i, k in enumerate(keys)}

    def _ef_after_micro_batch(self, metrics: dict[str, float], batch: TokenBatch) -> None:
        """Accumulate the generation step's metrics; at its last micro-batch, run ``update``."""
        for k, v in metrics.items():
            if v is not None and not math.isnan(v):
                self._ef_sums[k] += float(v)
                self._ef_counts[k] += 1
        pos = self._step % self._ef_generate_every  # micro-step within this generation's cycle
        if pos < self.args.steps_per_generation:  # first pass over the generation batch
            h = batch.entropy_for_reading("controller entropy")
            self._ef_entropy_sum += float((h * batch.mask).sum())
            self._ef_entropy_count += float(batch.mask.sum())
        if pos != self._ef_generate_every - 1:
            return
        step_metrics = {k: self._ef_sums[k] / self._ef_counts[k] for k in self._ef_sums}
        step_metrics = self._ef_process_mean(step_metrics)
        h = torch.tensor(
            [self._ef_entropy_sum, self._ef_entropy_count], dtype=torch.float64, device=self.accelerator.device
        )
        if self.accelerator.num_processes > 1:
            h = self.accelerator.reduce(h, reduction="sum")
        step_metrics["entropy"] = float(h[0] / h[1].clamp(min=1))  # rollout entropy, all tokens, all processes
        step_metrics["step"] = self._ef_gen_step
        self.entflow_method.update(step_metrics)
        self._ef_gen_step += 1
        self._ef_sums.clear()
        self._ef_counts.clear()
        self._ef_entropy_sum = self._ef_entropy_count = 0.0

    # ---------------------------------------------------------------------------------------
    # checkpoints
    # ---------------------------------------------------------------------------------------

    def _ef_state_path(self, checkpoint_dir: str) -> str:
        if self.accelerator.num_processes == 1:
            return os.path.join(checkpoint_dir, STATE_FILE)
        return os.path.join(checkpoint_dir, STATE_FILE.replace(".pt", f"_{self.accelerator.process_index}.pt"))

    def entflow_state_dict(self) -> dict[str, Any]:
        """What a checkpoint stores: the method's state and the generation-step counter."""
        return {
            "method": self.entflow_method.name,
            "method_state": self.entflow_method.state_dict(),
            "gen_step": self._ef_gen_step,
        }

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        os.makedirs(folder, exist_ok=True)
        torch.save(self.entflow_state_dict(), self._ef_state_path(folder))

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = self._ef_state_path(checkpoint)
        if not os.path.exists(path):
            if any(p.state_fields or p.overrides("state_dict") for p in self.entflow_method.parts):
                raise ConfigError(
                    "resume_from_checkpoint",
                    f"{checkpoint} has no {os.path.basename(path)} (not saved by EntflowGRPOTrainer), so the state of "
                    f"{self.entflow_method.name!r} cannot be restored",
                )
            warnings.warn(
                f"{checkpoint} has no {os.path.basename(path)}; {self.entflow_method.name!r} has no state to restore, "
                "the generation-step counter restarts at 0",
                stacklevel=2,
            )
            return
        state = torch.load(path, weights_only=True)
        if state["method"] != self.entflow_method.name:
            raise ConfigError(
                "entflow_method",
                f"is {self.entflow_method.name!r} but the checkpoint {checkpoint} was trained with {state['method']!r}",
            )
        self.entflow_method.load_state_dict(state["method_state"])
        self._ef_gen_step = int(state["gen_step"])
