"""Deprecated import path: moved to entflow.methods.reward_advantages (docs/architecture.md §6)."""

from entflow._moved import forward

__getattr__ = forward("entflow.methods.rewards", "entflow.methods.reward_advantages")
