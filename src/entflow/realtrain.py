"""Deprecated import path: moved to entflow.hf.setup (docs/architecture.md §6)."""

from entflow._moved import forward

__getattr__ = forward("entflow.realtrain", "entflow.hf.setup")
