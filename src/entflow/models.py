"""Deprecated import path: moved to entflow.hf.models (docs/architecture.md §6)."""

from entflow._moved import forward

__getattr__ = forward("entflow.models", "entflow.hf.models")
