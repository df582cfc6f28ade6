"""benchmarks/hidden_passes.py: the table's medians and ratios to the logits passes from hand-made
repetitions, ``--from-json`` of a saved result (without importing torch or transformers), and the
live run's saving and printing with stand-in measurements (a real one builds a 150 M-parameter model)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "hidden_passes.py"
sys.path.insert(0, str(ROOT / "benchmarks"))

import _result  # noqa: E402  (benchmarks/_result.py)
import hidden_passes as hp  # noqa: E402  (benchmarks/hidden_passes.py)
from support import bench_cli  # noqa: E402


def _reps(variant: str, times, cpus, peaks) -> list[dict]:
    return [
        {"variant": variant, "time_s": t, "cpu_s": c, "peak_extra_mib": p}
        for t, c, p in zip(times, cpus, peaks, strict=True)
    ]


def _results() -> dict:
    """Medians: trl_hidden 2 s / 3 CPU s / 110 MiB against trl_logits 4 / 4 / 440 (0.50, 0.75, 0.25);
    update_hidden 6 / 12 / 500 against update_logits 5 / 10 / 1000 (1.20, 1.20, 0.50)."""
    m = {
        "trl_hidden": _reps("trl_hidden", (1.0, 3.5, 2.0), (3.0, 3.1, 2.5), (100.0, 150.0, 110.0)),
        "trl_logits": _reps("trl_logits", (4.0, 4.0, 4.0), (4.0, 4.0, 4.0), (440.0, 440.0, 440.0)),
        "update_hidden": _reps("update_hidden", (6.0, 6.0, 6.0), (12.0, 12.0, 12.0), (500.0, 500.0, 500.0)),
        "update_logits": _reps("update_logits", (5.0, 5.0, 5.0), (10.0, 10.0, 10.0), (1000.0, 1000.0, 1000.0)),
    }
    return {
        "batch": 8,
        "prompt": 32,
        "completion": 128,
        "vocab": 151936,
        "threads": 2,
        "runs": 3,
        "variants": list(m),
        "seconds": 95.4,
        "day": "2026-11-25",
        "processor": "x86_64",
        "cpus": 2,
        "torch": "2.9.0",
        "transformers": "4.57.0",
        "measurements": m,
    }


def test_report_by_hand():
    lines = hp.report(_results()).splitlines()
    assert lines[0] == (
        "2026-11-25, x86_64, 2 cores, 2 threads, torch 2.9.0, transformers 4.57.0; 3 runs, 95 s. "
        "Batch 8 × (32 + 128) = 1024 scored tokens, V = 151936, D = 896 (the [rows, V] float32 logits: 594 MiB)."
    )
    assert lines[2:] == [
        "| variant | median wall (s) | median CPU (s) | peak extra MiB "
        "| × logits wall | × logits CPU | × logits peak |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        "| trl_hidden | 2.00 | 3.00 | 110 | 0.50 | 0.75 | 0.25 |",
        "| trl_logits | 4.00 | 4.00 | 440 | 1.00 | 1.00 | 1.00 |",
        "| update_hidden | 6.00 | 12.00 | 500 | 1.20 | 1.20 | 0.50 |",
        "| update_logits | 5.00 | 10.00 | 1000 | 1.00 | 1.00 | 1.00 |",
    ]


def test_report_of_some_variants():
    """A hidden variant whose logits pass was not measured gets "—" ratios (it used to raise)."""
    res = _results()
    res["variants"] = ["trl_hidden", "update_logits"]
    res["measurements"] = {v: res["measurements"][v] for v in res["variants"]}
    rows = [line for line in hp.report(res).splitlines() if line.startswith("| trl_") or line.startswith("| upd")]
    assert rows == [
        "| trl_hidden | 2.00 | 3.00 | 110 | — | — | — |",
        "| update_logits | 5.00 | 10.00 | 1000 | 1.00 | 1.00 | 1.00 |",
    ]


def test_from_json_prints_the_table_without_torch(tmp_path):
    res = _results()
    _result.write(tmp_path / "r.json", res)
    printed, imported = bench_cli.from_json_and_imports("hidden_passes", tmp_path / "r.json")
    assert printed == hp.report(res) + "\n"
    assert not imported & {"torch", "transformers"}  # printing imports no library


def test_live_run_saves_every_repetition_and_prints_what_from_json_prints(tmp_path, monkeypatch, capsys):
    """Stand-in measurements (the n-th call takes n s, n CPU s, 10·n MiB): the file keeps every
    repetition in the interleaved schedule's order, and ``--from-json`` prints the live table."""
    calls: list[str] = []

    def fake_run(variant, args):
        calls.append(variant)
        n = float(len(calls))
        return {"variant": variant, "time_s": n, "cpu_s": n, "peak_extra_mib": 10 * n}

    monkeypatch.setattr(hp, "run", fake_run)
    out = tmp_path / "r.json"
    monkeypatch.setattr(sys, "argv", ["hidden_passes.py", "--runs", "2", "--threads", "1", "--out", str(out)])
    hp.main()
    live = capsys.readouterr().out
    saved = _result.read(out)
    assert saved["benchmark"] == "hidden_passes"
    res = saved["results"]
    assert res["variants"] == list(hp.VARIANTS) and res["threads"] == 1 and res["runs"] == 2
    # repetition 0 runs the four in order (calls 1-4), repetition 1 rotated by one and reversed (5-8)
    assert calls == [*hp.VARIANTS, "trl_hidden", "update_logits", "update_hidden", "trl_logits"]
    assert [r["time_s"] for r in res["measurements"]["trl_hidden"]] == [1.0, 5.0]
    assert [r["peak_extra_mib"] for r in res["measurements"]["trl_logits"]] == [20.0, 80.0]
    monkeypatch.setattr(sys, "argv", ["hidden_passes.py", "--from-json", str(out)])
    hp.main()
    printed = capsys.readouterr().out
    assert live.endswith("\n\n" + printed)  # the progress lines, a blank line, then the same report
    # trl_hidden: median of 1 and 5 = 3 s, trl_logits: of 2 and 8 = 5 s → 0.60×
    assert "| trl_hidden | 3.00 | 3.00 | 30 | 0.60 | 0.60 | 0.60 |" in printed.splitlines()
