"""Early prediction of the final accuracy (paper 003 App. B.3; issue 21 point 5): the law and the
two naive forecasts it must beat, against hand-worked values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from entflow.analysis.diagnostics import AnalysisError, early_prediction_errors, naive_forecasts

STEPS = np.arange(0, 90, 10.0)  # 9 evaluations, steps 0..80 (the demo's)
H = np.linspace(1.5, 0.3, 9)


def test_a_run_that_follows_the_law_is_predicted_exactly_and_the_naive_forecasts_are_not():
    R = -0.2 * np.exp(H) + 1.0  # exactly on R = −a·e^H + b
    for frac, n_fit in ((0.15, 2), (0.30, 3), (0.50, 5)):  # ceil(frac · 9) points, at least 2
        err = early_prediction_errors(STEPS, H, R, frac)
        assert err["law"] == pytest.approx(0.0, abs=1e-9)
        assert err["last_value"] == pytest.approx(R[n_fit - 1] - R[-1], abs=1e-12)
        # the line through the fitted points, by hand for two points
        if n_fit == 2:
            slope = (R[1] - R[0]) / (STEPS[1] - STEPS[0])
            assert err["linear"] == pytest.approx(R[0] + slope * 80 - R[-1], abs=1e-12)


def test_naive_forecasts_by_hand():
    got = naive_forecasts([0, 10, 20], [0.1, 0.3, 0.2], n_fit=3, at_step=40)
    # least squares through (0, .1), (10, .3), (20, .2): slope 0.005, intercept 0.15
    assert got == {"last_value": 0.2, "linear": pytest.approx(0.15 + 0.005 * 40, abs=1e-12)}
    with pytest.raises(AnalysisError, match="n_fit"):
        naive_forecasts([0, 10], [0.1, 0.2], n_fit=1, at_step=20)


def test_nothing_held_out_gives_nan():
    err = early_prediction_errors(STEPS[:2], H[:2], [0.1, 0.2], 0.5)
    assert all(math.isnan(v) for v in err.values())
