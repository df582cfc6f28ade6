"""benchmarks/few_row_linear.py: the three parts' tables from hand-made call times, and ``--from-json``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _result  # noqa: E402  (benchmarks/_result.py)
import few_row_linear as fr  # noqa: E402
from support import bench_cli  # noqa: E402

RESULTS = {
    "torch": "2.13.0+cpu",
    "threads": 2,
    "one_layer": [
        {"weight": "q/o", "shape": [576, 576], "rows": 16, "plain": [0.002, 0.004, 0.1], "few": [0.001, 0.001, 0.003]}
    ],
    "stack": {"rows": 16, "plain": [0.020, 0.010, 0.030], "few": [0.005, 0.015, 0.010]},
    "generate": {"F.linear": [2.0, 4.0, 3.0], "few_row_linears": [1.5, 1.0, 9.0], "the LM head only": [3.0, 3.0, 3.0]},
}


def test_report_by_hand():
    """Medians, not means: one layer 4 ms vs 1 ms (0.25); the stack 20 vs 10 ms (0.50); generate 3 s, 1.5 s, 3 s."""
    out = fr.report(RESULTS)
    assert "| q/o | 576×576 | 16 | 4.000 | 1.000 | 0.25 |" in out
    assert "F.linear 20.0 ms, (W @ xᵀ)ᵀ 10.0 ms, ratio 0.50" in out
    assert "| few_row_linears | 1.50 | 0.50 |" in out and "| the LM head only | 3.00 | 1.00 |" in out
    assert "median of 3 interleaved calls" in out


def test_a_part_not_run_is_left_out():
    out = fr.report({k: RESULTS[k] for k in ("torch", "threads", "generate")})
    assert "576×576" not in out and "30 layers" not in out and "| F.linear | 3.00 | 1.00 |" in out


def test_from_json_prints_the_saved_tables(tmp_path):
    path = tmp_path / "r.json"
    _result.write(path, RESULTS)
    assert bench_cli.from_json("few_row_linear", path) == fr.report(RESULTS) + "\n"


@pytest.mark.parametrize(
    ("flags", "parts"),
    [([], ["one_layer", "stack", "generate"]), (["--no-generate"], ["one_layer", "stack"]),
     (["--generate-only"], ["generate"])],
)  # fmt: skip
def test_live_run_saves_the_raw_times_and_prints_them_as_from_json_does(tmp_path, monkeypatch, capsys, flags, parts):
    """The live run (the three parts stubbed) saves exactly the parts it ran, with every call's seconds, and
    prints ``report`` of that dict; ``--from-json`` on the file prints the same text and measures nothing."""
    calls = []
    monkeypatch.setattr(fr, "one_layer", lambda: calls.append("one_layer") or RESULTS["one_layer"])
    monkeypatch.setattr(fr, "decoding_stack", lambda: calls.append("stack") or RESULTS["stack"])
    monkeypatch.setattr(fr, "smollm2_generate", lambda reps: calls.append(("generate", reps)) or RESULTS["generate"])
    path = tmp_path / "r.json"
    monkeypatch.setattr(sys, "argv", ["few_row_linear.py", "--threads", "1", *flags, "--out", str(path)])
    import torch

    threads = torch.get_num_threads()
    try:
        fr.main()
    finally:
        torch.set_num_threads(threads)
    live = capsys.readouterr().out
    assert [c if isinstance(c, str) else c[0] for c in calls] == parts
    assert ("generate", 8) in calls or "generate" not in parts  # the documented default --reps 8
    saved = _result.read(path)["results"]
    assert saved == {"torch": torch.__version__, "threads": 1, **{k: RESULTS[k] for k in parts}}
    assert live == fr.report(saved) + "\n"
    monkeypatch.setattr(sys, "argv", ["few_row_linear.py", "--from-json", str(path)])
    fr.main()
    assert capsys.readouterr().out == live and len(calls) == len(parts)
