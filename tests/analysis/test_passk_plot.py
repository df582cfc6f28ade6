"""The report's first plot: pass@k curves of the warm start and of each method's final policy
(mean over seeds), from the runs' coverage.json."""

from __future__ import annotations

import json

import pytest

from entflow.analysis.plots import passk_curves
from entflow.analysis.report import write_report
from support.run_dirs import make_run


def coverage(warm_val: float, final_val: float, final_hard: float) -> dict:
    def split(p1: float) -> dict:
        return {"n_problems": 2, "correct": [1, 0], "pass_at_k": {"1": p1, "2": p1 + 0.1, "4": p1 + 0.2}}

    return {
        "n": 4,
        "warm": {"step": 0, "splits": {"val": split(warm_val), "hard": split(0.0)}},
        "final": {"step": 40, "splits": {"val": split(final_val), "hard": split(final_hard)}},
    }


def test_curves_average_over_seeds_and_keep_the_warm_start():
    runs = [("grpo", coverage(0.3, 0.5, 0.1)), ("grpo", coverage(0.3, 0.7, 0.3)), ("clip_cov", coverage(0.3, 0.4, 0.2))]
    warm, finals = passk_curves(runs)
    assert warm["val"] == {1: 0.3, 2: pytest.approx(0.4), 4: pytest.approx(0.5)}
    curve, n = finals["val"]["grpo"]
    assert n == 2 and curve[1] == pytest.approx(0.6) and curve[4] == pytest.approx(0.8)
    assert finals["hard"]["clip_cov"] == ({1: 0.2, 2: pytest.approx(0.3), 4: pytest.approx(0.4)}, 1)
    assert passk_curves([("grpo", {})]) == ({}, {})  # no coverage evaluation: nothing to plot


def test_the_report_shows_pass_at_k_first(tmp_path):
    a = make_run(tmp_path, "grpo-s0", "grpo")
    b = make_run(tmp_path, "clip_cov-s0", "clip_cov")
    (a / "coverage.json").write_text(json.dumps(coverage(0.3, 0.5, 0.1)))
    (b / "coverage.json").write_text(json.dumps(coverage(0.3, 0.6, 0.2)))
    report = write_report([a, b], tmp_path / "out")
    assert (tmp_path / "out" / "plots" / "passk.png").stat().st_size > 0
    html = report.read_text()
    assert html.index("passk.png") < html.index("entropy.png")
    # without coverage there is no pass@k plot (and a stale one is removed)
    (a / "coverage.json").unlink()
    (b / "coverage.json").unlink()
    write_report([a, b], tmp_path / "out")
    assert not (tmp_path / "out" / "plots" / "passk.png").exists()
