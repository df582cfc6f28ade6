"""``entflow analyze RUN [RUN …] [--out DIR]``: summary table, plots and report.html.

Reads each run directory's ``config.yaml`` and ``metrics.jsonl`` (docs/design.md §10), prints the summary
table, and writes ``DIR/report.html``, ``DIR/plots/*.png``, ``DIR/summary.md`` and
``DIR/summary.json``. ``DIR`` defaults to the runs' common parent directory when they share one
(``runs/COMPARE/`` for a comparison), else the first run directory.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (each with metrics.jsonl)")
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="output directory [the runs' common parent if they share one, else the first run]",
    )


def default_out_dir(runs: list[Path]) -> Path:
    """The runs' common parent directory if they all share one, else the first run directory.

    A single run reports into its own directory (docs/design.md §10: ``runs/NAME/report.html``).
    """
    parents = {r.resolve().parent for r in runs}
    if len(runs) > 1 and len(parents) == 1:
        return runs[0].parent
    return runs[0]


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from entflow.analysis.report import print_summary, summarize_run, write_report
    from entflow.analysis.runs import RunDirError

    runs = [Path(r) for r in args.runs]
    for r in runs:
        if not (r / "metrics.jsonl").is_file():
            raise RunDirError(r, "no metrics.jsonl here (not a run directory?)")
    out = Path(args.out) if args.out else default_out_dir(runs)
    console = Console()
    report = write_report(runs, out)
    summaries = [summarize_run(r) for r in runs]
    print_summary(summaries, console)
    console.print(f"report: {report}  (plots in {out / 'plots'}, summary.md, summary.json)")
    return 0
