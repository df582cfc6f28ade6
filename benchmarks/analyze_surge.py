"""The entropy-surge triage of ``entflow analyze`` on a committed log (docs/analyze.md "Entropy surges").

    .venv/bin/python benchmarks/analyze_surge.py docs/results/analyze-surge/verl_run.jsonl
    .venv/bin/python benchmarks/analyze_surge.py --write docs/results/analyze-surge

The first form prints the lines ``entflow analyze LOG`` prints under its table: the verdict, the
suggestion and the entropy-surge triage (the same function,
:func:`entflow.analysis.tables.collapse_footer`, on the same analysis,
:func:`entflow.analysis.collapse.analyze_log`), with ``--fenced`` inside a Markdown code fence; a
``Printed by`` block of docs/analyze.md runs it.
The second writes the example log (``verl_run.jsonl``: ``tests/support/surge_logs.DOCS_CASE``, a
synthetic 300-step run logged through verl's own ``Tracking`` file logger) and the plot
``entflow analyze`` draws of it (``surge.png``) into the folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write(folder: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from entflow.analysis.collapse import analyze_log
    from entflow.analysis.plots import write_surge_plot
    from support.surge_logs import DOCS_CASE, write_verl_jsonl

    log_path = write_verl_jsonl(folder / "verl_run.jsonl", DOCS_CASE)
    log, analysis = analyze_log(log_path)
    print(f"wrote {log_path} and {write_surge_plot(log, analysis.surge, folder)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", nargs="?", type=Path, help="a training log (any format entflow analyze reads)")
    ap.add_argument("--write", type=Path, metavar="DIR", help="write the example log and its plot into DIR")
    ap.add_argument("--fenced", action="store_true", help="print the lines inside a Markdown code fence")
    a = ap.parse_args()
    if a.write is not None:
        write(a.write)
        return
    if a.log is None:
        ap.error("give a LOG or --write DIR")
    from entflow.analysis.collapse import analyze_log
    from entflow.analysis.tables import collapse_footer

    _, analysis = analyze_log(a.log)
    lines = collapse_footer(analysis)
    print("\n".join(["```", *lines, "```"] if a.fenced else lines))


if __name__ == "__main__":
    main()
