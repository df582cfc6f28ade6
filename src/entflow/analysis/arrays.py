"""Array inputs of the analysis functions: Python sequences, NumPy arrays or (detached) torch
tensors, as flat float64 vectors. No torch import."""

from __future__ import annotations

from typing import Any

import numpy as np

from entflow.errors import AnalysisError

__all__ = ["as_vector", "finite_vector"]


def as_vector(x: Any) -> np.ndarray:
    """``x`` as a flat float64 NumPy vector ``[n]`` (a tensor is detached and copied to the CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64).ravel()


def finite_vector(x: Any, name: str, n: int | None = None) -> np.ndarray:
    """:func:`as_vector`, checked: length ``n`` when given, every value finite.

    Raises:
        AnalysisError: (field ``name``) the length differs from ``n``, or a value is not finite.
    """
    a = as_vector(x)
    if n is not None and a.size != n:
        raise AnalysisError(name, f"length {a.size} differs from steps length {n}")
    bad = ~np.isfinite(a)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise AnalysisError(name, f"{int(bad.sum())} non-finite value(s), first at index {i} ({a[i]})")
    return a
