"""The entropy–performance law (entflow.analysis.law): the fit against the normal equations, early
prediction (paper 003 App. B.3) and the two naive forecasts it must beat against hand-worked values,
entropy retention by hand, form selection against scipy's paired t-test."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from entflow.analysis.law import (
    MIN_HELDOUT_POINTS,
    early_fit_points,
    early_prediction,
    entropy_retention,
    fit_entropy_law,
    fit_law,
    fit_mirror,
    naive_forecasts,
    select_form,
)
from entflow.errors import AnalysisError, EntflowError


def test_law_fit_recovers_known_coefficients_exactly():
    a, b = 0.3, 0.95
    H = np.linspace(1.2, 0.05, 40)
    R = -a * np.exp(H) + b
    fit = fit_entropy_law(H, R)
    assert fit.a == pytest.approx(a, abs=1e-6)
    assert fit.b == pytest.approx(b, abs=1e-6)
    assert fit.r2 == pytest.approx(1.0, abs=1e-9)
    assert fit.ceiling == pytest.approx(-a + b, abs=1e-6)
    assert fit.n == 40
    np.testing.assert_allclose(fit.predict([0.0, 1.0]), [-a + b, -a * math.e + b], atol=1e-9)


def test_law_fit_matches_normal_equations_on_noisy_data():
    rng = np.random.default_rng(0)
    H = rng.uniform(0.1, 1.5, 50)
    R = -0.2 * np.exp(H) + 0.9 + rng.normal(0, 0.02, 50)
    fit = fit_entropy_law(H, R)
    # independent: closed-form simple regression of R on x = exp(H)
    x = np.exp(H)
    slope = np.sum((x - x.mean()) * (R - R.mean())) / np.sum((x - x.mean()) ** 2)
    intercept = R.mean() - slope * x.mean()
    assert fit.a == pytest.approx(-slope, rel=1e-10)
    assert fit.b == pytest.approx(intercept, rel=1e-10)
    r2 = np.corrcoef(x, R)[0, 1] ** 2  # simple regression: R² = Pearson²
    assert fit.r2 == pytest.approx(r2, rel=1e-10)


def test_law_fit_ignores_nan_and_rejects_degenerate_input():
    fit = fit_entropy_law([1.0, math.nan, 0.5, 0.2], [0.1, 0.5, 0.3, math.nan])
    assert fit.n == 2
    with pytest.raises(AnalysisError, match="entropy"):
        fit_entropy_law([0.5], [0.5])
    with pytest.raises(AnalysisError, match="distinct"):
        fit_entropy_law([0.5, 0.5, 0.5], [0.1, 0.2, 0.3])
    with pytest.raises(EntflowError):
        fit_entropy_law([0.5, 0.4], [0.1])


def test_law_early_prediction_uses_first_15_percent():
    a, b = 0.25, 0.8
    H = np.linspace(1.5, 0.1, 40)
    R = -a * np.exp(H) + b
    R_noisy = R.copy()
    R_noisy[10:] += 0.05  # later points are off the early law by exactly 0.05
    pred = early_prediction(np.arange(40.0), H, R_noisy, frac=0.15)
    assert pred.n_fit == 6  # ceil(0.15 · 40)
    assert pred.fit.a == pytest.approx(a, abs=1e-9)
    assert pred.predicted.shape == (34,)
    # RMSE over the 34 held-out points: 4 exact + 30 off by 0.05
    assert pred.rmse == pytest.approx(math.sqrt(30 * 0.05**2 / 34), rel=1e-9)
    assert pred.error == pytest.approx(-0.05, abs=1e-9)
    with pytest.raises(AnalysisError):
        early_prediction(np.arange(40.0), H, R, frac=0.0)


STEPS = np.arange(0, 90, 10.0)  # 9 evaluations, steps 0..80 (the demo's)
H = np.linspace(1.5, 0.3, 9)


def test_a_run_that_follows_the_law_is_predicted_exactly_and_the_naive_forecasts_are_not():
    R = -0.2 * np.exp(H) + 1.0  # exactly on R = −a·e^H + b
    for frac, n_fit in ((0.15, 3), (0.30, 3), (0.50, 5)):  # ceil(frac · 9) points, at least 3
        pred = early_prediction(STEPS, H, R, frac)
        assert pred.n_fit == n_fit
        err = pred.errors()
        assert err["law"] == pytest.approx(0.0, abs=1e-9)
        assert err["last_value"] == pytest.approx(R[n_fit - 1] - R[-1], abs=1e-12)
        # the least-squares line through the fitted points, by hand for three equally spaced points:
        # slope (R2 − R0) / (S2 − S0), through the centroid (S1, mean R)
        if n_fit == 3:
            slope = (R[2] - R[0]) / (STEPS[2] - STEPS[0])
            line = R[:3].mean() + slope * (80 - STEPS[1])
            assert err["linear"] == pytest.approx(line - R[-1], abs=1e-12)


def test_one_minimum_point_rule():
    """max(3, ceil(frac·n)): three points leave the two-parameter law one degree of freedom."""
    assert [early_fit_points(n, 0.15) for n in (4, 9, 13, 14, 20, 40)] == [3, 3, 3, 3, 3, 6]
    assert early_fit_points(9, 1 / 3) == 3 and early_fit_points(10, 1 / 3) == 4
    assert early_fit_points(9, 0.5) == 5
    # four points: three fitted, one predicted
    pred = early_prediction([0, 1, 2, 3], [1.0, 0.8, 0.6, 0.4], [0.1, 0.2, 0.3, 0.5], 0.15)
    assert pred.n_fit == 3 and pred.predicted.shape == (1,)
    assert pred.rmse == pytest.approx(abs(pred.error), rel=1e-12)


def test_naive_forecasts_by_hand():
    got = naive_forecasts([0, 10, 20], [0.1, 0.3, 0.2], n_fit=3, at_step=40)
    # least squares through (0, .1), (10, .3), (20, .2): slope 0.005, intercept 0.15
    assert got == {"last_value": 0.2, "linear": pytest.approx(0.15 + 0.005 * 40, abs=1e-12)}
    with pytest.raises(AnalysisError, match="n_fit"):
        naive_forecasts([0, 10], [0.1, 0.2], n_fit=1, at_step=20)


def test_nothing_held_out_gives_nan():
    for n in (2, 3):  # three points are all fitted: nothing is left to predict
        pred = early_prediction(STEPS[:n], H[:n], np.linspace(0.1, 0.3, n), 0.5)
        assert not pred.held_out and pred.fit is None
        assert all(math.isnan(v) for v in pred.errors().values()) and math.isnan(pred.rmse)


def test_early_points_that_cannot_be_fitted_leave_the_naive_forecasts():
    pred = early_prediction(STEPS, np.r_[[1.0] * 3, H[3:]], np.linspace(0.1, 0.5, 9), 0.15)
    err = pred.errors()
    assert pred.fit is None and math.isnan(err["law"])
    assert err["last_value"] == pytest.approx(0.2 - 0.5, abs=1e-12)


def test_entropy_retention_is_final_over_initial_window_means():
    # 20 values: first 5 % = 1 value, last 20 % = 4 values
    h = np.array([2.0] + [1.5] * 15 + [0.4, 0.6, 0.5, 0.5])
    assert entropy_retention(h) == (2.0, pytest.approx(0.5), pytest.approx(0.25))
    # 3 values: each window holds at least one value (floor(0.15) = 0 → 1, floor(0.6) = 0 → 1)
    assert entropy_retention(np.array([2.0, 1.0, 0.5])) == (2.0, 0.5, 0.25)
    assert all(math.isnan(v) for v in entropy_retention(np.array([])))
    assert math.isnan(entropy_retention(np.array([0.0, 1.0]))[2])  # initial 0: no ratio


# --------------------------------------------------------------------------------------------
# Form selection: the law unless the held-out points resolve the mirror form
# --------------------------------------------------------------------------------------------


def _forms_data(form: str, n: int, sigma: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(H, R) ``[n]``: H decaying over 300 steps, sampled every 300/n steps; R from the law
    (ceiling 0.62) or the mirror form (ceiling 0.70), plus N(0, sigma) noise."""
    s = np.arange(1, 301)[300 // n - 1 :: 300 // n]
    H = 0.2 + 1.3 * np.exp(-s / 50)
    R = -0.31 * np.exp(H) + 0.93 if form == "law" else 0.70 * np.exp(-1.2 * H)
    return H, R + np.random.default_rng(seed).normal(0, sigma, n)


def test_select_form_is_a_paired_t_test_on_the_held_out_squared_errors():
    """20 points of mirror data: both forms fitted on the first 14 (70 %), scored on the last 6;
    the gain and its noise are scipy's paired t-test on the squared errors (independent code)."""
    H, R = _forms_data("mirror", 20, 0.01, seed=3)
    c = select_form(H, R)
    assert c.heldout_n == 6
    e_law = fit_law(H[:14], R[:14]).predict(H[14:]) - R[14:]
    e_mir = fit_mirror(H[:14], R[:14]).predict(H[14:]) - R[14:]
    t = stats.ttest_rel(e_law**2, e_mir**2).statistic  # mean(d) / (sd(d)/√m)
    t_crit = stats.t.ppf(0.975, 5)
    assert c.gain == pytest.approx(np.mean(e_law**2 - e_mir**2), rel=1e-12)
    assert c.gain / (c.noise / t_crit) == pytest.approx(t, rel=1e-9)
    assert c.heldout_rmse["law"] == pytest.approx(math.sqrt(np.mean(e_law**2)), rel=1e-12)
    assert (c.resolved == "mirror") is bool(t > t_crit)
    assert c.resolved == "mirror" and c.model == "mirror" and c.selected is c.mirror
    assert c.ceiling_ci == c.mirror.ci["ceiling"] and not c.uncertain


def test_too_few_held_out_points_never_select_the_mirror_form():
    """Exact mirror data on 6 points: the mirror form predicts the one held-out point far better,
    yet one point cannot resolve the forms: the law's ceiling is reported, "form uncertain" since
    the two ceilings' intervals do not overlap, and the interval is the hull of both."""
    H, R = _forms_data("mirror", 6, 1e-4, seed=0)
    c = select_form(H, R)
    assert c.heldout_n == 1 < MIN_HELDOUT_POINTS == 5
    assert c.heldout_rmse["mirror"] < c.heldout_rmse["law"] / 10  # the old rule picked the mirror
    assert c.resolved is None and c.model == "law" and c.selected is c.law and c.uncertain
    assert "form uncertain" in c.reason and "cannot resolve" in c.reason
    (llo, lhi), (mlo, mhi) = c.law.ci["ceiling"], c.mirror.ci["ceiling"]
    assert lhi < mlo or mhi < llo  # disjoint
    assert c.ceiling_ci == (min(llo, mlo), max(lhi, mhi))
    assert c.ceiling_ci[0] <= 0.70 <= c.ceiling_ci[1]


def test_unresolved_forms_whose_ceilings_agree_report_the_law_with_the_hull():
    """Law data, 20 points, noisy enough that neither form is resolved and the intervals overlap:
    the law's ceiling, not "form uncertain", with the hull of both intervals."""
    for seed in range(200):
        H, R = _forms_data("law", 20, 0.03, seed)
        c = select_form(H, R)
        if c.resolved is None and c.mirror is not None and not c.uncertain:
            break
    else:
        pytest.fail("no unresolved, overlapping draw in 200")
    (llo, lhi), (mlo, mhi) = c.law.ci["ceiling"], c.mirror.ci["ceiling"]
    assert not (lhi < mlo or mhi < llo)
    assert c.model == "law" and c.ceiling == c.law.ceiling
    assert c.ceiling_ci == (min(llo, mlo), max(lhi, mhi))
    assert c.reason.startswith("the law (paper 003's form)")


def test_many_points_of_law_data_resolve_the_law():
    H, R = _forms_data("law", 300, 0.005, seed=0)
    c = select_form(H, R)
    assert c.heldout_n == 90 and c.resolved == "law" and c.model == "law" and not c.uncertain
    assert c.ceiling_ci == c.law.ci["ceiling"]
