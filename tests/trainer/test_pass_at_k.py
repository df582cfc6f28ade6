"""The one pass@k (Chen et al. 2021 Eq. 1) against exact combinatorics, and the metric helpers
shared by the lab and the real-model evaluation."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from entflow.errors import ConfigError
from entflow.trainer.evaluate import mean_and_se, pass_at_k


def exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """1 − C(n−c, k)/C(n, k) in exact rational arithmetic (math.comb is 0 when n − c < k)."""
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


@pytest.mark.parametrize("n", [1, 2, 3, 8, 16, 31])
def test_pass_at_k_equals_exact_combinatorics(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            want = exact_pass_at_k(n, c, k)
            got = pass_at_k(n, c, k)
            assert abs(Fraction(got) - want) <= Fraction(1, 10**13), (n, c, k, got, float(want))
            if n - c < k:  # every k-subset holds a correct sample
                assert got == 1.0
            if c == 0:  # no correct sample: exactly 0, not a rounding residue
                assert got == 0.0


@pytest.mark.parametrize(("n", "c", "k"), [(2000, 3, 100), (1000, 1, 1), (5000, 4990, 7), (400, 200, 200)])
def test_pass_at_k_is_accurate_where_binomials_are_huge(n, c, k):
    # C(5000, 7) and C(400, 200) ~ 1e119 do not fit a float; the product form needs no binomial
    want = exact_pass_at_k(n, c, k)
    assert pass_at_k(n, c, k) == pytest.approx(float(want), rel=1e-12, abs=1e-15)


def test_pass_at_k_at_n_equal_k_is_any_correct():
    """The lab's validation uses n = k: pass@k is exactly 1 if any sample is correct, else 0."""
    for k in range(1, 9):
        assert [pass_at_k(k, c, k) for c in range(k + 1)] == [0.0] + [1.0] * k


@pytest.mark.parametrize(("n", "c", "k"), [(3, 1, 4), (3, 4, 1), (3, -1, 1), (3, 1, 0)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ConfigError, match="k"):
        pass_at_k(n, c, k)


def test_lab_and_real_model_evaluation_use_the_one_pass_at_k():
    import entflow.hf.evaluate as hf_evaluate
    import entflow.lab.evaluate as lab_evaluate

    assert lab_evaluate.pass_at_k is pass_at_k
    assert hf_evaluate.pass_at_k is pass_at_k
    assert not hasattr(lab_evaluate, "_pass_at_k")


def test_mean_and_se_by_hand():
    m, se = mean_and_se([1.0, 0.0, 0.0, 1.0])  # mean 1/2, sample var 1/3, se = sqrt(1/12)
    assert m == 0.5 and se == pytest.approx(math.sqrt(1 / 12), rel=1e-15)
    assert mean_and_se([2.5]) == (2.5, 0.0)
    assert all(math.isnan(v) for v in mean_and_se([]))
