"""What one registered real-v2 run costs on this machine, from its committed files: the wall time
from the run's start to its final judge-set evaluation (``docs/results/real-v2/run_times.json``,
taken from the run folder's file times when it was published) and, from its ``timing.jsonl``, the
median training step (and its two largest parts, the rollout and the update) and the mean periodic
evaluation.

    .venv/bin/python benchmarks/real_v2_cost.py docs/results/real-v2

The budget is 25 minutes a run on 2 cores. Other jobs on the machine can only slow a run down, so a
run that shared the machine (its ``note`` in run_times.json) still answers the question one way: if it
met the budget, a run alone would have too ("yes, though shared"); if it missed the budget by more than
the other jobs' wall time (``other_jobs_s``, an upper bound on what they took from it, recorded when
known), it would have missed it alone too. Otherwise, and for a run that was interrupted and resumed
(its ``time/elapsed_s`` restarts, so its wall time is only the resumed part), the table says it is
not a measurement instead of judging it.

A machine's speed varies by the day. When ``run_times.json`` has a ``speed_reference``
(``{"then": [...], "now": [...]}``: ``benchmarks/real_step.py --out`` files, paths from the
repository's root), the table is followed by the reference step's time on both occasions, their
ratio, and each run's wall time scaled by it: what the run would take at the reference day's speed,
a projection (the budget column judges only the measured wall time).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

BUDGET_MIN = 25.0
ROOT = Path(__file__).resolve().parents[1]


def step_times(timing: list[dict]) -> tuple[list[float], list[float], bool]:
    """(wall seconds of each step without an evaluation, ``time/eval_s`` of each evaluation, resumed):
    a step's wall time is the growth of ``time/elapsed_s`` since the step before it; a drop in
    ``time/elapsed_s`` marks a resume, and the first step after one is left out."""
    plain, evals, resumed = [], [], False
    for prev, cur in itertools.pairwise(timing):
        if cur["time/elapsed_s"] < prev["time/elapsed_s"]:
            resumed = True
            continue
        if "time/eval_s" in cur:
            evals.append(cur["time/eval_s"])
        else:
            plain.append(cur["time/elapsed_s"] - prev["time/elapsed_s"])
    return plain, evals, resumed


def _fmt(stat, values: list[float]) -> str:
    return f"{stat(values):.1f}" if values else "–"


def budget_verdict(wall_min: float, resumed: bool, note: str, other_jobs_s: float | None) -> str:
    """Whether a run alone would have met :data:`BUDGET_MIN`, as far as its wall time says (see the
    module's docstring): other jobs only slow a run, so a shared run that met the budget says yes, and
    one that missed it by more than ``other_jobs_s`` says no."""
    if resumed:
        return "not a measurement: " + "; ".join(["resumed after an interruption"] + [note] * bool(note))
    ratio = f"{wall_min / BUDGET_MIN:.2f}× the budget"
    if not note:
        return "yes" if wall_min <= BUDGET_MIN else f"no ({ratio})"
    if wall_min <= BUDGET_MIN:
        return f"yes, though shared ({note})"
    if other_jobs_s is not None and wall_min - other_jobs_s / 60 > BUDGET_MIN:
        return f"no ({ratio}; over it even without the other jobs' {other_jobs_s:g} s: {note})"
    return f"not a measurement: {note}"


def reference_step_s(files: list[str]) -> float:
    """The speed reference's step in seconds: the median plain step of ``real_step.py``'s entflow arm
    over every round in ``files`` (its ``--out`` files)."""
    from real_step import summarize  # benchmarks/real_step.py, beside this file

    return summarize([r for f in files for r in json.loads((ROOT / f).read_text())["entflow"]])["step"]


def _code_list(paths: list[str]) -> str:
    return ", ".join(f"`{p}`" for p in paths)


def speed_lines(ref: dict, walls: dict[str, float]) -> list[str]:
    """The machine's speed against the reference day's, and each run's wall time (min) scaled to it."""
    then, now = reference_step_s(ref["then"]), reference_step_s(ref["now"])
    ratio = now / then
    scaled = "; ".join(f"{name} {wall / ratio:.1f} min" for name, wall in walls.items())
    return [
        "",
        f"Speed reference (`benchmarks/real_step.py`'s entflow arm, the same step and settings on both days): "
        f"a step took {then:.2f} s on the reference day ({_code_list(ref['then'])}) and {now:.2f} s around these "
        f"runs ({_code_list(ref['now'])}), so the machine ran {ratio:.2f}× {'slower' if ratio >= 1 else 'faster'}. "
        f"Wall time scaled to the reference day's speed (a projection, not a measurement): {scaled}.",
    ]


def cost_table(root: Path) -> str:
    meta = json.loads((root / "run_times.json").read_text())
    lines = [
        f"Measured on {meta['machine']}. Wall time: the run folder's `config.yaml` written → its final "
        "`coverage.json` written.",
        "",
        "| run | start (UTC) | wall (min) | start + steps + periodic evaluations (min) | final checkpoint + "
        "judge-set evaluation (min) | median step (s) | of which rollout, update (s, median) | periodic evaluation "
        "(s, mean) | within 25 min |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    walls = {}
    for name, rec in meta["runs"].items():
        timing = [json.loads(x) for x in (root / name / "timing.jsonl").read_text().splitlines() if x.strip()]
        plain, evals, resumed = step_times(timing)
        wall = walls[name] = rec["wall_s"] / 60
        note = rec.get("note", "")
        verdict = budget_verdict(wall, resumed, note, rec.get("other_jobs_s"))
        train = timing[-1]["time/elapsed_s"] / 60  # since the run's start, as its config.yaml
        split = "– | –" if resumed else f"{train:.1f} | {wall - train:.1f}"
        parts = ", ".join(
            _fmt(statistics.median, [r[k] for r in timing if k in r]) for k in ("time/rollout_s", "time/update_s")
        )
        lines.append(
            f"| {name} | {rec['start'][11:19]} | {wall:.1f} | {split} | {_fmt(statistics.median, plain)} | {parts} "
            f"| {_fmt(statistics.mean, evals)} | {verdict} |"
        )
    if "speed_reference" in meta:
        lines += speed_lines(meta["speed_reference"], walls)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, help="docs/results/real-v2")
    sys.stdout.write(cost_table(ap.parse_args(argv).root))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
