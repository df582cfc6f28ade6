"""Diversity (paper 002 App. C.1): distinct-n, BLEU and Self-BLEU against hand-worked values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from entflow.analysis.diversity import bleu, groups_from_index, ngram_diversity, ngram_diversity_per_n, self_bleu
from entflow.errors import AnalysisError


def test_ngram_diversity_hand_worked():
    # group 1: "abab", "abc"  (characters are tokens)
    #   1-grams a b a b a b c: 7 total, unique {a,b,c} = 3 → 3/7
    #   2-grams ab ba ab | ab bc: 5 total, unique {ab, ba, bc} = 3 → 3/5
    #   3-grams aba bab | abc: 3 total, 3 unique → 1
    #   4-grams abab: 1/1 → 1
    # group 2: "xy", "xy": 1-grams 4 total, 2 unique → 1/2; 2-grams 2 total, 1 unique → 1/2; no 3/4-grams
    groups = [["abab", "abc"], ["xy", "xy"]]
    per_n = ngram_diversity_per_n(groups)
    assert per_n[1] == pytest.approx((3 / 7 + 1 / 2) / 2)
    assert per_n[2] == pytest.approx((3 / 5 + 1 / 2) / 2)
    assert per_n[3] == pytest.approx(1.0)  # group 2 has no 3-gram: skipped
    assert per_n[4] == pytest.approx(1.0)
    assert ngram_diversity(groups) == pytest.approx(np.mean(list(per_n.values())))
    # token lists work the same as strings
    assert ngram_diversity([[["a", "b", "a", "b"], ["a", "b", "c"]]]) == pytest.approx(
        ngram_diversity([["abab", "abc"]])
    )
    assert math.isnan(ngram_diversity_per_n([["ab"]], max_n=3)[3])


def test_groups_from_index():
    assert groups_from_index(["a", "b", "c", "d"], [1, 0, 1, 0]) == [["a", "c"], ["b", "d"]]
    with pytest.raises(AnalysisError):
        groups_from_index(["a"], [0, 1])


def test_bleu_hand_worked_pair():
    hyp = "a b c d e f".split()
    ref = "a b c d x f g".split()
    # p1 = 5/6, p2 = 3/5 (ab bc cd), p3 = 2/4 (abc bcd), p4 = 1/3 (abcd); c = 6 < r = 7 → BP = exp(1 − 7/6)
    expected = math.exp(1 - 7 / 6) * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    assert bleu(hyp, [ref]) == pytest.approx(expected, rel=1e-12)
    assert bleu(hyp, [ref], smoothing=None) == pytest.approx(expected, rel=1e-12)


def test_bleu_clipping_closest_ref_length_and_smoothing():
    # "the the the the" vs ref "the cat": p1 = clipped 1/4; no bigram match
    hyp, ref = ["the"] * 4, ["the", "cat"]
    assert bleu(hyp, [ref], smoothing=None) == 0.0
    # method1 smoothing: p2 = 0.1/3, p3 = 0.1/2, p4 = 0.1/1; c = 4 > r = 2 → BP = 1
    expected = (1 / 4 * 0.1 / 3 * 0.1 / 2 * 0.1 / 1) ** 0.25
    assert bleu(hyp, [ref]) == pytest.approx(expected, rel=1e-12)
    # closest reference length (tie → shorter): c = 3, refs of length 4 and 2 → r = 2, BP = 1
    assert bleu("abc", ["abcd", "ab"], max_n=1) == pytest.approx(1.0)
    # the only reference longer: BP = exp(1 − 4/3)
    assert bleu("abc", ["abcd"], max_n=1) == pytest.approx(math.exp(1 - 4 / 3))
    assert bleu("", ["abc"]) == 0.0
    assert bleu("abcabc", ["xyz"]) == 0.0  # no token in common: 0 even when smoothed (NLTK)
    # shorter than max_n: geometric mean over the orders that exist (1 and 2): p1 = 1, p2 = 1/2
    assert bleu("ab", ["ab", "ba"], smoothing=None) == pytest.approx(1.0)
    # "aba" vs "abab": p1 = p2 = p3 = 1, no 4-gram (not a zero precision); BP = exp(1 − 4/3)
    assert bleu("aba", ["abab"], max_n=4, smoothing=None) == pytest.approx(math.exp(1 - 4 / 3))
    with pytest.raises(AnalysisError):
        bleu("abc", [])


def test_self_bleu_identical_and_disjoint_groups():
    assert self_bleu([["abcde", "abcde", "abcde"]]) == pytest.approx(1.0)
    assert self_bleu([["abcd", "wxyz"]], smoothing=None) == 0.0
    # mixed: average over responses, then groups; groups of one are skipped
    g = ["abcdef", "abcdxfg"]
    expected = (bleu(g[0], [g[1]]) + bleu(g[1], [g[0]])) / 2
    assert self_bleu([g, ["solo"]]) == pytest.approx(expected)
    avg = np.mean([np.mean([bleu(g[0], [g[1]], n), bleu(g[1], [g[0]], n)]) for n in range(1, 5)])
    assert self_bleu([g], average_orders=True) == pytest.approx(avg)
    assert math.isnan(self_bleu([["only"]]))
