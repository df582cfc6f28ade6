"""Deprecated import path: moved to entflow.trainer.rundir (docs/architecture.md §6)."""

from entflow._moved import forward

__getattr__ = forward("entflow.lab.rundir", "entflow.trainer.rundir")
