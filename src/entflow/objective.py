"""Deprecated import path: moved to entflow.methods.objective (docs/architecture.md §6)."""

from entflow._moved import forward

__getattr__ = forward("entflow.objective", "entflow.methods.objective")
