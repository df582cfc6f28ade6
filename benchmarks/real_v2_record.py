"""Record timed real-v2 runs as ``benchmarks/docs_tables.py --print cost`` reads them: each run's ``config.yaml``,
``metrics.jsonl`` and ``timing.jsonl`` copied into ``DEST/<run>-s<seed>/``, and ``DEST/run_times.json``
with each run's start and end (its ``config.yaml`` and its final ``coverage.json`` written, the files'
modification times), its wall time and, with ``--then`` and ``--now``, the speed reference.

    entflow reproduce --runs kl_cov_paper --seeds 8 --name real-v2-timing --no-audit --jobs 1
    .venv/bin/python benchmarks/real_v2_record.py runs/real-v2-timing docs/results/real-v2-timing \\
        --machine "2-core Intel Xeon (23 GiB), torch 2.13.0+cpu, 2 threads, the run alone" \\
        --then ref-day.json --now before.json after.json
    .venv/bin/python benchmarks/docs_tables.py --print cost docs/results/real-v2-timing

``RUNS`` is ``entflow reproduce``'s folder (``runs/<name>``): every run folder below it that has a
final ``coverage.json`` is recorded, one still running or stopped is refused, naming it. The speed
reference files are ``benchmarks/real_step.py --out`` files, named by their path from the
repository's root, as ``docs_tables.py --print cost`` reads them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
from pathlib import Path

import yaml

COPIED = ("config.yaml", "metrics.jsonl", "timing.jsonl")


def _utc(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat(timespec="seconds")


def run_folders(runs: Path) -> list[Path]:
    """The run folders below ``runs`` (each holds a ``config.yaml``), sorted; a folder without its
    final ``coverage.json`` (a run not finished) is refused with a ValueError naming it."""
    folders = sorted(p.parent for p in runs.rglob("config.yaml"))
    if not folders:
        raise ValueError(f"{runs}: no run folder (no config.yaml below it)")
    unfinished = [str(f) for f in folders if not (f / "coverage.json").is_file()]
    if unfinished:
        raise ValueError(f"not finished (no final coverage.json): {', '.join(unfinished)}")
    return folders


def record(runs: Path, dest: Path, machine: str, then: list[str], now: list[str]) -> dict:
    """Copy each finished run's files into ``dest/<run>-s<seed>/`` and write ``dest/run_times.json``;
    returns what it wrote there."""
    if bool(then) != bool(now):
        raise ValueError("the speed reference needs both --then and --now (or neither)")
    meta: dict = {"machine": machine, "runs": {}}
    for folder in run_folders(runs):
        seed = yaml.safe_load((folder / "config.yaml").read_text())["seed"]
        name = f"{folder.name}-s{seed}"
        (dest / name).mkdir(parents=True, exist_ok=True)
        for f in COPIED:
            shutil.copy2(folder / f, dest / name / f)
        start, end = (folder / "config.yaml").stat().st_mtime, (folder / "coverage.json").stat().st_mtime
        meta["runs"][name] = {"start": _utc(start), "end": _utc(end), "wall_s": round(end - start, 1)}
    if then:
        meta["speed_reference"] = {"then": then, "now": now}
    (dest / "run_times.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
    return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, help="entflow reproduce's folder, runs/<name>")
    ap.add_argument("dest", type=Path, help="where to record them, e.g. docs/results/real-v2-timing")
    ap.add_argument("--machine", required=True, help="the machine and conditions, as the cost table shows them")
    ap.add_argument("--then", nargs="+", default=[], help="real_step --out files of the reference day")
    ap.add_argument("--now", nargs="+", default=[], help="real_step --out files around these runs")
    a = ap.parse_args(argv)
    try:
        meta = record(a.runs, a.dest, a.machine, a.then, a.now)
    except ValueError as e:
        print(f"real_v2_record: {e}", file=sys.stderr)
        return 2
    print(json.dumps(meta, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
