"""benchmarks/real_v2_cost.py: step and evaluation times from a hand-made timing.jsonl (a resume
in the middle), and the budget verdict of a run, of a slow run and of a resumed run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import real_v2_cost as rc  # noqa: E402  (benchmarks/real_v2_cost.py)


def _timing(elapsed: list[float], evals: dict[int, float], parts: bool = False) -> list[dict]:
    """Steps 1…n; with ``parts``, step i's rollout takes i s and its update 2·i s."""
    return [
        {"step": i + 1, "time/elapsed_s": e}
        | ({"time/eval_s": evals[i + 1]} if i + 1 in evals else {})
        | ({"time/rollout_s": float(i + 1), "time/update_s": 2.0 * (i + 1)} if parts else {})
        for i, e in enumerate(elapsed)
    ]


def test_step_times_leave_out_evaluation_steps_and_the_step_after_a_resume():
    # steps 2, 3 take 10 and 12 s; step 4 evaluates (30 s of it); step 5 restarts the clock (resume); step 6 11 s
    plain, evals, resumed = rc.step_times(_timing([50, 60, 72, 115, 8, 19], {4: 30.0}))
    assert plain == [10, 12, 11] and evals == [30.0] and resumed
    assert rc.step_times(_timing([5, 15], {}))[2] is False


def _write(root: Path, runs: dict[str, tuple[float, list[float], str]]) -> None:
    meta = {"machine": "a test machine", "runs": {}}
    for name, (wall, elapsed, note) in runs.items():
        (root / name).mkdir(parents=True)
        timing = _timing(elapsed, {3: 20.0}, parts=name == "a-s0")
        (root / name / "timing.jsonl").write_text("".join(json.dumps(r) + "\n" for r in timing))
        meta["runs"][name] = {"start": "2026-11-28T06:00:00+00:00", "wall_s": wall} | ({"note": note} if note else {})
    (root / "run_times.json").write_text(json.dumps(meta))


def test_the_budget_verdict(tmp_path):
    _write(
        tmp_path,
        {
            "a-s0": (24 * 60, [30, 48, 90, 108], ""),
            "b-s0": (30 * 60, [30, 48, 90, 108], ""),
            "c-s0": (20 * 60, [30, 48, 5, 23], ""),
            "d-s0": (20 * 60, [30, 48, 90, 108], "shared the machine"),
        },
    )
    rows = {r.split(" | ")[0].lstrip("| "): r for r in rc.cost_table(tmp_path).splitlines() if r.startswith("| ")}
    # 108 s of 24 min since the start by the last step: 1.8 min, the rest (22.2) after it;
    # rollouts of 1, 2, 3, 4 s (median 2.5) and updates of 2, 4, 6, 8 s (median 5.0)
    assert rows["a-s0"] == "| a-s0 | 06:00:00 | 24.0 | 1.8 | 22.2 | 18.0 | 2.5, 5.0 | 20.0 | yes |"
    assert "| 18.0 | –, – | 20.0 |" in rows["b-s0"]
    assert rows["b-s0"].endswith("| no (1.20× the budget) |")
    assert rows["c-s0"].endswith("| – | – | 18.0 | –, – | – | not a measurement: resumed after an interruption |")
    # shared and within the budget: the other jobs can only have slowed it, so a run alone meets it too
    assert rows["d-s0"].endswith("| yes, though shared (shared the machine) |")


def test_a_shared_run_says_no_only_if_it_misses_by_more_than_the_other_jobs():
    assert rc.budget_verdict(30.0, False, "a copy", 20.0) == (
        "no (1.20× the budget; over it even without the other jobs' 20 s: a copy)"
    )
    # 25.2 min with 20 s of other jobs: 24.87 min alone is possible, so it says nothing
    assert rc.budget_verdict(25.2, False, "a copy", 20.0) == "not a measurement: a copy"
    assert rc.budget_verdict(30.0, False, "tests beside it", None) == "not a measurement: tests beside it"
    assert rc.budget_verdict(20.0, True, "", None) == "not a measurement: resumed after an interruption"
    assert rc.budget_verdict(25.0, False, "", None) == "yes"


def _reference(path: Path, steps: list[float]) -> str:
    """A ``real_step.py --out`` file: entflow's arm, one round, plain steps 2… of ``steps`` seconds."""
    phases = dict.fromkeys(("generation", "scoring", "old_logp", "update", "audit", "validation"), 0.0)
    rows = [{"step": i + 2, **phases, "total": s} for i, s in enumerate(steps)]
    path.write_text(json.dumps({"entflow": [{"rows": rows, "checkpoint_s": []}]}))
    return str(path)


def test_the_speed_reference_scales_each_run_to_the_reference_day(tmp_path):
    _write(tmp_path, {"a-s0": (30 * 60, [30, 48, 90, 108], "")})
    meta = json.loads((tmp_path / "run_times.json").read_text())
    # reference day: median 10 s; now: median of 19, 20, 21, 25 (both files) = 20.5 s, so 2.05× slower
    meta["speed_reference"] = {
        "then": [_reference(tmp_path / "then.json", [9.0, 10.0, 12.0])],
        "now": [_reference(tmp_path / "c.json", [19.0, 21.0]), _reference(tmp_path / "d.json", [20.0, 25.0])],
    }
    (tmp_path / "run_times.json").write_text(json.dumps(meta))
    text = rc.cost_table(tmp_path)
    assert "a step took 10.00 s on the reference day" in text and "20.50 s around these runs" in text
    assert "the machine ran 2.05× slower" in text
    assert text.rstrip().endswith("a-s0 14.6 min.")  # 30 / 2.05
    # the budget column still judges the measured wall time
    assert "| no (1.20× the budget) |" in text
