"""verl's policy-loss config with entflow's keys, validated when verl builds its config objects.

verl's config dataclasses are strict: ``PolicyLossConfig`` has no room for a method's
parameters. Its Hydra node carries ``_target_``, which verl instantiates (``omega_conf_to_dataclass``)
in ``validate_config`` on the driver, before Ray starts, and again in every worker. Pointing
``_target_`` at :class:`EntflowPolicyLossConfig`, a subclass with four more fields, lets the
command line carry the method and its parameters without patching verl::

    actor_rollout_ref.actor.policy_loss._target_=entflow.integrations.verl.EntflowPolicyLossConfig
    actor_rollout_ref.actor.policy_loss.loss_mode=entflow
    +actor_rollout_ref.actor.policy_loss.method=clip_higher+steer
    +actor_rollout_ref.actor.policy_loss.params.lambda_min=0.5

A wrong method name or parameter raises :class:`entflow.errors.ConfigError` naming the key
(``actor_rollout_ref.actor.policy_loss.params.lambda_min``) as soon as verl converts the config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.workers.config import PolicyLossConfig

from entflow.errors import ConfigError
from entflow.integrations.verl.spec import KEY, MODE_PREFIX, is_entflow_mode, spec_from_policy_loss, verl_blockers
from entflow.methods.needs import needs_of


@dataclass
class EntflowPolicyLossConfig(PolicyLossConfig):
    """``PolicyLossConfig`` plus entflow's keys.

    Args:
        method: the entflow method or composition (``"clip_higher+steer"``) when
            ``loss_mode="entflow"``; with ``loss_mode="entflow.<name>"`` leave it unset.
        params: the method's parameters (``"part.key"`` names a part of a composition).
        statistics: ``"micro_batch"`` (default; batch statistics per micro-batch, as verl's own
            Clip-Cov / KL-Cov) or ``"global"`` (over the data-parallel group).
        dual_clip: apply verl's ``actor.clip_ratio_c`` dual clip (as verl's ``vanilla`` loss) unless
            the method fixes its own clip (KL-Cov).
    """

    method: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    statistics: str = "micro_batch"
    dual_clip: bool = True

    def __post_init__(self) -> None:
        if not is_entflow_mode(self.loss_mode):
            if self.method or self.params:
                raise ConfigError(
                    f"{KEY}.loss_mode",
                    f"is {self.loss_mode!r}, so {KEY}.method / params would be ignored; "
                    f"use loss_mode='entflow' or '{MODE_PREFIX}<method>'",
                )
            return
        spec = spec_from_policy_loss(self)
        assert spec is not None
        method = spec.build()
        blockers = verl_blockers(method)
        if blockers:
            raise ConfigError(f"{KEY}.method", "; ".join(blockers))


def check_config(config: Any) -> Any:
    """Check verl's whole (composed) config for an entflow method; returns the method, or None
    when the loss mode is not entflow's.

    The policy-loss dataclass above sees only its own node; this checks what spans sections:
    the trainer mode a method needs, the entropy / reference log-probs it reads, settings that
    would starve it, and the single update per rollout a strictly on-policy method needs. The
    entflow trainer calls it before any worker starts; run it yourself before launching with
    ``python -m entflow.integrations.verl.check <overrides>``.
    Raises :class:`ConfigError` naming the key to change.
    """
    from omegaconf import OmegaConf

    from entflow.integrations.verl.spec import (
        needs_model_entropy,
        needs_ref_logp,
        registry_blockers,
    )

    actor = config.actor_rollout_ref.actor
    spec = spec_from_policy_loss(actor.policy_loss)
    if spec is None:
        if OmegaConf.select(config, "trainer.v1.trainer_mode") == "entflow":
            raise ConfigError(
                f"{KEY}.loss_mode", "trainer_mode 'entflow' needs loss_mode 'entflow' or 'entflow.<name>'"
            )
        return None
    method = spec.build()
    blockers = verl_blockers(method)
    if blockers:
        raise ConfigError(f"{KEY}.method", "; ".join(blockers))
    entflow_trainer = bool(OmegaConf.select(config, "trainer.use_v1", default=True)) and (
        OmegaConf.select(config, "trainer.v1.trainer_mode") == "entflow"
    )
    needs_trainer = registry_blockers(method)
    if spec.statistics == "global":
        needs_trainer.append("statistics='global' needs the data-parallel group of the loss-function path")
    if needs_trainer and not entflow_trainer:
        raise ConfigError(
            "trainer.v1.trainer_mode",
            f"must be 'entflow' (with trainer.use_v1=True) for {method.name}: " + "; ".join(needs_trainer),
        )
    if spec.statistics == "global" and actor.get("loss_agg_mode") in ("token-sum", "seq-mean-token-sum"):
        raise ConfigError(
            "actor_rollout_ref.actor.loss_agg_mode",
            "global statistics support token-mean, seq-mean-token-mean and seq-mean-token-sum-norm, "
            f"got {actor.get('loss_agg_mode')!r}",
        )
    if needs_model_entropy(method) and not actor.get("calculate_entropy", False):
        raise ConfigError(
            "actor_rollout_ref.actor.calculate_entropy",
            f"must be True: {method.name} differentiates the current policy's entropy in the update pass",
        )
    if needs_ref_logp(method) and not actor.get("use_kl_loss", False):
        raise ConfigError(
            "actor_rollout_ref.actor.use_kl_loss",
            "must be True so that verl computes reference log-probs; entflow's kl_ref then replaces verl's KL loss "
            "(actor.kl_loss_coef is ignored)",
        )
    if needs_of(method).rollout_logp:
        rollout = config.actor_rollout_ref.rollout
        if not rollout.get("calculate_log_probs", False):
            raise ConfigError(
                "actor_rollout_ref.rollout.calculate_log_probs",
                f"must be True: {method.name} reads the rollout engine's log-probs of the sampled tokens "
                "(verl's rollout_log_probs)",
            )
        reweighting = [p.name for p in method.parts if p.rollout_correction in ("weight", "ratio")]
        if reweighting and OmegaConf.select(config, "algorithm.rollout_correction.rollout_is") is not None:
            raise ConfigError(
                "algorithm.rollout_correction.rollout_is",
                f"must be null: {', '.join(reweighting)} corrects the rollout–training mismatch itself; verl's "
                "rollout_is_weights on top would correct it twice",
            )
        on_old = [p.name for p in method.parts if p.rollout_correction in ("weight", "mask")]
        if on_old and OmegaConf.select(config, "algorithm.rollout_correction.bypass_mode", default=False):
            raise ConfigError(
                "algorithm.rollout_correction.bypass_mode",
                f"must be False: bypass mode sets old_log_probs = rollout_log_probs, so π_old/π_rollout ≡ 1 and "
                f"{', '.join(on_old)} would do nothing",
            )
    reads_old = [p.name for p in method.parts if needs_of(p).rollout_entropy]
    if reads_old and OmegaConf.select(config, "algorithm.rollout_correction.bypass_mode", default=False):
        raise ConfigError(
            "algorithm.rollout_correction.bypass_mode",
            f"must be False: {', '.join(reads_old)} read the old-policy entropy, which verl computes only in the "
            "old-log-prob pass that bypass mode skips",
        )
    if needs_of(method).strict_on_policy:  # one gradient step per rollout batch (r ≡ 1; docs/design.md §6)
        epochs = actor.get("ppo_epochs", 1)
        if epochs != 1:
            raise ConfigError(
                "actor_rollout_ref.actor.ppo_epochs", f"must be 1: {method.name} is strictly on-policy, got {epochs}"
            )
        mini, batch = actor.get("ppo_mini_batch_size"), OmegaConf.select(config, "data.train_batch_size")
        if mini is not None and batch is not None and int(mini) != int(batch):
            raise ConfigError(
                "actor_rollout_ref.actor.ppo_mini_batch_size",
                f"must equal data.train_batch_size = {batch} (one gradient step per rollout batch): "
                f"{method.name} is strictly on-policy, got {mini}",
            )
    sync_steps = OmegaConf.select(config, "trainer.v1.sync.parameter_sync_step", default=1) or 1
    if entflow_trainer and int(sync_steps) != 1:
        raise ConfigError(
            "trainer.v1.sync.parameter_sync_step",
            f"must be 1 with the entflow trainer (controllers advance once per training step), got {sync_steps}",
        )
    if entflow_trainer and OmegaConf.select(config, "distillation.enabled", default=False):
        raise ConfigError(
            "distillation.enabled", "the entflow trainer replaces the actor loss; distillation is not supported"
        )
    return method
