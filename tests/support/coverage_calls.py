"""Counting a setting's coverage evaluations (tests/lab/test_coverage_eval.py, tests/hf/test_real_coverage.py)."""

from __future__ import annotations

from typing import Any


def coverage_seeds(monkeypatch: Any, owner: Any, name: str) -> list[int]:
    """The run seed of every call of the coverage evaluation ``owner.name(model, tokenizer, task, cfg)``
    from now on, in order (the evaluation itself still runs)."""
    calls: list[int] = []
    real = getattr(owner, name)

    def counted(model, tokenizer, task, cfg):
        calls.append(cfg.seed)
        return real(model, tokenizer, task, cfg)

    monkeypatch.setattr(owner, name, counted)
    return calls
