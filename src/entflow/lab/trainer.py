"""Deprecated import path: moved to entflow.trainer.{rollout,diagnostics,audit,step,loop} and
entflow.lab.setup (docs/architecture.md §6). Targets are searched in order, each name's defining
module first."""

from entflow._moved import forward

__getattr__ = forward(
    "entflow.lab.trainer",
    "entflow.core.estimators",
    "entflow.trainer.rollout",
    "entflow.trainer.diagnostics",
    "entflow.trainer.audit",
    "entflow.trainer.step",
    "entflow.lab.setup",
    "entflow.trainer.loop",
)
