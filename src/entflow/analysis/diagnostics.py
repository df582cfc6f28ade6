"""Diagnostics of docs/design.md §9 as pure functions: no trainer, no I/O, no global state.

* :func:`fit_entropy_law` — paper 003 (Cui et al.) §2: R = −a·exp(H) + b, ceiling −a + b
* :func:`predict_entropy_law` — paper 003 App. B.3: fit on the first 15 % of steps, RMSE on the rest
* :func:`ngram_diversity`, :func:`ngram_diversity_per_n` — paper 002 (Jin et al.) App. C.1, Eq. 8
  (Li et al., 2016)
* :func:`self_bleu`, :func:`bleu` — paper 002 App. C.1 (Zhu et al., 2018); BLEU of Papineni et al.
* :func:`calibration` — paper 002 §5.3: mean token log-prob of correct vs incorrect responses
* :func:`ema` — paper 002 App. D.3 (β = 0.6)
* :func:`positional_entropy` — paper 004 (Deng et al.) Fig. 6a
* :func:`grad_norm_proxy` — paper 004 Eq. 4
* :func:`detect_stage_transition` — paper 004, rising → plateau stage

Array inputs may be Python sequences, NumPy arrays or (detached) torch tensors, except
:func:`grad_norm_proxy`, which is a tensor function.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import stats

from entflow.errors import EntflowError

if TYPE_CHECKING:  # torch is only needed by grad_norm_proxy / positional_entropy callers
    import torch

__all__ = [
    "AnalysisError",
    "Calibration",
    "LawFit",
    "LawPrediction",
    "StageTransition",
    "bleu",
    "calibration",
    "detect_stage_transition",
    "ema",
    "fit_entropy_law",
    "grad_norm_proxy",
    "groups_from_index",
    "ngram_diversity",
    "ngram_diversity_per_n",
    "positional_entropy",
    "predict_entropy_law",
    "self_bleu",
    "sequence_mean_logp",
]


class AnalysisError(EntflowError, ValueError):
    """The data given to a diagnostic cannot define the requested quantity (too few points …)."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


def _vec(x: Any, field: str) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().double().numpy()
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1:
        a = a.ravel()
    return a


# --------------------------------------------------------------------------------------------
# Entropy–performance law (paper 003)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LawFit:
    """Least-squares fit of ``R = −a·exp(H) + b``.

    ``ceiling = −a + b`` is the predicted performance when entropy is exhausted (H = 0,
    paper 003 §2). ``r2`` is the coefficient of determination on the fitted points (NaN when
    the accuracies are all equal).
    """

    a: float
    b: float
    r2: float
    n: int

    @property
    def ceiling(self) -> float:
        """Predicted R at H = 0: ``−a + b``."""
        return -self.a + self.b

    def predict(self, entropy: Any) -> np.ndarray:
        """``−a·exp(H) + b`` for each entropy value."""
        return -self.a * np.exp(_vec(entropy, "entropy")) + self.b


def fit_entropy_law(entropy: Any, acc: Any) -> LawFit:
    """Fit paper 003's entropy–performance law ``R = −a·exp(H) + b`` by least squares.

    Cui et al., *The Entropy Mechanism of RL for Reasoning LMs* (paper 003), §2 / Fig. 1: without
    entropy intervention, validation performance R is an exponential function of policy entropy H.
    The model is linear in (a, b) with regressor ``exp(H)``, so ordinary least squares is exact:
    slope of R on exp(H) = −a, intercept = b.

    Args:
        entropy: policy entropy H at each evaluation point (nats).
        acc: validation performance R at the same points.

    Returns:
        :class:`LawFit` with a, b, R², n and ``ceiling`` (= −a + b).

    Raises:
        AnalysisError: fewer than 2 finite points, or all entropies equal.
    """
    H, R = _vec(entropy, "entropy"), _vec(acc, "acc")
    if H.shape != R.shape:
        raise AnalysisError("acc", f"length {R.size} differs from entropy length {H.size}")
    ok = np.isfinite(H) & np.isfinite(R)
    H, R = H[ok], R[ok]
    if H.size < 2:
        raise AnalysisError("entropy", f"law fit needs >= 2 finite (H, R) points, got {H.size}")
    x = np.exp(H)
    if np.ptp(x) == 0:
        raise AnalysisError("entropy", "law fit needs at least two distinct entropy values")
    X = np.stack([-x, np.ones_like(x)], axis=1)
    (a, b), *_ = np.linalg.lstsq(X, R, rcond=None)
    resid = R - (X @ np.array([a, b]))
    ss_tot = float(np.sum((R - R.mean()) ** 2))
    r2 = 1.0 - float(resid @ resid) / ss_tot if ss_tot > 0 else math.nan
    return LawFit(a=float(a), b=float(b), r2=r2, n=int(H.size))


@dataclass(frozen=True)
class LawPrediction:
    """Early prediction with the entropy–performance law (paper 003 App. B.3).

    ``fit`` is fitted on the first ``n_fit`` points; ``predicted`` holds the law's R for the
    remaining points from their observed entropy; ``rmse`` is over those points and
    ``final_error`` = predicted − observed at the last point (NaN when nothing is held out).
    """

    fit: LawFit
    n_fit: int
    predicted: np.ndarray
    rmse: float
    final_error: float


def predict_entropy_law(entropy: Any, acc: Any, fit_frac: float = 0.15) -> LawPrediction:
    """Fit the law on the first ``fit_frac`` of the points and predict the rest.

    Paper 003 App. B.3 / Fig. 10: fitting on the first 15 % of training steps predicts the later
    performance from the later entropy (RMSE ≈ 1 %). Points must be in training order;
    ``n_fit = max(2, ceil(fit_frac · n))`` (the fit needs two points).

    Raises:
        AnalysisError: ``fit_frac`` not in (0, 1], or the early points cannot be fitted.
    """
    if not 0 < fit_frac <= 1:
        raise AnalysisError("fit_frac", f"must be in (0, 1], got {fit_frac}")
    H, R = _vec(entropy, "entropy"), _vec(acc, "acc")
    if H.shape != R.shape:
        raise AnalysisError("acc", f"length {R.size} differs from entropy length {H.size}")
    ok = np.isfinite(H) & np.isfinite(R)
    H, R = H[ok], R[ok]
    n_fit = min(H.size, max(2, math.ceil(fit_frac * H.size - 1e-9)))
    fit = fit_entropy_law(H[:n_fit], R[:n_fit])
    pred = fit.predict(H[n_fit:])
    if pred.size:
        err = pred - R[n_fit:]
        rmse, final = float(np.sqrt(np.mean(err**2))), float(err[-1])
    else:
        rmse = final = math.nan
    return LawPrediction(fit=fit, n_fit=n_fit, predicted=pred, rmse=rmse, final_error=final)


def naive_forecasts(steps: Any, acc: Any, n_fit: int, at_step: float) -> dict[str, float]:
    """The two naive forecasts an early prediction must beat (paper 003 App. B.3), from the first
    ``n_fit`` points (``steps`` / ``acc`` ``[K]``, training order): ``last_value`` carries the last
    fitted accuracy forward; ``linear`` extrapolates the least-squares line in steps to ``at_step``."""
    S, R = _vec(steps, "steps")[:n_fit], _vec(acc, "acc")[:n_fit]
    if S.size < 2:
        raise AnalysisError("n_fit", f"a line needs two points, got {S.size}")
    slope, intercept = np.polyfit(S, R, 1)
    return {"last_value": float(R[-1]), "linear": float(slope * at_step + intercept)}


def early_prediction_errors(steps: Any, entropy: Any, acc: Any, fit_frac: float) -> dict[str, float]:
    """Signed errors (predicted − observed) of three forecasts of the last point's accuracy made
    from the first ``fit_frac`` of the points: the law (:func:`predict_entropy_law`, fed the last
    point's observed entropy, as paper 003 App. B.3 does) and the two :func:`naive_forecasts`.
    NaN for a forecast that cannot be made (nothing held out, or the early points cannot be fitted)."""
    S, H, R = _vec(steps, "steps"), _vec(entropy, "entropy"), _vec(acc, "acc")
    out = {"law": math.nan, "last_value": math.nan, "linear": math.nan}
    n_fit = min(R.size, max(2, math.ceil(fit_frac * R.size - 1e-9)))
    if n_fit >= R.size:
        return out
    try:
        out["law"] = predict_entropy_law(H, R, fit_frac).final_error
    except AnalysisError:
        pass
    for name, value in naive_forecasts(S, R, n_fit, float(S[-1])).items():
        out[name] = value - float(R[-1])
    return out


# --------------------------------------------------------------------------------------------
# Diversity (paper 002 App. C.1)
# --------------------------------------------------------------------------------------------

Tokens = Sequence[Hashable] | str


def groups_from_index(responses: Sequence[Tokens], group_index: Sequence[int]) -> list[list[Tokens]]:
    """Split a flat list of responses into prompt groups by ``group_index`` (order of first use)."""
    if len(responses) != len(group_index):
        raise AnalysisError("group_index", f"length {len(group_index)} differs from {len(responses)} responses")
    groups: dict[int, list[Tokens]] = {}
    for r, g in zip(responses, group_index, strict=True):
        groups.setdefault(int(g), []).append(r)
    return list(groups.values())


def _ngrams(tokens: Tokens, n: int) -> list[tuple]:
    t = tuple(tokens)
    return [t[i : i + n] for i in range(len(t) - n + 1)]


def ngram_diversity_per_n(groups: Sequence[Sequence[Tokens]], max_n: int = 4) -> dict[int, float]:
    """Distinct-n of each order n = 1…max_n, averaged over prompt groups.

    For one group and order n: (number of unique n-grams) / (total number of n-grams) over all of
    the group's responses pooled (paper 002 Eq. 8, Li et al. 2016). Groups with no n-gram of
    order n (all responses shorter than n) are skipped for that order; an order with no group
    gives NaN. A response is a ``str`` (its characters are the tokens — the lab's tokenizer is
    character level; pass ``s.split()`` for words) or any sequence of hashable tokens.
    """
    if max_n < 1:
        raise AnalysisError("max_n", f"must be >= 1, got {max_n}")
    out: dict[int, float] = {}
    for n in range(1, max_n + 1):
        ratios = []
        for group in groups:
            grams = [g for resp in group for g in _ngrams(resp, n)]
            if grams:
                ratios.append(len(set(grams)) / len(grams))
        out[n] = float(np.mean(ratios)) if ratios else math.nan
    return out


def ngram_diversity(groups: Sequence[Sequence[Tokens]], max_n: int = 4) -> float:
    """N-gram diversity (paper 002 App. C.1): mean over n = 1…max_n of :func:`ngram_diversity_per_n`.

    1 means no n-gram repeats within any group; lower means the responses to a prompt share more
    n-grams. NaN-free orders only are averaged.
    """
    vals = [v for v in ngram_diversity_per_n(groups, max_n).values() if not math.isnan(v)]
    return float(np.mean(vals)) if vals else math.nan


def bleu(hypothesis: Tokens, references: Sequence[Tokens], max_n: int = 4, smoothing: float | None = 0.1) -> float:
    """Sentence BLEU of one hypothesis against several references (Papineni et al., 2002).

    ``BLEU = BP · exp(Σ_{n=1..max_n} (1/max_n) · log p_n)`` with

    * ``p_n`` the modified n-gram precision: each hypothesis n-gram count is clipped to its
      maximum count in any single reference, summed, divided by the number of hypothesis n-grams;
    * ``BP = 1`` if c > r else ``exp(1 − r/c)``, c = hypothesis length, r = the reference length
      closest to c (the shorter one on a tie), as in NLTK's ``sentence_bleu``.

    ``smoothing``: a zero match count is replaced by this epsilon (NLTK ``SmoothingFunction
    .method1``, which Texygen's Self-BLEU — Zhu et al., 2018 — uses; 0.1 by default). With
    ``None`` any zero precision makes BLEU 0; with no unigram match BLEU is 0 either way (as in
    NLTK). For hypotheses of at least ``max_n`` tokens this equals NLTK's ``sentence_bleu``
    (checked on 2,000 random cases to 1e-16, with and without method1). Orders above the hypothesis length (no n-gram at
    all) are left out and the geometric mean is taken over orders 1…len(hypothesis) — *ours*; a
    zero there would make every short response score 0. An empty hypothesis scores 0.
    """
    if max_n < 1:
        raise AnalysisError("max_n", f"must be >= 1, got {max_n}")
    if not references:
        raise AnalysisError("references", "BLEU needs at least one reference")
    hyp = tuple(hypothesis)
    c = len(hyp)
    if c == 0:
        return 0.0
    refs = [tuple(r) for r in references]
    log_p = []
    for n in range(1, min(max_n, c) + 1):
        h = Counter(_ngrams(hyp, n))
        max_ref: Counter = Counter()
        for r in refs:
            for g, k in Counter(_ngrams(r, n)).items():
                if k > max_ref[g]:
                    max_ref[g] = k
        matched = sum(min(k, max_ref[g]) for g, k in h.items())
        total = sum(h.values())
        if matched == 0:
            if smoothing is None or n == 1:  # no token in common: 0 even when smoothed (as NLTK)
                return 0.0
            log_p.append(math.log(smoothing / total))
        else:
            log_p.append(math.log(matched / total))
    ref_lens = [len(r) for r in refs]
    r_len = min(ref_lens, key=lambda L: (abs(L - c), L))
    bp = 1.0 if c > r_len else math.exp(1.0 - r_len / c)
    return bp * math.exp(sum(log_p) / len(log_p))


def self_bleu(
    groups: Sequence[Sequence[Tokens]],
    max_n: int = 4,
    smoothing: float | None = 0.1,
    average_orders: bool = False,
) -> float:
    """Self-BLEU (paper 002 App. C.1; Zhu et al., 2018): higher means less diverse.

    Each response of a group is the hypothesis and the *other* responses of the same group the
    references; BLEU (:func:`bleu`, uniform weights over 1…max_n-grams with brevity penalty) is
    averaged over the responses of a group, then over groups (groups with fewer than 2 responses
    are skipped; none left gives NaN).

    ``average_orders=True`` uses the other reading of paper 002's wording ("BLEU scores, averaged
    over 1- to 4-gram"): the arithmetic mean of BLEU-1 … BLEU-max_n instead of BLEU-max_n.
    """
    per_group = []
    for group in groups:
        if len(group) < 2:
            continue
        scores = []
        for i, hyp in enumerate(group):
            refs = [r for j, r in enumerate(group) if j != i]
            if average_orders:
                scores.append(float(np.mean([bleu(hyp, refs, n, smoothing) for n in range(1, max_n + 1)])))
            else:
                scores.append(bleu(hyp, refs, max_n, smoothing))
        per_group.append(float(np.mean(scores)))
    return float(np.mean(per_group)) if per_group else math.nan


# --------------------------------------------------------------------------------------------
# Calibration (paper 002 §5.3)
# --------------------------------------------------------------------------------------------


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
    s, y = _vec(mean_logp, "mean_logp"), _vec(correct, "correct")
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


# --------------------------------------------------------------------------------------------
# EMA entropy (paper 002 App. D.3)
# --------------------------------------------------------------------------------------------


def ema(values: Any, beta: float = 0.6) -> np.ndarray:
    """Exponential moving average ``H̃_k = β·H̃_{k−1} + (1−β)·H_k`` (paper 002 App. D.3, β = 0.6).

    Started at the first finite value (``H̃_0 = H_0``, no zero-initialisation bias). A NaN
    input keeps the previous average (and is NaN before the first finite value).
    """
    if not 0 <= beta < 1:
        raise AnalysisError("beta", f"must be in [0, 1), got {beta}")
    x = _vec(values, "values")
    out = np.full_like(x, math.nan)
    cur = math.nan
    for i, v in enumerate(x):
        if math.isfinite(v):
            cur = v if math.isnan(cur) else beta * cur + (1 - beta) * v
        out[i] = cur
    return out


# --------------------------------------------------------------------------------------------
# Positional entropy (paper 004 Fig. 6a)
# --------------------------------------------------------------------------------------------


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
        y = _vec(correct, "correct") > 0.5
        if y.size != H.shape[0]:
            raise AnalysisError("correct", f"expected {H.shape[0]} values, got {y.size}")
        out["correct"], out["incorrect"] = _profile(y), _profile(~y)
    return out


# --------------------------------------------------------------------------------------------
# Gradient-norm proxy (paper 004 Eq. 4)
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Rising → plateau stage (paper 004)
# --------------------------------------------------------------------------------------------


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
    s, a = _vec(steps, "steps"), _vec(acc, "acc")
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
