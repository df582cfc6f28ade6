"""benchmarks/real_v2_design.py: the judge set's size formula (hand-worked) and the between-problem
variance estimator (Monte Carlo against a known mixture). The design runs' table is docs_tables.py's
``--print design-runs`` (tests/benchmarks/test_docs_tables_printers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import real_v2_design as rd  # noqa: E402  (benchmarks/real_v2_design.py)


def test_judge_size_at_the_two_extremes():
    # p = 0.4, m = 32, s.e. 0.02: every problem alike -> 0.24 / 32 / 0.0004 = 18.75 -> 19;
    # each problem always or never solved (s_b^2 = p(1 - p) = 0.24) -> (0.2325 + 0.0075) / 0.0004 = 600
    assert rd.judge_size(0.4, 0.0) == 19
    assert rd.judge_size(0.4, 0.24) == 600
    assert rd.judge_size(0.4, 0.24, m=1) == 600  # then m no longer matters


def test_between_problem_variance_recovers_a_known_mixture():
    # half the problems solved with probability 0.1, half with 0.7: p = 0.4, s_b^2 = 0.09
    rng = np.random.default_rng(0)
    p_i = np.where(rng.random(40_000) < 0.5, 0.1, 0.7)
    counts = rng.binomial(4, p_i).tolist()
    p, sb2 = rd.between_problem_variance(counts, 4)
    assert p == pytest.approx(0.4, abs=0.01)
    assert sb2 == pytest.approx(0.09, abs=0.005)
    # all problems alike: the estimate is floored at 0, not negative
    assert rd.between_problem_variance(rng.binomial(4, 0.4, 2000).tolist(), 4)[1] >= 0.0
