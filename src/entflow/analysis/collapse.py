"""Entropy collapse from a training log: :func:`analyze_log` reads any trainer's log
(:mod:`entflow.analysis.log_readers`), finds its keys (:mod:`entflow.analysis.log_keys`) and calls
:func:`analyze_series`, the pure function on the series.

The CLI (``entflow analyze``), the TRL callback (:class:`entflow.integrations.trl.EntropyMonitorCallback`)
and the verl helper (:func:`entflow.integrations.verl.monitor.analyze_metrics`) all call it
(the live ones through :class:`entflow.analysis.collapse_monitor.CollapseMonitor`).
:func:`analyze_series` reads arrays only (no file, no trainer) and returns a :class:`CollapseAnalysis`:

* **law fit** — paper 003 §2.4 Eq. 6: ``R = −a·exp(H) + b`` (ordinary least squares in (a, b),
  :func:`entflow.analysis.law.fit_law`), with 95 % t-intervals on a, b and the
  ceiling ``−a + b`` from the OLS covariance ``s²·(XᵀX)⁻¹``, ``X = [−e^H, 1]``, ``s² = RSS/(n − 2)``;
* **mirror form** — ``R = q·exp(−β·H)`` (docs/reproduction.md: it fits the lab's ``grpo_law`` better),
  nonlinear least squares (``scipy.optimize.curve_fit``), ceiling ``q`` at H = 0;
* **form selection** — :func:`entflow.analysis.law.select_form`: the law's ceiling, unless the mirror
  form predicts the last 30 % of the points (both fitted on the first 70 %) better by more than the
  held-out noise, on at least 5 held-out points; "form uncertain" with both ceilings when the data
  resolve neither form and the two ceilings' intervals do not overlap;
* **early prediction** — paper 003 App. B.3 (:func:`entflow.analysis.law.early_prediction`, whose
  minimum-point rule every early prediction shares): fit on the first ``early_frac`` (15 %) of the points,
  predict R at the last point from its entropy, with a prediction interval (delta method:
  ``ŷ ± t·sqrt(gᵀ·Cov·g + s²)``, g = ∂f/∂θ at the final H; exact for the linear law), next to two
  naive baselines from the same points: the last value carried forward and a straight line in the
  step extrapolated to the final step;
* **entropy** — retention = mean of the last 20 % of the entropies / mean of the first 5 % (each at
  least one value; :func:`entflow.analysis.law.entropy_retention`, as the report), and the first step where the
  EMA of entropy (paper 002 App. D.3, β = 0.6) fell below half its start;
* **verdict** — ``collapsed`` (retention < threshold and the reward has stalled: its late slope is
  at most ``stall_ratio`` × its early slope), ``collapsing`` (retention < threshold, reward still
  rising), ``rising`` (retention > 1/threshold), else ``healthy``; with the evidence as sentences,
  and a suggestion of an entflow method and setting (docs/methods.md);
* **entropy surges** (:func:`analyze_log` only, which has the other curves) — a sustained rise of
  the entropy after a stable phase, and which curve moved first (:mod:`entflow.analysis.surge`).

R is the validation metric when at least :data:`~entflow.analysis.law.MIN_POINTS` validation points are given (paper 003
fits validation accuracy), else the training reward.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from entflow.analysis.arrays import finite_vector
from entflow.analysis.curves import ema
from entflow.analysis.law import (
    EARLY_FRAC,
    HELDOUT_FRAC,
    MIN_HELDOUT_POINTS,
    MIN_POINTS,
    FormChoice,
    FormFit,
    early_prediction,
    entropy_retention,
    fit_law,
    fit_mirror,
    law_with_intervals,
    select_form,
)
from entflow.analysis.log_keys import resolve_keys
from entflow.analysis.log_readers import LogData, read_log
from entflow.analysis.surge import CURVES, SurgeTriage, triage_surges
from entflow.core.clip_settings import CLIP_EPS
from entflow.errors import AnalysisError, LogError
from entflow.files import json_safe

__all__ = [
    "EARLY_FRAC",
    "HELDOUT_FRAC",
    "MIN_R2",
    "RETENTION_THRESHOLD",
    "SCHEMA",
    "STALL_RATIO",
    "SUGGESTIONS",
    "CollapseAnalysis",
    "analyze_log",
    "analyze_series",
    "suggestion_lines",
    "trainer_of",
    "uninformative",
]

SCHEMA = "entflow.analysis/2"

# The verdict's settings, one home for every caller (analyze_series, the live CollapseMonitor, the
# TRL callback, `entflow analyze`); see analyze_series for what each means. The third default,
# EARLY_FRAC (the share of the R points the early prediction is fitted on), is analysis/law.py's.
RETENTION_THRESHOLD = 0.5  # entropy retention below which entropy counts as collapsed
STALL_RATIO = 0.1  # the reward has stalled when its late slope <= this × its early slope

# The one bound of "the fit says something" (docs/analyze.md §2, "When the fit knows little"): a
# ceiling or a prediction is informative only when the selected form explains at least MIN_R2 of
# R's variance and its 95 % interval is no wider than the span of R seen in the log.
MIN_R2 = 0.5


def uninformative(r2: float, interval: Any, span: float) -> str:
    """Why a fitted number (a ceiling or a prediction) is not informative, or ``""`` when it is.

    Args:
        r2: R² of the form it comes from, on all the points.
        interval: its ``[low, high]`` interval.
        span: max − min of the R values in the log.

    Not informative when ``r2 < MIN_R2`` (or undefined), or the interval is not finite or wider than
    ``span``: then it says less than the log itself.
    """
    lo, hi = (float(x) for x in interval)
    if not (math.isfinite(r2) and r2 >= MIN_R2):
        return f"the fit explains little of R (R² {r2:.3f} < {MIN_R2:g})"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "its interval is undefined"
    if hi - lo > span:
        return f"its 95 % interval [{lo:.3g}, {hi:.3g}] is wider than the range of R in the log ({span:.3g})"
    return ""


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    xc = x - x.mean()
    den = float(xc @ xc)
    return float(xc @ (y - y.mean())) / den if den > 0 else math.nan


@dataclass(frozen=True)
class CollapseAnalysis:
    """What :func:`analyze_series` found; :meth:`to_dict` is the ``analysis.json`` schema (docs/analyze.md).

    ``points`` = (steps, H, R) ``[n]`` each: the points the law was fitted on. ``choice`` is the
    form selection (:func:`entflow.analysis.law.select_form`): :attr:`model`, ``heldout_rmse`` and
    ``heldout_n`` are its numbers, :attr:`form_uncertain` whether the form is uncertain.
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
    choice: FormChoice | None = field(repr=False, default=None)
    surge: SurgeTriage | None = field(repr=False, default=None)

    @property
    def selected(self) -> FormFit:
        """The form whose ceiling is reported (:attr:`model`): the law, or the mirror form when the
        held-out points resolve it."""
        return self.mirror if self.model == "mirror" and self.mirror is not None else self.law

    @property
    def form_uncertain(self) -> bool:
        """True when the data resolve neither form and their ceilings disagree beyond their intervals:
        both ceilings are reported, neither as "the ceiling" (:attr:`informative` is False)."""
        return self.choice is not None and self.choice.uncertain

    @property
    def ceiling_ci(self) -> tuple[float, float]:
        """The reported ceiling's interval: the selected form's, or the hull of both when the form is
        uncertain."""
        return self.choice.ceiling_ci if self.choice is not None else self.selected.ci["ceiling"]

    @property
    def ceiling(self) -> float:
        """The selected form's ceiling, R at H = 0: −a + b (paper 003) or q (the mirror form)."""
        return self.selected.ceiling

    @property
    def fit_note(self) -> str:
        """Why the ceiling is not informative (the form is uncertain, or :func:`uninformative`), or ``""``."""
        if self.form_uncertain:
            return self.choice.reason
        return self.form_note(self.selected)

    @property
    def informative(self) -> bool:
        """Whether the ceiling says something (:attr:`fit_note` says why not)."""
        return not self.fit_note

    def form_note(self, form: FormFit) -> str:
        """:func:`uninformative` for one form's ceiling: its R², its CI, the span of the fitted R."""
        return uninformative(form.r2, form.ci["ceiling"], float(np.ptp(self.points[2])))

    def form_dict(self, form: FormFit, params: tuple[str, ...]) -> dict[str, Any]:
        """One form's part of ``analysis.json``'s ``fit``: its parameters, R², ceiling, CIs and whether
        its ceiling is informative (with the note that says why not)."""
        note = self.form_note(form)
        return {
            **{name: form.params[name] for name in params},
            "r2": form.r2,
            "ceiling": form.ceiling,
            "ci": {k: list(v) for k, v in form.ci.items()},
            "informative": not note,
            "note": note,
        }

    def _selection(self) -> dict[str, Any]:
        c = self.choice
        if c is None:
            return {"resolved": None, "gain": math.nan, "noise": math.nan, "min_heldout": None, "reason": ""}
        return {
            "resolved": c.resolved,
            "gain": c.gain,
            "noise": c.noise,
            "min_heldout": MIN_HELDOUT_POINTS,
            "reason": c.reason,
        }

    def to_dict(self) -> dict[str, Any]:
        """The stable ``analysis.json`` object (NaN → None); see docs/analyze.md for every key."""
        law, mir, sel = self.law, self.mirror, self.selected
        out = {
            "schema": SCHEMA,
            "source": self.source,
            "target": self.target,
            "steps": {"first": self.steps[0], "last": self.steps[1], "n_points": self.n_points},
            "fit": {
                "model": sel.model,
                "ceiling": sel.ceiling,
                "ceiling_ci": list(self.ceiling_ci),
                "form_uncertain": self.form_uncertain,
                "r2": sel.r2,
                "informative": self.informative,
                "note": self.fit_note,
                "n": sel.n,
                "level": sel.level,
                "law": self.form_dict(law, ("a", "b")),
                "mirror": None if mir is None else self.form_dict(mir, ("q", "beta")),
                "heldout_rmse": self.heldout_rmse,
                "heldout_n": self.heldout_n,
                "selection": self._selection(),
            },
            "prediction": self.prediction,
            "entropy": self.entropy,
            "reward": self.reward,
            "collapse": self.collapse,
            "suggestion": self.suggestion,
            "surge": None if self.surge is None else self.surge.to_dict(),
        }
        return json_safe(out)


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
    h0, h1, retention = entropy_retention(H)
    smooth = ema(H)  # paper 002 App. D.3, β = 0.6
    below = np.flatnonzero(smooth < 0.5 * h0)
    return {
        "initial": h0,
        "final": h1,
        "retention": retention,
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


def _early_prediction(
    steps: np.ndarray, H: np.ndarray, R: np.ndarray, frac: float, level: float, forms: dict[str, FormFit | None]
) -> dict[str, Any]:
    """:func:`entflow.analysis.law.early_prediction` (its point prediction and naive forecasts),
    with a prediction interval for the law and the mirror form fitted on the same early points.
    ``forms``: the selected form first, then the other, fitted on all the points (their R² decide,
    with the interval, whether the prediction is informative: :func:`uninformative`)."""
    model = next(iter(forms))
    ep = early_prediction(steps, H, R, frac)
    n, n_fit = ep.n, ep.n_fit
    out: dict[str, Any] = {
        "frac": frac,
        "n_fit": n_fit,
        "model": model,
        "final": math.nan,
        "interval": [math.nan, math.nan],
        "observed_final": ep.observed_final,
        "error": math.nan,
        "at_step": ep.at_step,
        "at_entropy": ep.at_entropy,
        "by_model": {},
        "baselines": {},
        "informative": False,
        "note": "",
    }
    if not ep.held_out:
        out["note"] = f"needs more than {n_fit} points to hold any out, got {n}"
        return out
    if ep.fit is not None:
        f = law_with_intervals(H[:n_fit], R[:n_fit], level)
        out["by_model"]["law"] = {"final": ep.final, "interval": list(f.interval(ep.at_entropy)), "error": ep.error}
    try:  # a nonlinear two-parameter form is not fitted on three points
        mirror = fit_mirror(H[:n_fit], R[:n_fit], level) if n_fit >= MIN_POINTS else None
    except AnalysisError:
        mirror = None
    if mirror is not None:
        y = float(mirror.predict(np.array([ep.at_entropy]))[0])
        interval = list(mirror.interval(ep.at_entropy))
        out["by_model"]["mirror"] = {"final": y, "interval": interval, "error": y - ep.observed_final}
    out["baselines"] = {name: {"final": y, "error": y - ep.observed_final} for name, y in ep.naive.items()}
    chosen = out["by_model"].get(model) or out["by_model"].get("law")
    if chosen is not None:
        out["model"] = model if model in out["by_model"] else "law"
        out["final"], out["interval"], out["error"] = chosen["final"], chosen["interval"], chosen["error"]
        form = forms.get(out["model"])
        why = uninformative(form.r2 if form is not None else math.nan, out["interval"], float(np.ptp(R)))
        out["informative"], out["note"] = not why, why
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
        "entropy is spent and the reward has stalled: KL-Cov (paper 003 Alg. 1) penalises the few "
        "high-covariance tokens that drive entropy down, lifting the ceiling",
    ),
    "collapsing": (
        "clip_higher",
        {"clip_low": CLIP_EPS, "clip_high": 0.28},
        f"clip_higher(clip_low={CLIP_EPS!r}, clip_high=0.28)",
        "entropy is falling fast while the reward still rises: Clip-Higher (ε_high = 0.28, DAPO) lets "
        "unlikely tokens with positive advantage grow, slowing the collapse at no extra cost",
    ),
    "rising": (
        "clip_lower",
        {"clip_low": 0.28, "clip_high": CLIP_EPS},
        f"clip_lower(clip_low=0.28, clip_high={CLIP_EPS!r})",
        "entropy is growing: Clip-Lower (paper 002 App. D.1) lowers entropy",
    ),
    "healthy": ("grpo", {}, "grpo()", "entropy is retained: no intervention needed"),
}


TRAINERS = ("entflow", "trl", "verl")
_VERL_LOSS = "actor_rollout_ref.actor.policy_loss"


def trainer_of(log_format: str, entropy_key: str | None) -> str:
    """Which trainer wrote a log, for the suggestion's configuration lines: ``verl`` (a verl
    file-logger log, or verl's ``actor/entropy`` key), ``trl`` (``trainer_state.json``, or TRL's
    ``entropy`` / ``train/entropy`` key in TensorBoard or a CSV export), else ``entflow``."""
    if log_format == "entflow-run":
        return "entflow"
    if log_format == "verl-jsonl" or (entropy_key or "").startswith("actor/"):
        return "verl"
    if log_format == "trl-state" or entropy_key in ("entropy", "train/entropy"):
        return "trl"
    return "entflow"


def suggestion_lines(method: str, params: dict[str, Any], trainer: str) -> list[str]:
    """The lines that switch ``trainer`` to ``method`` with ``params`` (docs/integrations.md): an
    ``entflow train`` command, the ``EntflowGRPOConfig`` fields of TRL, or verl's Hydra overrides.
    Empty for ``grpo`` (no change). The terminal and ``report.html`` both show these lines."""
    if trainer not in TRAINERS:
        raise AnalysisError("trainer", f"unknown trainer {trainer!r}; known: {', '.join(TRAINERS)}")
    if method == "grpo":
        return []
    if trainer == "trl":
        return [
            "from entflow.integrations.trl import EntflowGRPOConfig, EntflowGRPOTrainer",
            "args = EntflowGRPOConfig(",
            "    ...,  # your GRPOConfig arguments",
            f"    entflow_method={method!r},",
            f"    entflow_method_params={params!r},",
            ")",
            "trainer = EntflowGRPOTrainer(..., args=args)  # was: GRPOTrainer",
        ]
    if trainer == "verl":
        return [
            f"{_VERL_LOSS}._target_=entflow.integrations.verl.config.EntflowPolicyLossConfig",
            f"{_VERL_LOSS}.loss_mode=entflow",
            f"+{_VERL_LOSS}.method={method}",
            *(f"+{_VERL_LOSS}.params.{k}={v}" for k, v in params.items()),
            "trainer.use_v1=True",
            "trainer.v1.trainer_mode=entflow",
        ]
    return [f"entflow train --method {method} " + " ".join(f"method.{k}={v}" for k, v in params.items())]


def _suggest(verdict: str, trainer: str = "entflow") -> dict[str, Any]:
    name, params, spec, why = SUGGESTIONS[verdict]
    overrides = " ".join(f"method.{k}={v}" for k, v in params.items())
    return {
        "method": name,
        "params": params,
        "spec": spec,
        "why": why,
        "trainer": trainer,
        "lines": suggestion_lines(name, params, trainer),
        "cli": f"entflow train --method {name} {overrides}".strip(),
        "trl": f"EntflowGRPOConfig(entflow_method={name!r}, entflow_method_params={params!r})",
    }


def _ceiling_evidence(choice: FormChoice, fit_note: str, R_last: float) -> str:
    """The verdict's sentence about the ceiling: the selected form's, or both when the form is uncertain."""
    names = {"law": "law ceiling −a+b", "mirror": "mirror ceiling q"}
    if choice.uncertain and choice.mirror is not None:
        both = ", ".join(
            f"{names[f.model]} = {f.ceiling:.4g} [{f.ci['ceiling'][0]:.4g}, {f.ci['ceiling'][1]:.4g}]"
            for f in (choice.law, choice.mirror)
        )
        return f"form uncertain: {both} vs last R {R_last:.4g}; {choice.reason.removeprefix('form uncertain: ')}"
    form = choice.selected
    if fit_note:
        return f"{names[form.model]}: not informative, {fit_note}"
    lo, hi = form.ci["ceiling"]
    return (
        f"{names[form.model]} = {form.ceiling:.4g} [{lo:.4g}, {hi:.4g}] vs last R {R_last:.4g} "
        f"(headroom {form.ceiling - R_last:.3g}); R² {form.r2:.3f}"
    )


def _verdict(ent: dict[str, Any], rew: dict[str, Any], ceiling: str, threshold: float) -> dict[str, Any]:
    ret = ent["retention"]
    evidence = [
        f"entropy retention {ret:.3g} (mean of the last 20 % / first 5 % of entropies: "
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
    evidence.append(ceiling)
    if not math.isfinite(ret):
        verdict, reason = "healthy", "entropy retention undefined (initial entropy not positive)"
        evidence.append("initial entropy is not positive: retention undefined")
    elif ret < threshold:
        verdict = "collapsed" if rew["stalled"] else "collapsing"
        reason = f"entropy retention {ret:.3g} < {threshold:g}, " + (
            "and the reward has stalled" if rew["stalled"] else "while the reward still rises"
        )
    elif ret > 1 / threshold:
        verdict, reason = "rising", f"entropy retention {ret:.3g} > {1 / threshold:g}: entropy is growing"
    else:
        verdict, reason = "healthy", f"entropy retention {ret:.3g} within [{threshold:g}, {1 / threshold:g}]"
    return {
        "verdict": verdict,
        "collapsed": verdict == "collapsed",
        "threshold": threshold,
        "reason": reason,
        "evidence": evidence,
    }


def analyze_series(
    steps: Any,
    entropy: Any,
    reward: Any,
    *,
    val_steps: Any = None,
    val: Any = None,
    val_entropy: Any = None,
    early_frac: float = EARLY_FRAC,
    level: float = 0.95,
    retention_threshold: float = RETENTION_THRESHOLD,
    stall_ratio: float = STALL_RATIO,
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
    s = finite_vector(steps, "steps")
    H = finite_vector(entropy, "entropy", s.size)
    rew = finite_vector(reward, "reward", s.size)
    if s.size < MIN_POINTS:
        raise AnalysisError("entropy", f"needs >= {MIN_POINTS} logged steps with entropy and reward, got {s.size}")
    _increasing(s, "steps")
    target, Rs, RH, R = "reward", s, H, rew
    if val is not None:
        vs = finite_vector(val_steps, "val_steps")
        v = finite_vector(val, "val", vs.size)
        _increasing(vs, "val_steps")
        if v.size >= MIN_POINTS:
            vh = _nearest(s, H, vs) if val_entropy is None else finite_vector(val_entropy, "val_entropy", vs.size)
            target, Rs, RH, R = "val", vs, vh, v
    if np.ptp(RH) == 0:
        raise AnalysisError("entropy", f"all {RH.size} entropies are equal ({RH[0]:g}): the law has no slope to fit")
    law = fit_law(RH, R, level)
    mirror = fit_mirror(RH, R, level)
    choice = select_form(RH, R, level, law=law, mirror=mirror)
    model = choice.model
    selected, other = (mirror, law) if model == "mirror" else (law, mirror)
    fit_note = (
        choice.reason if choice.uncertain else uninformative(selected.r2, selected.ci["ceiling"], float(np.ptp(R)))
    )
    ent = _entropy_summary(s, H)
    rs = _reward_summary(s, rew, stall_ratio)
    verdict = _verdict(ent, rs, _ceiling_evidence(choice, fit_note, float(R[-1])), retention_threshold)
    forms = {model: selected, ("law" if model == "mirror" else "mirror"): other}
    return CollapseAnalysis(
        target=target,
        steps=(float(s[0]), float(s[-1])),
        n_points=int(R.size),
        law=law,
        mirror=mirror,
        model=model,
        heldout_rmse=choice.heldout_rmse,
        heldout_n=choice.heldout_n,
        prediction=_early_prediction(Rs, RH, R, early_frac, level, forms),
        entropy=ent,
        reward=rs,
        collapse=verdict,
        suggestion=_suggest(verdict["verdict"]),
        points=(Rs, RH, R),
        choice=choice,
    )


def _finite(log: LogData, key: str, strict: bool, warnings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The steps and values of ``key`` without its NaN / ±inf values, each drop counted in
    ``warnings``; with ``strict`` a non-finite value is a :class:`LogError` naming the step."""
    s, v = log.series[key]
    bad = ~np.isfinite(v)
    if bad.any():
        i, n = int(np.flatnonzero(bad)[0]), int(bad.sum())
        if strict:
            raise LogError(log.path, key, f"{n} non-finite value(s), first at step {s[i]:g} ({v[i]}) (strict)")
        warnings.append(f"dropped {n} step(s) where {key} is NaN or inf (first at step {s[i]:g})")
        s, v = s[~bad], v[~bad]
    return s, v


def analyze_log(
    path: str | os.PathLike | LogData,
    *,
    entropy_key: str | None = None,
    reward_key: str | None = None,
    val_key: str | None = None,
    val_entropy_key: str | None = None,
    strict: bool = False,
    **kwargs: Any,
) -> tuple[LogData, CollapseAnalysis]:
    """Read a log (or take a :class:`LogData`) and run :func:`analyze_series` on its series.

    The training series are the steps where both the entropy and the reward key were logged; the
    validation series is the ``val`` key with the ``val_entropy`` key at the same steps (else the
    training entropy at the nearest step). A step whose value of a key used is NaN or ±inf is
    dropped from that key's series, and counted in ``source["warnings"]``; with ``strict`` it is
    refused. ``kwargs`` go to :func:`analyze_series`. The result's ``source`` holds ``format``,
    ``path``, ``keys``, ``notes``, ``warnings`` and ``trainer`` (:func:`trainer_of`, whose lines
    the suggestion carries); its ``surge`` the entropy surges of the entropy key's series with the
    curves of :data:`entflow.analysis.surge.CURVES` the log has
    (:func:`entflow.analysis.surge.triage_surges`).

    Raises:
        LogError: anything :func:`read_log` / :func:`resolve_keys` raise, non-finite values of a
            key used (``strict``), or too few points for the fit (naming the file and the key).
    """
    log = path if isinstance(path, LogData) else read_log(path)
    keys = resolve_keys(
        log, {"entropy": entropy_key, "reward": reward_key, "val": val_key, "val_entropy": val_entropy_key}
    )
    dropped: list[str] = []
    es, ev = _finite(log, keys["entropy"], strict, dropped)
    rs, rv = _finite(log, keys["reward"], strict, dropped)
    steps, ie, ir = np.intersect1d(es, rs, assume_unique=True, return_indices=True)
    val_args: dict[str, Any] = {}
    if keys["val"] is not None:
        vs, vv = _finite(log, keys["val"], strict, dropped)
        val_args = {"val_steps": vs, "val": vv}
        if keys["val_entropy"] is not None:
            hs, hv = _finite(log, keys["val_entropy"], strict, dropped)
            common, _, ih = np.intersect1d(vs, hs, assume_unique=True, return_indices=True)
            if common.size == vs.size:
                val_args["val_entropy"] = hv[ih]
            else:
                keys["val_entropy"] = None
    field_key = {
        "steps": keys["entropy"],
        "entropy": keys["entropy"],
        "reward": keys["reward"],
        "val": keys["val"],
        "val_steps": keys["val"],
        "val_entropy": keys["val_entropy"],
    }
    try:
        result = analyze_series(steps, ev[ie], rv[ir], **val_args, **kwargs)
    except AnalysisError as e:
        key = field_key.get(e.field, e.field)
        msg = str(e).split(": ", 1)[-1]
        if e.field in ("entropy", "steps") and steps.size < len(es):
            msg += f" ({steps.size} steps carry both {keys['entropy']} and {keys['reward']})"
        raise LogError(log.path, key, msg) from None
    keys_used = {k: v for k, v in keys.items() if v is not None}
    if result.target == "reward":
        keys_used = {k: v for k, v in keys_used.items() if k not in ("val", "val_entropy")}
        if keys["val"] is not None:
            log.notes.append(f"{keys['val']} has fewer points than the fit needs: R is the training reward")
    trainer = trainer_of(log.format, keys["entropy"])
    curves = {role: (keys[role], *log.series[keys[role]]) if keys.get(role) else None for role in CURVES}
    surge = triage_surges(es, ev, curves, entropy_key=keys["entropy"])
    source = {
        "format": log.format,
        "path": str(log.path),
        "keys": keys_used,
        "trainer": trainer,
        "notes": list(log.notes),
        "warnings": dropped,
    }
    return log, replace(result, source=source, suggestion=_suggest(result.collapse["verdict"], trainer), surge=surge)
