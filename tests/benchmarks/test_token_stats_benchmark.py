"""benchmarks/token_stats.py: the report's medians, ratios and verdict from hand-made repetitions,
``--from-json`` of a saved result (without importing torch), and a tiny live run (the worker in
this process) whose saved file prints the table the run printed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "token_stats.py"
sys.path.insert(0, str(ROOT / "benchmarks"))

import _result  # noqa: E402  (benchmarks/_result.py)
import token_stats as ts  # noqa: E402  (benchmarks/token_stats.py)
from support import bench_cli  # noqa: E402


def _rep(variant: str, time_s: float, mib: float, check: float = 10.0) -> dict:
    return {"variant": variant, "time_s": time_s, "peak_extra_mib": mib, "check": check}


def _results(chunked_times=(2.2, 2.4, 1.8)) -> dict:
    """Three repetitions: naive 2, 1, 3 s and 800, 1300, 900 MiB; chunked 100, 90, 110 MiB."""
    naive = [_rep("naive", t, m) for t, m in zip((2.0, 1.0, 3.0), (800.0, 1300.0, 900.0), strict=True)]
    chunked = [_rep("chunked", t, m, 10.0001) for t, m in zip(chunked_times, (100.0, 90.0, 110.0), strict=True)]
    return {
        "tokens": 64,
        "vocab": 4096,
        "chunk": "auto",
        "auto_chunk_rows": 2048,
        "runs": 3,
        "seed": 0,
        "torch_threads": 2,
        "variants": ["naive", "chunked"],
        "measurements": {"naive": naive, "chunked": chunked},
    }


def test_report_by_hand():
    """Medians 2.0 s / 900 MiB (naive) and 2.2 s / 100 MiB (chunked): time 1.10×, memory 0.111×
    (1/9.0); the outputs' sums 10 and 10.0001 differ by 1e-5 relative."""
    out = ts.report(_results())
    lines = out.splitlines()
    assert lines[0] == (
        "tokens=64, vocab=4096, float32, chunk_size=auto (= 2048 rows), runs=3 (median; min–max), "
        "logits = 1 MiB; torch threads = 2"
    )
    assert "| naive | 2.000 | 1.000–3.000 | 900 | 800–1300 |" in lines
    assert "| chunked | 2.200 | 1.800–2.400 | 100 | 90–110 |" in lines
    assert "chunked / naive: time 1.10×, peak extra memory 0.111× (1/9.0)" in lines
    assert "sum of all outputs, naive vs chunked: relative difference 1.00e-05" in lines
    assert lines[-1].endswith(": PASS")


def test_report_fails_the_time_bound_and_names_an_explicit_chunk():
    """Chunked at 2.6 s median is 1.30× naive's 2.0 s (> 1.2): FAIL although memory is 1/9."""
    res = _results(chunked_times=(2.6, 2.6, 2.6)) | {"chunk": "128"}
    out = ts.report(res)
    assert "chunk_size=128, runs=3" in out and "rows)" not in out
    assert "chunked / naive: time 1.30×" in out
    assert out.splitlines()[-1].endswith(": FAIL")


def test_from_json_prints_the_report_without_torch(tmp_path):
    res = _results()
    _result.write(tmp_path / "r.json", res)
    printed, imported = bench_cli.from_json_and_imports("token_stats", tmp_path / "r.json")
    assert printed == ts.report(res) + "\n"
    assert not imported & {"torch"}  # printing imports no torch


@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")
def test_tiny_live_run_round_trips(tmp_path, monkeypatch, capsys):
    """``--out`` of a real (tiny, in-process) run saves every repetition; ``--from-json`` of the file
    prints the report the run printed."""

    def in_process(variant, args, seed):
        chunk = None if args.chunk == "auto" else int(args.chunk)
        return ts.worker(variant, args.tokens, args.vocab, chunk, seed)

    monkeypatch.setattr(ts, "run_variant", in_process)
    out = tmp_path / "r.json"
    argv = ["token_stats.py", "--tokens", "8", "--vocab", "64", "--chunk", "4", "--runs", "2", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    with torch.random.fork_rng():  # the worker seeds torch
        ts.main()
    live = capsys.readouterr().out
    saved = _result.read(out)
    assert saved["benchmark"] == "token_stats" and saved["results"]["chunk"] == "4"
    runs = saved["results"]["measurements"]
    assert list(runs) == ["naive", "chunked", "chunked_fwd_bwd"]
    assert all(len(r) == 2 for r in runs.values())
    assert runs["naive"][0]["check"] == pytest.approx(runs["chunked"][0]["check"], rel=1e-5)
    monkeypatch.setattr(sys, "argv", ["token_stats.py", "--from-json", str(out)])
    ts.main()
    printed = capsys.readouterr().out
    assert live.endswith("\n\n" + printed)  # the progress lines, a blank line, then the same report
    assert printed == ts.report(saved["results"]) + "\n"
