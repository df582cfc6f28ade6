"""Run directories (docs/design.md §10) → summary, tables, plots and a self-contained HTML report.

Orchestration only: :func:`summarize_run` gathers one run's headline numbers, :func:`write_report`
writes ``summary.md``, ``summary.json``, the plots and ``report.html``, :func:`print_summary` prints
the terminal tables. The parts live in their own modules:

* :mod:`entflow.analysis.runs` — reading ``config.yaml`` / ``metrics.jsonl`` / ``timing.jsonl``;
* :mod:`entflow.analysis.law` — the law fit, its early prediction, entropy retention;
* :mod:`entflow.analysis.stats` — windowed best, t-intervals over seeds, audit ranks;
* :mod:`entflow.analysis.tables` — the :class:`~entflow.analysis.tables.Table` model and the tables;
* :mod:`entflow.analysis.render` — the same tables as rich (terminal), markdown and HTML;
* :mod:`entflow.analysis.plots` — matplotlib figures.

Only ``config.yaml``, ``metrics.jsonl`` (and ``timing.jsonl`` for the wall time) of each run are
read.
"""

from __future__ import annotations

import html
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from entflow.analysis.curves import detect_stage_transition
from entflow.analysis.law import EARLY_FRAC, early_prediction, entropy_retention, fit_entropy_law, head_tail_means
from entflow.analysis.plots import PLOT_NAMES, write_band_plots, write_passk_plot, write_plots
from entflow.analysis.render import render_html, render_html_page, render_markdown, render_rich, split_columns
from entflow.analysis.runs import (
    audit_estimators,
    is_training_line,
    last_value,
    law_points,
    load_config,
    load_coverage,
    load_metrics,
    metric_float,
    n_position_bins,
    series,
    wall_time,
)
from entflow.analysis.stats import BEST_WINDOW, finite_mean, group_label, has_seed_groups, windowed_best
from entflow.analysis.tables import (
    COVERAGE_KS,
    TERMINAL_SEED_COLUMNS,
    Table,
    audit_detail_table,
    audit_matrix_table,
    audit_ranking_table,
    coverage_table,
    headline_table,
    seeds_table,
    summary_table,
)
from entflow.errors import AnalysisError, RunDirError
from entflow.files import write_json

__all__ = [
    "DIAG_KEYS",
    "audit_rich_table",
    "load_config",
    "load_metrics",
    "print_summary",
    "series",
    "summarize_run",
    "summary_markdown",
    "summary_rich_table",
    "wall_time",
    "write_plots",
    "write_report",
]

# (metrics key, summary tag) of the §9 diagnostics the trainer logs on validation steps
DIAG_KEYS = (
    ("diag/distinct_n", "distinct_n"),
    ("diag/self_bleu", "self_bleu"),
    ("diag/calib/gap", "calib_gap"),
    ("diag/calib/auroc", "calib_auroc"),
    ("diag/gnorm/mean", "gnorm_mean"),
    ("diag/gnorm/top20_entropy_share", "gnorm_top20_share"),
)


# --------------------------------------------------------------------------------------------
# One run's summary
# --------------------------------------------------------------------------------------------


def summarize_run(run_dir: str | os.PathLike) -> dict[str, Any]:
    """One run's headline numbers.

    Keys: ``name``, ``method``, ``task``, ``seed``, ``run_dir``, ``steps`` (number of training
    steps logged), ``n_records``, ``wall_time_s`` (:func:`~entflow.analysis.runs.wall_time`),
    ``entropy_initial`` (mean of the first 5 % of logged entropies), ``entropy_final`` (last 20 %),
    ``entropy_retention`` (final / initial), ``reward_final`` (mean ``reward/mean`` over the last
    20 %), ``val_acc_warm`` / ``val_acc_greedy_warm`` (step-0 line), ``val_acc_best`` /
    ``val_acc_best_step`` / ``val_acc_greedy_best`` (evaluations after step 0), ``val_acc_final``
    / ``val_acc_greedy_final`` / ``val_pass_at_k_final`` (last evaluation), ``audit_spearman``,
    ``audit_pearson``, ``audit_mse`` (estimator → nan-aware mean over steps), and the law fit
    ``law_a``, ``law_b``, ``law_r2``, ``law_ceiling`` (NaN when it cannot be fitted),
    ``law_predict_rmse`` and ``law_predict_error`` (paper 003 App. B.3,
    :func:`~entflow.analysis.law.early_prediction`: fit on the first 15 % of the evaluations, at least
    3; RMSE on the rest, and the signed error at the last one; NaN when no evaluation is left to
    predict) and ``plateau_step`` (rising → plateau, paper 004,
    :func:`~entflow.analysis.curves.detect_stage_transition` on ``val/acc``; None if none).
    Missing quantities are NaN (``None`` for the warm-start step when there is no step-0 line).
    """
    run_dir = Path(run_dir)
    records = load_metrics(run_dir)
    return {
        **_run_identity(run_dir, load_config(run_dir), records),
        **_training_numbers(records),
        **_validation_numbers(records),
        **_diagnostic_numbers(records),
        **_audit_means(records),
        **_law_numbers(records),
        **_coverage_numbers(run_dir),
    }


def _coverage_numbers(run_dir: Path) -> dict[str, Any]:
    """pass@k of the warm start (``_first``) and the final policy (``_last``) per split, for each k
    of :data:`~entflow.analysis.tables.COVERAGE_KS` the run measured and its largest k (``n``
    samples per problem), from ``coverage.json``: keys ``{split}_pass_at_{k}_first`` / ``_last``;
    none when the run measured no coverage."""
    cov = load_coverage(run_dir)
    out: dict[str, Any] = {}
    for which, end in (("warm", "first"), ("final", "last")):
        for split, data in ((cov.get(which) or {}).get("splits") or {}).items():
            curve = data.get("pass_at_k") or {}
            measured = sorted(int(k) for k in curve)
            for k in sorted({k for k in COVERAGE_KS if k in measured} | set(measured[-1:])):
                out[f"{split}_pass_at_{k}_{end}"] = metric_float(curve[str(k)])
    return out


def _run_identity(run_dir: Path, cfg: dict[str, Any], records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    train_steps = [metric_float(r.get("step")) for r in records if is_training_line(r)]
    return {
        "name": str(cfg.get("name") or run_dir.name),
        "group": cfg.get("group"),
        "method": str(cfg.get("method", "?")),
        "task": str(cfg.get("task", "?")),
        "seed": cfg.get("seed"),
        "run_dir": str(run_dir),
        "n_records": len(records),
        "steps": sum(map(math.isfinite, train_steps)),
        "wall_time_s": wall_time(run_dir, records),
    }


def _training_numbers(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    h0, h1, retention = entropy_retention(series(records, "entropy")[1])
    _, reward = series(records, "reward/mean")
    return {
        "entropy_initial": h0,
        "entropy_final": h1,
        "entropy_retention": retention,
        "reward_final": head_tail_means(reward)[1],
    }


def _validation_numbers(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Warm start (step 0), best after it, final; best 3-evaluation window and its gain over warm."""
    out: dict[str, Any] = {}
    for key, tag in (("val/acc", "val_acc"), ("val/acc_greedy", "val_acc_greedy")):
        s, v = series(records, key)
        warm = v[s == 0]
        out[f"{tag}_warm"] = float(warm[-1]) if warm.size else math.nan
        trained = s > 0
        i = int(np.argmax(v[trained])) if trained.any() else None
        out[f"{tag}_best"] = float(v[trained][i]) if i is not None else math.nan
        if tag == "val_acc":
            out["val_acc_best_step"] = int(s[trained][i]) if i is not None else None
        out[f"{tag}_final"] = float(v[-1]) if v.size else math.nan
    out["val_pass_at_k_final"] = last_value(records, "val/pass@k")
    s, v = series(records, "val/acc")
    best, best_step = windowed_best(s[s > 0], v[s > 0], BEST_WINDOW)
    out["val_acc_best_window"], out["val_acc_best_window_step"] = best, best_step
    warm = out["val_acc_warm"]
    out["val_acc_gain_window"] = best - warm if math.isfinite(warm) else math.nan
    return out


def _diagnostic_numbers(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """First and last value of each §9 diagnostic (logged on validation steps), and the last
    positional entropy profile of correct / incorrect responses."""
    out: dict[str, Any] = {}
    for key, tag in DIAG_KEYS:
        _, d = series(records, key)
        out[f"{tag}_first"] = float(d[0]) if d.size else math.nan
        out[f"{tag}_last"] = float(d[-1]) if d.size else math.nan
    bins = range(n_position_bins(records))
    out["pos_entropy_last"] = {
        kind: [last_value(records, f"diag/pos_entropy/{kind}/b{i}") for i in bins] for kind in ("correct", "incorrect")
    }
    return out


def _audit_means(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``audit_{spearman,pearson,mse}``: estimator → NaN-aware mean over the logged steps."""
    estimators = audit_estimators(records)
    return {
        f"audit_{stat}": {est: finite_mean(series(records, f"audit/{est}/{stat}")[1]) for est in estimators}
        for stat in ("spearman", "pearson", "mse")
    }


def _law_numbers(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The entropy–performance law fit (paper 003), its early prediction and the plateau step."""
    s, h, r, _ = law_points(records)
    try:
        fit = fit_entropy_law(h, r)
        out: dict[str, Any] = {"law_a": fit.a, "law_b": fit.b, "law_r2": fit.r2, "law_ceiling": fit.ceiling}
    except AnalysisError:
        out = {"law_a": math.nan, "law_b": math.nan, "law_r2": math.nan, "law_ceiling": math.nan}
    early = early_prediction(s, h, r, EARLY_FRAC)
    out["law_predict_rmse"], out["law_predict_error"] = early.rmse, early.error
    try:
        out["plateau_step"] = detect_stage_transition(*series(records, "val/acc")).step
    except AnalysisError:
        out["plateau_step"] = None
    return out


# --------------------------------------------------------------------------------------------
# Tables of several runs, in the three formats
# --------------------------------------------------------------------------------------------


def _unique_labels(summaries: Sequence[dict[str, Any]]) -> list[str]:
    labels, seen = [], {}
    for s in summaries:
        base = s["name"]
        seen[base] = seen.get(base, 0) + 1
        labels.append(base if seen[base] == 1 else f"{base} #{seen[base]}")
    return labels


def _relabelled(summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``summaries`` whose repeated names get " #2", " #3" … (as in the report)."""
    return [{**s, "name": label} for s, label in zip(summaries, _unique_labels(summaries), strict=True)]


def report_tables(summaries: Sequence[dict[str, Any]]) -> list[tuple[Table, int]]:
    """The report's tables (summary.md and report.html), each with its heading level: summary,
    coverage (when runs measured pass@k), over seeds (when a method has several seeds), estimator
    audit, ranking across runs (audit metrics and more than one run)."""
    tables = [(summary_table(summaries), 2)]
    if (coverage := coverage_table(summaries)).rows:
        tables.append((coverage, 2))
    if has_seed_groups(summaries):
        tables.append((seeds_table(summaries), 2))
    audit = audit_detail_table(summaries)
    tables.append((audit, 2))
    if audit.rows and len(summaries) > 1:
        tables.append((audit_ranking_table(summaries), 3))
    return tables


def terminal_tables(summaries: Sequence[dict[str, Any]]) -> list[Table]:
    """The terminal's compact tables: headline columns, coverage (when runs measured pass@k), over
    seeds (the first seven columns) when a method has several seeds, and the audit matrix when there
    are audit metrics."""
    tables = [headline_table(summaries)]
    if (coverage := coverage_table(summaries)).rows:
        tables.append(coverage)
    if has_seed_groups(summaries):
        tables.append(seeds_table(summaries, TERMINAL_SEED_COLUMNS))
    audit = audit_matrix_table(summaries)
    if audit.rows:
        tables.append(audit)
    return tables


def summary_markdown(summaries: Sequence[dict[str, Any]]) -> str:
    """``summary.md``: the report's tables (:func:`report_tables`) as GitHub-flavoured markdown."""
    return "\n".join(render_markdown(table, level) for table, level in report_tables(summaries))


def print_summary(summaries: Sequence[dict[str, Any] | str | os.PathLike], console: Any = None) -> None:
    """Print the terminal tables (:func:`terminal_tables`) with ``rich``.

    ``summaries``: :func:`summarize_run` dicts, or run directories (summarized here); repeated run
    names are told apart as in the report. ``console``: a ``rich.console.Console`` (a new one on
    stdout if None).
    """
    from rich.console import Console

    rows = _relabelled([s if isinstance(s, dict) else summarize_run(s) for s in summaries])
    # a pipe or CI log gets 120 columns rather than rich's 80, so the table does not wrap
    console = console or Console(width=None if sys.stdout.isatty() else 120)
    for table in terminal_tables(rows):  # a table wider than the terminal is split by columns
        for part in split_columns(table, console.width):
            console.print(render_rich(part))


def summary_rich_table(summaries: Sequence[dict[str, Any]], title: str = "entflow runs") -> Any:
    """The headline table (:func:`~entflow.analysis.tables.headline_table`) as a ``rich.table.Table``."""
    return render_rich(headline_table(summaries, title))


def audit_rich_table(summaries: Sequence[dict[str, Any]]) -> Any | None:
    """The audit matrix (:func:`~entflow.analysis.tables.audit_matrix_table`) as a
    ``rich.table.Table``; None when no run has audit metrics."""
    table = audit_matrix_table(summaries)
    return render_rich(table) if table.rows else None


# --------------------------------------------------------------------------------------------
# The report directory
# --------------------------------------------------------------------------------------------


def _html_report(
    summaries: Sequence[dict[str, Any]], configs: Sequence[dict[str, Any]], plots: Sequence[Path], out_dir: Path
) -> str:
    sections = [f"<p class='note'>{len(summaries)} run(s).</p>"]
    sections += [render_html(table, level) for table, level in report_tables(summaries)]
    sections.append("<h2>Plots</h2>")
    e = html.escape
    for p in plots:
        rel = p.relative_to(out_dir).as_posix() if p.is_relative_to(out_dir) else os.path.relpath(p, out_dir)
        sections.append(f"<h3>{e(p.stem)}</h3><img src='{e(rel)}' alt='{e(p.stem)}'>")
    sections.append("<h2>Configs</h2>")
    for s, cfg in zip(summaries, configs, strict=True):
        text = yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True) if cfg else "(no config.yaml)\n"
        sections.append(f"<details><summary>{e(s['name'])} — {e(s['run_dir'])}</summary><pre>{e(text)}</pre></details>")
    return render_html_page("entflow report", sections)


def write_report(run_dirs: Sequence[str | os.PathLike], out_dir: str | os.PathLike) -> Path:
    """Summaries, plots and ``report.html`` for ``run_dirs`` in ``out_dir``; returns the report path.

    Writes ``out_dir/plots/*.png`` (see :func:`~entflow.analysis.plots.write_plots`),
    ``out_dir/summary.md``, ``out_dir/summary.json`` (a list of :func:`summarize_run` dicts,
    NaN → null) and ``out_dir/report.html`` (self-contained apart from the relative ``plots/``
    image links).

    Raises:
        RunDirError: no run given, or a run directory cannot be read.
    """
    if not run_dirs:
        raise RunDirError(Path(out_dir), "no run directories given")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dirs = [Path(d) for d in run_dirs]
    summaries = _relabelled([summarize_run(d) for d in dirs])
    configs = [load_config(d) for d in dirs]
    plots = _write_all_plots(summaries, dirs, out / "plots")
    (out / "summary.md").write_text(summary_markdown(summaries), encoding="utf-8")
    write_json(out / "summary.json", list(summaries))
    report = out / "report.html"
    report.write_text(_html_report(summaries, configs, plots, out), encoding="utf-8")
    return report


def _write_all_plots(summaries: Sequence[dict[str, Any]], dirs: Sequence[Path], plot_dir: Path) -> list[Path]:
    """The seed bands (when a method has several seeds) then the per-run plots; a plot of ours that
    no longer applies is removed first (other files in ``plot_dir`` stay)."""
    for name in PLOT_NAMES:
        (plot_dir / name).unlink(missing_ok=True)
    plots = write_plots([(s["name"], load_metrics(d)) for s, d in zip(summaries, dirs, strict=True)], plot_dir)
    if has_seed_groups(summaries):
        groups: dict[str, list[list[dict[str, Any]]]] = {}
        for s, d in zip(summaries, dirs, strict=True):
            groups.setdefault(group_label(s), []).append(load_metrics(d))
        plots = write_band_plots(groups, plot_dir) + plots
    # first: the pass@k curves (warm start and every method's final policy), when runs measured them
    coverage = [(group_label(s), load_coverage(d)) for s, d in zip(summaries, dirs, strict=True)]
    return write_passk_plot(coverage, plot_dir) + plots


def write_log_report(log: Any, analysis: Any, out_dir: str | Path, write_json: bool = False) -> Path:
    """``entflow analyze`` on any trainer's log (docs/analyze.md): ``out_dir/report.html`` (the
    title once, the collapse table, the verdict with its evidence, the suggestion with the lines of
    the log's trainer, the entropy-surge triage, the source and its warnings, the plots),
    ``out_dir/plots/*.png`` and, with ``write_json``, ``out_dir/analysis.json``. Returns the report."""
    import dataclasses
    import json

    from entflow import files
    from entflow.analysis.plots import write_collapse_plots
    from entflow.analysis.surge import surge_lines
    from entflow.analysis.tables import TRAINER_NAMES, collapse_table

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = write_collapse_plots(log, analysis, out / "plots")
    d = analysis.to_dict()
    table = collapse_table(analysis)
    e = html.escape
    sug, src, col = d["suggestion"], d["source"], d["collapse"]
    if sug["lines"]:
        trainer = TRAINER_NAMES.get(sug["trainer"], sug["trainer"])
        how = f"<p>In {e(trainer)}:</p><pre>{e(chr(10).join(sug['lines']))}</pre>"
    else:
        how = "<p>No change.</p>"
    items = [f"<li>{e(x)}</li>" for x in (*src.get("warnings", []), *src.get("notes", []))]
    surge = getattr(analysis, "surge", None)
    sections = [
        render_html(dataclasses.replace(table, title="")),  # the title is the page's <h1>
        f"<h2>Verdict: {e(col['verdict'])}</h2><p>{e(col['reason'])}</p><ul>"
        + "".join(f"<li>{e(x)}</li>" for x in col["evidence"])
        + "</ul>",
        f"<h2>Suggestion: {e(sug['spec'])}</h2><p>{e(sug['why'])}</p>{how}",
        *([] if surge is None else [f"<h2>Entropy surge</h2><pre>{e(chr(10).join(surge_lines(surge)))}</pre>"]),
        f"<h2>Source</h2><p>{e(src['format'])}: {e(str(src['path']))}</p><p>keys: {e(json.dumps(src['keys']))}</p>"
        + (f"<ul>{''.join(items)}</ul>" if items else ""),
        *(f'<p><img src="plots/{e(p.name)}" alt="{e(p.name)}" style="max-width:100%"></p>' for p in plots),
    ]
    report = out / "report.html"
    report.write_text(render_html_page(table.title, sections), encoding="utf-8")
    if write_json:
        files.write_json(out / "analysis.json", d)
    return report
