"""benchmarks/model_load.py: the table from hand-made load times, and ``--from-json``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _result  # noqa: E402  (benchmarks/_result.py)
import model_load as ml  # noqa: E402

RESULTS = {"processor": "x86_64", "torch": "2.13.0+cpu", "threads": 2, "rounds": 2}
RESULTS |= {"first_s": [10.0, 14.0], "cached_s": [0.5, 0.9, 1.1, 3.0]}


def test_report_by_hand():
    """Median first load 12.0 s (of 10, 14), cached 1.00 s (of 0.5, 0.9, 1.1, 3.0): 12.0×."""
    out = ml.report(RESULTS)
    assert "| first load (GGUF → safetensors) | 12.0 | 2 |" in out
    assert "| cached load (safetensors) | 1.00 | 4 |" in out
    assert out.endswith("first / cached: 12.0× (target: at least 5×)")


def test_from_json_prints_the_saved_table(tmp_path):
    path = tmp_path / "r.json"
    _result.write(path, RESULTS)
    script = ROOT / "benchmarks" / "model_load.py"
    res = subprocess.run([sys.executable, str(script), "--from-json", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ml.report(RESULTS) + "\n"
