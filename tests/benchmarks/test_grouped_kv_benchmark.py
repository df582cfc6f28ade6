"""benchmarks/grouped_kv.py: the tables from hand-made call times, ``--from-json``, and the one-call
part's bit-identity check on real tensors."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _result  # noqa: E402  (benchmarks/_result.py)
import grouped_kv as gk  # noqa: E402
from support import bench_cli  # noqa: E402

RESULTS = {
    "torch": "2.13.0+cpu",
    "transformers": "5.10.4",
    "threads": 2,
    "one_call": [
        {"what": "decoding step", "rows": 32, "query": 1, "keys": 112, "identical": True,
         "copy": [0.004, 0.002, 0.1], "in place": [0.001, 0.001, 0.003]},
        {"what": "packed update", "rows": 1, "query": 400, "keys": 400, "identical": False,
         "copy": [0.010, 0.010, 0.010], "in place": [0.009, 0.009, 0.5]},
    ],
    "generate": {
        "rollout": {"identical": True, "rows": 32, "copy K, V": [6.0, 4.0, 5.0], "in place": [4.0, 9.0, 3.0]},
        "validation": {"identical": False, "rows": 64, "copy K, V": [10.0, 10.0], "in place": [8.0, 7.0]},
    },
}  # fmt: skip


def test_report_by_hand():
    """Medians, not means: one call 4 ms vs 1 ms (0.25); the rollout 5 s vs 4 s (0.80); validation 10 vs 7.5 s."""
    out = gk.report(RESULTS)
    assert "| decoding step | 32 | 1 | 112 | 4.00 | 1.00 | 0.25 | yes |" in out
    assert "| packed update | 1 | 400 | 400 | 10.00 | 9.00 | 0.90 | no |" in out
    assert "| rollout | 32 | 5.00 | 4.00 | 0.80 | yes |" in out
    assert "| validation | 64 | 10.00 | 7.50 | 0.75 | no |" in out
    assert "median of 3 interleaved calls" in out and "transformers 5.10.4" in out


def test_from_json_prints_the_saved_tables_and_a_part_not_run_is_left_out(tmp_path):
    path = tmp_path / "r.json"
    _result.write(path, RESULTS)
    assert bench_cli.from_json("grouped_kv", path) == gk.report(RESULTS) + "\n"
    assert "rollout" not in gk.report({k: v for k, v in RESULTS.items() if k != "generate"})


def test_one_call_times_both_arms_and_finds_them_bit_identical(monkeypatch):
    """The one-call part on real tensors (shapes made small): every shape's two arms timed ``reps``
    times, and the copy and enable_gqa outputs equal bit for bit."""
    monkeypatch.setattr(gk, "SHAPES", [("decoding step", 4, 1, 10), ("packed update", 1, 12, 12)])
    rows = gk.one_call(reps=2)
    assert [(r["what"], r["rows"]) for r in rows] == [("decoding step", 4), ("packed update", 1)]
    for r in rows:
        assert r["identical"] is True
        assert len(r["copy"]) == len(r["in place"]) == 2 and min(r["copy"] + r["in place"]) > 0
