"""docs/design.md §9 diagnostics against hand-worked or independent computations."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from entflow.analysis.diagnostics import (
    AnalysisError,
    bleu,
    calibration,
    detect_stage_transition,
    ema,
    fit_entropy_law,
    grad_norm_proxy,
    groups_from_index,
    ngram_diversity,
    ngram_diversity_per_n,
    positional_entropy,
    predict_entropy_law,
    self_bleu,
    sequence_mean_logp,
)
from entflow.errors import EntflowError

# ---------------------------------------------------------------- entropy–performance law


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
    pred = predict_entropy_law(H, R_noisy, fit_frac=0.15)
    assert pred.n_fit == 6  # ceil(0.15 · 40)
    assert pred.fit.a == pytest.approx(a, abs=1e-9)
    assert pred.predicted.shape == (34,)
    # RMSE over the 34 held-out points: 4 exact + 30 off by 0.05
    assert pred.rmse == pytest.approx(math.sqrt(30 * 0.05**2 / 34), rel=1e-9)
    assert pred.final_error == pytest.approx(-0.05, abs=1e-9)
    with pytest.raises(AnalysisError):
        predict_entropy_law(H, R, fit_frac=0.0)


# ---------------------------------------------------------------- diversity


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


# ---------------------------------------------------------------- calibration


def _brute_auroc(scores, labels):
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


def test_calibration_auroc_matches_pair_counting_with_ties():
    rng = np.random.default_rng(1)
    scores = np.round(rng.normal(-1.0, 0.5, 60), 1)  # rounding makes ties
    labels = rng.random(60) < 0.4
    scores[labels] += 0.3
    cal = calibration(scores, labels)
    assert cal.auroc == pytest.approx(_brute_auroc(scores, labels), abs=1e-12)
    assert cal.mean_correct == pytest.approx(scores[labels].mean())
    assert cal.mean_incorrect == pytest.approx(scores[~labels].mean())
    assert cal.gap == pytest.approx(scores[labels].mean() - scores[~labels].mean())
    assert (cal.n_correct, cal.n_incorrect) == (int(labels.sum()), int((~labels).sum()))


def test_calibration_edge_cases_and_sequence_mean_logp():
    assert calibration([0.0, -1.0], [1, 0]).auroc == 1.0
    assert calibration([-1.0, 0.0], [1.0, 0.0]).auroc == 0.0
    cal = calibration([-1.0, -2.0], [1, 1])
    assert math.isnan(cal.auroc) and math.isnan(cal.mean_incorrect)
    logp = torch.tensor([[-1.0, -3.0, -9.0], [-0.5, -9.0, -9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    torch.testing.assert_close(sequence_mean_logp(logp, mask), torch.tensor([-2.0, -0.5]))


# ---------------------------------------------------------------- EMA


def test_ema_beta_0_6():
    out = ema([1.0, 0.0, 0.0, 2.0])
    np.testing.assert_allclose(out, [1.0, 0.6, 0.36, 0.6 * 0.36 + 0.4 * 2.0])
    out = ema([math.nan, 2.0, math.nan, 1.0], beta=0.5)
    assert math.isnan(out[0])
    np.testing.assert_allclose(out[1:], [2.0, 2.0, 1.5])
    with pytest.raises(AnalysisError):
        ema([1.0], beta=1.0)


# ---------------------------------------------------------------- positional entropy


def test_positional_entropy_bins_by_relative_position():
    # response 0: 5 valid tokens at positions 1..5 (position 0 is prompt), l = 0, .25, .5, .75, 1
    # response 1: 2 valid tokens, l = 0, 1; response 2: 1 valid token, l = 0
    H = torch.tensor(
        [
            [9.0, 1.0, 2.0, 3.0, 4.0, 5.0],
            [10.0, 20.0, 9.0, 9.0, 9.0, 9.0],
            [7.0, 9.0, 9.0, 9.0, 9.0, 9.0],
        ]
    )
    M = torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0]])
    prof = positional_entropy(H, M, correct=[1, 0, 1], n_bins=2)
    # bin 0: l < .5 ; bin 1: l >= .5
    np.testing.assert_allclose(prof["correct"], [(1 + 2 + 7) / 3, (3 + 4 + 5) / 3])
    np.testing.assert_allclose(prof["incorrect"], [10.0, 20.0])
    np.testing.assert_allclose(prof["all"], [(1 + 2 + 7 + 10) / 4, (3 + 4 + 5 + 20) / 4])
    prof4 = positional_entropy(H, M, n_bins=4)
    # l = 0 → 0, .25 → 1, .5 → 2, .75 → 3, 1 → 3 (last bin is closed)
    np.testing.assert_allclose(prof4["all"], [(1 + 10 + 7) / 3, 2.0, 3.0, (4 + 5 + 20) / 3])
    assert "correct" not in prof4
    empty = positional_entropy(H, torch.zeros_like(M), n_bins=3)["all"]
    assert np.isnan(empty).all()


# ---------------------------------------------------------------- gradient-norm proxy


def test_grad_norm_proxy_equals_autograd_lm_head_gradient():
    torch.manual_seed(0)
    N, T, D, V = 2, 3, 5, 7
    h = torch.randn(N, T, D, dtype=torch.float64)
    W = torch.randn(V, D, dtype=torch.float64)
    tok = torch.randint(0, V, (N, T))
    w = torch.randn(N, T, dtype=torch.float64)
    probs = torch.softmax(h @ W.T, -1)
    logp = probs.gather(-1, tok[..., None]).squeeze(-1).log()
    sum_p2 = (probs**2).sum(-1)
    G = grad_norm_proxy(w, logp, sum_p2, h)
    # independent: ‖∂(w_t · log π(o_t)) / ∂W‖_F by autograd, one token at a time
    for i in range(N):
        for t in range(T):
            Wg = W.clone().requires_grad_(True)
            lp = torch.log_softmax(h[i, t] @ Wg.T, -1)[tok[i, t]]
            (g,) = torch.autograd.grad(w[i, t] * lp, Wg)
            assert G[i, t].item() == pytest.approx(torch.linalg.norm(g).item(), rel=1e-10)
    # norms instead of hidden states, [N] weights broadcast, and the mask
    hn = torch.linalg.vector_norm(h, dim=-1)
    torch.testing.assert_close(grad_norm_proxy(w, logp, sum_p2, hn), G)
    wa = torch.tensor([2.0, -1.0], dtype=torch.float64)
    torch.testing.assert_close(
        grad_norm_proxy(wa, logp, sum_p2, hn), grad_norm_proxy(wa[:, None].expand(N, T), logp, sum_p2, hn)
    )
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    Gm = grad_norm_proxy(w, logp, sum_p2, h, mask=mask)
    assert Gm[0, 2] == 0 and (Gm[1] == 0).all() and Gm[0, 0] == G[0, 0]
    with pytest.raises(AnalysisError):
        grad_norm_proxy(w, logp, sum_p2, hn[:, :2])


# ---------------------------------------------------------------- stages


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
