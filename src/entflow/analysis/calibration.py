"""Calibration of a policy (paper 002, Jin et al., §5.3): the mean token log-prob of correct vs
incorrect responses, and how well it separates them (AUROC). Pure functions, no I/O."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import stats

from entflow.analysis.arrays import as_vector
from entflow.errors import AnalysisError

if TYPE_CHECKING:  # torch is only needed by sequence_mean_logp's callers
    import torch

__all__ = ["Calibration", "calibration", "sequence_mean_logp"]


@dataclass(frozen=True)
class Calibration:
    """Mean token log-prob of correct vs incorrect responses (paper 002 §5.3).

    ``gap = mean_correct − mean_incorrect`` (> 0 when correct answers are more likely);
    ``auroc`` = P(a random correct response has a higher mean log-prob than a random incorrect
    one) + ½·P(tie) — how well the model's own likelihood separates right from wrong
    (0.5 = no separation). NaN when either class is empty.
    """

    mean_correct: float
    mean_incorrect: float
    gap: float
    auroc: float
    n_correct: int
    n_incorrect: int


def sequence_mean_logp(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean token log-prob of each response: ``Σ_t logp·mask / Σ_t mask`` → ``[N]`` (NaN if empty)."""
    m = mask.to(logp.dtype)
    return (logp.detach() * m).sum(-1) / m.sum(-1)


def calibration(mean_logp: Any, correct: Any) -> Calibration:
    """Calibration of a policy from per-response mean token log-probs (paper 002 §5.3).

    Args:
        mean_logp: ``[N]`` mean token log-prob of each response (see :func:`sequence_mean_logp`).
        correct: ``[N]`` booleans (or rewards; > 0.5 counts as correct).

    AUROC by the Mann–Whitney formula with average ranks for ties:
    ``AUROC = (R₁ − n₁(n₁+1)/2) / (n₁·n₀)``, R₁ = rank sum of the correct responses.
    """
    s, y = as_vector(mean_logp), as_vector(correct)
    if s.shape != y.shape:
        raise AnalysisError("correct", f"length {y.size} differs from mean_logp length {s.size}")
    ok = np.isfinite(s)
    s, pos = s[ok], y[ok] > 0.5
    n1, n0 = int(pos.sum()), int((~pos).sum())
    mc = float(s[pos].mean()) if n1 else math.nan
    mi = float(s[~pos].mean()) if n0 else math.nan
    if n1 and n0:
        ranks = stats.rankdata(s)  # average ranks for ties
        auroc = (float(ranks[pos].sum()) - n1 * (n1 + 1) / 2) / (n1 * n0)
    else:
        auroc = math.nan
    return Calibration(mc, mi, mc - mi, auroc, n1, n0)
