"""``entflow analyze`` on the committed logs (tests/fixtures/logs, made by make_fixtures.py): a real
TRL ``trainer_state.json`` and the same run as a W&B CSV export. Both give report.html,
analysis.json and the plots, and the same law fit, equal to an independent least-squares fit of
R = −a·e^H + b (paper 003 Eq. 1) on the values read straight from the file. ``.ci/wheel`` runs the
same command from the built wheel with no extras."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from entflow.cli.main import main

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def trl_series() -> tuple[np.ndarray, np.ndarray]:
    rows = [h for h in json.loads((FIX / "trl" / "trainer_state.json").read_text())["log_history"] if "entropy" in h]
    return np.array([h["entropy"] for h in rows], np.float64), np.array([h["reward"] for h in rows], np.float64)


@pytest.mark.parametrize("log", ["trl/trainer_state.json", "wandb_export.csv"])
def test_analyze_a_committed_log(log, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["analyze", str(FIX / log), "--out", str(out), "--json"]) == 0
    for f in ("report.html", "analysis.json", "plots/entropy_reward.png", "plots/law_fit.png"):
        assert (out / f).stat().st_size > 0, f
    data = json.loads((out / "analysis.json").read_text())
    H, R = trl_series()
    assert data["steps"]["n_points"] == len(H) == 60
    X = np.stack([-np.exp(H), np.ones_like(H)], axis=1)
    (a, b), *_ = np.linalg.lstsq(X, R, rcond=None)
    assert data["fit"]["a"] == pytest.approx(a, rel=1e-6) and data["fit"]["b"] == pytest.approx(b, rel=1e-6)
    assert data["entropy"]["last"] == pytest.approx(H[-1], rel=1e-6)
    assert data["collapse"]["verdict"] == "collapsed"  # 3.1 nats → 0.001: the run collapsed
