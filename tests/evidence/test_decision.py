"""entflow.evidence.decision: the verdict rules on constructed data (hand-worked intervals), Pocock's
level against the published constants, the family-wise error of the sequential rule under the null
(simulated, and shown to fail without the correction), the planned power at δ, Holm across a family,
and "inconclusive" only at the maximum."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from entflow.evidence.decision import (
    ALPHA,
    CONTINUE,
    INCONCLUSIVE,
    NOT_REPRODUCED,
    REPRODUCED,
    Design,
    family_decisions,
    look_decision,
    margins,
    plan_claim,
    pocock_level,
    sequential_decision,
    simulate,
)


def test_margins_put_every_rule_on_its_claimed_side():
    assert margins([0.3, -0.1], "greater", 5.0).tolist() == [0.3, -0.1]  # bound ignored: 0
    assert margins([0.3, -0.1], "less", 5.0).tolist() == [-0.3, 0.1]
    assert margins([0.9, 0.7], "at_least", 0.8).tolist() == pytest.approx([0.1, -0.1])
    assert margins([0.31, 0.6, None, math.nan], "at_most", 0.5).tolist() == pytest.approx([0.19, -0.1])
    with pytest.raises(ValueError, match="rule"):
        margins([1.0], "bigger", 0.0)


def test_one_look_hand_worked():
    # m = 1, 2, 3: mean 2, s = 1, level 0.025: t_{0.975, 2} = 4.302653, half = 4.302653 / √3 = 2.484138
    r = look_decision([1.0, 2.0, 3.0], delta=1.0, level=0.025)
    assert r.low == pytest.approx(2 - 2.484138, abs=1e-6) and r.high == pytest.approx(2 + 2.484138, abs=1e-6)
    assert r.verdict == CONTINUE
    assert look_decision([1.0, 2.0, 3.0], delta=1.0, level=0.025, last=True).verdict == INCONCLUSIVE
    # clears 0: reproduced (checked first, even though the interval also lies below δ = 10)
    assert look_decision([2.0, 2.1, 2.2], delta=10.0, level=0.025).verdict == REPRODUCED
    # excludes δ: not reproduced (an effect smaller than δ, or none)
    assert look_decision([0.01, -0.01, 0.0, 0.02, -0.02], delta=0.1, level=0.025).verdict == NOT_REPRODUCED
    # entirely on the wrong side: not reproduced too
    assert look_decision([-2.0, -2.1, -2.2], delta=0.1, level=0.025).verdict == NOT_REPRODUCED
    assert look_decision([5.0, 6.0], delta=1.0, level=0.025).verdict == CONTINUE  # fewer than 3 seeds


@pytest.mark.parametrize("seed", range(5))
def test_one_look_matches_an_independent_t_interval(seed):
    rng = np.random.default_rng(seed)
    m = rng.normal(0.05, 0.1, size=7)
    level, delta = 0.011, 0.08
    half = stats.t.ppf(1 - level, 6) * np.std(m, ddof=1) / math.sqrt(7)
    r = look_decision(m, delta, level)
    assert r.low == pytest.approx(m.mean() - half, rel=1e-12) and r.high == pytest.approx(m.mean() + half, rel=1e-12)
    want = REPRODUCED if m.mean() - half > 0 else NOT_REPRODUCED if m.mean() + half < delta else CONTINUE
    assert r.verdict == want


def test_bad_designs_are_refused():
    for looks in [(), (2, 4), (6, 3), (3, 3)]:
        with pytest.raises(ValueError, match="looks"):
            Design(looks)
    with pytest.raises(ValueError, match="alpha"):
        Design((3,), alpha=0.6)
    with pytest.raises(ValueError, match="delta"):
        look_decision([1.0, 2.0, 3.0], delta=0.0, level=0.025)


@pytest.mark.parametrize(
    ("k", "published"),
    # Pocock (1977), Table 1: two-sided nominal levels 0.0294, 0.0221, 0.0182, 0.0158 for K = 2..5
    # equally spaced looks at α = 0.05; one-sided at 0.025, halved
    [(2, 0.0147), (3, 0.01105), (4, 0.0091), (5, 0.0079)],
)
def test_pocock_level_matches_the_published_constants(k, published):
    looks = tuple(40 * (i + 1) for i in range(k))  # large n: the t statistic is close to the normal one
    assert pocock_level(looks, ALPHA, sims=40_000) == pytest.approx(published, abs=0.0009)


def test_one_look_keeps_alpha():
    assert pocock_level((5,)) == ALPHA


@pytest.mark.parametrize("looks", [(3, 6, 9, 12), (3, 6, 9, 12, 18, 24, 30)])
def test_null_series_keep_the_family_wise_error_over_the_looks(looks):
    """Margins with mean 0: "reproduced" at any look at most α (20,000 series, s.e. 0.0011); with
    the plain level α at every look (no correction) well above it."""
    design = Design(looks)
    got = simulate(design, effect=0.0, delta=1.0, sims=20_000, seed=7)[REPRODUCED]
    assert got <= ALPHA + 0.004
    rng = np.random.default_rng(7)
    x = rng.standard_normal((20_000, looks[-1]))
    naive = np.zeros(20_000, dtype=bool)
    for n in looks:
        t = x[:, :n].mean(axis=1) / (x[:, :n].std(axis=1, ddof=1) / math.sqrt(n))
        naive |= stats.t.sf(t, n - 1) <= ALPHA
    assert naive.mean() > 1.8 * ALPHA  # the correction is what keeps the error at α


def test_null_series_of_a_skewed_law_keep_the_error_near_alpha():
    """Per-seed values are not normal (a pass@k difference is bounded and skewed): a centred
    exponential law at n ≥ 6 stays within 2× α (4,000 series)."""
    design = Design((6, 12, 18))
    rng = np.random.default_rng(11)
    x = rng.exponential(1.0, size=(4000, 18)) - 1.0
    hits = sum(sequential_decision(row, 1.0, design).verdict == REPRODUCED for row in x)
    assert hits / 4000 <= 2 * ALPHA


@pytest.mark.parametrize(("sigma", "delta"), [(0.02, 0.05), (0.03, 0.03), (0.035, 0.02)])
def test_planned_designs_decide_effects_of_delta_at_about_the_planned_power(sigma, delta):
    p = plan_claim(sigma, delta, 60, sims=8000)
    assert p["decidable"] and p["power"] >= 0.8
    again = simulate(Design(tuple(p["looks"])), effect=delta, delta=delta, sigma=sigma, sims=8000, seed=99)
    assert again[REPRODUCED] == pytest.approx(p["power"], abs=0.03)  # another seed: the same power
    # and the null: at most α reproduced, most series ruled out
    null = simulate(Design(tuple(p["looks"])), effect=0.0, delta=delta, sigma=sigma, sims=8000, seed=98)
    assert null[REPRODUCED] <= ALPHA + 0.006 and null[NOT_REPRODUCED] >= 0.75


def test_a_plan_needing_more_than_the_maximum_is_not_decidable():
    p = plan_claim(0.2, 0.03, 30, sims=2000)
    assert not p["decidable"] and p["maximum"] <= 30 and p["power"] < 0.8
    assert p["fixed_sample_seeds"] > 30


@pytest.mark.parametrize("seed", range(20))
def test_inconclusive_only_at_the_maximum(seed):
    rng = np.random.default_rng(seed)
    design = Design((3, 6, 9))
    m = rng.normal(0.05, 0.2, size=9)
    for n in range(10):
        r = sequential_decision(m[:n], 0.1, design)
        assert r.verdict != INCONCLUSIVE or n == 9
        if n < 9 and r.verdict == CONTINUE:
            assert r.n in (0, 3, 6)  # the last completed look


def test_a_decided_series_keeps_its_first_decision():
    design = Design((3, 6))
    m = [1.0, 1.1, 0.9, -5.0, -6.0, -7.0]  # reproduced at 3, whatever comes after
    assert sequential_decision(m, 0.5, design).verdict == REPRODUCED
    assert sequential_decision(m, 0.5, design).n == 3


def test_holm_across_a_family_recycles_the_level_of_a_reproduced_member():
    """Two members with identical designs; the strong one is reproduced at α/2, which lets the
    weaker one be judged at α: it is reproduced only thanks to the step-down."""
    design = Design((3, 6))
    strong = [5.0, 5.1, 4.9, 5.0, 5.2, 4.8]
    # a weak member reproduced at α (one look's α' for (3, 6)) but not at α/2
    rng = np.random.default_rng(3)
    for _ in range(2000):
        weak = rng.normal(0.5, 0.5, size=6)
        at_full = sequential_decision(weak, 10.0, design, level=pocock_level(design.looks, ALPHA)).verdict
        at_half = sequential_decision(weak, 10.0, design, level=pocock_level(design.looks, ALPHA / 2)).verdict
        if at_full == REPRODUCED and at_half != REPRODUCED:
            break
    else:
        pytest.fail("no weak series found")
    res = family_decisions({"strong": (strong, 1.0, design), "weak": (weak, 10.0, design)})
    assert res["strong"].verdict == REPRODUCED and res["weak"].verdict == REPRODUCED
    alone = family_decisions({"weak": (weak, 10.0, design), "other": ([0.0, 0.1, -0.1, 0.0, 0.1, -0.1], 10.0, design)})
    assert alone["weak"].verdict != REPRODUCED  # without a reproduced partner it stays at α/2


def test_holm_family_keeps_the_family_wise_error_under_the_null():
    design = Design((3, 6, 9))
    rng = np.random.default_rng(5)
    hits = 0
    sims = 1500
    for _ in range(sims):
        members = {f"c{i}": (rng.standard_normal(9), 1.0, design) for i in range(4)}
        res = family_decisions(members)
        hits += any(r.verdict == REPRODUCED for r in res.values())
    assert hits / sims <= ALPHA + 0.012  # s.e. of the estimate ≈ 0.004
