"""benchmarks/model_load.py: the table from hand-made load times, and ``--from-json``."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _result  # noqa: E402  (benchmarks/_result.py)
import model_load as ml  # noqa: E402
from support import bench_cli  # noqa: E402
from support.bench_cli import main_output  # noqa: E402

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
    assert bench_cli.from_json("model_load", path) == ml.report(RESULTS) + "\n"


def test_measure_times_one_first_and_two_cached_loads_per_fresh_cache(monkeypatch, capsys):
    """``load_model`` stubbed: every round's first load meets an empty cache (and fills it), the next two a
    filled one; every load's seconds are kept (2 rounds → 2 first, 4 cached)."""
    import entflow.hf.models

    seen = []

    def fake_load(name, cache_dir):
        cache = Path(cache_dir)
        seen.append((name, cache, any(cache.iterdir())))
        (cache / "model.safetensors").write_text("")

    monkeypatch.setattr(entflow.hf.models, "load_model", fake_load)
    res = ml.measure(2)
    assert [(n, filled) for n, _, filled in seen] == [("smollm2", False), ("smollm2", True), ("smollm2", True)] * 2
    assert seen[0][1] != seen[3][1]  # a fresh cache per round
    assert len(res["first_s"]) == 2 and len(res["cached_s"]) == 4 and res["rounds"] == 2
    assert all(t >= 0 for t in res["first_s"] + res["cached_s"])
    assert set(res) == {"processor", "torch", "threads", "rounds", "first_s", "cached_s"}
    assert capsys.readouterr().out.count("round ") == 2


def test_live_run_saves_the_raw_times_and_prints_them_as_from_json_does(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(ml, "measure", lambda *a: calls.append(a) or RESULTS)
    path = tmp_path / "r.json"
    live = main_output(ml.main, monkeypatch, capsys, "model_load.py", "--out", str(path))
    assert calls == [(2,)]  # the documented default --rounds 2
    assert live == ml.report(RESULTS) + "\n"
    saved = _result.read(path)
    assert saved["results"] == RESULTS and saved["benchmark"] == "model_load"
    assert main_output(ml.main, monkeypatch, capsys, "model_load.py", "--from-json", str(path)) == live
    assert len(calls) == 1
