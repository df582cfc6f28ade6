"""Entropy collapse from a training log's series: one pure function, :func:`analyze_series`.

The CLI (``entflow analyze``), the TRL callback (:class:`entflow.integrations.trl.EntropyMonitorCallback`)
and the verl helper (:func:`entflow.integrations.verl.monitor.analyze_metrics`) all call it. It reads
arrays only (no file, no trainer) and returns a :class:`CollapseAnalysis`:

* **law fit** — paper 003 §2.4 Eq. 6: ``R = −a·exp(H) + b`` (ordinary least squares in (a, b),
  :func:`entflow.analysis.diagnostics.fit_entropy_law`), with 95 % t-intervals on a, b and the
  ceiling ``−a + b`` from the OLS covariance ``s²·(XᵀX)⁻¹``, ``X = [−e^H, 1]``, ``s² = RSS/(n − 2)``;
* **mirror form** — ``R = q·exp(−β·H)`` (docs/reproduction.md: it fits the lab's ``grpo_law`` better),
  nonlinear least squares (``scipy.optimize.curve_fit``), ceiling ``q`` at H = 0; the form used for
  prediction is the one with the smaller **held-out** RMSE: both are fitted on the first 70 % of
  the points (training order) and scored on the last 30 %;
* **early prediction** — paper 003 App. B.3: fit on the first ``early_frac`` (15 %) of the points,
  predict R at the last point from its entropy, with a prediction interval (delta method:
  ``ŷ ± t·sqrt(gᵀ·Cov·g + s²)``, g = ∂f/∂θ at the final H; exact for the linear law), next to two
  naive baselines from the same points: the last value carried forward and a straight line in the
  step extrapolated to the final step;
* **entropy** — retention = mean of the last 20 % of the entropies / mean of the first 5 % (each at
  least one value; the same convention as ``entflow.analysis.report``), and the first step where the
  EMA of entropy (paper 002 App. D.3, β = 0.6) fell below half its start;
* **verdict** — ``collapsed`` (retention < threshold and the reward has stalled: its late slope is
  at most ``stall_ratio`` × its early slope), ``collapsing`` (retention < threshold, reward still
  rising), ``rising`` (retention > 1/threshold), else ``healthy``; with the evidence as sentences,
  and a suggestion of an entflow method and setting (docs/methods.md).

R is the validation metric when at least :data:`MIN_POINTS` validation points are given (paper 003
fits validation accuracy), else the training reward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import optimize, stats

from entflow.analysis.diagnostics import AnalysisError, ema, fit_entropy_law, naive_forecasts

__all__ = [
    "HELDOUT_FRAC",
    "MIN_POINTS",
    "SCHEMA",
    "CollapseAnalysis",
    "FormFit",
    "analyze_series",
    "fit_law",
    "fit_mirror",
]

SCHEMA = "entflow.analysis/1"
MIN_POINTS = 4  # two parameters, and two degrees of freedom left for the intervals
HELDOUT_FRAC = 0.30  # model choice: fit on the first 70 % of the points, score on the last 30 %
INITIAL_FRAC, FINAL_FRAC = 0.05, 0.20  # entropy retention, as entflow.analysis.report


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

    The point estimate is :func:`entflow.analysis.diagnostics.fit_entropy_law` (OLS with regressor
    e^H); the covariance of (a, b) is ``s²·(XᵀX)⁻¹`` with ``X = [−e^H, 1]`` and ``s² = RSS/(n − 2)``.

    Raises:
        AnalysisError: fewer than :data:`MIN_POINTS` points, or all entropies equal.
    """
    H, R = np.asarray(entropy, dtype=np.float64), np.asarray(acc, dtype=np.float64)
    if H.size < MIN_POINTS:
        raise AnalysisError("entropy", f"the law fit needs >= {MIN_POINTS} points, got {H.size}")
    return _law(H, R, level)


def _law(H: np.ndarray, R: np.ndarray, level: float) -> FormFit:
    """:func:`fit_law` on n >= 3 points (one degree of freedom: the early prediction's minimum)."""
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


def _fit_form(model: str, H: np.ndarray, R: np.ndarray, level: float) -> FormFit | None:
    return fit_law(H, R, level) if model == "law" else fit_mirror(H, R, level)


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    xc = x - x.mean()
    den = float(xc @ xc)
    return float(xc @ (y - y.mean())) / den if den > 0 else math.nan


@dataclass(frozen=True)
class CollapseAnalysis:
    """What :func:`analyze_series` found; :meth:`to_dict` is the ``analysis.json`` schema (docs/analyze.md).

    ``points`` = (steps, H, R) ``[n]`` each: the points the law was fitted on.
    """

    target: str
    steps: tuple[float, float]
    n_points: int
    law: FormFit
    mirror: FormFit | None
    model: str
    heldout_rmse: dict[str, float]
    heldout_n: int
    prediction: dict[str, Any]
    entropy: dict[str, Any]
    reward: dict[str, Any]
    collapse: dict[str, Any]
    suggestion: dict[str, Any]
    points: tuple[np.ndarray, np.ndarray, np.ndarray] = field(repr=False, default=())
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def ceiling(self) -> float:
        """The law's ceiling −a + b (paper 003)."""
        return self.law.ceiling

    def to_dict(self) -> dict[str, Any]:
        """The stable ``analysis.json`` object (NaN → None); see docs/analyze.md for every key."""
        law, mir = self.law, self.mirror
        out = {
            "schema": SCHEMA,
            "source": self.source,
            "target": self.target,
            "steps": {"first": self.steps[0], "last": self.steps[1], "n_points": self.n_points},
            "fit": {
                "model": self.model,
                "a": law.params["a"],
                "b": law.params["b"],
                "r2": law.r2,
                "ceiling": law.ceiling,
                "n": law.n,
                "level": law.level,
                "ci": {k: list(v) for k, v in law.ci.items()},
                "mirror": None
                if mir is None
                else {
                    "q": mir.params["q"],
                    "beta": mir.params["beta"],
                    "r2": mir.r2,
                    "ceiling": mir.ceiling,
                    "ci": {k: list(v) for k, v in mir.ci.items()},
                },
                "heldout_rmse": self.heldout_rmse,
                "heldout_n": self.heldout_n,
            },
            "prediction": self.prediction,
            "entropy": self.entropy,
            "reward": self.reward,
            "collapse": self.collapse,
            "suggestion": self.suggestion,
        }
        return _jsonable(out)


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _vector(x: Any, name: str, n: int | None = None) -> np.ndarray:
    a = np.asarray(x.detach().cpu().double().numpy() if hasattr(x, "detach") else x, dtype=np.float64).ravel()
    if n is not None and a.size != n:
        raise AnalysisError(name, f"length {a.size} differs from steps length {n}")
    bad = ~np.isfinite(a)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise AnalysisError(name, f"{int(bad.sum())} non-finite value(s), first at index {i} ({a[i]})")
    return a


def _increasing(steps: np.ndarray, name: str) -> None:
    if steps.size > 1 and not np.all(np.diff(steps) > 0):
        i = int(np.flatnonzero(np.diff(steps) <= 0)[0])
        raise AnalysisError(
            name, f"steps must increase; step {steps[i + 1]:g} follows {steps[i]:g} (several runs in one log?)"
        )


def _nearest(steps: np.ndarray, values: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``values`` at the logged step nearest to each query step (the earlier one on a tie)."""
    j = np.clip(np.searchsorted(steps, query), 1, max(steps.size - 1, 1))
    left = np.maximum(j - 1, 0)
    pick = np.where(np.abs(query - steps[left]) <= np.abs(steps[j] - query), left, j)
    return values[pick]


def _entropy_summary(steps: np.ndarray, H: np.ndarray) -> dict[str, Any]:
    n = H.size
    k0 = max(1, math.floor(INITIAL_FRAC * n + 1e-9))
    k1 = max(1, math.floor(FINAL_FRAC * n + 1e-9))
    h0, h1 = float(H[:k0].mean()), float(H[-k1:].mean())
    smooth = ema(H)  # paper 002 App. D.3, β = 0.6
    below = np.flatnonzero(smooth < 0.5 * h0)
    return {
        "initial": h0,
        "final": h1,
        "retention": h1 / h0 if h0 > 0 else math.nan,
        "half_life_step": float(steps[below[0]]) if below.size else None,
        "last": float(H[-1]),
    }


def _reward_summary(steps: np.ndarray, reward: np.ndarray, stall_ratio: float) -> dict[str, Any]:
    w = max(2, reward.size // 4)
    early, late = _slope(steps[:w], reward[:w]), _slope(steps[-w:], reward[-w:])
    return {
        "early_rate": early,
        "late_rate": late,
        "stalled": bool(late <= stall_ratio * max(early, 0.0)),
        "window": w,
        "final": float(reward[-1]),
        "stall_ratio": stall_ratio,
    }


def _choose_model(H: np.ndarray, R: np.ndarray, level: float) -> tuple[str, dict[str, float], int]:
    n_train = max(MIN_POINTS, math.ceil((1 - HELDOUT_FRAC) * H.size - 1e-9))
    n_out = H.size - n_train
    rmse = {"law": math.nan, "mirror": math.nan}
    if n_out < 1:
        return "law", rmse, 0
    for model in rmse:
        try:
            f = _fit_form(model, H[:n_train], R[:n_train], level)
        except AnalysisError:  # e.g. all early entropies equal
            f = None
        if f is not None:
            rmse[model] = float(np.sqrt(np.mean((f.predict(H[n_train:]) - R[n_train:]) ** 2)))
    finite = {k: v for k, v in rmse.items() if math.isfinite(v)}
    model = min(finite, key=lambda k: (finite[k], k != "law")) if finite else "law"
    return model, rmse, n_out


def _early_prediction(
    steps: np.ndarray, H: np.ndarray, R: np.ndarray, frac: float, level: float, model: str
) -> dict[str, Any]:
    n = H.size
    n_fit = max(MIN_POINTS - 1, math.ceil(frac * n - 1e-9))  # three points: one degree of freedom
    out: dict[str, Any] = {
        "frac": frac,
        "n_fit": n_fit,
        "model": model,
        "final": math.nan,
        "interval": [math.nan, math.nan],
        "observed_final": float(R[-1]),
        "error": math.nan,
        "at_step": float(steps[-1]),
        "at_entropy": float(H[-1]),
        "by_model": {},
        "baselines": {},
        "note": "",
    }
    if n_fit >= n:
        out["note"] = f"needs more than {n_fit} points to hold any out, got {n}"
        return out
    for form in ("law", "mirror"):
        try:
            if form == "law":
                f = _law(H[:n_fit], R[:n_fit], level)
            else:  # a nonlinear two-parameter form is not fitted on three points
                f = fit_mirror(H[:n_fit], R[:n_fit], level) if n_fit >= MIN_POINTS else None
        except AnalysisError:
            f = None
        if f is None:
            continue
        y = float(f.predict(np.array([H[-1]]))[0])
        out["by_model"][form] = {"final": y, "interval": list(f.interval(float(H[-1]))), "error": y - float(R[-1])}
    naive = naive_forecasts(steps, R, n_fit, float(steps[-1]))
    out["baselines"] = {name: {"final": y, "error": y - float(R[-1])} for name, y in naive.items()}
    chosen = out["by_model"].get(model) or out["by_model"].get("law")
    if chosen is not None:
        out["model"] = model if model in out["by_model"] else "law"
        out["final"], out["interval"], out["error"] = chosen["final"], chosen["interval"], chosen["error"]
    else:
        out["note"] = "the early points cannot be fitted (all entropies equal?)"
    return out


# verdict -> (method, params, spec, why); spec = repr(entflow.methods.get_method(method, **params)),
# written out so that analysing a log never imports torch (tests/analysis/test_collapse.py checks it)
SUGGESTIONS: dict[str, tuple[str, dict[str, Any], str, str]] = {
    "collapsed": (
        "kl_cov",
        {"ratio": 0.002, "beta": 1.0},
        "kl_cov(ratio=0.002, beta=1.0, keep_ppo_clip=False)",
        "entropy is spent and the reward has stalled at the law's ceiling: KL-Cov (paper 003 Alg. 1) "
        "penalises the few high-covariance tokens that drive entropy down, lifting the ceiling",
    ),
    "collapsing": (
        "clip_higher",
        {"clip_low": 0.2, "clip_high": 0.28},
        "clip_higher(clip_low=0.2, clip_high=0.28)",
        "entropy is falling fast while the reward still rises: Clip-Higher (ε_high = 0.28, DAPO) lets "
        "unlikely tokens with positive advantage grow, slowing the collapse at no extra cost",
    ),
    "rising": (
        "clip_lower",
        {"clip_low": 0.28, "clip_high": 0.2},
        "clip_lower(clip_low=0.28, clip_high=0.2)",
        "entropy is growing: Clip-Lower (paper 002 App. D.1) lowers entropy",
    ),
    "healthy": ("grpo", {}, "grpo()", "entropy is retained: no intervention needed"),
}


def _suggest(verdict: str) -> dict[str, Any]:
    name, params, spec, why = SUGGESTIONS[verdict]
    overrides = " ".join(f"method.{k}={v}" for k, v in params.items())
    return {
        "method": name,
        "params": params,
        "spec": spec,
        "why": why,
        "cli": f"entflow train --method {name} {overrides}".strip(),
        "trl": f"EntflowGRPOConfig(entflow_method={name!r}, entflow_method_params={params!r})",
    }


def _verdict(ent: dict[str, Any], rew: dict[str, Any], law: FormFit, R_last: float, threshold: float) -> dict[str, Any]:
    ret = ent["retention"]
    evidence = [
        f"entropy retention {ret:.3f} (mean of the last 20 % / first 5 % of entropies: "
        f"{ent['final']:.4g} / {ent['initial']:.4g}; threshold {threshold:g})",
    ]
    if ent["half_life_step"] is not None:
        evidence.append(f"entropy (EMA) fell below half its start at step {ent['half_life_step']:g}")
    else:
        evidence.append("entropy (EMA) never fell below half its start")
    evidence.append(
        f"reward slope over the last {rew['window']} points {rew['late_rate']:.3g}/step vs "
        f"{rew['early_rate']:.3g}/step over the first {rew['window']}: "
        + ("stalled" if rew["stalled"] else "still rising")
        + f" (stalled: late <= {rew['stall_ratio']:g} x early)"
    )
    lo, hi = law.ci["ceiling"]
    evidence.append(
        f"law ceiling -a+b = {law.ceiling:.4g} [{lo:.4g}, {hi:.4g}] vs last R {R_last:.4g} "
        f"(headroom {law.ceiling - R_last:.3g}); law R² {law.r2:.3f}"
    )
    if not math.isfinite(ret):
        verdict = "healthy"
        evidence.append("initial entropy is not positive: retention undefined")
    elif ret < threshold:
        verdict = "collapsed" if rew["stalled"] else "collapsing"
    elif ret > 1 / threshold:
        verdict = "rising"
    else:
        verdict = "healthy"
    return {"verdict": verdict, "collapsed": verdict == "collapsed", "threshold": threshold, "evidence": evidence}


def analyze_series(
    steps: Any,
    entropy: Any,
    reward: Any,
    *,
    val_steps: Any = None,
    val: Any = None,
    val_entropy: Any = None,
    early_frac: float = 0.15,
    level: float = 0.95,
    retention_threshold: float = 0.5,
    stall_ratio: float = 0.1,
) -> CollapseAnalysis:
    """Fit, predict and judge entropy collapse from one run's series (see the module docstring).

    Args:
        steps: ``[n]`` training steps, strictly increasing.
        entropy: ``[n]`` policy entropy at each step (nats).
        reward: ``[n]`` mean training reward at each step.
        val_steps: ``[m]`` steps of the validation points (strictly increasing), optional.
        val: ``[m]`` validation metric (accuracy); with at least :data:`MIN_POINTS` points it is R.
        val_entropy: ``[m]`` entropy measured by the same evaluation; if None, the training
            entropy at the nearest logged step is used.
        early_frac: share of the R points the early prediction is fitted on (paper 003 App. B.3: 0.15).
        level: confidence level of every interval.
        retention_threshold: entropy retention below which entropy counts as collapsed.
        stall_ratio: the reward has stalled when its late slope <= this × its early slope.

    Returns:
        :class:`CollapseAnalysis`.

    Raises:
        AnalysisError: (field ``steps``/``entropy``/``reward``/``val``/``val_steps``/``val_entropy``)
            mismatched lengths, non-finite values, steps not increasing, fewer than
            :data:`MIN_POINTS` points, or all entropies equal.
    """
    if not 0 < early_frac < 1:
        raise AnalysisError("early_frac", f"must be in (0, 1), got {early_frac}")
    if not 0 < level < 1:
        raise AnalysisError("level", f"must be in (0, 1), got {level}")
    if not 0 < retention_threshold < 1:
        raise AnalysisError("retention_threshold", f"must be in (0, 1), got {retention_threshold}")
    s = _vector(steps, "steps")
    H = _vector(entropy, "entropy", s.size)
    rew = _vector(reward, "reward", s.size)
    if s.size < MIN_POINTS:
        raise AnalysisError("entropy", f"needs >= {MIN_POINTS} logged steps with entropy and reward, got {s.size}")
    _increasing(s, "steps")
    target, Rs, RH, R = "reward", s, H, rew
    if val is not None:
        vs = _vector(val_steps, "val_steps")
        v = _vector(val, "val", vs.size)
        _increasing(vs, "val_steps")
        if v.size >= MIN_POINTS:
            vh = _nearest(s, H, vs) if val_entropy is None else _vector(val_entropy, "val_entropy", vs.size)
            target, Rs, RH, R = "val", vs, vh, v
    if np.ptp(RH) == 0:
        raise AnalysisError("entropy", f"all {RH.size} entropies are equal ({RH[0]:g}): the law has no slope to fit")
    law = fit_law(RH, R, level)
    mirror = fit_mirror(RH, R, level)
    model, rmse, n_out = _choose_model(RH, R, level)
    if model == "mirror" and mirror is None:
        model = "law"
    ent = _entropy_summary(s, H)
    rs = _reward_summary(s, rew, stall_ratio)
    verdict = _verdict(ent, rs, law, float(R[-1]), retention_threshold)
    return CollapseAnalysis(
        target=target,
        steps=(float(s[0]), float(s[-1])),
        n_points=int(R.size),
        law=law,
        mirror=mirror,
        model=model,
        heldout_rmse=rmse,
        heldout_n=n_out,
        prediction=_early_prediction(Rs, RH, R, early_frac, level, model),
        entropy=ent,
        reward=rs,
        collapse=verdict,
        suggestion=_suggest(verdict["verdict"]),
        points=(Rs, RH, R),
    )
