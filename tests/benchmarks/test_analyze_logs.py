"""benchmarks/analyze_logs.py's tables, printed from a saved result: medians, ranges, ratios and the torch
column worked out by hand, and the committed result in docs/analyze.md."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import analyze_logs as al  # noqa: E402  (benchmarks/analyze_logs.py)


def _result(baseline: bool) -> dict:
    side = {"wall_s": [1.0, 3.0, 2.0], "cpu_s": [0.5, 0.7, 0.6], "torch": ["False"]}
    base = {"wall_s": [4.0, 5.0, 6.0], "cpu_s": [1.2, 1.2, 1.2], "torch": ["True"]}
    fmt = {"size_bytes": 3 * 2**20, "read_s": 0.25, "analysis_s": 0.0125, "plots_s": 0.5, "this": side}
    floor = {"size_bytes": None, "read_s": None, "analysis_s": None, "plots_s": None, "this": side}
    if baseline:
        fmt, floor = {**fmt, "baseline": base}, {**floor, "baseline": base}
    return {
        "date": "2099-01-01T00:00:00Z", "machine": "a test machine", "command": "python benchmarks/analyze_logs.py",
        "steps": 10, "rounds": 3, "load_average_before": [0.1, 0.2, 0.3], "load_average_after": [0.4, 0.5, 0.6],
        "baseline_src": "SRC" if baseline else None, "formats": {"csv": fmt, "(floor)": floor},
    }  # fmt: skip


def test_render_medians_ranges_and_ratios():
    lines = al.render(_result(baseline=True)).splitlines()
    assert lines[0].startswith(
        "Measured 2099-01-01T00:00:00Z on a test machine, load average (1, 5, 15 min) 0.1, 0.2, 0.3"
    )
    assert "| csv | 3.0 MiB | 2.00 | 1.00–3.00 | 0.60 | no | 0.25 | 0.013 | 0.50 |" in lines
    floor = next(line for line in lines if line.startswith("| (floor) |  |"))
    assert floor.count("|") == lines[2].count("|")  # as many cells as the header
    assert "| csv | 2.00 | 5.00 | 2.5× | 0.60 | 1.20 | 2.0× | yes |" in lines


def test_without_a_baseline_there_is_one_table():
    text = al.render(_result(baseline=False))
    assert text.count("| format |") == 1 and "baseline" not in text


def test_the_docs_table_is_the_committed_result():
    data = json.loads((ROOT / "docs/results/analyze-logs/xeon2-2026-11-28.json").read_text())
    assert al.render(data) in (ROOT / "docs" / "analyze.md").read_text()
