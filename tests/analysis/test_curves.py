"""A run's series: the EMA of entropy (paper 002 App. D.3) and the rising → plateau stage (paper 004)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from entflow.analysis.curves import detect_stage_transition, ema
from entflow.errors import AnalysisError


def test_ema_beta_0_6():
    out = ema([1.0, 0.0, 0.0, 2.0])
    np.testing.assert_allclose(out, [1.0, 0.6, 0.36, 0.6 * 0.36 + 0.4 * 2.0])
    out = ema([math.nan, 2.0, math.nan, 1.0], beta=0.5)
    assert math.isnan(out[0])
    np.testing.assert_allclose(out[1:], [2.0, 2.0, 1.5])
    with pytest.raises(AnalysisError):
        ema([1.0], beta=1.0)


def test_stage_transition_on_piecewise_linear_accuracy():
    steps = np.arange(0, 105, 5)
    acc = np.minimum(steps, 50) / 100  # rises 0.01/step until step 50, then flat
    res = detect_stage_transition(steps, acc, window=3)
    assert res.early_rate == pytest.approx(0.01)
    # window starting at 45 (45, 50, 55) has slope 0.005 = 50 % of early; at 50 it is 0 → plateau
    assert res.step == 50
    assert res.rates[res.index - 1] == pytest.approx(0.005)


def test_stage_transition_none_cases():
    steps = np.arange(20)
    assert detect_stage_transition(steps, 0.5 - steps / 100, window=3).step is None  # falling: no rising
    assert detect_stage_transition(steps, steps / 100, window=3).step is None  # never plateaus
    with pytest.raises(AnalysisError):
        detect_stage_transition([0, 1, 2], [0.1, 0.2, 0.3], window=3)
