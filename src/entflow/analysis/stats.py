"""Summary statistics of runs: windowed best accuracy, Student-t intervals over seeds, audit ranks.
Numbers in, numbers out; nothing here reads a file or formats a cell. (Entropy retention is the
law's: :mod:`entflow.analysis.law`; its windowed form over a fixed number of evaluations,
:func:`window_retention`, is here.)

* Over seeds: mean ± the half-width of a 95 % Student-t interval, n − 1 degrees of freedom.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from entflow.analysis.runs import metric_float, series
from entflow.errors import AnalysisError

__all__ = [
    "AGGREGATE_KEYS",
    "BEST_WINDOW",
    "RETENTION_WINDOW",
    "aggregate_seeds",
    "audit_ranking",
    "audit_table",
    "audited_estimators",
    "band",
    "finite_mean",
    "group_label",
    "has_seed_groups",
    "series_window_retention",
    "t_interval",
    "window_retention",
    "windowed_best",
]

BEST_WINDOW = 3  # "best" validation accuracy = best mean of this many consecutive evaluations
# summary keys averaged over seeds (mean ± 95 % t-interval)
AGGREGATE_KEYS = (
    "entropy_initial",
    "entropy_final",
    "entropy_retention",
    "val_acc_warm",
    "val_acc_best_window",
    "val_acc_gain_window",
    "val_acc_final",
    "val_acc_greedy_final",
    "val_pass_at_k_final",
    "reward_final",
    "law_r2",
    "law_ceiling",
    "distinct_n_last",
    "self_bleu_last",
    "calib_auroc_last",
    "wall_time_s",
)


def finite_mean(x: Iterable[float]) -> float:
    """Mean of the finite values of ``x`` (NaN if there is none)."""
    a = np.asarray([v for v in x if math.isfinite(v)], dtype=np.float64)
    return float(a.mean()) if a.size else math.nan


def windowed_best(steps: np.ndarray, values: np.ndarray, window: int = 3) -> tuple[float, int | None]:
    """Best mean of ``window`` consecutive evaluations and the step ending that window.

    ``steps``, ``values``: ``[K]``. A single maximum over noisy evaluations is biased upward
    (selection); the mean of 3 consecutive evaluations is not much less reactive and far less
    noisy. With fewer than ``window`` evaluations the mean of all of them is used. (NaN, None)
    when there are none.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return math.nan, None
    w = min(window, v.size)
    means = np.convolve(v, np.ones(w) / w, mode="valid")
    i = int(np.argmax(means))
    return float(means[i]), int(np.asarray(steps)[i + w - 1])


RETENTION_WINDOW = 3  # evaluations averaged at each end by window_retention's callers (>= 3)


def window_retention(values: Sequence[float], window: int = RETENTION_WINDOW) -> float:
    """mean(last ``window`` values) / mean(first ``window`` values) of a series ``[K]``.

    The two windows never overlap (K ≥ 2·window is required), so a single noisy evaluation at
    either end cannot set the ratio alone. ``values`` are in evaluation order (e.g. the
    ``val/probe_entropy`` of each validation step); they must be finite and the first window's
    mean > 0."""
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise AnalysisError("window", f"must be an integer >= 1, got {window!r}")
    x = np.asarray(list(values), dtype=np.float64)
    if x.ndim != 1 or x.size < 2 * window:
        raise AnalysisError("values", f"need >= 2 * window = {2 * window} evaluations, got {x.size}")
    if not np.isfinite(x).all():
        raise AnalysisError("values", f"{int((~np.isfinite(x)).sum())} value(s) are NaN or infinite")
    head, tail = float(x[:window].mean()), float(x[-window:].mean())
    if not head > 0:
        raise AnalysisError("values", f"the first {window} values' mean must be > 0, got {head}")
    return tail / head


def series_window_retention(
    records: Sequence[dict[str, Any]], key: str = "val/probe_entropy", window: int = RETENTION_WINDOW
) -> float:
    """:func:`window_retention` of ``key`` over a run's metric records (the records that carry a
    finite value of it, in step order; :func:`entflow.analysis.runs.series`)."""
    return window_retention(series(records, key)[1], window)


def t_interval(values: Iterable[float | None], level: float = 0.95) -> tuple[float, float, int]:
    """(mean, half-width, n) of a Student-t confidence interval over the finite ``values``
    (e.g. one number per seed): half-width = t_{(1+level)/2, n−1} · s / √n, s the sample std
    (ddof 1). n = 1 gives a NaN half-width; no value gives (NaN, NaN, 0)."""
    from scipy import stats

    a = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=np.float64)
    if a.size == 0:
        return math.nan, math.nan, 0
    if a.size == 1:
        return float(a[0]), math.nan, 1
    half = float(stats.t.ppf(0.5 + level / 2, a.size - 1) * a.std(ddof=1) / math.sqrt(a.size))
    return float(a.mean()), half, int(a.size)


def group_label(summary: dict[str, Any]) -> str:
    """The label shared by the seeds of one method (config ``group``; else the run name)."""
    return str(summary.get("group") or summary["name"])


def has_seed_groups(summaries: Sequence[dict[str, Any]]) -> bool:
    """True when at least one group holds more than one run (several seeds of a method)."""
    labels = [group_label(s) for s in summaries]
    return len(set(labels)) < len(labels)


def aggregate_seeds(summaries: Sequence[dict[str, Any]], keys: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One row per group (:func:`group_label`), in order of first appearance: ``group``,
    ``method``, ``seeds`` (list) and, for each numeric key, ``{key: (mean, half-width, n)}`` of the
    95 % t-interval over the group's runs (see :func:`t_interval`)."""
    keys = list(keys or AGGREGATE_KEYS)
    groups: dict[str, list[dict[str, Any]]] = {}
    for s in summaries:
        groups.setdefault(group_label(s), []).append(s)
    rows = []
    for label, runs in groups.items():
        row: dict[str, Any] = {"group": label, "method": runs[0]["method"], "seeds": [r.get("seed") for r in runs]}
        for k in keys:
            row[k] = t_interval(metric_float(r.get(k)) for r in runs)
        rows.append(row)
    return rows


def band(runs: Sequence[Sequence[dict[str, Any]]], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps ``[K]``, mean ``[K]``, 95 % t half-width ``[K]``) of ``key`` over runs (each a list of
    metric records), on the steps every run logged."""
    per_run = [dict(zip(*series(recs, key), strict=True)) for recs in runs]
    common = sorted(set.intersection(*(set(d) for d in per_run))) if per_run else []
    steps = np.asarray(common, dtype=np.float64)
    mean = np.empty(len(common))
    half = np.empty(len(common))
    for i, st in enumerate(common):
        mean[i], half[i], _ = t_interval(d[st] for d in per_run)
    return steps, mean, half


def audit_table(summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows ``{run, estimator, spearman, pearson, mse, rank}``; rank 1 = highest mean Spearman
    within its run (NaN Spearman ranks last, rank None)."""
    rows = []
    for s in summaries:
        sp = s.get("audit_spearman", {})
        ranked = sorted((e for e in sp if math.isfinite(sp[e])), key=lambda e: -sp[e])
        for est in sp:
            rows.append(
                {
                    "run": s["name"],
                    "estimator": est,
                    "spearman": sp[est],
                    "pearson": s.get("audit_pearson", {}).get(est, math.nan),
                    "mse": s.get("audit_mse", {}).get(est, math.nan),
                    "rank": ranked.index(est) + 1 if est in ranked else None,
                }
            )
    return rows


def audited_estimators(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """Every estimator with a mean audit Spearman in any summary, in order of first appearance."""
    ests: list[str] = []
    for s in summaries:
        ests += [e for e in s.get("audit_spearman", {}) if e not in ests]
    return ests


def audit_ranking(summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Estimators ranked across runs: ``{estimator, spearman, pearson, n_runs, rank}`` where
    spearman/pearson are the means over runs of each run's mean (NaN-aware), best first."""
    rows = []
    for e in audited_estimators(summaries):
        sp = [s.get("audit_spearman", {}).get(e, math.nan) for s in summaries]
        pe = [s.get("audit_pearson", {}).get(e, math.nan) for s in summaries]
        rows.append(
            {
                "estimator": e,
                "spearman": finite_mean(sp),
                "pearson": finite_mean(pe),
                "n_runs": sum(map(math.isfinite, sp)),
            }
        )
    rows.sort(key=lambda r: -r["spearman"] if math.isfinite(r["spearman"]) else math.inf)
    rank = 0
    for r in rows:
        r["rank"] = (rank := rank + 1) if math.isfinite(r["spearman"]) else None
    return rows
