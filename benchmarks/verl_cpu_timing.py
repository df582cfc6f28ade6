"""Print the time per step of verl's trainer on a CPU from the committed ``timing.json`` files.

``examples/verl/run_cpu.sh`` writes ``OUT/timing.json``: verl's own ``timing_s/*`` of every step
(``total`` is verl's ``timing_s/step``; ``gen`` the rollout, ``update_actor`` the actor's update,
``update_weights`` the weight sync to the rollout servers), the wall time of the attempt (Ray's start
included), the machine and the versions. Copies of such files live in ``docs/results/verl-cpu/``;
docs/integrations.md shows what this prints (between "Printed by" and "(End of what that command
prints.)", kept current by ``benchmarks/docs_tables.py --check``).

    python benchmarks/verl_cpu_timing.py docs/results/verl-cpu
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

PARTS = ("gen", "update_actor", "update_weights")


def _s(x: float) -> str:
    return f"{x:.1f} s" if x < 100 else f"{x / 60:.1f} min"


def _span(xs: list[float]) -> str:
    if not xs:
        return "–"
    lo, hi = min(xs), max(xs)
    return _s(lo) if f"{lo:.1f}" == f"{hi:.1f}" else f"{_s(statistics.median(xs))} ({lo:.1f}–{hi:.1f})"


def row(t: dict) -> str:
    steps = sorted(t["steps"], key=lambda r: r["step"])
    first, later = steps[0], steps[1:]
    parts = " / ".join(_span([r[p] for r in later if r.get(p) is not None]) for p in PARTS)
    m = t["machine"]
    return (
        f"| {t['model']} | {t['method']} | {len(steps)} | {_s(first['total'])} | "
        f"{_span([r['total'] for r in later])} | {parts} | {_s(t['attempt_wall_s'])} | "
        f"{t['date']}, {m['cores']} cores, load {m['load_average_1m_at_end']:.0f} |"
    )


def table(folder: Path) -> str:
    files = sorted(folder.glob("*.json"))
    if not files:
        raise SystemExit(f"verl_cpu_timing.py: no *.json in {folder}")
    lines = [
        "| model | method | steps | first step | later steps: median (range) | of which rollout / update / "
        "weight sync | whole run (wall, Ray's start included) | measured |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [row(json.loads(f.read_text())) for f in files]
    versions = {json.dumps(json.loads(f.read_text())["versions"], sort_keys=True) for f in files}
    vs = "; ".join(", ".join(f"{k} {v}" for k, v in json.loads(x).items()) for x in sorted(versions))
    return "\n".join(lines) + f"\n\nverl's `timing_s/*` per step; files: {folder}/ ({vs})."


if __name__ == "__main__":
    print(table(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results/verl-cpu")))
