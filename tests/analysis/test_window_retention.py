"""entflow.analysis.stats.window_retention: the mean of the last w evaluations over the mean of the
first w, checked against sums written out by hand; too short or non-finite series are refused."""

from __future__ import annotations

import math

import pytest

from entflow.analysis.stats import series_window_retention, window_retention
from entflow.errors import AnalysisError


def test_window_retention_against_hand_sums():
    v = [2.0, 1.0, 3.0, 0.5, 0.4, 0.2, 0.3]
    assert window_retention(v, 3) == pytest.approx(((0.4 + 0.2 + 0.3) / 3) / ((2.0 + 1.0 + 3.0) / 3), rel=1e-12)
    assert window_retention(v, 1) == pytest.approx(0.3 / 2.0, rel=1e-12)
    assert window_retention(v[:6], 3) == pytest.approx((0.5 + 0.4 + 0.2) / (2.0 + 1.0 + 3.0), rel=1e-12)


def test_one_spike_moves_the_windowed_ratio_less_than_a_single_step_ratio():
    flat = [1.0] * 9
    spiked = [1.0] * 8 + [0.4]
    assert window_retention(spiked, 1) == pytest.approx(0.4)
    assert window_retention(spiked, 3) == pytest.approx((1 + 1 + 0.4) / 3)
    assert window_retention(flat, 3) == 1.0


def test_series_window_retention_reads_the_key_in_step_order_and_skips_missing_values():
    records = [{"step": 0, "val/probe_entropy": 1.0}, {"step": 1, "loss": 0.1}]
    records += [{"step": s, "val/probe_entropy": h} for s, h in [(5, 0.9), (10, 0.8), (15, 0.5), (20, math.nan)]]
    records += [{"step": 25, "val/probe_entropy": 0.4}, {"step": 30, "val/probe_entropy": 0.3}]
    want = ((0.5 + 0.4 + 0.3) / 3) / ((1.0 + 0.9 + 0.8) / 3)
    assert series_window_retention(records, window=3) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize(
    ("values", "window", "field"),
    [
        ([1.0, 0.9, 0.8, 0.7, 0.6], 3, "values"),  # 5 < 2 * 3: the windows would overlap
        ([1.0, math.nan, 0.8, 0.7, 0.6, 0.5], 3, "values"),
        ([0.0, 0.0, 0.0, 0.7, 0.6, 0.5], 3, "values"),
        ([1.0, 0.9], 0, "window"),
        ([1.0, 0.9], 1.5, "window"),
    ],
)
def test_bad_series_or_window_is_refused_naming_the_field(values, window, field):
    with pytest.raises(AnalysisError) as e:
        window_retention(values, window)
    assert e.value.field == field
