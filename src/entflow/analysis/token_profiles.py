"""Per-token profiles of one rollout ``[N, T]``: mean entropy by relative position (paper 004, Deng
et al., Fig. 6a) and the gradient-norm proxy on the LM head (paper 004 Eq. 4). Pure functions, no I/O."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from entflow.analysis.arrays import as_vector
from entflow.errors import AnalysisError

if TYPE_CHECKING:  # torch is imported by grad_norm_proxy itself
    import torch

__all__ = ["grad_norm_proxy", "positional_entropy"]


def positional_entropy(entropy: Any, mask: Any, correct: Any = None, n_bins: int = 10) -> dict[str, np.ndarray]:
    """Mean token entropy by relative position in the response (paper 004 Fig. 6a).

    A valid token's relative position is ``l = k / (L − 1)`` ∈ [0, 1], k its index among the
    response's valid tokens and L their number (l = 0 when L = 1); its bin is
    ``min(⌊l·n_bins⌋, n_bins − 1)``. Each bin holds the token-weighted mean entropy.

    Args:
        entropy: ``[N, T]`` token entropies.
        mask: ``[N, T]`` 1 on valid response tokens.
        correct: optional ``[N]`` booleans / rewards (> 0.5 = correct).
        n_bins: number of equal-width bins.

    Returns:
        ``{"all": [n_bins]}`` plus ``"correct"`` and ``"incorrect"`` when ``correct`` is given;
        empty bins are NaN.
    """
    if n_bins < 1:
        raise AnalysisError("n_bins", f"must be >= 1, got {n_bins}")
    H = np.asarray(entropy.detach().cpu().double() if hasattr(entropy, "detach") else entropy, dtype=np.float64)
    M = np.asarray(mask.detach().cpu() if hasattr(mask, "detach") else mask).astype(bool)
    if H.ndim != 2 or H.shape != M.shape:
        raise AnalysisError("mask", f"entropy and mask must both be [N, T], got {H.shape} and {M.shape}")
    k = np.cumsum(M, axis=1) - 1
    L = M.sum(axis=1, keepdims=True)
    rel = np.where(L > 1, k / np.maximum(L - 1, 1), 0.0)
    bins = np.minimum(np.floor(rel * n_bins).astype(int), n_bins - 1)

    def _profile(rows: np.ndarray) -> np.ndarray:
        sel = M & rows[:, None]
        s = np.bincount(bins[sel], weights=H[sel], minlength=n_bins)
        c = np.bincount(bins[sel], minlength=n_bins)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(c > 0, s / np.maximum(c, 1), math.nan)

    out = {"all": _profile(np.ones(H.shape[0], dtype=bool))}
    if correct is not None:
        y = as_vector(correct) > 0.5
        if y.size != H.shape[0]:
            raise AnalysisError("correct", f"expected {H.shape[0]} values, got {y.size}")
        out["correct"], out["incorrect"] = _profile(y), _profile(~y)
    return out


def grad_norm_proxy(
    w: torch.Tensor,
    logp: torch.Tensor,
    sum_p2: torch.Tensor,
    hidden: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token gradient norm on the LM head: ``G_t = |w_t|·sqrt(1 − 2p + Σπ²)·‖h_t‖``.

    Paper 004 (Deng et al.) Eq. 4: ``G_t = ‖w_t (e(o_t) − π_θ) h_tᵀ‖_F`` — the Frobenius norm of
    the gradient of ``w_t·log π(o_t)`` with respect to the output projection; since
    ``‖u vᵀ‖_F = ‖u‖·‖v‖`` and ``‖e − π‖² = 1 − 2p + Σ_b π_b²`` it needs only ``sum_p2``
    (from :func:`entflow.token_stats`), not the full distribution.

    Args:
        w: ``[N, T]`` (or ``[N]``, broadcast) weight on ∇log π of each token (e.g. I·A·r).
        logp: ``[N, T]`` log-prob of the sampled token (p = exp(logp)).
        sum_p2: ``[N, T]`` Σ_b π_b².
        hidden: ``[N, T]`` norms ‖h_t‖, or ``[N, T, D]`` hidden states (normed over the last dim).
        mask: optional ``[N, T]``; G = 0 where mask == 0.

    Returns:
        ``[N, T]`` detached tensor.
    """
    import torch

    logp, sum_p2, w = logp.detach(), sum_p2.detach(), w.detach()
    if w.dim() == 1:
        w = w[:, None]
    hn = hidden.detach()
    if hn.dim() == logp.dim() + 1:
        hn = torch.linalg.vector_norm(hn.to(logp.dtype), dim=-1)
    if hn.shape != logp.shape or sum_p2.shape != logp.shape:
        raise AnalysisError("hidden", f"expected [N, T] = {tuple(logp.shape)}, got {tuple(hn.shape)}")
    p = logp.exp()
    g = w.abs() * (1.0 - 2.0 * p + sum_p2).clamp_min(0.0).sqrt() * hn
    if mask is not None:
        g = g * mask.to(g.dtype)
    return g
