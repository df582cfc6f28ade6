"""Deprecated import path: moved to entflow.lab.setup, entflow.trainer.loop (docs/architecture.md §6)."""

from entflow._moved import forward

__getattr__ = forward("entflow.lab.trainer", "entflow.lab.setup", "entflow.trainer.loop")
