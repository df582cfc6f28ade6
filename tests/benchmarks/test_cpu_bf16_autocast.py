"""benchmarks/cpu_bf16_autocast.py: the table from hand-made call times, and ``--from-json``."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _result  # noqa: E402  (benchmarks/_result.py)
import cpu_bf16_autocast as bf  # noqa: E402
from support import bench_cli  # noqa: E402
from support.bench_cli import main_output  # noqa: E402

RESULTS = {
    "torch": "2.13.0+cpu",
    "cpu_capability": "AVX2",
    "native_bf16": False,
    "threads": 1,
    "rows": 256,
    "runs": 3,
    "seconds": {"float32": [0.010, 0.012, 0.030], "bf16 autocast": [0.050, 0.024, 0.036]},
}


def test_report_by_hand():
    """Medians 12 ms and 36 ms (not the means, 17.3 and 36.7): bf16 costs 3.00× float32."""
    out = bf.report(RESULTS)
    assert "native bfloat16: no" in out and "median of 3 interleaved calls" in out
    assert "| float32 | 12.0 | 10.0–30.0 | 1.00 |" in out
    assert "| bf16 autocast | 36.0 | 24.0–50.0 | 3.00 |" in out


def test_from_json_prints_the_saved_table(tmp_path):
    path = tmp_path / "r.json"
    _result.write(path, RESULTS)
    assert bench_cli.from_json("cpu_bf16_autocast", path) == bf.report(RESULTS) + "\n"


def test_live_run_saves_the_raw_times_and_prints_them_as_from_json_does(tmp_path, monkeypatch, capsys):
    """The live run (measurement stubbed, defaults checked) prints ``report`` of exactly the dict it saves
    under ``results``; ``--from-json`` on that file prints the same text and measures nothing."""
    calls = []
    monkeypatch.setattr(bf, "measure", lambda *a: calls.append(a) or RESULTS)
    path = tmp_path / "r.json"
    live = main_output(bf.main, monkeypatch, capsys, "cpu_bf16_autocast.py", "--out", str(path))
    assert calls == [(8, 1, 256)]  # the documented defaults: --runs 8 --threads 1 --rows 256
    assert live == bf.report(RESULTS) + "\n"
    saved = _result.read(path)
    assert saved["results"] == RESULTS and saved["benchmark"] == "cpu_bf16_autocast"
    assert {"date", "machine", "command"} <= set(saved)
    assert main_output(bf.main, monkeypatch, capsys, "cpu_bf16_autocast.py", "--from-json", str(path)) == live
    assert len(calls) == 1
