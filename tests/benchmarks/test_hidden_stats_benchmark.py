"""benchmarks/hidden_stats.py: the report's medians, ratios, working memory, agreement lines and
targets from hand-made repetitions, the tile-sweep table, ``--from-json`` of saved results (without
importing torch), and tiny live runs (the workers in this process) whose saved files print the
tables the runs printed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "hidden_stats.py"
sys.path.insert(0, str(ROOT / "benchmarks"))

import _result  # noqa: E402  (benchmarks/_result.py)
import hidden_stats as hs  # noqa: E402  (benchmarks/hidden_stats.py)


def _reps(variant: str, times, cpu: float, peak: float, logp: float = -1000.0) -> list[dict]:
    """fwd_bwd repetitions: every one with the same CPU seconds and peak, 600 MiB of gradients."""
    return [
        {
            "variant": variant,
            "mode": "fwd_bwd",
            "time_s": t,
            "cpu_s": cpu,
            "peak_extra_mib": peak,
            "grads_mib": 600.0,
            "logp_sum": logp,
            "entropy_sum": 500.0,
            "grad_h_abs_sum": 7.0,
            "grad_w_abs_sum": 9.0,
        }
        for t in times
    ]


def _results() -> dict:
    """D = 896, fwd_bwd. logits_ts: 2.0 s, 4.0 CPU s, 1000 MiB peak (400 working). hidden4: median
    2.5 s (1.25×; 1.00× trl2), 4.4 CPU s (1.10×), 700 MiB (0.700×; working 100, 0.250×), Σlogp 2e-6
    off logits_ts's. hidden2: 2.0 s, 4.0 CPU s, 650 MiB (working 50). trl2: 2.5 s, 5.0 CPU s, 800 MiB."""
    m = {
        "hidden2": _reps("hidden2", (2.0, 1.9, 2.1), 4.0, 650.0),
        "hidden4": _reps("hidden4", (2.4, 2.9, 2.5), 4.4, 700.0, logp=-1000.002),
        "logits_ts": _reps("logits_ts", (2.0, 2.0, 2.0), 4.0, 1000.0),
        "trl2": _reps("trl2", (2.5, 2.5, 2.5), 5.0, 800.0),
        "naive": _reps("naive", (6.0, 6.0, 6.0), 8.0, 3000.0),
    }
    return {
        "kind": "variants",
        "rows": 1024,
        "vocab": 151936,
        "threads": 2,
        "runs": 3,
        "seed": 0,
        "variants": list(m),
        "modes": ["fwd_bwd"],
        "platform": "x86_64",
        "cpus": 2,
        "dims": {"896": {"seconds": 312.6, "load_average": [2.96, 2.0, 1.04], "measurements": {"fwd_bwd": m}}},
    }


def test_report_by_hand():
    lines = hs.report(_results(), 896).splitlines()
    assert lines[0] == (
        "D=896: rows=1024, V=151936, float32, 2 threads, median of 3 fresh processes, 313 s; x86_64, 2 CPUs, "
        "load average at the end 3.0/2.0/1.0"
    )
    assert (
        "| hidden4 | fwd_bwd | 2.50 | 2.40–2.90 | 1.25 | 1.00 | 4.4 | 1.10 | 0.88 | 700 | 100 | 0.700 | 0.250 |"
        in lines
    )
    assert (
        "| hidden2 | fwd_bwd | 2.00 | 1.90–2.10 | 1.00 | 0.80 | 4.0 | 1.00 | 0.80 | 650 | 50 | 0.650 | 0.125 |" in lines
    )
    assert (
        "| logits_ts | fwd_bwd | 2.00 | 2.00–2.00 | 1.00 | 0.80 | 4.0 | 1.00 | 0.80 | 1000 | 400 | 1.000 | 1.000 |"
        in lines
    )
    diffs = [line for line in lines if "relative difference" in line]
    assert [line.split(":")[0] for line in diffs] == [f"fwd_bwd {v}" for v in _results()["variants"]]
    assert diffs[1].endswith("to logits_ts: 2.0e-06") and diffs[0].endswith("to naive: 0.0e+00")
    targets = lines[lines.index("targets (forward+backward, D=896):") + 1 :]
    assert targets == [
        "- peak extra memory hidden4 / logits_ts ≤ 0.25: 0.700 → NOT met",
        "- working memory hidden4 / logits_ts ≤ 0.25: 0.250 → met",
        "- time hidden4 / logits_ts ≤ 1.2: 1.250 → NOT met",
        "- time hidden2 / logits_ts ≤ 1.2: 1.000 → met",
        "- time hidden2 / trl2 ≤ 1.0: 0.800 → met",
        "- time hidden4 / trl2 ≤ 1.2: 1.000 → met",
        "- CPU time hidden4 / logits_ts ≤ 1.2: 1.100 → met",
        "- CPU time hidden2 / trl2 ≤ 1.0: 0.800 → met",
        "- CPU time hidden4 / trl2 ≤ 1.2: 0.880 → met",
    ]


def test_report_without_the_references():
    """Without logits_ts, trl2 and naive: "—" ratios, no targets, and hidden2 compares with the first
    variant of its own mode (itself), also when another mode comes first."""
    res = _results()
    fwd = [r | {"mode": "fwd"} for r in res["dims"]["896"]["measurements"]["fwd_bwd"]["hidden2"]]
    res["dims"]["896"]["measurements"]["fwd"] = {"hidden2": fwd, "hidden4": fwd}
    res["variants"], res["modes"] = ["hidden2", "hidden4"], ["fwd", "fwd_bwd"]
    lines = hs.report(res, 896).splitlines()
    assert "| hidden2 | fwd | 2.00 | 1.90–2.10 | — | — | 4.0 | — | — | 650 | 50 | — | — |" in lines
    assert "fwd_bwd hidden2: relative difference of Σlogp, ΣH (and Σ|∇h|, Σ|∇W|) to hidden2: 0.0e+00" in lines
    assert not any(line.startswith("targets") for line in lines)


def _sweep() -> dict:
    return {
        "kind": "tile_sweep",
        "rows": 256,
        "vocab": 4096,
        "threads": 2,
        "runs": 3,
        "seed": 0,
        "chunk_vocab": [2048, 8192],
        "dims": {"896": {"times": {"2048": [3.0, 1.0, 2.0], "8192": [1.5, 1.5, 1.6]}}},
    }


def test_tile_table_by_hand():
    assert hs.tile_table(_sweep(), 896).splitlines() == [
        "| chunk_vocab (D=896, 256 rows, V=4096) | median fwd+bwd (s) | min–max (s) |",
        "| --- | ---: | ---: |",
        "| 2048 | 2.00 | 1.00–3.00 |",
        "| 8192 | 1.50 | 1.50–1.60 |",
    ]


def test_from_json_prints_the_tables_without_torch(tmp_path):
    two_dims = _results()
    two_dims["dims"]["3584"] = two_dims["dims"]["896"]
    _result.write(tmp_path / "a.json", two_dims)
    _result.write(tmp_path / "b.json", _sweep())
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            str(SCRIPT),
            "--from-json",
            str(tmp_path / "a.json"),
            str(tmp_path / "b.json"),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    a = hs.report(two_dims, 896) + "\n\n" + hs.report(two_dims, 3584)
    assert proc.stdout == a + "\n\n" + hs.tile_table(_sweep(), 896) + "\n"
    assert "D=3584: rows=1024" in proc.stdout and "targets (forward+backward, D=3584):" in proc.stdout
    assert not re.search(r"\|\s+(torch|trl)$", proc.stderr, re.M)  # printing imports no library


def _live(monkeypatch, capsys, argv: list[str], out: Path) -> tuple[str, str]:
    """What main prints with ``argv + --out out``, and then with ``--from-json out``."""
    monkeypatch.setattr(sys, "argv", ["hidden_stats.py", *argv, "--out", str(out)])
    with torch.random.fork_rng():
        hs.main()
    live = capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["hidden_stats.py", "--from-json", str(out)])
    hs.main()
    return live, capsys.readouterr().out


def test_tiny_live_run_round_trips(tmp_path, monkeypatch, capsys):
    """Two dimensions, both modes, four variants, two repetitions, the workers in this process:
    every repetition saved; ``--from-json`` prints each dimension's report as the run printed it."""

    def in_process(variant, mode, dim, args):
        return hs.worker(variant, mode, args.rows, args.vocab, dim, args.threads, args.seed)

    monkeypatch.setattr(hs, "run", in_process)
    argv = ["--rows", "8", "--vocab", "64", "--dims", "16,32", "--runs", "2", "--threads", str(torch.get_num_threads())]
    live, printed = _live(
        monkeypatch, capsys, [*argv, "--variants", "hidden2,hidden4,logits_ts,naive"], tmp_path / "r.json"
    )
    saved = _result.read(tmp_path / "r.json")["results"]
    assert list(saved["dims"]) == ["16", "32"] and saved["kind"] == "variants"
    for d in saved["dims"].values():
        assert all(len(d["measurements"][m][v]) == 2 for m in saved["modes"] for v in saved["variants"])
    blocks = [hs.report(saved, 16), hs.report(saved, 32)]
    assert printed == "\n\n".join(blocks) + "\n"
    for block in blocks:
        assert "\n\n" + block + "\n" in live  # each printed live after its own progress lines


def test_tiny_tile_sweep_round_trips(tmp_path, monkeypatch, capsys):
    argv = ["--rows", "8", "--vocab", "64", "--dims", "16", "--runs", "2", "--threads", str(torch.get_num_threads())]
    live, printed = _live(monkeypatch, capsys, [*argv, "--tile-sweep", "16,64"], tmp_path / "t.json")
    saved = _result.read(tmp_path / "t.json")["results"]
    assert saved["kind"] == "tile_sweep" and saved["chunk_vocab"] == [16, 64]
    assert [len(t) for t in saved["dims"]["16"]["times"].values()] == [2, 2]
    assert printed == hs.tile_table(saved, 16) + "\n"
    assert live.endswith("\n\n" + printed)
