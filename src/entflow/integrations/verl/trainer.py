"""The ``entflow`` trainer mode of verl's v1 PPO trainer: ``trainer.v1.trainer_mode=entflow``.

A subclass of verl's synchronous trainer (``PPOTrainerSync``), registered with verl's own
``register_trainer``; once verl has picked it by name it sets ``trainer_mode`` back to ``"sync"``
(verl branches on that name) and changes five hooks and nothing else (their signatures are checked
when the trainer is built, :data:`VERL_HOOKS`):

- ``on_init_end``: installs :func:`entflow_ppo_loss` on the actor workers (``set_loss_fn``), the
  loss-function path that gives a method the current and old entropy and the whole micro-batch;
- ``_compute_advantage``: after verl's estimator, applies the method's advantage shapers on the
  driver, where the group structure (``uid``), old log-probs and old entropy are all present;
- ``_update_actor``: sends the step and the controllers' state with the batch, then advances the
  controllers once on the step's metrics (already averaged over ranks by verl) and moves
  entflow's metrics to ``entflow/…``;
- ``_save_checkpoint`` / ``_load_checkpoint``: the method's state in ``global_step_<k>/entflow_method.pt``.

It needs Ray and a rollout engine like any verl trainer. It runs end to end on a CPU with entflow's
``cpu`` platform and ``entflow_cpu`` rollout (``examples/verl/run_cpu.sh``, the ``.ci/verl-cpu``
lane); ``tests/integrations/test_verl_trainer.py`` runs its hooks over stand-ins for verl's base
trainer and TransferQueue. It was not run on GPUs, with vLLM/SGLang, or with Megatron.
"""

from __future__ import annotations

import logging
import os
from functools import partial

import numpy as np
import transfer_queue as tq
from tensordict import TensorDict
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.utils.padding import response_to_nested

from entflow.integrations.hooks import Hook, check_hooks
from entflow.integrations.verl.driver import Driver, shape_verl_advantages, shaping_metrics
from entflow.integrations.verl.losses import entflow_ppo_loss
from entflow.integrations.verl.spec import shapes_advantages, spec_from_policy_loss

logger = logging.getLogger(__name__)

# PPOTrainerSync's methods EntflowTrainer overrides, with the arguments it passes to verl's own
VERL_HOOKS = (
    Hook("on_init_end"),
    Hook("_compute_advantage", ("batch", "metrics")),
    Hook("_update_actor", ("batch", "metrics")),
    Hook("_save_checkpoint"),
    Hook("_load_checkpoint"),
)


@register_trainer("entflow")
class EntflowTrainer(PPOTrainerSync):
    """verl's synchronous PPO trainer with an entflow method on the loss-function path."""

    def __init__(self, config):
        # imported here: config.py imports verl, whose plugin loading imports this module
        from entflow.integrations.verl.config import check_config

        # a verl whose hooks differ fails here, naming the hook and verl's version, not mid-training
        check_hooks(type(self), EntflowTrainer, VERL_HOOKS, "verl", "PPOTrainerSync")
        check_config(config)  # before any worker starts
        spec = spec_from_policy_loss(config.actor_rollout_ref.actor.policy_loss)
        assert spec is not None  # check_config refuses trainer_mode=entflow without an entflow loss mode
        self.entflow = Driver(spec)
        # verl picked this class by trainer_mode; from here on it is the synchronous trainer, and
        # verl's code branches on trainer_mode == "sync" (replay buffer, refill, checkpoints)
        config.trainer.v1.trainer_mode = "sync"
        super().__init__(config)

    def on_init_end(self):
        actor_config = omega_conf_to_dataclass(self.config.actor_rollout_ref.actor)
        self.actor_rollout_wg.set_loss_fn(partial(entflow_ppo_loss, config=actor_config))
        super().on_init_end()

    def _compute_advantage(self, batch, metrics):
        batch = super()._compute_advantage(batch, metrics)
        if not shapes_advantages(self.entflow.method):
            return batch
        fields = ["uid", "response_mask", "rm_scores", "old_log_probs", "entropy", "advantages"]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        nested_mask = data["response_mask"]
        padded = data.to_padded_tensor()
        uid = np.array(padded.pop("uid").tolist(), dtype=object)
        adv = shape_verl_advantages(
            self.entflow.method,
            advantages=padded["advantages"],
            response_mask=padded["response_mask"],
            old_log_probs=padded["old_log_probs"],
            scores=padded["rm_scores"],
            uid=uid,
            old_entropy=padded.get("entropy", None),
            step=self.global_steps - 1,
            total_steps=self.total_training_steps,
        )
        metrics.update(shaping_metrics(self.entflow.method))
        out = TensorDict({"advantages": response_to_nested(adv, nested_mask)}, batch_size=len(batch))
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=out)

    def _update_actor(self, batch, metrics):
        batch.extra_info.update(self.entflow.extra_info(self.global_steps - 1, self.total_training_steps))
        batch = super()._update_actor(batch, metrics)
        for key in [k for k in metrics if k.startswith("actor/entflow/")]:
            metrics[key[len("actor/") :]] = metrics.pop(key)
        self.entflow.after_update(metrics, self.global_steps - 1)
        return batch

    def _save_checkpoint(self):
        folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        self.entflow.save(folder, self.global_steps)  # before verl writes its "latest" tracker
        super()._save_checkpoint()

    def _load_checkpoint(self):
        super()._load_checkpoint()
        if self.global_steps <= 0:
            return
        if self.config.trainer.resume_mode == "resume_path":
            folder = self.config.trainer.resume_from_path
        else:
            folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        if not os.path.isabs(folder):
            folder = os.path.join(os.getcwd(), folder)
        if not self.entflow.load(folder):
            logger.warning("entflow: %s has no %s; the method starts from its initial state", folder, "method state")
        else:  # printed, as verl prints its own resume lines (its loggers are quiet in Ray actors)
            print(f"entflow: method state restored from {folder}")
