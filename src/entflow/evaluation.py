"""Deprecated import path: moved to entflow.trainer.evaluate (pass@k and the metric helpers) and
entflow.hf.evaluate (evaluating a real model) (docs/architecture.md §6)."""

from entflow._moved import forward

__getattr__ = forward("entflow.evaluation", "entflow.trainer.evaluate", "entflow.hf.evaluate")
