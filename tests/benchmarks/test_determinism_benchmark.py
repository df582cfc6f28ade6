"""benchmarks/determinism.py: the cost table and the whole-run (twins) table from hand-made results,
``--from-json`` for both, and twins' comparison of run folders (``--collect``) on hand-made files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _result  # noqa: E402  (benchmarks/_result.py)
import determinism as det  # noqa: E402
from support import bench_cli  # noqa: E402

COST = {
    "setting": "real_v2_design.yaml + seed=8",
    "op": {"without": [0.004, 0.002, 0.003], "with": [0.001, 0.009, 0.0015]},
    "wall_s": {"without": [8.0, 10.0, 9.0], "with": [9.0, 9.9, 8.1]},
    "cpu_s": {"without": [16.0, 18.0, 20.0], "with": [18.0, 19.8, 16.2]},
    "timings": {
        "without": [{"time/update_s": 5.0}, {"time/update_s": 4.0}, {"time/update_s": 6.0}],
        "with": [{"time/update_s": 5.5}, {"time/update_s": 4.0}, {"time/update_s": 6.0}],
    },
}


def test_cost_report_by_hand():
    """Medians, each over the without arm's: wall 9.0 vs 9.0 (1.000×), CPU 18.0 vs 18.0, update 5.5 vs
    5.0 (1.100×); the op 1.5 ms vs 3.0 ms (0.50×)."""
    out = det.report(COST)
    assert "| without | 3 | 9.00 (1.000×) | 18.00 (1.000×) | 5.00 (1.000×) |" in out
    assert "| with | 3 | 9.00 (1.000×) | 18.00 (1.000×) | 5.50 (1.100×) |" in out
    assert "| without | 3 | 3.000 (1.00×) |" in out and "| with | 3 | 1.500 (0.50×) |" in out


def twins_result(tmp_path: Path, differ: str | None = None, final: bool = True) -> dict:
    """``twins --collect`` over three hand-made run folders (``differ``: one file changed in ``b``;
    ``final``: whether every run wrote its final model)."""
    for n in det.RUNS:
        (tmp_path / n / "checkpoints" / "final").mkdir(parents=True)
        (tmp_path / n / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1}\n{"step": 2}\n')
        (tmp_path / n / "samples.jsonl").write_text('{"step": 1}\n')
        (tmp_path / n / "checkpoints" / "last.pt").write_bytes(b"weights")
        if final or n != "killed":
            (tmp_path / n / "checkpoints" / "final" / "model.safetensors").write_bytes(b"final")
    if differ:
        (tmp_path / "b" / differ).write_bytes(b"other")
    (tmp_path / "killed.log").write_text(f"\n--- SIGKILL ---\nresuming {tmp_path}/killed from step 1 (ckpt)\n")
    a = argparse.Namespace(work=str(tmp_path), kill_seed=0, steps=3, kill_delay_max=30.0, collect=True,
                           checkpoint_every=1, override=[])  # fmt: skip
    return det.twins(a)


def test_twins_compares_every_file_byte_for_byte(tmp_path):
    same = twins_result(tmp_path / "same")
    assert same["identical"] == dict.fromkeys(det.RUN_FILES, True) and same["not_written"] == []
    assert same["last_step"] == {"a": 2, "b": 2, "killed": 2}
    assert same["kill"]["resume_line"] == "resuming …/killed from step 1 (ckpt)"
    changed = twins_result(tmp_path / "changed", differ="checkpoints/last.pt")
    assert changed["identical"]["checkpoints/last.pt"] is False and changed["identical"]["metrics.jsonl"] is True
    assert "| `checkpoints/last.pt` |" in det.twins_report(changed) and "| NO |" in det.twins_report(changed)


def test_twins_names_a_file_not_every_run_wrote_and_leaves_it_out(tmp_path):
    res = twins_result(tmp_path, final=False)
    assert res["not_written"] == ["checkpoints/final/model.safetensors"]
    assert "checkpoints/final/model.safetensors" not in res["identical"]
    assert "Not compared, not written by every run" in det.twins_report(res)


def test_from_json_prints_either_saved_result(tmp_path):
    cost, twins = tmp_path / "cost.json", tmp_path / "twins.json"
    _result.write(cost, COST)
    res = twins_result(tmp_path / "runs")
    _result.write(twins, res)
    assert bench_cli.from_json("determinism", cost) == det.report(COST) + "\n"
    assert bench_cli.from_json("determinism", twins) == det.twins_report(res) + "\n"
