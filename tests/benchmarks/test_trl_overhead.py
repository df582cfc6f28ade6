"""benchmarks/trl_overhead.py: the tables from hand-made step times (medians over every step, and the
median of the per-round ratios), and ``--from-json``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _result  # noqa: E402  (benchmarks/_result.py)
import trl_overhead as to  # noqa: E402


def kinds(cpu: list[list[float]], loss: list[list[float]], gen: list[list[float]]) -> dict:
    return {"wall": cpu, "cpu": cpu, "loss_cpu": loss, "gen_cpu": gen}


SETTINGS = {"rounds": 2, "steps": 3, "prompts": 8, "group": 8, "threads": 1, "grad_accum": 1, "max_len": 9}
RESULTS = {
    **SETTINGS,
    "machine": "x86_64",
    "torch": "2.13.0+cpu",
    "rounds_s": {
        "trl": kinds([[1.0, 1.0], [2.0, 2.0]], [[0.1], [0.3]], [[0.5], [0.5]]),
        "entflow:grpo": kinds([[1.1, 1.1], [1.8, 1.8]], [[0.2], [0.2]], [[0.4], [0.6]]),
        "lab": kinds([[0.5, 0.5], [3.0, 3.0]], [[0.0], [0.0]], [[0.0], [0.0]]),
    },
    "loss_s": {"trl": [0.2, 0.4, 0.3], "entflow:grpo": [0.6, 0.3, 0.3]},
}


def test_report_by_hand():
    """entflow: median of all steps 1.45 s vs trl's 1.5 (0.967); per-round ratios 1.1 and 0.9 → 1.000.
    lab: all-steps median 1.75 (1.167), per-round 0.5 and 1.5 → 1.000."""
    out = to.report(RESULTS)
    assert "| entflow:grpo | 1.450 | 1.100–1.800 | 0.967 | 1.000 |" in out
    assert "| lab | 1.750 | 0.500–3.000 | 1.167 | 1.000 |" in out
    assert "| trl | 0.2000 | 0.5000 |" in out and "| entflow:grpo | 0.2000 | 0.5000 |" in out
    assert "| entflow:grpo | 0.3000 | 0.3000–0.6000 | 1.000 |" in out  # loss: 0.3 / 0.3
    assert "micro-batch of 64 completions" in out and "2 rounds × 2 timed steps" in out


def test_without_loss_timings_the_last_table_is_left_out():
    out = to.report({**RESULTS, "loss_s": {}})
    assert "fixed micro-batch" not in out


def test_from_json_prints_the_saved_tables(tmp_path):
    path = tmp_path / "r.json"
    _result.write(path, RESULTS)
    script = ROOT / "benchmarks" / "trl_overhead.py"
    res = subprocess.run([sys.executable, str(script), "--from-json", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout == to.report(RESULTS) + "\n"
