"""benchmarks/real_v2_record.py: a finished run recorded as ``docs_tables.py --print cost`` reads it (files copied,
wall time from the file times, the speed reference kept), and an unfinished run refused by name."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import docs_tables as dt  # noqa: E402  (benchmarks/docs_tables.py)
import real_v2_record as rr  # noqa: E402  (benchmarks/real_v2_record.py)

START = 1_764_400_000.0  # 2025-11-29T07:06:40Z


def _run(folder: Path, seed: int, wall: float | None) -> None:
    """A reproduce run folder: config (with its seed), metrics, three timed steps and, unless ``wall``
    is None, its final coverage.json written ``wall`` seconds after the config."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(f"seed: {seed}\nsteps: 3\n")
    (folder / "metrics.jsonl").write_text('{"step": 1}\n')
    timing = [{"step": i, "time/elapsed_s": 10.0 * i, "time/rollout_s": 2.0, "time/update_s": 5.0} for i in (1, 2, 3)]
    (folder / "timing.jsonl").write_text("".join(json.dumps(t) + "\n" for t in timing))
    os.utime(folder / "config.yaml", (START, START))
    if wall is not None:
        (folder / "coverage.json").write_text("{}")
        os.utime(folder / "coverage.json", (START + wall, START + wall))


def test_a_finished_run_is_recorded_as_the_cost_table_reads_it(tmp_path):
    runs, dest = tmp_path / "runs" / "t", tmp_path / "out"
    _run(runs / "real_v2" / "kl_cov_paper", seed=8, wall=1234.5)
    meta = rr.record(runs, dest, "a test machine", ["then.json"], ["a.json", "b.json"])
    assert meta == {
        "machine": "a test machine",
        "runs": {
            "kl_cov_paper-s8": {
                "start": "2025-11-29T07:06:40+00:00", "end": "2025-11-29T07:27:14+00:00", "wall_s": 1234.5
            }
        },
        "speed_reference": {"then": ["then.json"], "now": ["a.json", "b.json"]},
    }  # fmt: skip
    assert json.loads((dest / "run_times.json").read_text()) == meta
    for f in rr.COPIED:
        assert (dest / "kl_cov_paper-s8" / f).read_bytes() == (runs / "real_v2" / "kl_cov_paper" / f).read_bytes()
    del meta["speed_reference"]  # the printer's own check of the reference files is tested in its tests
    (dest / "run_times.json").write_text(json.dumps(meta))
    table = dt.cost_table(dest)
    # 30 s of steps (10 s each), then 20.1 min to the final coverage.json; within 25 minutes
    assert "| kl_cov_paper-s8 | 07:06:40 | 20.6 | 0.5 | 20.1 | 10.0 | 2.0, 5.0 | – | yes |" in table


def test_an_unfinished_run_is_refused_by_name(tmp_path, capsys):
    runs = tmp_path / "runs" / "t"
    _run(runs / "real_v2" / "grpo", seed=8, wall=100.0)
    _run(runs / "real_v2" / "kl_cov_paper", seed=8, wall=None)
    with pytest.raises(ValueError, match=r"kl_cov_paper"):
        rr.record(runs, tmp_path / "out", "m", [], [])
    assert rr.main([str(runs), str(tmp_path / "out"), "--machine", "m"]) == 2
    assert "not finished" in capsys.readouterr().err and not (tmp_path / "out" / "run_times.json").exists()


def test_the_speed_reference_needs_both_days(tmp_path):
    runs = tmp_path / "runs" / "t"
    _run(runs / "real_v2" / "grpo", seed=1, wall=100.0)
    with pytest.raises(ValueError, match="both --then and --now"):
        rr.record(runs, tmp_path / "out", "m", ["then.json"], [])
    assert rr.record(runs, tmp_path / "out", "m", [], [])["runs"].keys() == {"grpo-s1"}
