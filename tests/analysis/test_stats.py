"""Summary statistics (entflow.analysis.stats) against hand computations: the Student-t interval,
the windowed best, entropy retention, seed bands, audit ranks within and across runs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from entflow.analysis.report import summarize_run
from entflow.analysis.stats import audit_ranking, audit_table, band, t_interval, windowed_best
from support.run_dirs import make_run


def test_t_interval_matches_hand_formula():
    x = [0.30, 0.36, 0.42]
    mean, half, n = t_interval(x)
    sd = math.sqrt(sum((v - 0.36) ** 2 for v in x) / 2)  # = 0.06
    assert n == 3 and mean == pytest.approx(0.36, abs=1e-15)
    assert half == pytest.approx(4.30265273 * sd / math.sqrt(3), rel=1e-8)  # t_{0.975, 2}
    assert t_interval([0.5])[0] == 0.5 and math.isnan(t_interval([0.5])[1])
    assert t_interval([math.nan, None, 1.0, 3.0])[2] == 2
    assert t_interval([])[2] == 0


def test_windowed_best_is_the_best_mean_of_three_consecutive_evaluations():
    steps = np.array([10, 20, 30, 40, 50, 60])
    acc = np.array([0.2, 0.9, 0.2, 0.5, 0.6, 0.55])  # one lucky spike at 20
    best, at = windowed_best(steps, acc)
    assert best == pytest.approx(0.55) and at == 60  # (0.5 + 0.6 + 0.55) / 3 beats (0.2+0.9+0.2)/3
    assert windowed_best(steps[:2], acc[:2]) == (pytest.approx(0.55), 20)  # fewer than 3: mean of all
    assert math.isnan(windowed_best(np.array([]), np.array([]))[0])


def test_audit_table_ranks_within_run(tmp_path: Path):
    s = summarize_run(make_run(tmp_path, "r", "grpo"))
    rows = {r["estimator"]: r for r in audit_table([s])}
    assert rows["steer"]["rank"] == 1 and rows["cov"]["rank"] == 2 and rows["opefo"]["rank"] is None
    assert rows["steer"]["spearman"] == pytest.approx(0.65) and rows["cov"]["pearson"] == pytest.approx(0.02)


def test_audit_ranking_across_runs():
    runs = [
        {"audit_spearman": {"steer": 0.6, "cov": 0.1, "opefo": math.nan}, "audit_pearson": {"steer": 0.5}},
        {"audit_spearman": {"steer": 0.4, "cov": 0.3, "tabular": 0.9}, "audit_pearson": {"steer": 0.3}},
    ]
    ranking = audit_ranking(runs)
    assert [r["estimator"] for r in ranking] == ["tabular", "steer", "cov", "opefo"]
    assert [r["rank"] for r in ranking] == [1, 2, 3, None]
    assert ranking[1]["spearman"] == pytest.approx(0.5) and ranking[1]["pearson"] == pytest.approx(0.4)
    assert ranking[0]["n_runs"] == 1 and ranking[1]["n_runs"] == 2


def test_band_is_the_t_interval_on_the_steps_every_run_logged():
    runs = [
        [{"step": 1, "x": 1.0}, {"step": 2, "x": 2.0}, {"step": 3, "x": 3.0}],
        [{"step": 1, "x": 3.0}, {"step": 2, "x": None}, {"step": 3, "x": 5.0}],  # step 2 not finite
        [{"step": 1, "x": 2.0}, {"step": 3, "x": 4.0}, {"step": 4, "x": 9.0}],
    ]
    steps, mean, half = band(runs, "x")
    assert steps.tolist() == [1.0, 3.0]
    assert mean.tolist() == pytest.approx([2.0, 4.0])
    # sample std 1 at both steps: half-width = t_{0.975, 2} / sqrt(3)
    assert half.tolist() == pytest.approx([4.30265273 / math.sqrt(3)] * 2, rel=1e-8)
