"""A run directory → the facts a claim of ``entflow reproduce`` reads (docs/reproduction.md).

Each fact comes from one producer below, declared with the names it returns (:func:`_produces`);
:data:`FACTS` — what a claim of the registry may read — is derived from those declarations, and
:func:`run_facts` checks that every producer returned exactly its names, so the list cannot drift
from the code. The law's numbers (its fit, early prediction, entropy retention) come from
:mod:`entflow.analysis.law`, through the report's summary where the report shows them, so
``entflow analyze``, the report and ``entflow reproduce`` agree on one run.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from entflow.analysis.law import early_prediction
from entflow.analysis.runs import law_points, load_config, load_coverage, load_metrics, series
from entflow.analysis.stats import RETENTION_WINDOW, window_retention, windowed_best

__all__ = ["COVERAGE_FACTS", "COVERAGE_FACT_KS", "FACTS", "RunData", "coverage_facts", "run_facts"]


@dataclass(frozen=True)
class RunData:
    """One run directory, read once: its metric records, config and report summary
    (:func:`entflow.analysis.report.summarize_run`)."""

    run_dir: Path
    records: list[dict[str, Any]]
    config: dict[str, Any]
    summary: dict[str, Any]


Producer = Callable[[RunData], dict[str, float]]
_PRODUCERS: list[tuple[tuple[str, ...], Producer]] = []


def _produces(*names: str) -> Callable[[Producer], Producer]:
    """Register a producer of the facts ``names``."""

    def register(fn: Producer) -> Producer:
        _PRODUCERS.append((names, fn))
        return fn

    return register


def _mean(x: np.ndarray) -> float:
    return float(x.mean()) if x.size else math.nan


# the report's summary numbers a claim reads (entropy retention and the law's R² are analysis.law's)
SUMMARY_FACTS = (
    "entropy_retention",
    "entropy_final",
    "val_acc_best_window",
    "val_acc_final",
    "val_acc_warm",
    "val_pass_at_k_final",
    "law_r2",
)


@_produces(*SUMMARY_FACTS)
def _summary_facts(run: RunData) -> dict[str, float]:
    return {k: run.summary[k] for k in SUMMARY_FACTS}


@_produces("opefo_lambda_mean")
def _opefo_lambda(run: RunData) -> dict[str, float]:
    return {"opefo_lambda_mean": _mean(series(run.records, "opefo/lambda")[1])}


@_produces("dH_clipped_low_mean", "dH_clipped_high_mean")
def _clipped_entropy_change(run: RunData) -> dict[str, float]:
    """The estimated entropy change each clip bound removed, per step (docs/design.md §8; Park et
    al. 2025, arXiv 2509.26114: clip-low raises entropy, clip-high lowers it)."""
    return {f"dH_clipped_{b}_mean": _mean(series(run.records, f"flow/dH_clipped_{b}")[1]) for b in ("low", "high")}


@_produces("target_rel_err")
def _adaptive_target(run: RunData) -> dict[str, float]:
    """|final entropy − target| / target of an ``adaptive_entropy`` run (NaN for another method)."""
    if run.config.get("method") != "adaptive_entropy":
        return {"target_rel_err": math.nan}
    target = (run.config.get("method_params") or {}).get("target")
    target = 0.2 if target is None else target
    return {"target_rel_err": abs(run.summary["entropy_final"] - target) / target}


PREDICT_PCTS = (15, 30, 50)
NAIVE = ("last_value", "linear")


@_produces(
    "law_predict_final_abs_err",
    *(f"predict_{p}_law_minus_{n}" for p in PREDICT_PCTS for n in NAIVE),
    *(f"predict_{p}_abs_err_{k}" for p in PREDICT_PCTS for k in ("law", *NAIVE)),
)
def _early_predictions(run: RunData) -> dict[str, float]:
    """The law fitted on the first third of the evaluations (step 0 included) predicts the last one;
    and from the first 15 / 30 / 50 %: the law's absolute error minus each naive forecast's (< 0:
    the law is closer; paper 003 App. B.3). :func:`entflow.analysis.law.early_prediction`."""
    s, h, r, _ = law_points(run.records)
    out = {"law_predict_final_abs_err": abs(early_prediction(s, h, r, 1 / 3).error)}
    for pct in PREDICT_PCTS:
        err = early_prediction(s, h, r, pct / 100).errors()
        for naive in NAIVE:
            out[f"predict_{pct}_law_minus_{naive}"] = abs(err["law"]) - abs(err[naive])
        out |= {f"predict_{pct}_abs_err_{k}": abs(v) for k, v in err.items()}
    return out


@_produces("gain_first_half_share")
def _gain_first_half(run: RunData) -> dict[str, float]:
    """Share of the best-window gain over the warm start reached by mid-training."""
    s, v = series(run.records, "val/acc")
    warm = run.summary["val_acc_warm"]
    gain = run.summary["val_acc_best_window"] - warm
    half = [x for st, x in zip(s, v, strict=True) if 0 < st <= max(s) / 2]
    if not (gain > 0 and half):
        return {"gain_first_half_share": math.nan}
    best, _ = windowed_best(np.arange(len(half)), np.asarray(half))
    return {"gain_first_half_share": (best - warm) / gain}


@_produces("probe_entropy_retention")
def _probe_retention(run: RunData) -> dict[str, float]:
    """A real run's fixed-text probe entropy (``val/probe_entropy``), the mean of its last
    RETENTION_WINDOW evaluations over the mean of its first (:func:`~entflow.analysis.stats.window_retention`);
    NaN for a run without a probe or with fewer than 2 · RETENTION_WINDOW evaluations."""
    _, h = series(run.records, "val/probe_entropy")
    if h.size < 2 * RETENTION_WINDOW:
        return {"probe_entropy_retention": math.nan}
    return {"probe_entropy_retention": window_retention(h, RETENTION_WINDOW)}


# the k of the held-out pass@k facts read from coverage.json (val_pass_at_<k>_final / _warm): 256,
# the lab's pre-registered coverage; 1 (mean accuracy over coverage_n samples) and 4–128, the
# range the real settings' claims judge (their coverage_n is smaller than 256)
COVERAGE_FACT_KS = (1, 4, 8, 16, 32, 64, 128, 256)


@_produces(
    *(f"val_pass_at_{k}_{which}" for k in COVERAGE_FACT_KS for which in ("final", "warm")),
    "val_greedy_final",
    "val_greedy_warm",
    "hard_pass_at_256_final",
)
def _coverage(run: RunData) -> dict[str, float]:
    return coverage_facts(run.run_dir)


@_produces("hard_acc_best_window")
def _hard_window(run: RunData) -> dict[str, float]:
    """Hard-split accuracy (avg@k, logged by tasks with ``hard_set()``): the best mean of 3
    consecutive evaluations, as for val acc."""
    hs, hv = series(run.records, "val/hard_acc")
    return {"hard_acc_best_window": windowed_best(hs, hv)[0] if hv.size else math.nan}


def coverage_facts(run_dir: str | os.PathLike) -> dict[str, float]:
    """Unbiased pass@k of the final policy (``_final``) and of the starting policy (``_warm``: the
    lab's warm start, a real run's model at step 0) on the validation split for each k of
    :data:`COVERAGE_FACT_KS`, the greedy accuracy of each (``val_greedy_*``, a real run's
    ``coverage_greedy``), and pass@256 of the final policy on the hard split, from the run's
    ``coverage.json`` (written when ``coverage_n`` > 0); NaN where the file, the split, or that k
    is absent (k > ``coverage_n``)."""
    data = load_coverage(Path(run_dir))

    def at(k: int, which: str, split: str) -> float:
        v = (((data.get(which) or {}).get("splits") or {}).get(split) or {}).get("pass_at_k", {}).get(str(k))
        return math.nan if v is None else float(v)

    def greedy(which: str) -> float:
        v = (((data.get(which) or {}).get("splits") or {}).get("val") or {}).get("greedy_correct")
        return float(np.mean(v)) if v else math.nan

    out = {f"val_pass_at_{k}_{w}": at(k, w, "val") for k in COVERAGE_FACT_KS for w in ("final", "warm")}
    out |= {f"val_greedy_{w}": greedy(w) for w in ("final", "warm")}
    return out | {"hard_pass_at_256_final": at(256, "final", "hard")}


# every fact a claim may read, derived from the producers' declarations
FACTS = frozenset(name for names, _ in _PRODUCERS for name in names)
# the facts read from coverage.json: a run a claim reads one of is trained with coverage_n = 256
COVERAGE_FACTS = frozenset(next(names for names, fn in _PRODUCERS if fn is _coverage))


def run_facts(run_dir: str | os.PathLike, summary: dict[str, Any] | None = None) -> dict[str, float]:
    """Every fact of :data:`FACTS` for one run directory (``summary``: its
    :func:`~entflow.analysis.report.summarize_run`, computed when not given)."""
    run_dir = Path(run_dir)
    if summary is None:
        from entflow.analysis.report import summarize_run

        summary = summarize_run(run_dir)
    run = RunData(run_dir, load_metrics(run_dir), load_config(run_dir), summary)
    facts: dict[str, float] = {}
    for names, produce in _PRODUCERS:
        got = produce(run)
        if set(got) != set(names):  # a producer's declaration is the list of facts: keep them equal
            raise AssertionError(f"{produce.__name__} returned {sorted(got)}, declared {sorted(names)}")
        facts |= got
    return facts
