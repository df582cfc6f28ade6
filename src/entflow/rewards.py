"""Deprecated import path: moved to entflow.hf.rewards (docs/architecture.md §6)."""

from entflow._moved import forward

__getattr__ = forward("entflow.rewards", "entflow.hf.rewards")
