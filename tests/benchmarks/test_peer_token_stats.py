"""benchmarks/peer_token_stats.py: the report's medians, ratios to TRL, agreement lines and targets
from hand-made repetitions, ``--from-json`` of a saved result (without importing torch), and a
tiny live run (the entflow and naive workers in this process) whose saved file prints the table
the run printed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "peer_token_stats.py"
sys.path.insert(0, str(ROOT / "benchmarks"))

import _result  # noqa: E402  (benchmarks/_result.py)
import peer_token_stats as pt  # noqa: E402  (benchmarks/peer_token_stats.py)
from support import bench_cli  # noqa: E402


def _reps(variant: str, mode: str, times, mibs, logp: float = -100.0) -> list[dict]:
    return [
        {"variant": variant, "mode": mode, "time_s": t, "peak_extra_mib": m, "logp_sum": logp, "entropy_sum": 50.0}
        for t, m in zip(times, mibs, strict=True)
    ]


def _results(entflow2_fwd=(1.5, 1.4, 1.9)) -> dict:
    """TRL: fwd 1, 2, 3 s (median 2) at 100 MiB, fwd_bwd 4 s at 200 MiB. entflow2: fwd median 1.5
    (0.75×) at 50 MiB (0.50×), fwd_bwd 3.0 (0.75×) at 150 MiB (0.75×); entflow4: 1.9 (0.95×) and
    3.6 (0.90×). naive's Σlogp is −100, entflow2's −100.0001 (1.0e-06 apart)."""
    m = {
        "fwd": {
            "entflow2": _reps("entflow2", "fwd", entflow2_fwd, (50, 60, 10), logp=-100.0001),
            "entflow4": _reps("entflow4", "fwd", (1.8, 1.9, 2.0), (70, 70, 70)),
            "trl": _reps("trl", "fwd", (1.0, 2.0, 3.0), (100, 100, 100)),
            "naive": _reps("naive", "fwd", (5.0, 5.0, 5.0), (400, 400, 400)),
        },
        "fwd_bwd": {
            "entflow2": _reps("entflow2", "fwd_bwd", (3.0, 3.2, 2.8), (150, 150, 150)),
            "entflow4": _reps("entflow4", "fwd_bwd", (3.6, 3.6, 3.6), (160, 160, 160)),
            "trl": _reps("trl", "fwd_bwd", (4.0, 4.0, 4.0), (200, 200, 200)),
            "naive": _reps("naive", "fwd_bwd", (9.0, 9.0, 9.0), (800, 800, 800)),
        },
    }
    return {
        "rows": 256,
        "vocab": 4096,
        "threads": 1,
        "clock": "cpu",
        "runs": 3,
        "seed": 0,
        "variants": ["entflow2", "entflow4", "trl", "naive"],
        "modes": ["fwd", "fwd_bwd"],
        "seconds": 61.4,
        "platform": "x86_64",
        "cpus": 2,
        "load_average": [3.04, 2.5, 1.96],
        "measurements": m,
    }


def test_report_by_hand():
    out = pt.report(_results())
    lines = out.splitlines()
    assert lines[0] == (
        "rows=256, V=4096, float32 logits (4 MiB), 1 threads, cpu clock, median of 3 fresh processes, 61 s; "
        "x86_64, 2 CPUs, load average at the end 3.0/2.5/2.0"
    )
    assert "| trl | fwd | 2.000 | 1.000–3.000 | 1.00 | 100 | 1.00 |" in lines
    assert "| entflow2 | fwd | 1.500 | 1.400–1.900 | 0.75 | 50 | 0.50 |" in lines
    assert "| entflow4 | fwd | 1.900 | 1.800–2.000 | 0.95 | 70 | 0.70 |" in lines
    assert "| entflow2 | fwd_bwd | 3.000 | 2.800–3.200 | 0.75 | 150 | 0.75 |" in lines
    assert "| naive | fwd_bwd | 9.000 | 9.000–9.000 | 2.25 | 800 | 4.00 |" in lines
    assert "fwd entflow2: relative difference of Σlogp, ΣH to naive: 1.0e-06" in lines
    assert "fwd_bwd trl: relative difference of Σlogp, ΣH to naive: 0.0e+00" in lines
    assert lines[-1] == (
        "targets: logp+entropy fwd 0.75× and fwd+bwd 0.75× TRL (≤ 0.8), memory 0.75× TRL (≤ 1), "
        "four stats fwd 0.95× / fwd+bwd 0.90× TRL's two (≤ 1): PASS"
    )


def test_report_fails_a_target_and_leaves_ratios_out_without_trl():
    """entflow2's fwd median 1.7 s is 0.85× TRL's 2 s (> 0.8): FAIL. Without TRL: "—" ratios, no targets."""
    assert pt.report(_results(entflow2_fwd=(1.7, 1.7, 1.7))).endswith(": FAIL")
    res = _results()
    res["variants"] = ["entflow2", "naive"]
    res["modes"] = ["fwd"]
    out = pt.report(res)
    assert "| entflow2 | fwd | 1.500 | 1.400–1.900 | — | 50 | — |" in out.splitlines()
    assert "targets" not in out and "fwd_bwd" not in out


def test_from_json_prints_the_report_without_torch(tmp_path):
    res = _results()
    _result.write(tmp_path / "r.json", res)
    printed, imported = bench_cli.from_json_and_imports("peer_token_stats", tmp_path / "r.json")
    assert printed == pt.report(res) + "\n"
    assert not imported & {"torch", "trl", "verl"}  # printing imports no library


def test_tiny_live_run_round_trips(tmp_path, monkeypatch, capsys):
    """``--out`` of a real (tiny, in-process) run saves every repetition of every (mode, variant);
    ``--from-json`` of the file prints the report the run printed."""
    threads = torch.get_num_threads()  # the worker sets this; keep the test process's own

    def in_process(variant, mode, args):
        return pt.worker(variant, mode, args.rows, args.vocab, args.threads, args.seed, args.clock)

    monkeypatch.setattr(pt, "run", in_process)
    out = tmp_path / "r.json"
    argv = ["peer_token_stats.py", "--rows", "8", "--vocab", "64", "--runs", "2", "--threads", str(threads)]
    argv += ["--variants", "entflow2,entflow4,naive", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    with torch.random.fork_rng():  # the worker seeds torch
        pt.main()
    live = capsys.readouterr().out
    saved = _result.read(out)["results"]
    assert saved["modes"] == ["fwd", "fwd_bwd"] and saved["variants"] == ["entflow2", "entflow4", "naive"]
    assert all(len(saved["measurements"][m][v]) == 2 for m in saved["modes"] for v in saved["variants"])
    assert "grad_abs_sum" in saved["measurements"]["fwd_bwd"]["naive"][0]
    monkeypatch.setattr(sys, "argv", ["peer_token_stats.py", "--from-json", str(out)])
    pt.main()
    printed = capsys.readouterr().out
    assert live.endswith("\n\n" + printed)  # the progress lines, a blank line, then the same report
    assert printed == pt.report(saved) + "\n"


TINY = ["--rows", "8", "--vocab", "64", "--threads", "1", "--seed", "0", "--clock", "cpu"]


def test_every_entflow_worker_runs_in_a_fresh_process():
    """The workers run as fresh processes, where only what they import themselves exists (a lazy
    attribute that an in-process test had imported once hid a crash of ``entflow4``)."""
    for variant in ("entflow2", "entflow4"):
        res = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "peer_token_stats.py"), "--worker", variant, "fwd", *TINY],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr[-1500:]
        assert f'"variant": "{variant}"' in res.stdout
