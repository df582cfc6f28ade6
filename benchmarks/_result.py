"""The result file the benchmarks share: ``--out FILE`` writes the raw measurements with the date,
machine and command that produced them, and ``--from-json FILE`` prints the same table from it, so a
table in docs/benchmarks.md is regenerated from committed data (``benchmarks/docs_tables.py``).

A result file is one JSON object: ``date`` (UTC, ISO 8601), ``machine`` (CPU model, cores, torch
and its threads, the 1-minute load average when written), ``command`` (the argv that ran),
``benchmark`` (the script's name) and ``results`` (whatever the script measured, raw: per-round
times, not only medians), plus any extra keys the script adds.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from entflow.evidence.records import cpu_model


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """``--out`` and ``--from-json``, the two options every benchmark that publishes a table takes."""
    ap.add_argument("--out", default=None, help="also write the raw result as JSON (date, machine, command)")
    ap.add_argument("--from-json", nargs="+", default=None, help="print the table of saved results; run nothing")


def machine() -> str:
    """The machine a measurement names: CPU model, CPU count, torch version and threads, load."""
    import torch

    return (
        f"{cpu_model()}, {os.cpu_count()} CPUs, torch {torch.__version__} with "
        f"{torch.get_num_threads()} thread(s), 1-min load average {os.getloadavg()[0]:.2f} when written"
    )


def write(path: str | Path, results: Any, **extra: Any) -> dict:
    """Write ``results`` with this run's date, machine and command to ``path``; returns the record."""
    record = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "command": "python " + " ".join(sys.argv),
        "benchmark": Path(sys.argv[0]).stem,
        **extra,
        "results": results,
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(record, indent=1) + "\n")
    return record


def read(path: str | Path) -> dict:
    """A saved result; a file without ``results`` is refused, naming it."""
    record = json.loads(Path(path).read_text())
    if not isinstance(record, dict) or "results" not in record:
        raise ValueError(f"{path}: not a benchmark result file (no 'results' key)")
    return record


def print_saved(paths: list[str], report: Callable[[Any], str]) -> None:
    """``--from-json``: ``report`` of each saved file's ``results``, a blank line between two; measures nothing."""
    print("\n\n".join(report(read(p)["results"]) for p in paths))


def print_and_save(results: Any, report: Callable[[Any], str], out: str | None) -> None:
    """A live run's end: print ``report(results)`` (what ``--from-json`` will print) and, with ``--out``, save."""
    print(report(results))
    if out:
        write(out, results)


def main(
    doc: str | None,
    options: Callable[[argparse.ArgumentParser], None],
    measure: Callable[[argparse.Namespace], Any],
    report: Callable[[Any], str],
    *,
    worker: Callable[[argparse.Namespace], Any] | None = None,
) -> None:
    """A benchmark's command line, the one the scripts that publish a table share: the script's own
    ``options``, then ``--out`` and ``--from-json`` (:func:`add_arguments`).

    ``--from-json FILE...`` prints ``report`` of each saved result and measures nothing
    (:func:`print_saved`); with ``worker``, ``--worker ...`` (an option the script declares: one
    measurement in a fresh process the script started) prints ``worker(args)`` as one JSON line;
    otherwise ``measure(args)``'s results are printed with ``report`` and, with ``--out``, saved
    (:func:`print_and_save`). A ``measure`` that returns None printed and saved its results itself
    (part by part, so that a later part that fails keeps the earlier)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    options(ap)
    add_arguments(ap)
    args = ap.parse_args()
    if args.from_json:
        print_saved(args.from_json, report)
        return
    if worker is not None and args.worker:
        print(json.dumps(worker(args)))
        return
    results = measure(args)
    if results is not None:
        print_and_save(results, report, args.out)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table: the header, the alignment row (text left, the rest right), the rows."""
    align = ["---"] + ["---:"] * (len(header) - 1)
    lines = [header, align, *rows]
    return "\n".join("| " + " | ".join(str(c) for c in line) + " |" for line in lines)
