"""benchmarks/fast_path.py: the table from hand-made rounds, a tiny live run, and ``--from-json``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _result  # noqa: E402  (benchmarks/_result.py)
import fast_path as fp  # noqa: E402

SCRIPT = ROOT / "benchmarks" / "fast_path.py"


def test_report_by_hand():
    """Median 10 ms default; fast 5 ms (0.50), none 2 ms (0.20), global 15 ms (1.50)."""
    seconds = {"grpo/default": [0.010, 0.009, 0.030], "grpo/fast": [0.005, 0.004, 0.006]}
    seconds |= {"grpo/none": [0.002, 0.002, 0.001], "grpo/global": [0.015, 0.020, 0.010]}
    out = fp.report({"n": 4, "t": 8, "rounds": 3, "threads": 1, "seconds": seconds})
    assert "| grpo | 10.0 | 5.0 (0.50) | 2.0 (0.20) | 15.0 (1.50) |" in out


def test_tiny_live_run_round_trips(tmp_path):
    path = tmp_path / "r.json"
    args = ["--n", "8", "--t", "8", "--rounds", "2", "--out", str(path)]
    live = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)
    assert live.returncode == 0, live.stderr[-2000:]
    saved = _result.read(path)["results"]
    assert len(saved["seconds"]) == 4 * len(fp.METHODS)  # four paths per method
    assert all(len(v) == 2 for v in saved["seconds"].values())
    again = subprocess.run([sys.executable, str(SCRIPT), "--from-json", str(path)], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert again.stdout == live.stdout
