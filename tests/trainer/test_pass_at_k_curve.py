"""The pass@k curve (k = 1, 2, 4, …, 256 from n ≥ 256 samples) against exact
combinatorics: 1 − C(n−c, k)/C(n, k) in rational arithmetic (fractions.Fraction, math.comb)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from entflow.errors import ConfigError
from entflow.trainer.evaluate import pass_at_k_curve


def exact(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def test_curve_at_n_256_equals_exact_combinatorics_for_every_count():
    ks = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    for c in range(257):
        curve = pass_at_k_curve(256, c)
        assert list(curve) == ks
        for k, got in curve.items():
            assert abs(Fraction(got) - exact(256, c, k)) <= Fraction(1, 10**12), (c, k, got)
        assert all(a <= b for a, b in zip(curve.values(), list(curve.values())[1:], strict=False))  # monotone in k


def test_curve_over_problems_is_the_mean_of_their_pass_at_k():
    n, counts, ks = 300, [0, 1, 3, 17, 150, 299, 300], [1, 4, 64, 256, 300]
    curve = pass_at_k_curve(n, counts, ks)
    for k in ks:
        want = sum(exact(n, c, k) for c in counts) / len(counts)
        assert abs(Fraction(curve[k]) - want) <= Fraction(1, 10**12), k
    assert list(pass_at_k_curve(300, 5)) == [1, 2, 4, 8, 16, 32, 64, 128, 256]  # powers of 2 up to n


def test_curve_rejects_impossible_inputs():
    with pytest.raises(ConfigError, match="k"):
        pass_at_k_curve(128, 3, [256])  # k > n
    with pytest.raises(ConfigError):
        pass_at_k_curve(256, [])
