"""Agreement between an estimate and a measured change: Pearson, Spearman, scale-fitted MSE."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def _as_array(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64).ravel()


def pearson(x, y) -> float:
    """Pearson correlation of two equal-length vectors; NaN if either is constant."""
    x, y = _as_array(x), _as_array(y)
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(stats.pearsonr(x, y).statistic)


def spearman(x, y) -> float:
    """Spearman rank correlation (average ranks for ties); NaN if either is constant."""
    x, y = _as_array(x), _as_array(y)
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(stats.spearmanr(x, y).statistic)


def scale_fitted_mse(estimate, truth) -> tuple[float, float]:
    """MSE of ``α·estimate`` against ``truth`` after the least-squares scale α → (mse, α).

    Estimators are in unit-step units; the fit removes the unknown step size (Adam, lr).
    """
    e, t = _as_array(estimate), _as_array(truth)
    if e.size == 0:
        return math.nan, math.nan
    ee = float(e @ e)
    alpha = float(e @ t) / ee if ee > 0 else 0.0
    return float(np.mean((alpha * e - t) ** 2)), alpha


def relative_error(estimate, truth) -> float:
    """‖estimate − truth‖₂ / ‖truth‖₂."""
    e, t = _as_array(estimate), _as_array(truth)
    nt = float(np.linalg.norm(t))
    return float(np.linalg.norm(e - t)) / nt if nt > 0 else math.nan
