"""The entropy–performance law of paper 003 and every number computed from it, in one place.

``entflow analyze`` (:mod:`entflow.analysis.collapse`), the report (:mod:`entflow.analysis.report`)
and ``entflow reproduce`` (:mod:`entflow.evidence.facts`) all call this module, so they give the same
number on the same run (``tests/analysis/test_law_agreement.py``).

* :func:`fit_entropy_law` — paper 003 (Cui et al.) §2.4 Eq. 6: ``R = −a·exp(H) + b`` by least
  squares, ceiling ``−a + b``;
* :func:`fit_law` / :func:`fit_mirror` — the same law with t-intervals (OLS covariance), and the
  mirror form ``R = q·exp(−β·H)`` (docs/reproduction.md) by nonlinear least squares;
* :func:`select_form` — which form's ceiling to report: the law, unless the mirror form predicts
  held-out points better by more than their noise on at least :data:`MIN_HELDOUT_POINTS` points;
  "form uncertain" (both ceilings) when the data resolve neither and the two ceilings' intervals
  do not overlap;
* :func:`early_prediction` — paper 003 App. B.3: fit the law on the first ``frac`` of the points,
  predict the rest from their observed entropy, next to the two :func:`naive_forecasts` it must
  beat (the last value carried forward; a straight line in the step). **One minimum-point rule**
  (:func:`early_fit_points`): the early fit uses ``max(3, ⌈frac·n⌉)`` points — three points leave
  one degree of freedom — and a prediction exists only when at least one point is held out;
* :func:`entropy_retention` — mean of the last 20 % of the entropies / mean of the first 5 %
  (:func:`head_tail_means`, each at least one value).

Arrays may be Python sequences, NumPy arrays or (detached) torch tensors. No file, no trainer,
no torch import.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import optimize, stats

from entflow.analysis.arrays import as_vector
from entflow.errors import AnalysisError

__all__ = [
    "EARLY_FRAC",
    "FINAL_FRAC",
    "HELDOUT_FRAC",
    "INITIAL_FRAC",
    "MIN_EARLY_POINTS",
    "MIN_HELDOUT_POINTS",
    "MIN_POINTS",
    "EarlyPrediction",
    "FormChoice",
    "FormFit",
    "LawFit",
    "early_fit_points",
    "early_prediction",
    "entropy_retention",
    "fit_entropy_law",
    "fit_law",
    "fit_mirror",
    "head_tail_means",
    "naive_forecasts",
    "select_form",
]

MIN_POINTS = 4  # a fit with intervals: two parameters and two degrees of freedom left
MIN_EARLY_POINTS = MIN_POINTS - 1  # the early fit: two parameters and one degree of freedom left
EARLY_FRAC = 0.15  # paper 003 App. B.3: the first 15 % of training
INITIAL_FRAC, FINAL_FRAC = 0.05, 0.20  # entropy retention: last 20 % / first 5 %
HELDOUT_FRAC = 0.30  # form selection: fit on the first 70 % of the points, score on the last 30 %
# form selection: the fewest held-out points on which the mirror form may replace the law (with
# fewer, one lucky point decides; 5 held-out points are a log of about 17)
MIN_HELDOUT_POINTS = 5


# --------------------------------------------------------------------------------------------
# The law's point estimate (paper 003 §2.4)
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
        """``−a·exp(H) + b`` for each entropy value ``[m]`` → ``[m]``."""
        return -self.a * np.exp(as_vector(entropy)) + self.b


def fit_entropy_law(entropy: Any, acc: Any) -> LawFit:
    """Fit paper 003's entropy–performance law ``R = −a·exp(H) + b`` by least squares.

    Cui et al., *The Entropy Mechanism of RL for Reasoning LMs* (paper 003), §2 / Fig. 1: without
    entropy intervention, validation performance R is an exponential function of policy entropy H.
    The model is linear in (a, b) with regressor ``exp(H)``, so ordinary least squares is exact:
    slope of R on exp(H) = −a, intercept = b.

    Args:
        entropy: ``[n]`` policy entropy H at each evaluation point (nats).
        acc: ``[n]`` validation performance R at the same points.

    Returns:
        :class:`LawFit` with a, b, R², n and ``ceiling`` (= −a + b).

    Raises:
        AnalysisError: fewer than 2 finite points, or all entropies equal.
    """
    H, R = as_vector(entropy), as_vector(acc)
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


# --------------------------------------------------------------------------------------------
# The law and its mirror form with intervals
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FormFit:
    """One fitted form of R(H): ``law`` (R = −a·e^H + b) or ``mirror`` (R = q·e^(−βH)).

    ``params`` maps the parameter names (``a, b`` or ``q, beta``) to values, ``cov`` is their
    ``[2, 2]`` covariance, ``s2`` the residual variance RSS/(n − 2) and ``ci`` the ``level``
    t-intervals of each parameter and of ``ceiling`` (R at H = 0: −a + b, or q).
    """

    model: str
    params: dict[str, float]
    cov: np.ndarray
    s2: float
    r2: float
    n: int
    level: float
    ceiling: float
    ci: dict[str, tuple[float, float]]

    def predict(self, entropy: Any) -> np.ndarray:
        """R of the form at each entropy ``[m]`` → ``[m]``."""
        H = np.asarray(entropy, dtype=np.float64)
        p = self.params
        if self.model == "law":
            return -p["a"] * np.exp(H) + p["b"]  # paper 003 §2.4 Eq. 6: R = −a·exp(H) + b
        return p["q"] * np.exp(-p["beta"] * H)  # docs/reproduction.md: R ≈ q·e^(−βH)

    def gradient(self, entropy: float) -> np.ndarray:
        """∂R/∂θ at one entropy → ``[2]`` (θ = (a, b) or (q, β))."""
        p = self.params
        if self.model == "law":
            return np.array([-math.exp(entropy), 1.0])
        e = math.exp(-p["beta"] * entropy)
        return np.array([e, -p["q"] * entropy * e])

    def interval(self, entropy: float) -> tuple[float, float]:
        """``level`` prediction interval of a new R at ``entropy``: ŷ ± t·sqrt(gᵀ·Cov·g + s²)."""
        y = float(self.predict(np.array([entropy]))[0])
        g = self.gradient(entropy)
        se = math.sqrt(max(float(g @ self.cov @ g) + self.s2, 0.0))
        t = _t(self.level, self.n)
        return y - t * se, y + t * se


def _t(level: float, n: int) -> float:
    """Two-sided Student t quantile with n − 2 degrees of freedom."""
    return float(stats.t.ppf(0.5 + level / 2, n - 2))


def _r2(R: np.ndarray, fitted: np.ndarray) -> float:
    ss_tot = float(np.sum((R - R.mean()) ** 2))
    return 1.0 - float(np.sum((R - fitted) ** 2)) / ss_tot if ss_tot > 0 else math.nan


def _ci(value: float, var: float, t: float) -> tuple[float, float]:
    se = math.sqrt(max(var, 0.0))
    return value - t * se, value + t * se


def fit_law(entropy: Any, acc: Any, level: float = 0.95) -> FormFit:
    """Paper 003's law ``R = −a·exp(H) + b`` with t-intervals on a, b and the ceiling −a + b.

    Args:
        entropy: ``[n]`` policy entropy H at each point.
        acc: ``[n]`` performance R at the same points.
        level: confidence level of the intervals.

    The point estimate is :func:`fit_entropy_law` (OLS with regressor e^H); the covariance of
    (a, b) is ``s²·(XᵀX)⁻¹`` with ``X = [−e^H, 1]`` and ``s² = RSS/(n − 2)``.

    Raises:
        AnalysisError: fewer than :data:`MIN_POINTS` points, or all entropies equal.
    """
    H, R = np.asarray(entropy, dtype=np.float64), np.asarray(acc, dtype=np.float64)
    if H.size < MIN_POINTS:
        raise AnalysisError("entropy", f"the law fit needs >= {MIN_POINTS} points, got {H.size}")
    return law_with_intervals(H, R, level)


def law_with_intervals(H: np.ndarray, R: np.ndarray, level: float) -> FormFit:
    """:func:`fit_law` on n >= :data:`MIN_EARLY_POINTS` points (one degree of freedom: the early
    prediction's minimum)."""
    law = fit_entropy_law(H, R)
    X = np.stack([-np.exp(H), np.ones_like(H)], axis=1)
    resid = R - X @ np.array([law.a, law.b])
    s2 = float(resid @ resid) / (H.size - 2)
    cov = s2 * np.linalg.inv(X.T @ X)
    t = _t(level, H.size)
    c = np.array([-1.0, 1.0])  # ceiling = −a + b
    ci = {
        "a": _ci(law.a, cov[0, 0], t),
        "b": _ci(law.b, cov[1, 1], t),
        "ceiling": _ci(law.ceiling, float(c @ cov @ c), t),
    }
    return FormFit("law", {"a": law.a, "b": law.b}, cov, s2, law.r2, int(H.size), level, law.ceiling, ci)


def fit_mirror(entropy: Any, acc: Any, level: float = 0.95) -> FormFit | None:
    """The mirror form ``R = q·exp(−β·H)`` by nonlinear least squares; None if it does not converge.

    Started from the log-linear fit ``log R = log q − β·H`` on the points with R > 0 (or q = mean R,
    β = 0 when fewer than two are positive). ``cov`` is scipy's ``pcov`` (scaled by s² = RSS/(n − 2)).

    Raises:
        AnalysisError: fewer than :data:`MIN_POINTS` points.
    """
    H, R = np.asarray(entropy, dtype=np.float64), np.asarray(acc, dtype=np.float64)
    if H.size < MIN_POINTS:
        raise AnalysisError("entropy", f"the mirror fit needs >= {MIN_POINTS} points, got {H.size}")
    pos = R > 0
    if pos.sum() >= 2 and np.ptp(H[pos]) > 0:
        slope, icpt = np.polyfit(H[pos], np.log(R[pos]), 1)
        p0 = [math.exp(icpt), -slope]
    else:
        p0 = [float(R.mean()) or 1.0, 0.0]
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            (q, beta), pcov = optimize.curve_fit(lambda h, q, beta: q * np.exp(-beta * h), H, R, p0=p0, maxfev=2000)
    except (RuntimeError, ValueError, optimize.OptimizeWarning):
        return None
    if not (np.all(np.isfinite(pcov)) and math.isfinite(q) and math.isfinite(beta)):
        return None
    fitted = q * np.exp(-beta * H)
    s2 = float(np.sum((R - fitted) ** 2)) / (H.size - 2)
    t = _t(level, H.size)
    ci = {
        "q": _ci(float(q), pcov[0, 0], t),
        "beta": _ci(float(beta), pcov[1, 1], t),
        "ceiling": _ci(float(q), pcov[0, 0], t),
    }
    params = {"q": float(q), "beta": float(beta)}
    return FormFit("mirror", params, np.asarray(pcov), s2, _r2(R, fitted), int(H.size), level, float(q), ci)


# --------------------------------------------------------------------------------------------
# Which form's ceiling to report
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FormChoice:
    """Which form's ceiling :func:`select_form` reports, and why.

    ``model`` is the form whose ceiling is reported: ``mirror`` only when the held-out test
    ``resolved`` it, else ``law`` (paper 003's form). ``resolved`` is the form that predicts the
    held-out points better by more than their noise, on at least :data:`MIN_HELDOUT_POINTS` of
    them, or None; when it is None, :attr:`ceiling_ci` is the hull of both forms' intervals.
    ``uncertain`` is True when nothing is resolved and the two ceilings' intervals do not overlap:
    the data cannot say which of two different ceilings holds, so both are reported.

    ``heldout_rmse`` / ``heldout_n``: each form fitted on the first 70 % of the points (training
    order) and scored on the last ``heldout_n``; ``gain`` is the mean over those points of the law's
    squared error minus the mirror form's (> 0: the mirror form predicts better), ``noise`` its
    t-quantile × standard error at ``level`` (NaN with fewer than two held-out points or a form that
    could not be fitted); ``reason`` says in one sentence why ``model`` was chosen.
    """

    model: str
    uncertain: bool
    resolved: str | None
    law: FormFit
    mirror: FormFit | None
    heldout_rmse: dict[str, float]
    heldout_n: int
    gain: float
    noise: float
    reason: str

    @property
    def selected(self) -> FormFit:
        """The form whose ceiling is reported (:attr:`model`)."""
        return self.mirror if self.model == "mirror" and self.mirror is not None else self.law

    @property
    def ceiling(self) -> float:
        """The selected form's ceiling (the law's when the form is uncertain)."""
        return self.selected.ceiling

    @property
    def ceiling_ci(self) -> tuple[float, float]:
        """The reported ceiling's interval: the resolved form's; when the data resolve neither form,
        the hull of both forms' intervals (the ceiling is in it if either form holds), so that an
        unresolved choice never reports the law's interval alone on data from the mirror form."""
        lo, hi = self.selected.ci["ceiling"]
        if self.resolved is None and self.mirror is not None:
            mlo, mhi = self.mirror.ci["ceiling"]
            lo, hi = min(lo, mlo), max(hi, mhi)
        return lo, hi


def _disjoint(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[1] < b[0] or b[1] < a[0]


def _heldout_errors(H: np.ndarray, R: np.ndarray, n_train: int, level: float) -> dict[str, np.ndarray | None]:
    """Each form fitted on the first ``n_train`` points: its errors on the rest ``[n − n_train]``,
    or None when it cannot be fitted."""
    out: dict[str, np.ndarray | None] = {}
    for model in ("law", "mirror"):
        try:
            f = (fit_law if model == "law" else fit_mirror)(H[:n_train], R[:n_train], level)
        except AnalysisError:  # e.g. all early entropies equal
            f = None
        out[model] = None if f is None else f.predict(H[n_train:]) - R[n_train:]
    return out


def select_form(
    entropy: Any, acc: Any, level: float = 0.95, *, law: FormFit | None = None, mirror: FormFit | None = None
) -> FormChoice:
    """Which form's ceiling to report: paper 003's law, unless the data resolve the mirror form.

    Both forms are fitted on the first 70 % of the points (training order, :data:`HELDOUT_FRAC`)
    and predict the last 30 %. With ``d_i`` = the law's squared error − the mirror form's at
    held-out point i, the mirror form is selected only when ``mean(d) > t·sd(d)/√m`` (a paired
    t-test at ``level``, m − 1 degrees of freedom) on at least :data:`MIN_HELDOUT_POINTS` held-out
    points; the law is resolved by the mirror image of that test. With fewer points, or a gain
    within the noise, the law's ceiling is reported, and the choice is "form uncertain" when the
    two ceilings' intervals (fitted on all the points) do not overlap.

    Args:
        entropy: ``[n]`` entropy H at each point, in training order.
        acc: ``[n]`` performance R at the same points.
        level: confidence level of the test and of the intervals.
        law, mirror: the forms already fitted on all the points (:func:`fit_law`,
            :func:`fit_mirror`), to avoid fitting them again.

    Raises:
        AnalysisError: fewer than :data:`MIN_POINTS` points, or all entropies equal.
    """
    H, R = np.asarray(entropy, dtype=np.float64), np.asarray(acc, dtype=np.float64)
    law = fit_law(H, R, level) if law is None else law
    mirror = fit_mirror(H, R, level) if mirror is None else mirror
    n_train = max(MIN_POINTS, math.ceil((1 - HELDOUT_FRAC) * H.size - 1e-9))
    m = H.size - n_train
    rmse = {"law": math.nan, "mirror": math.nan}
    gain = noise = math.nan
    if m >= 1:
        errors = _heldout_errors(H, R, n_train, level)
        for model, e in errors.items():
            if e is not None:
                rmse[model] = float(np.sqrt(np.mean(e**2)))
        e_law, e_mir = errors["law"], errors["mirror"]
        if e_law is not None and e_mir is not None:
            d = e_law**2 - e_mir**2  # [m]
            gain = float(d.mean())
            if m >= 2:
                noise = float(stats.t.ppf(0.5 + level / 2, m - 1)) * float(d.std(ddof=1)) / math.sqrt(m)
    resolved = None
    if m >= MIN_HELDOUT_POINTS and math.isfinite(noise):
        resolved = "mirror" if gain > noise else "law" if gain < -noise else None
    model = "mirror" if resolved == "mirror" and mirror is not None else "law"
    uncertain = resolved is None and mirror is not None and _disjoint(law.ci["ceiling"], mirror.ci["ceiling"])
    if resolved is not None:
        better = "mirror form" if resolved == "mirror" else "law"
        reason = (
            f"the {better} predicts the last {m} points better by more than their noise "
            f"(squared-error gain {abs(gain):.3g} > {noise:.3g})"
        )
        if model != resolved:
            reason += "; the mirror form does not converge on all the points"
    elif m < MIN_HELDOUT_POINTS:
        reason = f"{m} held-out point(s) cannot resolve the forms (at least {MIN_HELDOUT_POINTS} needed)"
    elif not math.isfinite(noise):
        reason = "a form cannot be fitted on the first 70 % of the points"
    else:
        reason = f"on the last {m} points the forms' squared-error gain {gain:.3g} is within the noise ±{noise:.3g}"
    if uncertain:
        reason = f"form uncertain: the two ceilings disagree beyond their intervals, and {reason}"
    elif resolved is None:
        reason = f"the law (paper 003's form): {reason}"
    return FormChoice(model, uncertain, resolved, law, mirror, rmse, m, gain, noise, reason)


# --------------------------------------------------------------------------------------------
# Early prediction (paper 003 App. B.3) and the naive forecasts it must beat
# --------------------------------------------------------------------------------------------


def early_fit_points(n: int, frac: float) -> int:
    """How many of ``n`` points (training order) the early fit uses: ``max(3, ⌈frac·n⌉)``, the one
    minimum-point rule of every early prediction (three points leave the two-parameter law one
    degree of freedom). A prediction exists only when this is below ``n``."""
    return max(MIN_EARLY_POINTS, math.ceil(frac * n - 1e-9))


def naive_forecasts(steps: Any, acc: Any, n_fit: int, at_step: float) -> dict[str, float]:
    """The two naive forecasts an early prediction must beat, from the first ``n_fit`` points
    (``steps`` / ``acc`` ``[K]``, training order): ``last_value`` carries the last fitted accuracy
    forward; ``linear`` extrapolates the least-squares line in steps to ``at_step``."""
    S, R = as_vector(steps)[:n_fit], as_vector(acc)[:n_fit]
    if S.size < 2:
        raise AnalysisError("n_fit", f"a line needs two points, got {S.size}")
    slope, intercept = np.polyfit(S, R, 1)
    return {"last_value": float(R[-1]), "linear": float(slope * at_step + intercept)}


@dataclass(frozen=True)
class EarlyPrediction:
    """The law fitted on the first ``n_fit`` points, predicting the rest.

    ``fit`` is None when nothing is held out or the early points cannot be fitted (all entropies
    equal). ``predicted`` ``[m]`` is the law's R at the held-out points from their observed entropy
    (empty without a fit), ``observed`` ``[m]`` their observed R; ``last`` = (step, entropy, R) of the
    last point; ``naive`` the :func:`naive_forecasts` of the last point (empty when nothing is held
    out). Undefined numbers are NaN.
    """

    frac: float
    n_fit: int
    fit: LawFit | None
    predicted: np.ndarray = field(repr=False)
    observed: np.ndarray = field(repr=False)
    last: tuple[float, float, float]
    naive: dict[str, float]

    @property
    def n(self) -> int:
        """The number of points."""
        return self.n_fit + self.observed.size

    @property
    def held_out(self) -> bool:
        """True when at least one point is left to predict."""
        return self.observed.size > 0

    @property
    def rmse(self) -> float:
        """RMSE of the law over the held-out points."""
        return float(np.sqrt(np.mean((self.predicted - self.observed) ** 2))) if self.predicted.size else math.nan

    @property
    def final(self) -> float:
        """The law's prediction of the last point's R."""
        return float(self.predicted[-1]) if self.predicted.size else math.nan

    @property
    def at_step(self) -> float:
        return self.last[0]

    @property
    def at_entropy(self) -> float:
        return self.last[1]

    @property
    def observed_final(self) -> float:
        return self.last[2]

    @property
    def error(self) -> float:
        """The law's signed error at the last point: predicted − observed."""
        return self.final - self.observed_final

    def errors(self) -> dict[str, float]:
        """Signed errors (predicted − observed) of the final point's three forecasts: ``law``,
        ``last_value``, ``linear`` (NaN for one that cannot be made)."""
        out = {"law": self.error, "last_value": math.nan, "linear": math.nan}
        for name, value in self.naive.items():
            out[name] = value - self.observed_final
        return out


def early_prediction(steps: Any, entropy: Any, acc: Any, frac: float = EARLY_FRAC) -> EarlyPrediction:
    """Fit the law on the first ``frac`` of the points (:func:`early_fit_points`) and predict the
    rest, the last point's accuracy included, from their observed entropy, as paper 003 App. B.3 /
    Fig. 10 does; the naive forecasts see only the early points.

    Args:
        steps: ``[n]`` training steps of the points, in training order.
        entropy: ``[n]`` entropy at each point.
        acc: ``[n]`` accuracy at each point. Points where any of the three is not finite are dropped.
        frac: share of the points the law is fitted on, in (0, 1].

    Raises:
        AnalysisError: ``frac`` not in (0, 1], or the lengths differ.
    """
    if not 0 < frac <= 1:
        raise AnalysisError("frac", f"must be in (0, 1], got {frac}")
    S, H, R = as_vector(steps), as_vector(entropy), as_vector(acc)
    if not S.shape == H.shape == R.shape:
        raise AnalysisError("acc", f"lengths differ: steps {S.size}, entropy {H.size}, acc {R.size}")
    ok = np.isfinite(S) & np.isfinite(H) & np.isfinite(R)
    S, H, R = S[ok], H[ok], R[ok]
    n_fit = min(R.size, early_fit_points(R.size, frac))
    last = (float(S[-1]), float(H[-1]), float(R[-1])) if R.size else (math.nan, math.nan, math.nan)
    fit, pred, naive = None, np.empty(0), {}
    if n_fit < R.size:
        try:
            fit = fit_entropy_law(H[:n_fit], R[:n_fit])
            pred = fit.predict(H[n_fit:])
        except AnalysisError:
            fit = None
        naive = naive_forecasts(S, R, n_fit, last[0])
    return EarlyPrediction(frac, n_fit, fit, pred, R[n_fit:], last, naive)


# --------------------------------------------------------------------------------------------
# Entropy retention
# --------------------------------------------------------------------------------------------


def head_tail_means(values: Any) -> tuple[float, float]:
    """(mean of the first 5 %, mean of the last 20 %) of ``values`` ``[K]``, each over at least one
    value (counts rounded down); (NaN, NaN) when empty."""
    v = as_vector(values)
    n = v.size
    if n == 0:
        return math.nan, math.nan
    k0 = max(1, math.floor(INITIAL_FRAC * n + 1e-9))
    k1 = max(1, math.floor(FINAL_FRAC * n + 1e-9))
    return float(v[:k0].mean()), float(v[-k1:].mean())


def entropy_retention(entropy: Any) -> tuple[float, float, float]:
    """(initial, final, final / initial) of a run's entropies ``[K]`` in step order
    (:func:`head_tail_means`); the ratio is NaN unless both means are finite and the initial one is
    positive."""
    h0, h1 = head_tail_means(entropy)
    ratio = h1 / h0 if math.isfinite(h0) and math.isfinite(h1) and h0 > 0 else math.nan
    return h0, h1, ratio
