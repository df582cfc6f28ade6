"""Deprecated import path: moved to entflow.hf.data (docs/architecture.md §6)."""

from entflow._moved import forward

__getattr__ = forward("entflow.data", "entflow.hf.data")
