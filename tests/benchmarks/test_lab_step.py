"""benchmarks/lab_step.py: the phase table from hand-made steps, and ``--from-json``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _result  # noqa: E402  (benchmarks/_result.py)
import lab_step as ls  # noqa: E402

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


def test_from_json_prints_the_saved_table(tmp_path):
    path = tmp_path / "r.json"
    _result.write(path, RESULTS)
    script = ROOT / "benchmarks" / "lab_step.py"
    res = subprocess.run([sys.executable, str(script), "--from-json", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ls.report(RESULTS) + "\n"
