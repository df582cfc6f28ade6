"""A run's series over steps: the EMA of entropy (paper 002 App. D.3) and where the rising stage of
the accuracy ends (paper 004, Deng et al.). Pure functions, no I/O; inputs may be Python sequences,
NumPy arrays or (detached) torch tensors."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from entflow.analysis.arrays import as_vector
from entflow.errors import AnalysisError

__all__ = ["StageTransition", "detect_stage_transition", "ema"]


def ema(values: Any, beta: float = 0.6) -> np.ndarray:
    """Exponential moving average ``H̃_k = β·H̃_{k−1} + (1−β)·H_k`` (paper 002 App. D.3, β = 0.6).

    Started at the first finite value (``H̃_0 = H_0``, no zero-initialisation bias). A NaN
    input keeps the previous average (and is NaN before the first finite value).
    """
    if not 0 <= beta < 1:
        raise AnalysisError("beta", f"must be in [0, 1), got {beta}")
    x = as_vector(values)
    out = np.full_like(x, math.nan)
    cur = math.nan
    for i, v in enumerate(x):
        if math.isfinite(v):
            cur = v if math.isnan(cur) else beta * cur + (1 - beta) * v
        out[i] = cur
    return out


@dataclass(frozen=True)
class StageTransition:
    """Result of :func:`detect_stage_transition`.

    ``step`` is the first step of the plateau (None if the gain never falls below the threshold
    or there is no rising stage); ``early_rate`` the accuracy gain per step of the first window;
    ``rates[i]`` the smoothed gain per step of the window starting at ``window_steps[i]``.
    """

    step: float | None
    index: int | None
    early_rate: float
    rates: np.ndarray
    window_steps: np.ndarray


def detect_stage_transition(steps: Any, acc: Any, window: int | None = None, threshold: float = 0.1) -> StageTransition:
    """Where the rising stage ends and the plateau begins (paper 004, Fig. 1a red line).

    The smoothed gain per step at evaluation point i is the least-squares slope of validation
    accuracy against step over the window of ``window`` consecutive points starting at i (a local
    linear fit: smoothing and differencing in one). The early rate is the slope of the first
    window; the transition is the first window start whose slope is below ``threshold`` (10 %)
    of the early rate. ``window`` defaults to ``max(3, n // 10)``.

    Returns ``step=None`` when the early rate is not positive (no rising stage) or the gain
    never drops below the threshold.
    """
    s, a = as_vector(steps), as_vector(acc)
    if s.shape != a.shape:
        raise AnalysisError("acc", f"length {a.size} differs from steps length {s.size}")
    ok = np.isfinite(s) & np.isfinite(a)
    s, a = s[ok], a[ok]
    order = np.argsort(s, kind="stable")
    s, a = s[order], a[order]
    n = s.size
    w = max(3, n // 10) if window is None else int(window)
    if w < 2:
        raise AnalysisError("window", f"must be >= 2, got {w}")
    if n < w + 1:
        raise AnalysisError("acc", f"stage detection needs more than window={w} points, got {n}")
    starts = np.arange(n - w + 1)
    rates = np.empty(starts.size)
    for i in starts:
        x, y = s[i : i + w], a[i : i + w]
        xc = x - x.mean()
        den = float(xc @ xc)
        rates[i] = float(xc @ (y - y.mean())) / den if den > 0 else math.nan
    early = float(rates[0])
    idx = None
    if early > 0:
        below = np.nonzero(rates[1:] < threshold * early)[0]
        if below.size:
            idx = int(below[0] + 1)
    return StageTransition(
        step=float(s[idx]) if idx is not None else None,
        index=idx,
        early_rate=early,
        rates=rates,
        window_steps=s[starts],
    )
