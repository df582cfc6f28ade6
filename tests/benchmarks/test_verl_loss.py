"""benchmarks/verl_loss.py: the table from hand-made repetitions, the live run's printing and saving
(the measurement replaced by hand-made repetitions: importing verl alone takes ~10 s), and
``--from-json``."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _result  # noqa: E402  (benchmarks/_result.py)
import verl_loss as vl  # noqa: E402
from support import bench_cli  # noqa: E402

SCRIPT = ROOT / "benchmarks" / "verl_loss.py"
RESULTS = {"rows": 4, "tokens": 8, "valid_tokens": 20, "runs": 3, "threads": 1}
RESULTS["seconds"] = {"verl": [0.001, 0.002, 0.009], "entflow": [0.004, 0.003, 0.005]}


def test_report_by_hand():
    """Ratios of medians to the first variant: 4 ms / 2 ms = 2.00 (the mean of [1, 2, 9] would give 4)."""
    out = vl.report(RESULTS)
    assert out.splitlines()[0] == "N=4 T=8 valid tokens=20 runs=3 torch threads=1"
    assert "| variant | median ms | min–max ms | × verl |" in out
    assert "| verl | 2.00 | 1.00–9.00 | 1.00 |" in out
    assert "| entflow | 4.00 | 3.00–5.00 | 2.00 |" in out


def test_the_first_saved_variant_is_the_reference():
    """Saved in the other order, entflow is the reference: verl's ratio 2 ms / 4 ms = 0.50."""
    seconds = RESULTS["seconds"]
    out = vl.report({**RESULTS, "seconds": {"entflow": seconds["entflow"], "verl": seconds["verl"]}})
    assert "| × entflow |" in out.splitlines()[2]
    assert "| verl | 2.00 | 1.00–9.00 | 0.50 |" in out and "| entflow | 4.00 | 3.00–5.00 | 1.00 |" in out


def test_from_json_prints_the_saved_table(tmp_path):
    other = {**RESULTS, "runs": 5}
    _result.write(tmp_path / "r.json", RESULTS)
    _result.write(tmp_path / "s.json", other)
    out = bench_cli.from_json("verl_loss", tmp_path / "r.json", tmp_path / "s.json")
    assert out == vl.report(RESULTS) + "\n\n" + vl.report(other) + "\n"


def test_live_run_prints_what_it_saves(tmp_path, monkeypatch, capsys):
    """main() passes --rows/--tokens/--runs to the measurement, prints the printer's table of the dict it
    measured, saves that dict raw, and ``--from-json`` of the file prints the live output exactly."""
    seen = []
    monkeypatch.setattr(vl, "measure", lambda a: seen.append((a.rows, a.tokens, a.runs)) or RESULTS)
    path = tmp_path / "r.json"
    argv = ["benchmarks/verl_loss.py", "--rows", "4", "--tokens", "8", "--runs", "3", "--out", str(path)]
    monkeypatch.setattr(sys, "argv", argv)
    vl.main()
    live = capsys.readouterr().out
    assert seen == [(4, 8, 3)]
    assert live == vl.report(RESULTS) + "\n"
    record = _result.read(path)
    assert record["results"] == RESULTS and record["benchmark"] == "verl_loss"
    assert bench_cli.from_json("verl_loss", path) == live
