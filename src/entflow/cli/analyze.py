"""``entflow analyze PATH [PATH …] [--out DIR] [--json] [--entropy-key K] [--reward-key K] [--val-key K]``.

Any trainer's log (docs/analyze.md): a TRL output folder or ``trainer_state.json``, TensorBoard event
files (TRL or verl), verl's file-logger JSONL, a W&B / MLflow CSV export, or an entflow run directory.
Each path is read by :func:`entflow.analysis.logs.analyze_log` and judged by
:func:`entflow.analysis.collapse.analyze_series`; the table goes to the terminal and
``DIR/report.html``, ``DIR/plots/{entropy_reward,law_fit}.png`` and (``--json``)
``DIR/analysis.json`` are written. ``DIR`` defaults to ``PATH/entflow-analysis/`` (a folder) or
``PATH-analysis/`` next to a file.

When every path is an entflow run directory the command keeps its earlier behaviour — the summary
table, ``report.html``, ``plots/*.png``, ``summary.md`` and ``summary.json`` of
``entflow.analysis.report`` in the runs' common parent (or the run directory) — and adds the
collapse table of each run (``--json``: ``RUN/analysis.json``); a run too short for the fit gets a
note instead.
"""

from __future__ import annotations

import argparse
import html
import json
from pathlib import Path
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "runs",
        nargs="+",
        metavar="PATH",
        help="logs: an entflow run directory, a TRL output folder / trainer_state.json, TensorBoard event "
        "files, a verl file-logger .jsonl, or a W&B / MLflow .csv export",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="output directory [run dirs: their common parent, else the run; other logs: PATH/entflow-analysis]",
    )
    p.add_argument("--json", action="store_true", help="also write analysis.json (schema: docs/analyze.md)")
    p.add_argument("--entropy-key", metavar="KEY", help="log key of the policy entropy (overrides the key table)")
    p.add_argument("--reward-key", metavar="KEY", help="log key of the mean training reward")
    p.add_argument("--val-key", metavar="KEY", help="log key of the validation metric (R of the law)")
    p.add_argument("--val-entropy-key", metavar="KEY", help="log key of the entropy measured by the validation")
    p.add_argument("--early-frac", type=float, default=0.15, help="share of points the early prediction uses [0.15]")
    p.add_argument(
        "--retention-threshold", type=float, default=0.5, help="entropy retention below which it collapsed [0.5]"
    )


def default_out_dir(runs: list[Path]) -> Path:
    """The runs' common parent directory if they all share one, else the first run directory.

    A single run reports into its own directory (docs/design.md §10: ``runs/NAME/report.html``).
    """
    parents = {r.resolve().parent for r in runs}
    if len(runs) > 1 and len(parents) == 1:
        return runs[0].parent
    return runs[0]


def log_out_dir(path: Path) -> Path:
    """Where the analysis of a non-entflow log goes by default: ``PATH/entflow-analysis`` or ``PATH-analysis``."""
    return path / "entflow-analysis" if path.is_dir() else path.with_name(f"{path.name}-analysis")


def _options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "entropy_key": args.entropy_key,
        "reward_key": args.reward_key,
        "val_key": args.val_key,
        "val_entropy_key": args.val_entropy_key,
        "early_frac": args.early_frac,
        "retention_threshold": args.retention_threshold,
    }


def rich_table(title: str, columns: list[str], rows: list[list[str]]) -> Any:
    """A ``rich.table.Table`` from (title, columns, rows)."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*r)
    return t


def html_report(
    title: str, columns: list[str], rows: list[list[str]], analysis: dict[str, Any], plots: list[str]
) -> str:
    """A self-contained ``report.html`` (images linked relatively) of one analysis."""
    e = html.escape
    head = "".join(f"<th>{e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows)
    evidence = "".join(f"<li>{e(x)}</li>" for x in analysis["collapse"]["evidence"])
    notes = "".join(f"<li>{e(x)}</li>" for x in analysis["source"].get("notes", []))
    imgs = "".join(f'<p><img src="{e(p)}" alt="{e(p)}" style="max-width:100%"></p>' for p in plots)
    sug = analysis["suggestion"]
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>"
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}</style>"
        f"</head><body><h1>{e(title)}</h1><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        f"<h2>Verdict: {e(analysis['collapse']['verdict'])}</h2><ul>{evidence}</ul>"
        f"<h2>Suggestion</h2><p><code>{e(sug['cli'])}</code><br><code>{e(sug['trl'])}</code></p><p>{e(sug['why'])}</p>"
        f"<h2>Source</h2><p>{e(analysis['source']['format'])}: {e(analysis['source']['path'])}</p>"
        f"<p>keys: {e(json.dumps(analysis['source']['keys']))}</p><ul>{notes}</ul>{imgs}</body></html>\n"
    )


def write_plots(log: Any, analysis: Any, plot_dir: Path) -> list[Path]:
    """``entropy_reward.png`` (entropy, reward and, when logged, response length and clip fraction against
    the step; the half-entropy step marked) and ``law_fit.png`` (R against H, both fitted forms, the ceiling)."""
    import matplotlib
    import numpy as np

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    plot_dir.mkdir(parents=True, exist_ok=True)
    keys = analysis.source["keys"]
    out = []
    roles = ["entropy", "reward"] + [r for r in ("response_length", "clip") if keys.get(r)]
    fig = Figure(figsize=(4.5 * len(roles), 3.5))
    axes = fig.subplots(1, len(roles))
    ax1 = axes[0]
    for ax, role in zip(axes, roles, strict=True):
        s, v = log.series[keys[role]]
        ax.plot(s, v, lw=1)
        ax.set_xlabel("step")
        ax.set_title(keys[role])
    half = analysis.entropy["half_life_step"]
    if half is not None:
        ax1.axvline(half, color="C3", ls="--", lw=1, label=f"below half at {half:g}")
        ax1.legend(fontsize=8)
    fig.tight_layout()
    out.append(plot_dir / "entropy_reward.png")
    fig.savefig(out[-1], dpi=100)

    fig = Figure(figsize=(5, 4))
    ax = fig.subplots()
    target_key = keys.get(analysis.target) or keys["reward"]
    _, H, R = analysis.points
    ax.scatter(H, R, s=8, alpha=0.6, label="logged")
    grid = np.linspace(0, max(float(np.max(H)), 1e-3), 100)
    ax.plot(grid, analysis.law.predict(grid), "C1", label=f"law −a·e^H+b (R² {analysis.law.r2:.3f})")
    if analysis.mirror is not None:
        ax.plot(grid, analysis.mirror.predict(grid), "C2--", label=f"mirror q·e^(−βH) (R² {analysis.mirror.r2:.3f})")
    ax.axhline(analysis.ceiling, color="C1", ls=":", lw=1, label=f"ceiling {analysis.ceiling:.3g}")
    ax.set_xlabel(keys.get("val_entropy") or keys["entropy"])
    ax.set_ylabel(target_key)
    ax.legend(fontsize=7)
    fig.tight_layout()
    out.append(plot_dir / "law_fit.png")
    fig.savefig(out[-1], dpi=100)
    return out


def analyze_one(path: Path, out: Path, args: argparse.Namespace, console: Any) -> Path:
    """Analyse one log: table on ``console``, ``out/report.html``, plots and (``--json``) ``analysis.json``."""
    from entflow.analysis.collapse import analysis_table
    from entflow.analysis.logs import analyze_log

    log, analysis = analyze_log(path, **_options(args))
    title, columns, rows = analysis_table(analysis)
    console.print(rich_table(title, columns, rows))
    for note in analysis.source.get("notes", []):
        console.print(f"note: {note}")
    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(log, analysis, out / "plots")
    d = analysis.to_dict()
    report = out / "report.html"
    report.write_text(html_report(title, columns, rows, d, [f"plots/{p.name}" for p in plots]), encoding="utf-8")
    if args.json:
        (out / "analysis.json").write_text(json.dumps(d, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    console.print(f"report: {report}" + ("  analysis.json" if args.json else ""))
    return report


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console()
    paths = [Path(r) for r in args.runs]
    if all((p / "metrics.jsonl").is_file() for p in paths):
        return _run_dirs(paths, args, console)
    for i, p in enumerate(paths):
        if args.out is None:
            out = log_out_dir(p)
        else:
            out = Path(args.out) if len(paths) == 1 else Path(args.out) / f"{i}-{p.name}"
        analyze_one(p, out, args, console)
    return 0


def _run_dirs(runs: list[Path], args: argparse.Namespace, console: Any) -> int:
    """The earlier behaviour for entflow run directories, plus each run's collapse table."""
    from entflow.analysis.collapse import analysis_table
    from entflow.analysis.logs import analyze_log
    from entflow.analysis.report import print_summary, summarize_run, write_report
    from entflow.errors import LogError

    out = Path(args.out) if args.out else default_out_dir(runs)
    report = write_report(runs, out)
    summaries = [summarize_run(r) for r in runs]
    print_summary(summaries, console)
    console.print(f"report: {report}  (plots in {out / 'plots'}, summary.md, summary.json)")
    for r in runs:
        try:
            _, analysis = analyze_log(r, **_options(args))
        except LogError as e:
            console.print(f"collapse analysis of {r}: skipped ({e})")
            continue
        console.print(rich_table(*analysis_table(analysis)))
        if args.json:
            (r / "analysis.json").write_text(json.dumps(analysis.to_dict(), indent=2) + "\n", encoding="utf-8")
    return 0
