"""Deprecated import path: moved to entflow.hf.evaluate (docs/architecture.md §6)."""

from entflow._moved import forward

__getattr__ = forward("entflow.evaluation", "entflow.hf.evaluate")
