"""benchmarks/trl_overhead.py: the tables from hand-made step times (medians over every step, and the
median of the per-round ratios), the live run's printing and saving (the training replaced by
hand-made step times), and ``--from-json`` (which imports neither torch nor TRL)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _result  # noqa: E402  (benchmarks/_result.py)
import trl_overhead as to  # noqa: E402
from support import bench_cli  # noqa: E402

SCRIPT = ROOT / "benchmarks" / "trl_overhead.py"


def kinds(cpu: list[list[float]], loss: list[list[float]], gen: list[list[float]]) -> dict:
    return {"wall": cpu, "cpu": cpu, "loss_cpu": loss, "gen_cpu": gen}


SETTINGS = {"rounds": 2, "steps": 3, "prompts": 8, "group": 8, "threads": 1, "grad_accum": 1, "max_len": 9}
RESULTS = {
    **SETTINGS,
    "machine": "x86_64",
    "torch": "2.13.0+cpu",
    "rounds_s": {
        "trl": kinds([[1.0, 1.0], [2.0, 2.0]], [[0.1], [0.3]], [[0.5], [0.5]]),
        "entflow:grpo": kinds([[1.1, 1.1], [1.8, 1.8]], [[0.2], [0.2]], [[0.4], [0.6]]),
        "lab": kinds([[0.5, 0.5], [3.0, 3.0]], [[0.0], [0.0]], [[0.0], [0.0]]),
    },
    "loss_s": {"trl": [0.2, 0.4, 0.3], "entflow:grpo": [0.6, 0.3, 0.3]},
}


def test_report_by_hand():
    """entflow: median of all steps 1.45 s vs trl's 1.5 (0.967); per-round ratios 1.1 and 0.9 → 1.000.
    lab: all-steps median 1.75 (1.167), per-round 0.5 and 1.5 → 1.000."""
    out = to.report(RESULTS)
    assert "| entflow:grpo | 1.450 | 1.100–1.800 | 0.967 | 1.000 |" in out
    assert "| lab | 1.750 | 0.500–3.000 | 1.167 | 1.000 |" in out
    assert "| trl | 0.2000 | 0.5000 |" in out and "| entflow:grpo | 0.2000 | 0.5000 |" in out
    assert "| entflow:grpo | 0.3000 | 0.3000–0.6000 | 1.000 |" in out  # loss: 0.3 / 0.3
    assert "micro-batch of 64 completions" in out and "2 rounds × 2 timed steps" in out


def test_per_round_ratio_differs_from_the_ratio_of_medians():
    """CPU: trl's rounds [1, 1] and [4, 4], entflow's [2, 2] and [2, 2]: medians 2.5 vs 2.0 (0.800),
    per-round ratios 2.0 and 0.5 → median 1.250. The wall table reads its own kind (entflow 3.0: 1.200)."""
    rounds = {
        "trl": {**kinds([[1.0, 1.0], [4.0, 4.0]], [[0.1]], [[0.1]]), "wall": [[1.0, 1.0], [4.0, 4.0]]},
        "entflow:grpo": {**kinds([[2.0, 2.0], [2.0, 2.0]], [[0.1]], [[0.1]]), "wall": [[3.0, 3.0], [3.0, 3.0]]},
    }
    out = to.report({**RESULTS, "rounds_s": rounds, "loss_s": {}}).split("wall time per optimizer step")
    assert "| entflow:grpo | 2.000 | 2.000–2.000 | 0.800 | 1.250 |" in out[0]
    assert "| entflow:grpo | 3.000 | 3.000–3.000 | 1.200 | 1.875 |" in out[1]  # per round 3/1, 3/4 → 1.875


def test_without_loss_timings_the_last_table_is_left_out():
    out = to.report({**RESULTS, "loss_s": {}})
    assert "fixed micro-batch" not in out


def test_from_json_prints_the_saved_tables(tmp_path):
    path = tmp_path / "r.json"
    _result.write(path, RESULTS)
    assert bench_cli.from_json("trl_overhead", path) == to.report(RESULTS) + "\n"


def test_from_json_imports_no_training_library(tmp_path):
    """``--from-json`` prints from the file alone: torch, transformers, trl and datasets stay unimported."""
    path = tmp_path / "r.json"
    _result.write(path, RESULTS)
    code = (
        "import runpy, sys; sys.argv = [sys.argv[1], '--from-json', sys.argv[2]]; "
        "runpy.run_path(sys.argv[0], run_name='__main__'); "
        "print(sorted(m for m in ('torch', 'transformers', 'trl', 'datasets') if m in sys.modules))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(SCRIPT), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT / "benchmarks",
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.splitlines()[-1] == "[]"


def test_live_run_prints_what_it_saves(tmp_path, monkeypatch, capsys):
    """main() hands its options to the measurement, prints the printer's tables of the dict it measured,
    saves that dict raw, and ``--from-json`` of the file prints the live tables exactly."""
    seen = []
    monkeypatch.setattr(to, "measure", lambda a: seen.append((a.rounds, a.steps, a.loss_reps, a.methods)) or RESULTS)
    path = tmp_path / "r.json"
    argv = ["benchmarks/trl_overhead.py", "--rounds", "2", "--steps", "3", "--methods", "grpo", "--out", str(path)]
    monkeypatch.setattr(sys, "argv", argv)
    to.main()
    live = capsys.readouterr().out
    assert seen == [(2, 3, 30, "grpo")]
    assert live == to.report(RESULTS) + "\n"
    record = _result.read(path)
    assert record["results"] == RESULTS and record["benchmark"] == "trl_overhead"
    assert bench_cli.from_json("trl_overhead", path) == live
