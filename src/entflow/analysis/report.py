"""Run directories (docs/design.md §10) → summary table, plots and a self-contained HTML report.

Reads only ``config.yaml`` and ``metrics.jsonl`` of each run. Conventions:

* ``metrics.jsonl``: one JSON object per line; a truncated (unparseable) **last** line is skipped
  (a crash mid-write); an unparseable line elsewhere is an error. ``null`` (how the trainer
  writes NaN) is read as NaN. If a step appears twice (a resumed run re-logging the steps after
  its last checkpoint) the later line wins; records are returned sorted by step.
* The ``step: 0`` line is the warm-started model before training (validation keys); training
  statistics (entropy, reward …) are taken from whatever lines carry them.
* Entropy retention = mean ``entropy`` over the last 20 % of the logged entropy values / mean
  over the first 5 % (each at least one value, counts rounded down).
"""

from __future__ import annotations

import html
import json
import math
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from entflow.analysis.diagnostics import (
    AnalysisError,
    detect_stage_transition,
    ema,
    fit_entropy_law,
    predict_entropy_law,
)
from entflow.core.estimators import ESTIMATORS
from entflow.errors import EntflowError

__all__ = [
    "AUDIT_ESTIMATORS",
    "METHOD_KEYS",
    "RunDirError",
    "audit_ranking",
    "audit_rich_table",
    "audit_table",
    "load_config",
    "load_metrics",
    "print_summary",
    "series",
    "summarize_run",
    "summary_rich_table",
    "wall_time",
    "write_plots",
    "write_report",
]

AUDIT_ESTIMATORS = ESTIMATORS  # the docs/design.md §5 estimators the lab audits
METHOD_KEYS = (
    "steer/weight_mean",
    "steer/weight_min",
    "opefo/lambda",
    "opefo_target/lambda",
    "adaptive_entropy/coef",
    "pos_adv/weight",
    "kl_cov/n_selected",
    "clip_cov/n_selected",
)
INITIAL_FRAC, FINAL_FRAC = 0.05, 0.20
PLOT_NAMES = (
    "entropy.png",
    "val_acc.png",
    "reward.png",
    "response_len.png",
    "method.png",
    "clip.png",
    "flow.png",
    "audit_spearman.png",
    "entropy_vs_acc.png",
    "entropy_band.png",
    "val_acc_band.png",
    "positional_entropy.png",
)
BEST_WINDOW = 3  # "best" validation accuracy = best mean of this many consecutive evaluations
# (metrics key, summary tag) of the §9 diagnostics the trainer logs on validation steps
DIAG_KEYS = (
    ("diag/distinct_n", "distinct_n"),
    ("diag/self_bleu", "self_bleu"),
    ("diag/calib/gap", "calib_gap"),
    ("diag/calib/auroc", "calib_auroc"),
    ("diag/gnorm/mean", "gnorm_mean"),
    ("diag/gnorm/top20_entropy_share", "gnorm_top20_share"),
)
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
# early law prediction fits on the first 15 % of the evaluations: with fewer than 14 of them the
# fit would rest on the 2-point minimum, so it is not reported
MIN_POINTS_EARLY_PREDICTION = 14


class RunDirError(EntflowError, ValueError):
    """A run directory is missing a file or holds a malformed one."""

    def __init__(self, path: Path | str, message: str):
        self.path = Path(path)
        super().__init__(f"{path}: {message}")


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def _num(v: Any) -> float:
    """A metric value as float; None / non-numbers → NaN."""
    if v is None or isinstance(v, bool):
        return math.nan if v is None else float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def load_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Records of ``run_dir/metrics.jsonl`` sorted by step (see the module docstring).

    Raises:
        RunDirError: the file is missing, or a line other than the last is not valid JSON.
    """
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise RunDirError(path, "not found (is this a run directory?)")
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    by_step: dict[Any, dict[str, Any]] = {}
    unstepped: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                continue  # truncated last line: the step in flight when the run died
            raise RunDirError(path, f"line {i + 1} is not valid JSON ({e.msg})") from None
        if not isinstance(rec, dict):
            raise RunDirError(path, f"line {i + 1} is not a JSON object")
        if "step" in rec and isinstance(rec["step"], int | float):
            by_step[rec["step"]] = rec  # a re-logged step (resume): the later line wins
        else:
            unstepped.append(rec)
    return [by_step[k] for k in sorted(by_step)] + unstepped


def load_config(run_dir: str | os.PathLike) -> dict[str, Any]:
    """``run_dir/config.yaml`` as a dict (empty if the file is absent).

    Raises:
        RunDirError: the file is not valid YAML or not a mapping.
    """
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return {}
    try:
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise RunDirError(path, f"not valid YAML ({e})") from None
    if cfg is None:
        return {}
    if not isinstance(cfg, dict):
        raise RunDirError(path, f"expected a mapping, got {type(cfg).__name__}")
    return cfg


def series(
    records: Sequence[dict[str, Any]], key: str, *, min_step: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of ``key`` over the records that carry a finite value of it."""
    xs, ys = [], []
    for r in records:
        if key not in r:
            continue
        v, s = _num(r[key]), _num(r.get("step"))
        if not math.isfinite(v) or not math.isfinite(s) or (min_step is not None and s < min_step):
            continue
        xs.append(s)
        ys.append(v)
    return np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)


# --------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------


def _nanmean(x: Iterable[float]) -> float:
    a = np.asarray([v for v in x if math.isfinite(v)], dtype=np.float64)
    return float(a.mean()) if a.size else math.nan


def _head_tail_means(values: np.ndarray) -> tuple[float, float]:
    n = values.size
    if n == 0:
        return math.nan, math.nan
    k0 = max(1, math.floor(INITIAL_FRAC * n + 1e-9))
    k1 = max(1, math.floor(FINAL_FRAC * n + 1e-9))
    return float(values[:k0].mean()), float(values[-k1:].mean())


def _is_training_line(rec: dict[str, Any]) -> bool:
    return any(k != "step" and not k.startswith(("val/", "time/")) for k in rec)


def law_points(records: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """(steps, entropy, val acc) pairs for the entropy–performance law, and the entropy source.

    Uses ``val/entropy`` — the policy's token entropy on the validation samples, measured by the
    same evaluation, on the same checkpoint, as ``val/acc`` (step 0, the warm start, included).
    The rollout ``entropy`` logged on the same line belongs to the rollout sampled *before*
    that step's update and does not exist at step 0, so it is only the fallback when fewer than
    3 lines carry ``val/entropy``.
    """
    for key in ("val/entropy", "entropy"):
        s, h, r = [], [], []
        for rec in records:
            H, R, st = _num(rec.get(key)), _num(rec.get("val/acc")), _num(rec.get("step"))
            if math.isfinite(H) and math.isfinite(R):
                s.append(st)
                h.append(H)
                r.append(R)
        if len(h) >= 3 or key == "entropy":
            return np.asarray(s), np.asarray(h), np.asarray(r), key
    raise AssertionError("unreachable")


def summarize_run(run_dir: str | os.PathLike) -> dict[str, Any]:
    """One run's headline numbers.

    Keys: ``name``, ``method``, ``task``, ``seed``, ``run_dir``, ``steps`` (number of training
    steps logged), ``n_records``, ``wall_time_s`` (:func:`wall_time`), ``entropy_initial``
    (mean of the first 5 % of logged entropies), ``entropy_final`` (last 20 %),
    ``entropy_retention`` (final / initial), ``reward_final`` (mean ``reward/mean`` over the last
    20 %), ``val_acc_warm`` / ``val_acc_greedy_warm`` (step-0 line), ``val_acc_best`` /
    ``val_acc_best_step`` / ``val_acc_greedy_best`` (evaluations after step 0), ``val_acc_final``
    / ``val_acc_greedy_final`` / ``val_pass_at_k_final`` (last evaluation), ``audit_spearman``,
    ``audit_pearson``, ``audit_mse`` (estimator → nan-aware mean over steps), and the law fit
    ``law_a``, ``law_b``, ``law_r2``, ``law_ceiling`` (NaN when it cannot be fitted),
    ``law_predict_rmse`` (paper 003 App. B.3: fit on the first 15 % of the evaluations, RMSE on the
    rest; NaN with fewer than 14 evaluations) and ``plateau_step`` (rising → plateau, paper 004,
    :func:`~entflow.analysis.diagnostics.detect_stage_transition` on ``val/acc``; None if none).
    Missing quantities are NaN (``None`` for the warm-start step when there is no step-0 line).
    """
    run_dir = Path(run_dir)
    records = load_metrics(run_dir)
    cfg = load_config(run_dir)
    out: dict[str, Any] = {
        "name": str(cfg.get("name") or run_dir.name),
        "group": cfg.get("group"),
        "method": str(cfg.get("method", "?")),
        "task": str(cfg.get("task", "?")),
        "seed": cfg.get("seed"),
        "run_dir": str(run_dir),
        "n_records": len(records),
    }
    train_steps = [_num(r.get("step")) for r in records if _is_training_line(r)]
    train_steps = [s for s in train_steps if math.isfinite(s)]
    out["steps"] = len(train_steps)
    out["wall_time_s"] = wall_time(run_dir, records)

    _, H = series(records, "entropy")
    h0, h1 = _head_tail_means(H)
    out["entropy_initial"], out["entropy_final"] = h0, h1
    out["entropy_retention"] = h1 / h0 if h0 and math.isfinite(h0) and math.isfinite(h1) else math.nan
    _, rew = series(records, "reward/mean")
    out["reward_final"] = _head_tail_means(rew)[1]

    for key, tag in (("val/acc", "val_acc"), ("val/acc_greedy", "val_acc_greedy")):
        s, v = series(records, key)
        warm = v[s == 0]
        out[f"{tag}_warm"] = float(warm[-1]) if warm.size else math.nan
        trained = s > 0
        if trained.any():
            i = int(np.argmax(v[trained]))
            out[f"{tag}_best"] = float(v[trained][i])
            if tag == "val_acc":
                out["val_acc_best_step"] = int(s[trained][i])
        else:
            out[f"{tag}_best"] = math.nan
            if tag == "val_acc":
                out["val_acc_best_step"] = None
        out[f"{tag}_final"] = float(v[-1]) if v.size else math.nan
    _, pk = series(records, "val/pass@k")
    out["val_pass_at_k_final"] = float(pk[-1]) if pk.size else math.nan
    s, v = series(records, "val/acc")
    best, best_step = windowed_best(s[s > 0], v[s > 0], BEST_WINDOW)
    out["val_acc_best_window"], out["val_acc_best_window_step"] = best, best_step
    out["val_acc_gain_window"] = best - out["val_acc_warm"] if math.isfinite(out["val_acc_warm"]) else math.nan
    # §9 diagnostics (logged on validation steps): first and last value of each
    for key, tag in DIAG_KEYS:
        _, d = series(records, key)
        out[f"{tag}_first"] = float(d[0]) if d.size else math.nan
        out[f"{tag}_last"] = float(d[-1]) if d.size else math.nan
    out["pos_entropy_last"] = {
        kind: [_last(records, f"diag/pos_entropy/{kind}/b{i}") for i in range(_n_pos_bins(records))]
        for kind in ("correct", "incorrect")
    }

    for stat in ("spearman", "pearson", "mse"):
        out[f"audit_{stat}"] = {}
        for est in _audit_estimators(records):
            _, v = series(records, f"audit/{est}/{stat}")
            out[f"audit_{stat}"][est] = _nanmean(v)

    _, lh, lr, _src = law_points(records)
    try:
        fit = fit_entropy_law(lh, lr)
        out.update(law_a=fit.a, law_b=fit.b, law_r2=fit.r2, law_ceiling=fit.ceiling)
    except AnalysisError:
        out.update(law_a=math.nan, law_b=math.nan, law_r2=math.nan, law_ceiling=math.nan)
    out["law_predict_rmse"] = math.nan
    if lh.size >= MIN_POINTS_EARLY_PREDICTION:
        try:
            out["law_predict_rmse"] = predict_entropy_law(lh, lr, fit_frac=0.15).rmse
        except AnalysisError:
            pass
    vs, va = series(records, "val/acc")
    try:
        out["plateau_step"] = detect_stage_transition(vs, va).step
    except AnalysisError:
        out["plateau_step"] = None
    return out


def windowed_best(steps: np.ndarray, values: np.ndarray, window: int = 3) -> tuple[float, int | None]:
    """Best mean of ``window`` consecutive evaluations and the step ending that window.

    A single maximum over noisy evaluations is biased upward (selection); the mean of 3
    consecutive evaluations is not much less reactive and far less noisy. With fewer than
    ``window`` evaluations the mean of all of them is used. (NaN, None) when there are none.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return math.nan, None
    w = min(window, v.size)
    means = np.convolve(v, np.ones(w) / w, mode="valid")
    i = int(np.argmax(means))
    return float(means[i]), int(np.asarray(steps)[i + w - 1])


def _last(records: Sequence[dict[str, Any]], key: str) -> float:
    _, v = series(records, key)
    return float(v[-1]) if v.size else math.nan


def _n_pos_bins(records: Sequence[dict[str, Any]]) -> int:
    n = 0
    while any(f"diag/pos_entropy/correct/b{n}" in r for r in records):
        n += 1
    return n


def t_interval(values: Iterable[float], level: float = 0.95) -> tuple[float, float, int]:
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
            row[k] = t_interval(_num(r.get(k)) for r in runs)
        rows.append(row)
    return rows


def _elapsed_total(values: Iterable[float]) -> float:
    """Total time from a file-ordered ``time/elapsed_s`` column whose clock restarts on resume."""
    total, seg, prev = 0.0, 0.0, -math.inf
    seen = False
    for v in values:
        if not math.isfinite(v):
            continue
        seen = True
        if v < prev:  # the clock restarted (resumed run): close the segment
            total += seg
        seg = v
        prev = v
    return total + seg if seen else math.nan


def wall_time(run_dir: str | os.PathLike, records: Sequence[dict[str, Any]] | None = None) -> float:
    """Training wall time in seconds from ``time/elapsed_s``.

    Read from ``metrics.jsonl`` when it carries the key, else from the lab's ``timing.jsonl``
    (file order, truncated last line skipped). The trainer's clock restarts on ``--resume``; each
    restart closes a segment and the segments are summed. NaN when neither file has the key.
    """
    recs = load_metrics(run_dir) if records is None else records
    vals = [_num(r.get("time/elapsed_s")) for r in recs if "time/elapsed_s" in r]
    if vals:
        return _elapsed_total(vals)
    path = Path(run_dir) / "timing.jsonl"
    if not path.is_file():
        return math.nan
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and "time/elapsed_s" in rec:
            vals.append(_num(rec["time/elapsed_s"]))
    return _elapsed_total(vals)


def _audit_estimators(records: Sequence[dict[str, Any]]) -> list[str]:
    """Estimators with audit metrics: the docs/design.md §5 ones first (in order), then any other."""
    seen: list[str] = []
    for r in records:
        for k in r:
            if k.startswith("audit/") and k.count("/") == 2:
                est = k.split("/")[1]
                if est not in seen:
                    seen.append(est)
    return [e for e in AUDIT_ESTIMATORS if e in seen] + [e for e in seen if e not in AUDIT_ESTIMATORS]


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


def audit_ranking(summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Estimators ranked across runs: ``{estimator, spearman, pearson, n_runs, rank}`` where
    spearman/pearson are the means over runs of each run's mean (NaN-aware), best first."""
    ests: list[str] = []
    for s in summaries:
        ests += [e for e in s.get("audit_spearman", {}) if e not in ests]
    rows = []
    for e in ests:
        sp = [s.get("audit_spearman", {}).get(e, math.nan) for s in summaries]
        pe = [s.get("audit_pearson", {}).get(e, math.nan) for s in summaries]
        rows.append(
            {"estimator": e, "spearman": _nanmean(sp), "pearson": _nanmean(pe), "n_runs": sum(map(math.isfinite, sp))}
        )
    rows.sort(key=lambda r: -r["spearman"] if math.isfinite(r["spearman"]) else math.inf)
    rank = 0
    for r in rows:
        r["rank"] = (rank := rank + 1) if math.isfinite(r["spearman"]) else None
    return rows


# --------------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------------

# (header, key, format)
SUMMARY_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("run", "name", "s"),
    ("method", "method", "s"),
    ("steps", "steps", "d"),
    ("H initial", "entropy_initial", ".3f"),
    ("H final", "entropy_final", ".3f"),
    ("H retention", "entropy_retention", ".2f"),
    ("acc warm", "val_acc_warm", ".3f"),
    ("acc best", "val_acc_best", ".3f"),
    ("acc best (3-eval window)", "val_acc_best_window", ".3f"),
    ("acc final", "val_acc_final", ".3f"),
    ("greedy best", "val_acc_greedy_best", ".3f"),
    ("greedy final", "val_acc_greedy_final", ".3f"),
    ("pass@k final", "val_pass_at_k_final", ".3f"),
    ("reward final", "reward_final", ".3f"),
    ("law ceiling", "law_ceiling", ".3f"),
    ("law R²", "law_r2", ".2f"),
    ("law early-pred. RMSE", "law_predict_rmse", ".3f"),
    ("plateau step", "plateau_step", ".0f"),
    ("distinct-n first→last", "distinct_n", "pair"),
    ("Self-BLEU first→last", "self_bleu", "pair"),
    ("calib. AUROC last", "calib_auroc_last", ".2f"),
    ("calib. gap last", "calib_gap_last", "+.2f"),
    ("G top-20 % H share last", "gnorm_top20_share_last", ".2f"),
    ("wall s", "wall_time_s", ".0f"),
)


def _cell(s: dict[str, Any], key: str, spec: str) -> str:
    if spec == "pair":  # first → last of a diagnostic
        return f"{_fmt(s.get(key + '_first'), '.2f')}→{_fmt(s.get(key + '_last'), '.2f')}"
    return _fmt(s.get(key), spec)


def _fmt_ci(t: tuple[float, float, int], spec: str = ".3f") -> str:
    mean, half, n = t
    if n == 0:
        return "–"
    return _fmt(mean, spec) if n == 1 else f"{_fmt(mean, spec)} ± {_fmt(half, spec)}"


def _fmt(v: Any, spec: str) -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and not math.isfinite(v):
        return "–"
    try:
        return format(v, spec)
    except (TypeError, ValueError):
        return str(v)


# the terminal table keeps to the headline columns so that it fits an 80-column terminal
TERMINAL_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("steps", "steps", "d"),
    ("H init", "entropy_initial", ".3f"),
    ("H final", "entropy_final", ".3f"),
    ("H retain", "entropy_retention", ".2f"),
    ("acc warm", "val_acc_warm", ".3f"),
    ("acc best³", "val_acc_best_window", ".3f"),
    ("acc final", "val_acc_final", ".3f"),
    ("greedy", "val_acc_greedy_final", ".3f"),
)


def summary_rich_table(summaries: Sequence[dict[str, Any]], title: str = "entflow runs") -> Any:
    """A ``rich.table.Table`` of the headline columns: run (method), ``TERMINAL_COLUMNS``.

    Numbers never wrap or truncate; the run column folds instead, and the headers wrap.
    """
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD)
    table.add_column("run (method)", justify="left", overflow="fold", min_width=8)
    for header, _, _ in TERMINAL_COLUMNS:
        table.add_column(header, justify="right", no_wrap=False, min_width=5)
    for s in summaries:
        row = [_fmt(s.get(k), spec) for _, k, spec in TERMINAL_COLUMNS]
        label = s["name"] if s["name"] == str(s["method"]).replace("+", "_") else f"{s['name']} ({s['method']})"
        table.add_row(label, *row)
    return table


def audit_rich_table(summaries: Sequence[dict[str, Any]]) -> Any | None:
    """A ``rich.table.Table``: mean audit Spearman, one row per estimator, one column per run
    (rank within the run in brackets); None when no run has audit metrics."""
    from rich.table import Table

    ests: list[str] = []
    for s in summaries:
        ests += [e for e in s.get("audit_spearman", {}) if e not in ests]
    if not ests:
        return None
    from rich import box

    ranks = {(r["run"], r["estimator"]): r["rank"] for r in audit_table(summaries)}
    table = Table(title="audit: mean Spearman (rank)", box=box.SIMPLE_HEAD)
    table.add_column("estimator")
    for s in summaries:
        table.add_column(s["name"], justify="right", overflow="fold")
    for e in ests:
        cells = []
        for s in summaries:
            v = s.get("audit_spearman", {}).get(e, math.nan)
            rank = ranks.get((s["name"], e))
            cells.append(_fmt(v, "+.3f") + (f" ({rank})" if rank else ""))
        table.add_row(e, *cells)
    return table


def print_summary(summaries: Sequence[dict[str, Any] | str | os.PathLike], console: Any = None) -> None:
    """Print the summary table (and the audit table when there are audit metrics) with ``rich``.

    ``summaries``: :func:`summarize_run` dicts, or run directories (summarized here).
    ``console``: a ``rich.console.Console`` (a new one on stdout if None).
    """
    from rich.console import Console

    rows = [s if isinstance(s, dict) else summarize_run(s) for s in summaries]
    # a pipe or CI log gets 120 columns rather than rich's 80, so the table does not wrap
    console = console or Console(width=None if sys.stdout.isatty() else 120)
    console.print(summary_rich_table(rows))
    if has_seed_groups(rows):
        console.print(seeds_rich_table(rows))
    audit = audit_rich_table(rows)
    if audit is not None:
        console.print(audit)


def summary_markdown(summaries: Sequence[dict[str, Any]]) -> str:
    """The summary as a GitHub-flavoured markdown table (plus the audit table when present)."""
    heads = [h for h, _, _ in SUMMARY_COLUMNS]
    lines = ["| " + " | ".join(heads) + " |", "|" + "|".join("---" for _ in heads) + "|"]
    for s in summaries:
        lines.append("| " + " | ".join(_cell(s, k, spec) for _, k, spec in SUMMARY_COLUMNS) + " |")
    if has_seed_groups(summaries):
        lines += ["", "Over seeds (mean ± 95 % t-interval half-width):", "", seeds_markdown(summaries).rstrip("\n")]
    rows = audit_table(summaries)
    if rows:
        lines += [
            "",
            "| run | estimator | mean Spearman | mean Pearson | mean MSE | rank |",
            "|---|---|---|---|---|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r['run']} | {r['estimator']} | {_fmt(r['spearman'], '+.3f')} | {_fmt(r['pearson'], '+.3f')} "
                f"| {_fmt(r['mse'], '.3g')} | {_fmt(r['rank'], 'd')} |"
            )
    return "\n".join(lines) + "\n"


# (header, key, format) of the over-seeds table
SEED_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("H retention", "entropy_retention", ".2f"),
    ("H initial", "entropy_initial", ".3f"),
    ("H final", "entropy_final", ".3f"),
    ("acc warm", "val_acc_warm", ".3f"),
    ("acc best (3-eval window)", "val_acc_best_window", ".3f"),
    ("gain (window − warm)", "val_acc_gain_window", "+.3f"),
    ("acc final", "val_acc_final", ".3f"),
    ("pass@k final", "val_pass_at_k_final", ".3f"),
    ("law R²", "law_r2", ".2f"),
    ("distinct-n last", "distinct_n_last", ".2f"),
    ("Self-BLEU last", "self_bleu_last", ".2f"),
)


def has_seed_groups(summaries: Sequence[dict[str, Any]]) -> bool:
    """True when at least one group holds more than one run (several seeds of a method)."""
    labels = [group_label(s) for s in summaries]
    return len(set(labels)) < len(labels)


def seeds_markdown(summaries: Sequence[dict[str, Any]]) -> str:
    """Mean ± 95 % t-interval half-width over seeds, one row per method group."""
    heads = ["method", "seeds"] + [h for h, _, _ in SEED_COLUMNS]
    lines = ["| " + " | ".join(heads) + " |", "|" + "|".join("---" for _ in heads) + "|"]
    for row in aggregate_seeds(summaries):
        cells = [row["group"], ",".join(str(x) for x in row["seeds"])]
        cells += [_fmt_ci(row[k], spec) for _, k, spec in SEED_COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def seeds_rich_table(summaries: Sequence[dict[str, Any]]) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(title="over seeds: mean ± 95 % t-interval", box=box.SIMPLE_HEAD)
    table.add_column("method", overflow="fold")
    table.add_column("n", justify="right")
    cols = SEED_COLUMNS[:7]
    for h, _, _ in cols:
        table.add_column(h, justify="right")
    for row in aggregate_seeds(summaries):
        table.add_row(row["group"], str(len(row["seeds"])), *[_fmt_ci(row[k], spec) for _, k, spec in cols])
    return table


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, np.generic):
        return _jsonable(v.item())
    return v


# --------------------------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------------------------


def _unique_labels(summaries: Sequence[dict[str, Any]]) -> list[str]:
    labels, seen = [], {}
    for s in summaries:
        base = s["name"]
        seen[base] = seen.get(base, 0) + 1
        labels.append(base if seen[base] == 1 else f"{base} #{seen[base]}")
    return labels


def write_plots(runs: Sequence[tuple[str, Sequence[dict[str, Any]]]], plot_dir: str | os.PathLike) -> list[Path]:
    """Write the overlaid plots for ``runs`` = [(label, records), …] into ``plot_dir``.

    A plot whose keys no run carries is not written. Returns the files written, in report order:
    ``entropy.png``, ``val_acc.png``, ``reward.png``, ``response_len.png``, ``method.png``,
    ``clip.png``, ``flow.png``, ``audit_spearman.png``, ``entropy_vs_acc.png``.
    """
    # Figure objects without pyplot: no global backend switch, no figure registry (safe to call
    # from a notebook or a GUI session); savefig renders PNG through Agg.
    import matplotlib
    from matplotlib.figure import Figure

    plot_dir = Path(plot_dir)
    plot_dir.mkdir(parents=True, exist_ok=True)
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {label: colors[i % len(colors)] for i, (label, _) in enumerate(runs)}
    written: list[Path] = []

    def has(key: str) -> bool:
        return any(series(recs, key)[0].size for _, recs in runs)

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        path = plot_dir / name
        fig.savefig(path, dpi=100)
        written.append(path)

    def line_panel(ax: Any, keys: Sequence[tuple[str, str]], ylabel: str, title: str, smooth: bool = False) -> bool:
        drawn = False
        for label, recs in runs:
            for key, style in keys:
                x, y = series(recs, key)
                if not x.size:
                    continue
                suffix = "" if len(keys) == 1 else f" {key}"
                if smooth and y.size > 2:
                    ax.plot(x, y, style, color=color[label], alpha=0.25, lw=1)
                    ax.plot(x, ema(y), style, color=color[label], lw=1.6, label=f"{label}{suffix}")
                else:
                    ax.plot(
                        x,
                        y,
                        style,
                        color=color[label],
                        lw=1.6,
                        marker="." if x.size < 30 else None,
                        label=f"{label}{suffix}",
                    )
                drawn = True
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend(fontsize=7)
        return drawn

    def simple_plot(name: str, keys: Sequence[tuple[str, str]], ylabel: str, title: str, smooth: bool) -> None:
        if not any(has(k) for k, _ in keys):
            return
        fig = Figure(figsize=(7, 4))
        ax = fig.subplots()
        line_panel(ax, keys, ylabel, title, smooth)
        save(fig, name)

    ema_note = "(faint: raw; solid: EMA β=0.6)"
    simple_plot("entropy.png", [("entropy", "-")], "entropy (nats)", f"Rollout token entropy {ema_note}", True)
    simple_plot(
        "val_acc.png",
        [("val/acc", "-"), ("val/acc_greedy", "--")],
        "accuracy",
        "Validation accuracy (solid: T=1, mean over k samples; dashed: greedy)",
        False,
    )
    simple_plot("reward.png", [("reward/mean", "-")], "mean reward", f"Training reward {ema_note}", True)
    simple_plot("response_len.png", [("response/len_mean", "-")], "tokens", "Mean response length", False)
    present = [k for k in METHOD_KEYS if has(k)]
    if present:
        fig = Figure(figsize=(7, 2.6 * len(present)))
        axes = fig.subplots(len(present), 1, squeeze=False)
        for ax, key in zip(axes[:, 0], present, strict=True):
            line_panel(ax, [(key, "-")], key, f"method value {key}")
        save(fig, "method.png")
    simple_plot(
        "clip.png",
        [("clip/frac_high", "-"), ("clip/frac_low", "--")],
        "fraction of tokens",
        "Clipped fraction (solid: high bound; dashed: low bound)",
        False,
    )
    simple_plot(
        "flow.png",
        [("flow/lambda_star", "-")],
        "λ*",
        "Entropy-flow balance λ* = (S− − S+)/(S− + S+), OPEFO estimator",
        False,
    )

    ests: list[str] = []
    for _, recs in runs:
        ests += [e for e in _audit_estimators(recs) if e not in ests]
    ests = [e for e in ests if has(f"audit/{e}/spearman")]
    if ests:
        fig = Figure(figsize=(7, 2.4 * len(ests)))
        axes = fig.subplots(len(ests), 1, squeeze=False, sharex=True)
        for ax, est in zip(axes[:, 0], ests, strict=True):
            line_panel(ax, [(f"audit/{est}/spearman", "-")], "Spearman", f"estimator {est}: Spearman vs true ΔH")
            ax.axhline(0, color="k", lw=0.5)
        save(fig, "audit_spearman.png")

    n_bins = max((_n_pos_bins(recs) for _, recs in runs), default=0)
    if n_bins:  # paper 004 Fig. 6a: entropy by relative position, at the last evaluation
        fig = Figure(figsize=(7, 4))
        ax = fig.subplots()
        centres = (np.arange(n_bins) + 0.5) / n_bins
        for label, recs in runs:
            for kind, style in (("correct", "-"), ("incorrect", "--")):
                y = [_last(recs, f"diag/pos_entropy/{kind}/b{i}") for i in range(n_bins)]
                if any(math.isfinite(v) for v in y):
                    ax.plot(centres, y, style, marker=".", color=color[label], label=f"{label} {kind}")
        ax.set_xlabel("relative position in the response")
        ax.set_ylabel("mean token entropy (nats)")
        ax.set_title("Positional entropy at the last evaluation (solid: correct; dashed: incorrect)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
        save(fig, "positional_entropy.png")

    if has("val/acc"):
        fig = Figure(figsize=(6, 4.5))
        ax = fig.subplots()
        drawn = False
        for label, recs in runs:
            _, h, r, src = law_points(recs)
            if not h.size:
                continue
            ax.scatter(h, r, s=14, color=color[label], label=f"{label} ({src})")
            drawn = True
            try:
                fit = fit_entropy_law(h, r)
            except AnalysisError:
                continue
            hh = np.linspace(0.0, max(float(h.max()), 1e-3) * 1.05, 100)
            ax.plot(
                hh,
                fit.predict(hh),
                "--",
                color=color[label],
                lw=1.2,
                label=f"{label}: R = {-fit.a:+.3g}·e^H {fit.b:+.3g} "
                f"(R²={_fmt(fit.r2, '.2f')}, ceiling {fit.ceiling:.3f})",
            )
        if drawn:
            ax.set_xlabel("policy entropy H (nats)")
            ax.set_ylabel("validation accuracy R")
            ax.set_title("Entropy vs accuracy, fitted R = −a·exp(H) + b (paper 003)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
            save(fig, "entropy_vs_acc.png")
    return written


def band(runs: Sequence[Sequence[dict[str, Any]]], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, mean, 95 % t half-width) of ``key`` over runs, on the steps every run logged."""
    per_run = [dict(zip(*series(recs, key), strict=True)) for recs in runs]
    common = sorted(set.intersection(*(set(d) for d in per_run))) if per_run else []
    steps = np.asarray(common, dtype=np.float64)
    mean = np.empty(len(common))
    half = np.empty(len(common))
    for i, st in enumerate(common):
        mean[i], half[i], _ = t_interval(d[st] for d in per_run)
    return steps, mean, half


def write_band_plots(groups: dict[str, list[list[dict[str, Any]]]], plot_dir: str | os.PathLike) -> list[Path]:
    """``entropy_band.png`` and ``val_acc_band.png``: per method the mean over seeds with a shaded
    95 % t-interval band (the entropy curve is EMA-smoothed per seed first, β = 0.6)."""
    import matplotlib
    from matplotlib.figure import Figure

    plot_dir = Path(plot_dir)
    plot_dir.mkdir(parents=True, exist_ok=True)
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    written = []
    for key, name, ylabel in (
        ("entropy", "entropy_band.png", "entropy (nats)"),
        ("val/acc", "val_acc_band.png", "val avg@k"),
    ):
        fig = Figure(figsize=(7, 4))
        ax = fig.subplots()
        drawn = False
        for i, (label, runs) in enumerate(groups.items()):
            if key == "entropy":
                runs = [
                    [{"step": st, key: h} for st, h in zip(x, ema(y), strict=True)]
                    for x, y in (series(r, key) for r in runs)
                ]
            x, m, h = band(runs, key)
            if not x.size:
                continue
            c = colors[i % len(colors)]
            ax.plot(x, m, color=c, lw=1.6, label=f"{label} (n={len(runs)})")
            hh = np.nan_to_num(h)
            ax.fill_between(x, m - hh, m + hh, color=c, alpha=0.2)
            drawn = True
        if not drawn:
            continue
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{ylabel}: mean over seeds ± 95 % t-interval")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = plot_dir / name
        fig.savefig(path, dpi=100)
        written.append(path)
    return written


# --------------------------------------------------------------------------------------------
# HTML report
# --------------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f3f3f3} td.l,th.l{text-align:left}
img{max-width:100%;border:1px solid #eee;margin:0.5em 0}
pre{background:#f7f7f7;padding:0.8em;overflow-x:auto;font-size:0.85em}
.note{color:#666;font-size:0.9em}
"""


def _html_table(heads: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1, cls: str = "") -> str:
    e = html.escape
    th = "".join(f'<th class="l">{e(h)}</th>' if i < left else f"<th>{e(h)}</th>" for i, h in enumerate(heads))
    body = []
    for row in rows:
        tds = "".join(f'<td class="l">{e(c)}</td>' if i < left else f"<td>{e(c)}</td>" for i, c in enumerate(row))
        body.append(f"<tr>{tds}</tr>")
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _render_html(
    summaries: Sequence[dict[str, Any]], configs: Sequence[dict[str, Any]], plots: Sequence[Path], out_dir: Path
) -> str:
    e = html.escape
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>entflow report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>entflow report</h1>",
        f"<p class='note'>{len(summaries)} run(s). Entropy retention = mean entropy over the last 20 % of steps "
        "/ mean over the first 5 %. Warm = the step-0 evaluation of the warm-started model; best over the "
        "evaluations after it. Law = R = −a·exp(H) + b fitted to (rollout entropy, val acc); ceiling = −a + b.</p>",
        "<h2>Summary</h2>",
        _html_table(
            [h for h, _, _ in SUMMARY_COLUMNS],
            [[_cell(s, k, spec) for _, k, spec in SUMMARY_COLUMNS] for s in summaries],
            left=2,
            cls="summary",
        ),
    ]
    if has_seed_groups(summaries):
        agg = aggregate_seeds(summaries)
        parts.append("<h2>Over seeds</h2>")
        parts.append(
            "<p class='note'>Mean over the seeds of each method ± the half-width of a 95 % Student-t "
            "interval (n − 1 degrees of freedom). Best accuracy = best mean of 3 consecutive evaluations.</p>"
        )
        parts.append(
            _html_table(
                ["method", "seeds"] + [h for h, _, _ in SEED_COLUMNS],
                [
                    [r["group"], ",".join(str(x) for x in r["seeds"])]
                    + [_fmt_ci(r[k], spec) for _, k, spec in SEED_COLUMNS]
                    for r in agg
                ],
                left=2,
                cls="seeds",
            )
        )
    rows = audit_table(summaries)
    parts.append("<h2>Estimator audit</h2>")
    if rows:
        parts.append(
            "<p class='note'>Mean over steps of the per-step correlation between each entropy-change estimator "
            "(docs/design.md §5) and the measured ΔH (docs/design.md §9); rank 1 = best mean Spearman within the run "
            "(paper 000 Table 1 reports SRCC 0.61–0.72 for STEER's Ω, 0.04–0.08 for Cov).</p>"
        )
        parts.append(
            _html_table(
                ["run", "estimator", "mean Spearman", "mean Pearson", "mean MSE (scale-fitted)", "rank"],
                [
                    [
                        r["run"],
                        r["estimator"],
                        _fmt(r["spearman"], "+.3f"),
                        _fmt(r["pearson"], "+.3f"),
                        _fmt(r["mse"], ".3g"),
                        _fmt(r["rank"], "d"),
                    ]
                    for r in rows
                ],
                left=2,
                cls="audit",
            )
        )
        if len(summaries) > 1:
            parts.append("<h3>Ranking across runs</h3>")
            parts.append(
                _html_table(
                    ["rank", "estimator", "mean Spearman (over runs)", "mean Pearson (over runs)", "runs with data"],
                    [
                        [
                            _fmt(r["rank"], "d"),
                            r["estimator"],
                            _fmt(r["spearman"], "+.3f"),
                            _fmt(r["pearson"], "+.3f"),
                            str(r["n_runs"]),
                        ]
                        for r in audit_ranking(summaries)
                    ],
                    left=2,
                    cls="ranking",
                )
            )
    else:
        parts.append("<p class='note'>No audit metrics in these runs.</p>")
    parts.append("<h2>Plots</h2>")
    for p in plots:
        rel = p.relative_to(out_dir).as_posix() if p.is_relative_to(out_dir) else os.path.relpath(p, out_dir)
        parts.append(f"<h3>{e(p.stem)}</h3><img src='{e(rel)}' alt='{e(p.stem)}'>")
    parts.append("<h2>Configs</h2>")
    for s, cfg in zip(summaries, configs, strict=True):
        text = yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True) if cfg else "(no config.yaml)\n"
        parts.append(f"<details><summary>{e(s['name'])} — {e(s['run_dir'])}</summary><pre>{e(text)}</pre></details>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_report(run_dirs: Sequence[str | os.PathLike], out_dir: str | os.PathLike) -> Path:
    """Summaries, plots and ``report.html`` for ``run_dirs`` in ``out_dir``; returns the report path.

    Writes ``out_dir/plots/*.png`` (see :func:`write_plots`), ``out_dir/summary.md``,
    ``out_dir/summary.json`` (a list of :func:`summarize_run` dicts, NaN → null) and
    ``out_dir/report.html`` (self-contained apart from the relative ``plots/`` image links).

    Raises:
        RunDirError: no run given, or a run directory cannot be read.
    """
    if not run_dirs:
        raise RunDirError(Path(out_dir), "no run directories given")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dirs = [Path(d) for d in run_dirs]
    summaries = [summarize_run(d) for d in dirs]
    configs = [load_config(d) for d in dirs]
    labels = _unique_labels(summaries)
    for s, label in zip(summaries, labels, strict=True):
        s["name"] = label
    plot_dir = out / "plots"
    for name in PLOT_NAMES:  # a plot of ours that no longer applies must not linger (others' files stay)
        (plot_dir / name).unlink(missing_ok=True)
    plots = write_plots([(label, load_metrics(d)) for label, d in zip(labels, dirs, strict=True)], plot_dir)
    if has_seed_groups(summaries):
        groups: dict[str, list[list[dict[str, Any]]]] = {}
        for s, d in zip(summaries, dirs, strict=True):
            groups.setdefault(group_label(s), []).append(load_metrics(d))
        plots = write_band_plots(groups, plot_dir) + plots
    (out / "summary.md").write_text(summary_markdown(summaries), encoding="utf-8")
    (out / "summary.json").write_text(
        json.dumps(_jsonable(list(summaries)), indent=2, allow_nan=False) + "\n", encoding="utf-8"
    )
    report = out / "report.html"
    report.write_text(_render_html(summaries, configs, plots, out), encoding="utf-8")
    return report
