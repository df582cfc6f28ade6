"""entflow inside verl (docs/design.md §12): every entflow method as a policy loss of verl's distributed engine.

Installed with ``pip install entflow[verl]``; verl finds it through the ``verl.plugins`` entry
point (``entflow.integrations.verl.plugin``), so ``import verl`` registers:

- the policy-loss modes ``entflow`` and ``entflow.<method>`` (the **registry path**, for methods
  that read only log-probs, advantages and the mask), and
- the trainer mode ``entflow`` (``trainer.v1.trainer_mode=entflow``), which installs entflow's
  loss function on the actor workers (the **loss-function path**, for every method), shapes
  advantages where verl computes them, advances controllers once per step and checkpoints them.

Modules: ``spec`` (which method a config selects and what it needs; no verl import),
``config`` (:class:`EntflowPolicyLossConfig`), ``losses`` (both paths), ``trainer``, ``plugin``;
for verl on a CPU (``VERL_PLATFORM=cpu``): ``cpu`` (verl's ``cpu`` platform and FSDP engine for it)
and ``cpu_rollout`` (the ``entflow_cpu`` rollout, generating with ``transformers``).
Nothing here is imported by ``import entflow``; attributes load verl on first use.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "EntflowPolicyLossConfig": "entflow.integrations.verl.config",
    "entflow_ppo_loss": "entflow.integrations.verl.losses",
    "registered_policy_loss": "entflow.integrations.verl.losses",
    "EntflowTrainer": "entflow.integrations.verl.trainer",
    "check_config": "entflow.integrations.verl.config",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
