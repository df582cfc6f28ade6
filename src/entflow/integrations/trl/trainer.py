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

What to compute for the method (rollout entropy, rollout log-probs before the advantages, the
tabular statistics, values for global statistics, checkpointed state) is read from its
:class:`~entflow.methods.needs.MethodNeeds`. The hooks below are thin: the work is in
``loss.py`` (batches, rollout statistics, the loss), ``metrics.py`` (TRL's names, the controller's
step metrics) and ``compat.py`` (TRL's internals).
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

import torch
from trl import GRPOConfig, GRPOTrainer

from entflow.core.batch import TokenBatch
from entflow.core.distributed import StepStatistics
from entflow.core.ppo import LossSpec
from entflow.errors import ConfigError, MissingInputError
from entflow.integrations.trl.compat import (
    check_trl_attributes,
    check_trl_hooks,
    completion_mask,
    forward_inputs,
    no_grad_forward,
    trl_computes_old_logps,
)
from entflow.integrations.trl.config import (
    LOSS_TYPE_AGG,
    EntflowGRPOConfig,
    build_method,
    check_compatibility,
    from_trl_config,
    trl_computes_update,
)
from entflow.integrations.trl.loss import (
    ROLLOUT_KEYS,
    advantage_batch,
    loss_scale,
    rollout_token_stats,
    scored_rewards,
    step_segment,
    token_batch,
    trl_loss,
)
from entflow.integrations.trl.metrics import (
    GenerationStepMetrics,
    process_mean,
    sequence_clip_fractions,
    trl_named,
)
from entflow.methods.needs import needs_of
from entflow.methods.objective import compute_advantages, prepare_statistics

STATE_FILE = "entflow_state.pt"  # per checkpoint; ``entflow_state_{rank}.pt`` with several processes


class EntflowGRPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` whose advantages and loss are entflow's (see the module docstring).

    Takes exactly ``GRPOTrainer``'s arguments; ``args`` is an :class:`EntflowGRPOConfig` or a plain
    ``trl.GRPOConfig`` (= ``entflow_method="grpo"`` with entflow's defaults). A TRL whose overridden
    hooks or read attributes differ from those the adapter knows (``compat.TRL_HOOKS``,
    ``compat.TRL_ATTRIBUTES``) is refused here with :class:`~entflow.errors.UnsupportedVersionError`.
    The method object is ``trainer.entflow_method`` (its state: ``trainer.entflow_method.state_dict()``).
    """

    def __init__(
        self, model, reward_funcs=None, args: EntflowGRPOConfig | GRPOConfig | None = None, *rest: Any, **kwargs: Any
    ):
        check_trl_hooks(type(self), EntflowGRPOTrainer)  # before anything is loaded: a TRL it cannot run fails here
        if args is None:
            name = model if isinstance(model, str) else getattr(model.config, "_name_or_path", "model")
            args = EntflowGRPOConfig(f"{str(name).split('/')[-1]}-GRPO")
        args = from_trl_config(args)  # a plain trl.GRPOConfig means entflow_method="grpo"
        self.entflow_method = build_method(args)  # before TRL loads anything: bad input fails here
        check_compatibility(args, self.entflow_method)
        super().__init__(model, reward_funcs, args, *rest, **kwargs)
        check_trl_attributes(self)

        needs = self.entflow_needs = needs_of(self.entflow_method)
        if needs.rollout_logp and not (self.use_vllm or self.rollout_func is not None):
            raise MissingInputError(
                "rollout_logp",
                f"entflow_method={self.entflow_method.name!r} (a rollout–training mismatch correction): TRL gives the "
                "sampler's log-probs of the drawn tokens only when vLLM generates (use_vllm=True) or a rollout_func "
                "returns them",
            )
        # grpo with a TRL-only option (loss types, sequence-level ratios, KL, entropy bonus or mask, ...):
        # advantages and loss are TRL's own, so the update is exactly TRL's
        self._ef_trl_update = trl_computes_update(self.args, self.entflow_method)
        self._ef_agg = LOSS_TYPE_AGG.get(self.loss_type, "token-mean")
        # global statistics: over every micro-batch of an optimizer step on every process
        self._ef_world = self.accelerator.num_processes
        # (a method without batch statistics, e.g. grpo, normalises each micro-batch as TRL does)
        has_statistics = any(p.overrides("batch_statistics") for p in self.entflow_method.parts)
        self._ef_global = (
            self.args.entflow_global_stats
            and has_statistics
            and (self.args.gradient_accumulation_steps > 1 or self._ef_world > 1)
        )
        self._ef_stats_need_values = self._ef_global and needs.statistics_read_values
        self._ef_stats: list[StepStatistics] | None = None
        self._ef_group = None
        if self._ef_global and self._ef_world > 1:
            import torch.distributed as dist

            self._ef_group = dist.group.WORLD
        self._ef_generate_every = self.args.steps_per_generation * self.num_iterations
        is_correction = self.use_vllm and self.vllm_importance_sampling_correction
        self._ef_trl_old_logps = trl_computes_old_logps(
            self.args.gradient_accumulation_steps, self._ef_generate_every, self.use_vllm, is_correction
        )
        # TRL's vLLM importance-sampling ratio weights the policy-gradient term (policy_loss's token_weights)
        self._ef_is_correction = is_correction
        self._ef_capture = False
        self._ef_captured_entropy: torch.Tensor | None = None
        self._ef_rewards_per_func: torch.Tensor | None = None
        self._ef_gen_step = 0  # generation (rollout) steps whose update() has run
        self._ef_step_metrics = GenerationStepMetrics()

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
        if self._ef_trl_update:
            return super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        needs = self.entflow_needs
        rollout_before_loss = bool(needs.rollout_stats) or self._ef_stats_need_values
        self._ef_captured_entropy = None
        self._ef_capture = self._ef_trl_old_logps and (needs.rollout_entropy or rollout_before_loss)
        try:
            out = super()._generate_and_score_completions(inputs)
        finally:
            self._ef_capture = False

        old_entropy = self._ef_captured_entropy
        if needs.tabular or "sum_p2" in needs.rollout_stats:  # Σπ²: tabular estimator, optimal_token_baseline
            stats = self._ef_rollout_token_stats(out)
            out["old_per_token_logps"] = stats.logp
            old_entropy = stats.entropy
            out["ef_sum_p2"], out["ef_sum_p2_logp"] = stats.sum_p2, stats.sum_p2_logp
        elif rollout_before_loss and "old_per_token_logps" not in out:
            # the rollout values are needed before the first loss call (shaping, global statistics)
            out["old_per_token_logps"], old_entropy = self._ef_rollout_logps(out)
        if old_entropy is not None:
            out["ef_old_entropy"] = old_entropy

        out["advantages"] = self._ef_advantages(out, completion_mask(out), mode)
        self._ef_rewards_per_func = None
        return out

    def _ef_batch_size(self) -> int:
        return self.args.per_device_train_batch_size if self.model.training else self.args.per_device_eval_batch_size

    @no_grad_forward
    def _ef_rollout_logps(self, out: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs and entropies of the generation batch under the current (= rollout) policy."""
        input_ids, attention_mask, keep, extra = forward_inputs(out)
        logps, entropies, _ = super()._get_per_token_logps_and_entropies(
            self.model, input_ids, attention_mask, keep, batch_size=self._ef_batch_size(), compute_entropy=True, **extra
        )
        return logps, entropies

    @no_grad_forward
    def _ef_rollout_token_stats(self, out: dict[str, Any]):
        return rollout_token_stats(
            self.model,
            out,
            self.temperature,
            self._ef_batch_size(),
            self.args.entflow_chunk_size,
            self.accelerator.autocast,
        )

    def _ef_advantages(self, out: dict[str, Any], mask: torch.Tensor, mode: str) -> torch.Tensor:
        """entflow advantages ``[B_local, T]`` from the rewards of the whole (all-process) batch."""
        G = self.num_generations if mode == "train" else self.num_generations_eval
        rewards, group, unscorable = scored_rewards(self._ef_rewards_per_func, self.reward_weights, G)
        fields = {"mask": mask, **{field: out[key] for key, field in ROLLOUT_KEYS.items() if key in out}}
        if self.accelerator.num_processes > 1:
            fields = {
                k: self.accelerator.gather(self.accelerator.pad_across_processes(v, dim=1, pad_index=0))
                for k, v in fields.items()
            }
        gmask = fields.pop("mask")
        batch = advantage_batch(gmask, fields, rewards, group, self._ef_gen_step, self._ef_total_gen_steps())
        adv = compute_advantages(
            batch, self.entflow_method, scale=self.scale_rewards, eps=self.args.entflow_advantage_eps
        )
        adv = adv.masked_fill(unscorable.to(mask.device).unsqueeze(1), 0.0)  # as TRL: no signal, no gradient
        local_n, rank = mask.shape[0], self.accelerator.process_index
        rows = slice(rank * local_n, (rank + 1) * local_n)
        adv = adv[rows, : mask.shape[1]]
        self._ef_log_advantages(adv, gmask[rows, : mask.shape[1]], rewards.shape[0])
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
        if self._ef_trl_update:
            return super()._compute_loss(model, inputs)
        mode = "train" if self.model.training else "eval"
        ga = self.args.gradient_accumulation_steps
        # transformers sets current_gradient_accumulation_steps only inside the training loop: an
        # evaluation before the first step (eval_on_start, evaluate()) has none, and accumulates nothing
        ga_now = self.current_gradient_accumulation_steps if mode == "train" else 1
        use_stats = mode == "train" and self._ef_global and ga_now == ga
        if use_stats:
            segment = self._ef_segment()
            if self._step == segment.start:  # first micro-batch of the segment
                self._ef_stats = self._ef_step_statistics(segment)
        input_ids, attention_mask, keep, extra = forward_inputs(inputs)
        logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            keep,
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            **extra,
        )
        batch = self._ef_token_batch(inputs, logps, entropies)
        weights = inputs["importance_sampling_ratio"] if self._ef_is_correction else None
        # TRL's off-policy sequence mask and high-entropy token mask, on the policy-gradient term as TRL applies them
        off_policy_mask, entropy_mask = self._ef_trl_token_masks(inputs, logps, entropies)
        for m in (off_policy_mask, entropy_mask):
            if m is not None:
                m = m[:, : batch.mask.shape[1]]
                weights = m if weights is None else weights * m
        if use_stats:
            # each segment's summed losses are its full loss; the segments share the step by micro-batches
            stats = self._ef_stats[self._step - segment.start]
            scale = self._ef_world * len(segment) / ga
        else:
            stats = None
            scale = loss_scale(
                batch.mask,
                inputs.get("num_items_in_batch"),
                self.loss_type,
                ga_now,
                self._ef_world,
                self.args.steps_per_generation,
                train=mode == "train",
            )
        loss, out = trl_loss(batch, self.entflow_method, self._ef_loss_spec, scale, stats, token_weights=weights)
        if getattr(self, "_entropy_bonus_enabled", False):  # TRL's entropy_coef / use_adaptive_entropy
            loss = loss - self._ef_trl_entropy_bonus(entropies, completion_mask(inputs), entropy_mask, ga_now, mode)

        if self.aux_loss_enabled:  # MoE load balancing, scaled as TRL does
            loss = loss + self.router_aux_loss_coef * aux_loss / ga_now
            self._metrics[mode]["aux_loss"].append(self.accelerator.gather_for_metrics(aux_loss).mean().item())

        self._ef_log_metrics(out.metrics, batch, mode)
        if mode == "train":
            self._ef_after_micro_batch(out.metrics, batch)
        return loss

    def _ef_trl_token_masks(
        self, inputs: dict[str, Any], logps: torch.Tensor, entropies: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """TRL's ``off_policy_mask_threshold`` mask ``[B, 1]`` and its ``top_entropy_quantile`` mask
        ``[B, T]`` (each None when off), computed by TRL's own ``get_off_policy_mask`` and
        ``get_high_entropy_mask``."""
        mask = completion_mask(inputs)
        off_policy = high = None
        threshold = getattr(self, "off_policy_mask_threshold", None)
        if threshold is not None:
            adv = inputs["advantages"]
            old = inputs.get("old_per_token_logps")
            old = logps.detach() if old is None else old
            off_policy = self.get_off_policy_mask(
                advantages=adv.unsqueeze(1) if adv.dim() == 1 else adv,
                per_token_logps=logps,
                sampling_per_token_logps=inputs.get("sampling_per_token_logps", old),
                mask=mask,
                off_policy_threshold=threshold,
            )
        quantile = getattr(self, "top_entropy_quantile", 1.0)
        if quantile < 1.0:
            high = self.get_high_entropy_mask(entropies.detach(), mask, 1 - quantile).to(mask.dtype)
        return off_policy, high

    def _ef_trl_entropy_bonus(
        self,
        entropies: torch.Tensor,
        mask: torch.Tensor,
        token_mask: torch.Tensor | None,
        accumulation: int,
        mode: str,
    ) -> torch.Tensor:
        """TRL's entropy bonus ``coef · H̄`` (its documented objective ``L_policy − coef·H``): ``H̄`` the
        mean entropy ``[B, T]`` over the tokens the policy term acts on, divided by the accumulation
        steps (1 in eval). With ``use_adaptive_entropy`` the coefficient applies only while the last
        optimizer step's entropy was at most ``entropy_target``, and after each optimizer step moves
        by ``entropy_coef_delta`` towards more bonus below the target, less above, within
        [``entropy_coef_min``, ``entropy_coef_max``]; the state is TRL's own (``self.entropy_coef``)."""
        args = self.args
        eff = mask if token_mask is None else mask * token_mask[:, : mask.shape[1]]
        eff = eff.to(entropies.dtype)
        mean_h = (entropies * eff).sum() / eff.sum().clamp(min=1.0) / accumulation
        on = not self.use_adaptive_entropy or self._last_world_entropy <= args.entropy_target
        bonus = (self.entropy_coef if on else 0.0) * mean_h
        if self.use_adaptive_entropy and mode == "train":
            window = torch.stack([(entropies * eff).sum(), eff.sum()]).detach()
            prev = self._entropy_window_stats
            self._entropy_window_stats = window if prev is None else prev + window
            if self.accelerator.sync_gradients:  # last micro-batch of the optimizer step
                total = self.accelerator.reduce(self._entropy_window_stats, reduction="sum")
                h = float(total[0] / total[1].clamp(min=1.0))
                step = args.entropy_coef_delta if h <= args.entropy_target else -args.entropy_coef_delta
                self.entropy_coef = min(max(self.entropy_coef + step, args.entropy_coef_min), args.entropy_coef_max)
                self._last_world_entropy = h
                self._entropy_window_stats = None
        if mode == "train" and self.accelerator.sync_gradients:
            self._metrics[mode]["entropy_coef"].append(self.entropy_coef)
        return bonus

    @property
    def _ef_max_len(self) -> int | None:
        """Dr. GRPO's constant: TRL normalises by ``max_completion_length``, not the padded length."""
        return self.max_completion_length if self._ef_agg == "seq-mean-token-sum-norm" else None

    @property
    def _ef_loss_spec(self) -> LossSpec:
        """The loss settings TRL's own loss uses: ε_low, ε_high, ``delta`` (dual clip), the aggregation."""
        return LossSpec(self.epsilon_low, self.epsilon_high, self.args.delta, self._ef_agg, self._ef_max_len)

    def _ef_token_batch(
        self, inputs: dict[str, Any], logp: torch.Tensor, entropy: torch.Tensor, rollout_entropy: bool = True
    ) -> TokenBatch:
        """:func:`~entflow.integrations.trl.loss.token_batch`; ``entropy`` is the rollout's when
        TRL kept no old log-probs (no optimizer step since generation) and ``rollout_entropy``."""
        return token_batch(
            inputs,
            logp,
            entropy,
            entropy_is_rollout=rollout_entropy and not self._ef_trl_old_logps,
            max_len=self._ef_max_len,
            step=self._ef_gen_step,
            total_steps=self._ef_total_gen_steps(),
        )

    def _ef_segment(self) -> range:
        """:func:`~entflow.integrations.trl.loss.step_segment` of the current micro-step: global
        statistics are computed over what the optimizer step sees of one generation batch, and
        each segment's loss is weighted by its share of the step's micro-batches
        (docs/integrations.md, "Global statistics")."""
        return step_segment(self._step, self.args.gradient_accumulation_steps, self._ef_generate_every)

    def _ef_step_statistics(self, segment: range) -> list[StepStatistics]:
        """:func:`entflow.prepare_statistics` over the micro-batches of ``segment`` (micro-steps).

        The log-prob values are those the loss will see: the rollout's when no optimizer step
        ran since the generation, else one no-grad forward of the current policy (only when the
        method's statistics read log-probs).
        """
        ga, spg = self.args.gradient_accumulation_steps, self.args.steps_per_generation
        s = segment.start
        no_step_since_generation = s - s % ga <= s - s % self._ef_generate_every
        micro = []
        for j in segment:
            inputs = self._buffered_inputs[j % spg]
            old = inputs.get("old_per_token_logps")
            if old is None:
                values = torch.zeros_like(inputs["completion_mask"], dtype=torch.float32)
                inputs = {**inputs, "old_per_token_logps": values}  # the statistics read masks only
            elif no_step_since_generation or not self._ef_stats_need_values:
                values = old
            else:
                values = self._ef_current_logps(inputs)
            # ``entropy`` only has to be present (hooks that need it with grad run in the loss); the
            # statistics read H as old_entropy, which is there whenever a statistic reads entropies
            h = inputs.get("ef_old_entropy")
            h = torch.zeros_like(values) if h is None else h
            micro.append(self._ef_token_batch(inputs, values, h, rollout_entropy=False))
        return prepare_statistics(micro, self.entflow_method, self._ef_loss_spec, self._ef_group)

    @no_grad_forward
    def _ef_current_logps(self, inputs: dict[str, Any]) -> torch.Tensor:
        input_ids, attention_mask, keep, extra = forward_inputs(inputs)
        logps, _, _ = super()._get_per_token_logps_and_entropies(self.model, input_ids, attention_mask, keep, **extra)
        return logps

    # ---------------------------------------------------------------------------------------
    # metrics and the controller update
    # ---------------------------------------------------------------------------------------

    def _ef_log_metrics(self, metrics: dict[str, float], batch: TokenBatch, mode: str) -> None:
        named = trl_named(metrics)
        lo, hi = self.entflow_method.clip_bounds() or (self.epsilon_low, self.epsilon_high)
        low, high = sequence_clip_fractions(batch, lo, hi)
        if self.accelerator.num_processes > 1:
            low, high = self.accelerator.gather(low), self.accelerator.gather(high)
        named.update({"clip_ratio/low_min": float(low.min()), "clip_ratio/high_max": float(high.max())})
        for k, v in process_mean(named, self.accelerator).items():
            self._metrics[mode][k].append(v)

    def _ef_after_micro_batch(self, metrics: dict[str, float], batch: TokenBatch) -> None:
        """Accumulate the generation step's metrics; at its last micro-batch, run ``update``."""
        pos = self._step % self._ef_generate_every  # micro-step within this generation's cycle
        self._ef_step_metrics.add(metrics, batch, first_pass=pos < self.args.steps_per_generation)
        if pos != self._ef_generate_every - 1:
            return
        self.entflow_method.update(self._ef_step_metrics.result(self.accelerator, self._ef_gen_step))
        self._ef_gen_step += 1

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
            if self.entflow_needs.stateful:
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
