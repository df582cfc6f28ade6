"""Deprecated import path: moved to entflow.methods.needs (docs/architecture.md §6)."""

from entflow._moved import forward

__getattr__ = forward("entflow.requirements", "entflow.methods.needs")
