"""benchmarks/verl_loss.py: the table from hand-made repetitions, a tiny live run, and ``--from-json``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _result  # noqa: E402  (benchmarks/_result.py)
import verl_loss as vl  # noqa: E402

SCRIPT = ROOT / "benchmarks" / "verl_loss.py"


def test_report_by_hand():
    """Ratios of medians to the first variant: 4 ms / 2 ms = 2.00 (the mean of [1, 2, 9] would give 4)."""
    results = {"rows": 4, "tokens": 8, "valid_tokens": 20, "runs": 3, "threads": 1}
    results["seconds"] = {"verl": [0.001, 0.002, 0.009], "entflow": [0.004, 0.003, 0.005]}
    out = vl.report(results)
    assert out.splitlines()[0] == "N=4 T=8 valid tokens=20 runs=3 torch threads=1"
    assert "| verl | 2.00 | 1.00–9.00 | 1.00 |" in out
    assert "| entflow | 4.00 | 3.00–5.00 | 2.00 |" in out


def test_tiny_live_run_round_trips(tmp_path):
    path = tmp_path / "r.json"
    live = subprocess.run(
        [sys.executable, str(SCRIPT), "--rows", "4", "--tokens", "16", "--runs", "2", "--out", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert live.returncode == 0, live.stderr[-2000:]
    saved = _result.read(path)["results"]
    assert list(saved["seconds"]) == [
        "verl ppo_loss (vanilla)",
        *(f"entflow_ppo_loss ({m})" for m in ("grpo", "steer", "clip_cov")),
    ]
    assert all(len(v) == 2 for v in saved["seconds"].values())  # the warm-up round is not kept
    again = subprocess.run([sys.executable, str(SCRIPT), "--from-json", str(path)], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert live.stdout.endswith(again.stdout)
