"""What the entflow trainer does on verl's driver, without verl: advantage shaping, the controllers'
step, what travels to the workers with each update batch, and the checkpoint file.

verl's v1 trainer runs on one driver process and sends each update batch to the actor workers.
entflow keeps one copy of the method there, whose controllers (``adaptive_entropy``,
``pos_adv_reweight`` with the entropy schedule) advance once per training step on metrics that
verl has already averaged over the data-parallel ranks; their state travels to every worker with
the batch, so all ranks hold the same state, and is saved in verl's checkpoint folder.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from entflow.core.batch import TokenBatch
from entflow.errors import ConfigError
from entflow.files import atomic_write_bytes
from entflow.integrations.verl.spec import MethodSpec, controller_state
from entflow.methods import Method
from entflow.methods.objective import compute_advantages

CHECKPOINT_FILE = "entflow_method.pt"
METRIC_PREFIX = "entflow/"


def shape_verl_advantages(
    method: Method,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    old_log_probs: torch.Tensor,
    scores: torch.Tensor,
    uid: Sequence[Any],
    old_entropy: torch.Tensor | None = None,
    step: int = 0,
    total_steps: int | None = None,
) -> torch.Tensor:
    """Advantages ``[N, T]`` after the method's shapers, starting from verl's (any estimator).

    ``scores`` are verl's token-level scores ``[N, T]`` (their row sums are the rewards R_i);
    ``uid`` names each response's prompt (verl's group id). A method with an advantage replacer
    (``w_reinforce``, ``unlikeliness``, ``gtpo``) builds A from the rewards; the others shape verl's
    advantages. Detached, 0 off-mask (as :func:`entflow.compute_advantages`).
    """
    mask = response_mask.bool()
    _, group = np.unique(np.asarray(list(uid), dtype=object).astype(str), return_inverse=True)
    replaces = any(p.replaces_advantages for p in method.parts)
    batch = TokenBatch(
        logp=old_log_probs,
        old_logp=old_log_probs,
        advantages=advantages,
        mask=mask,
        old_entropy=old_entropy,
        rewards=scores.sum(-1).to(old_log_probs.dtype) if replaces else None,
        group_index=torch.as_tensor(group, device=advantages.device),
        step=step,
        total_steps=total_steps,
    )
    return compute_advantages(batch, method)


def shaping_metrics(method: Method) -> dict[str, float]:
    """What the shapers reported in their last ``shape_advantages`` call, under ``entflow/``."""
    return {METRIC_PREFIX + k: float(v) for k, v in method.shaping_metrics().items()}


class Driver:
    """The driver-side copy of the method and its per-step bookkeeping.

    ``step`` is 0-based (verl's ``global_steps`` − 1), as :class:`entflow.TokenBatch` expects.
    """

    def __init__(self, spec: MethodSpec):
        self.spec = spec
        self.method = spec.build()

    def extra_info(self, step: int, total_steps: int | None) -> dict[str, Any]:
        """Non-tensor data sent with each update batch (read by ``entflow_ppo_loss``)."""
        return {
            "entflow_step": step,
            "entflow_total_steps": total_steps,
            "entflow_state": controller_state(self.method),
        }

    def after_update(self, metrics: Mapping[str, Any], step: int) -> dict[str, float]:
        """Advance the controllers once for this step.

        ``metrics``: the step's metrics as verl logs them; ``actor/entropy`` is the old-policy
        entropy over the whole batch (all ranks) aggregated with ``loss_agg_mode`` — the token
        mean under ``token-mean``, which is docs/design.md §7's H — and entflow's per-micro-batch metrics
        arrive averaged over micro-batches and ranks under ``entflow/`` (or ``actor/entflow/``).
        Returns the metrics the controllers saw.
        """
        seen: dict[str, float] = {}
        for k, v in metrics.items():
            for prefix in ("actor/" + METRIC_PREFIX, METRIC_PREFIX):
                if k.startswith(prefix) and isinstance(v, int | float | np.floating | np.integer):
                    seen[k[len(prefix) :]] = float(v)
        if "actor/entropy" in metrics:
            seen["entropy"] = float(metrics["actor/entropy"])
        seen["step"] = float(step)
        self.method.update(seen)
        return seen

    def save(self, folder: str | os.PathLike, step: int) -> Path:
        """Write the method's state into verl's ``global_step_<k>`` folder (atomically)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        torch.save({"method": self.spec.name, "step": step, "state": self.method.state_dict()}, buf)
        path = folder / CHECKPOINT_FILE
        atomic_write_bytes(path, buf.getvalue())
        return path

    def load(self, folder: str | os.PathLike) -> bool:
        """Restore the state saved by :meth:`save`; False when the folder has none."""
        path = Path(folder) / CHECKPOINT_FILE
        if not path.exists():
            return False
        saved = torch.load(path, weights_only=False)
        if saved.get("method") != self.spec.name:
            raise ConfigError(
                "actor_rollout_ref.actor.policy_loss.method",
                f"is {self.spec.name!r} but the checkpoint {path} holds the state of {saved.get('method')!r}",
            )
        self.method.load_state_dict(saved["state"])
        return True
