"""benchmarks/fast_path.py: the table from hand-made rounds, a tiny live run (in-process), and
``--from-json``."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _result  # noqa: E402  (benchmarks/_result.py)
import fast_path as fp  # noqa: E402
from support import bench_cli  # noqa: E402

SCRIPT = ROOT / "benchmarks" / "fast_path.py"
SECONDS = {"grpo/default": [0.010, 0.009, 0.030], "grpo/fast": [0.005, 0.004, 0.006]}
SECONDS |= {"grpo/none": [0.002, 0.002, 0.001], "grpo/global": [0.015, 0.020, 0.010]}
RESULTS = {"n": 4, "t": 8, "rounds": 3, "threads": 1, "clock": "process CPU time", "seconds": SECONDS}


def test_report_by_hand():
    """Median 10 ms default; fast 5 ms (0.50), none 2 ms (0.20), global 15 ms (1.50)."""
    out = fp.report(RESULTS)
    assert out.splitlines()[0] == "[4, 8] float32, 1 thread, CPU time, median of 3 rounds"
    assert "| grpo | 10.0 | 5.0 (0.50) | 2.0 (0.20) | 15.0 (1.50) |" in out


def test_rows_follow_the_saved_methods_in_order():
    """Two methods, steer first: two rows in that order; steer's default median 4 ms, fast 1 ms (0.25)."""
    steer = {"steer/default": [0.004, 0.003, 0.005], "steer/fast": [0.001, 0.001, 0.002]}
    steer |= {"steer/none": [0.004, 0.004, 0.004], "steer/global": [0.008, 0.008, 0.008]}
    out = fp.report({**RESULTS, "seconds": steer | SECONDS})
    rows = [line for line in out.splitlines() if line.startswith("| ")][2:]
    assert rows == ["| steer | 4.0 | 1.0 (0.25) | 4.0 (1.00) | 8.0 (2.00) |", *rows[1:]]
    assert rows[1].startswith("| grpo | 10.0 |") and len(rows) == 2


def test_from_json_prints_the_saved_table(tmp_path):
    _result.write(tmp_path / "r.json", RESULTS)
    _result.write(tmp_path / "s.json", {**RESULTS, "rounds": 5})
    out = bench_cli.from_json("fast_path", tmp_path / "r.json", tmp_path / "s.json")
    assert out == fp.report(RESULTS) + "\n\n" + fp.report({**RESULTS, "rounds": 5}) + "\n"


def test_tiny_live_run_round_trips(tmp_path, monkeypatch, capsys):
    """A real measurement at [8, 8], 2 rounds, run in this process: every round of every method and
    path is saved, and ``--from-json`` prints exactly what the live run printed."""
    path = tmp_path / "r.json"
    argv = ["benchmarks/fast_path.py", "--n", "8", "--t", "8", "--rounds", "2", "--out", str(path)]
    monkeypatch.setattr(sys, "argv", argv)
    threads = torch.get_num_threads()
    try:
        fp.main()
    finally:
        torch.set_num_threads(threads)  # the benchmark sets one thread
    live = capsys.readouterr().out
    saved = _result.read(path)["results"]
    assert {k: saved[k] for k in ("n", "t", "rounds", "threads")} == {"n": 8, "t": 8, "rounds": 2, "threads": 1}
    assert list(saved["seconds"]) == [f"{m}/{p}" for m, _ in fp.METHODS for p in ("default", *fp.PATHS)]
    assert all(len(v) == 2 and min(v) >= 0 for v in saved["seconds"].values())  # two warm-up rounds dropped
    assert live == fp.report(saved) + "\n"
    assert bench_cli.from_json("fast_path", path) == live
