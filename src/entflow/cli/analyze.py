"""``entflow analyze PATH [PATH …] [--out DIR] [--json] [--entropy-key K] [--reward-key K] [--val-key K]``.

Any trainer's log (docs/analyze.md): a TRL output folder or ``trainer_state.json``, TensorBoard event
files (TRL or verl), verl's file-logger JSONL, a W&B / MLflow CSV export, or an entflow run directory.
Each path is read by :func:`entflow.analysis.collapse.analyze_log` and judged by
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
import json
from pathlib import Path
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    from entflow.analysis.collapse import EARLY_FRAC, RETENTION_THRESHOLD

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
    p.add_argument(
        "--early-frac", type=float, default=EARLY_FRAC, help=f"share of points the early prediction uses [{EARLY_FRAC}]"
    )
    p.add_argument(
        "--retention-threshold",
        type=float,
        default=RETENTION_THRESHOLD,
        help=f"entropy retention below which it collapsed [{RETENTION_THRESHOLD}]",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="refuse a log with NaN or inf in a key used (exit 2) instead of dropping those steps with a warning",
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
        "strict": args.strict,
    }


def print_analysis(analysis: Any, console: Any) -> None:
    """The collapse table, the lines under it (verdict, suggestion and its configuration lines for
    the log's trainer), then the warnings (dropped steps) and notes of the reading."""
    from entflow.analysis.render import render_rich
    from entflow.analysis.tables import collapse_footer, collapse_table

    console.print(render_rich(collapse_table(analysis)))
    for line in collapse_footer(analysis):
        # a configuration line is printed whole (soft wrap), so that it can be copied; the others as
        # the console prints (whole off a terminal)
        console.print(line, markup=False, highlight=False, soft_wrap=True if line.startswith("    ") else None)
    for w in analysis.source.get("warnings", []):
        console.print(f"warning: {w} (--strict refuses them)", markup=False, highlight=False)
    for note in analysis.source.get("notes", []):
        console.print(f"note: {note}", markup=False, highlight=False)


def print_method_metrics(log: Any, console: Any) -> None:
    """The ``entflow/*`` metrics the log carries (steps logged, first and last value), one line each."""
    from entflow.analysis.short_log import method_metrics

    metrics = method_metrics(log)
    if not metrics:
        console.print("entflow/* metrics: none in this log", markup=False, highlight=False)
        return
    console.print(f"entflow/* metrics ({len(metrics)}): steps, first -> last", markup=False, highlight=False)
    for m in metrics:
        console.print(f"  {m.key}: {m.n_steps}, {m.first:.4g} -> {m.last:.4g}", markup=False, highlight=False)


def analyze_one(path: Path, out: Path, args: argparse.Namespace, console: Any) -> Path | None:
    """Analyse one log: table on ``console``, ``out/report.html``, plots and (``--json``) ``analysis.json``.

    A log too short for the law fit gets its entropy, reward and the verdict ``too short to fit the
    law`` on the terminal (``--json``: ``out/analysis.json``) and no report (None is returned)."""
    from entflow.analysis.collapse import analyze_log
    from entflow.analysis.log_readers import read_log
    from entflow.analysis.report import write_log_report
    from entflow.analysis.short_log import short_log

    log = read_log(path)
    short = short_log(log, entropy_key=args.entropy_key, reward_key=args.reward_key, strict=args.strict)
    if short is not None:
        for line in short.lines():
            console.print(line, markup=False, highlight=False)
        for w in short.warnings:
            console.print(f"warning: {w} (--strict refuses them)", markup=False, highlight=False)
        print_method_metrics(log, console)
        if args.json:
            out.mkdir(parents=True, exist_ok=True)
            (out / "analysis.json").write_text(json.dumps(short.to_dict(), indent=2) + "\n", encoding="utf-8")
            console.print(f"analysis: {out / 'analysis.json'}", markup=False, highlight=False)
        return None
    log, analysis = analyze_log(log, **_options(args))
    print_analysis(analysis, console)
    print_method_metrics(log, console)
    report = write_log_report(log, analysis, out, write_json=args.json)
    console.print(f"report: {report}" + ("  analysis.json" if args.json else ""), markup=False, highlight=False)
    return report


def run(args: argparse.Namespace) -> int:
    from entflow.cli._common import cli_console, output_dir

    console = cli_console()
    paths = [Path(r) for r in args.runs]
    if args.out is not None:  # before any work: an existing file there is refused in one line
        output_dir("--out", args.out)
    if all((p / "metrics.jsonl").is_file() for p in paths):
        return _run_dirs(paths, args, console)
    for i, p in enumerate(paths):
        if args.out is None:
            out = output_dir("--out (default)", log_out_dir(p))
        else:
            out = output_dir("--out", Path(args.out) if len(paths) == 1 else Path(args.out) / f"{i}-{p.name}")
        analyze_one(p, out, args, console)
    return 0


def _run_dirs(runs: list[Path], args: argparse.Namespace, console: Any) -> int:
    """The earlier behaviour for entflow run directories, plus each run's collapse table. Every run
    is analysed first, so that ``--strict`` refuses a NaN before anything is written or printed."""
    from entflow.analysis.collapse import analyze_log
    from entflow.analysis.report import print_summary, summarize_run, write_report
    from entflow.errors import LogError

    analyses: list[tuple[Path, Any]] = []
    for r in runs:
        try:
            analyses.append((r, analyze_log(r, **_options(args))[1]))
        except LogError as e:
            if args.strict and "non-finite" in str(e):
                raise
            analyses.append((r, e))
    out = Path(args.out) if args.out else default_out_dir(runs)
    report = write_report(runs, out)
    summaries = [summarize_run(r) for r in runs]
    print_summary(summaries, console)
    console.print(
        f"report: {report}  (plots in {out / 'plots'}, summary.md, summary.json)", markup=False, highlight=False
    )
    for r, analysis in analyses:
        if isinstance(analysis, LogError):
            console.print(f"collapse analysis of {r}: skipped ({analysis})", markup=False, highlight=False)
            continue
        print_analysis(analysis, console)
        if args.json:
            (r / "analysis.json").write_text(json.dumps(analysis.to_dict(), indent=2) + "\n", encoding="utf-8")
    return 0
