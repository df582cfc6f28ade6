"""benchmarks/lab_step.py: the phase table from hand-made steps, the live run's printing and saving
(the training replaced by hand-made steps), and ``--from-json``."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _result  # noqa: E402  (benchmarks/_result.py)
import lab_step as ls  # noqa: E402
from support import bench_cli  # noqa: E402

SCRIPT = ROOT / "benchmarks" / "lab_step.py"
CONFIG = {"method": "grpo", "prompts_per_step": 16, "group_size": 16, "mini_batches": 4, "ppo_epochs": 1}
RESULTS = {
    "processor": "x86_64",
    "threads": 1,
    "overrides": [],
    "config": {**CONFIG, "task": "countdown"},
    "steps": [
        {"time/rollout_s": 1.0, "time/update_s": 2.0, "time/eval_s": None},
        {"time/rollout_s": 3.0, "time/update_s": 2.0, "time/eval_s": None},
        {"time/rollout_s": 2.0, "time/update_s": 6.0, "time/eval_s": 4.0},
    ],
    "wall_s": 20.0,
}


def test_report_by_hand():
    """Medians: rollout 2.0, update 2.0 → total 4.0, 50 % each; phases never logged are left out."""
    out = ls.report(RESULTS)
    assert "| rollout | 2.000 | 50% |" in out and "| update | 2.000 | 50% |" in out
    assert "| **total (train step)** | **4.000** | 100% |" in out
    assert "| eval (final step only) | 4.000 | — |" in out
    assert "audit" not in out and "3 steps" in out
    assert out.endswith("whole run incl. step-0 and final validation: 20.0 s")


def test_shares_of_uneven_phases():
    """verify median 0.5, update median 1.5 (of 1, 1.5, 9): total 2.0, shares 25 % / 75 %; no eval: nan."""
    steps = [{"time/verify_s": v, "time/update_s": u} for v, u in ((0.5, 1.0), (0.4, 1.5), (0.6, 9.0))]
    out = ls.report({**RESULTS, "steps": steps})
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert rows[2:] == [
        "| verify | 0.500 | 25% |",
        "| update | 1.500 | 75% |",
        "| **total (train step)** | **2.000** | 100% |",
        "| eval (final step only) | nan | — |",
    ]


def test_from_json_prints_the_saved_table(tmp_path):
    path = tmp_path / "r.json"
    _result.write(path, RESULTS)
    assert bench_cli.from_json("lab_step", path) == ls.report(RESULTS) + "\n"
    other = {**RESULTS, "threads": 2, "wall_s": 7.0}
    _result.write(tmp_path / "s.json", other)
    assert (
        bench_cli.from_json("lab_step", path, tmp_path / "s.json")
        == ls.report(RESULTS) + "\n\n" + ls.report(other) + "\n"
    )


def test_live_run_prints_what_it_saves(tmp_path, monkeypatch, capsys):
    """main() with the training replaced: it passes the settings on, prints the printer's table of the
    measured dict, saves that dict raw, and ``--from-json`` of the file prints the live output exactly."""
    calls = []
    monkeypatch.setattr(ls, "measure", lambda *args: calls.append(args) or RESULTS)
    path = tmp_path / "r.json"
    argv = ["benchmarks/lab_step.py", "--steps", "3", "--threads", "2", "lr=0.1", "--out", str(path)]
    monkeypatch.setattr(sys, "argv", argv)
    ls.main()
    live = capsys.readouterr().out
    assert calls == [(3, 2, ["lr=0.1"])]
    assert live == ls.report(RESULTS) + "\n"
    record = _result.read(path)
    assert record["results"] == RESULTS and record["benchmark"] == "lab_step"
    assert record["command"] == "python " + " ".join(argv)
    assert bench_cli.from_json("lab_step", path) == live
