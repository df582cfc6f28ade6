"""Entropy surges (entflow.analysis.surge): ten synthetic runs with a known cause are dated within
5 % of their steps and the curve that moved first is named in at least 9 of them; pure noise, a
plain collapse, a steady rise and the committed real logs show no surge; the pieces (noise scale,
running median, ties, curves that never move, several surges) on their own."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from entflow.analysis.surge import (
    CURVES,
    curve_departure,
    find_surges,
    noise_scale,
    running_median,
    surge_lines,
    triage_surges,
    window_sizes,
)
from support.log_writers import law_series
from support.surge_logs import CASES, VERL_CURVES, SurgeCase

ROOT = Path(__file__).resolve().parents[2]


def triage(case: SurgeCase):
    steps, H, curves = case.series()
    given = {role: (VERL_CURVES[role][0], steps, v) for role, v in curves.items()}
    return triage_surges(steps, H, given, entropy_key="actor/entropy")


def test_ten_known_causes_dated_and_the_leader_named():
    assert len(CASES) == 10
    assert {c.leader for c in CASES} >= {"clip_high", "response_length", "grad_norm", "mismatch", "lr", "entropy"}
    dated = named = 0
    for case in CASES:
        tri = triage(case)
        assert len(tri.surges) == 1, case  # one surge, no second one found in its noise
        sg = tri.surges[0]
        ok_date = abs(sg.start_step - case.t0) <= 0.05 * case.n
        ok_first = sg.first == (case.leader,)
        dated += ok_date
        named += ok_date and ok_first
        print(
            f"seed {case.seed}: n {case.n}, true start {case.t0}, dated {sg.start_step:g}; "
            f"leader {case.leader}, named {'/'.join(sg.first)}"
        )
        assert sg.rise == pytest.approx(case.size * case.h_level, rel=0.35)
    print(f"dated within 5 %: {dated}/10; dated and leader named: {named}/10")
    assert dated == 10
    assert named >= 9


def _noise_runs():
    for seed in range(20):
        for n in (80, 300):
            for noise in (0.01, 0.05, 0.15):
                yield seed, n, noise


def test_no_surge_in_pure_noise():
    found = 0
    for seed, n, noise in _noise_runs():
        rng = np.random.default_rng(seed)
        H = 0.5 + rng.normal(0, noise * 0.5, n)
        found += bool(find_surges(np.arange(1, n + 1), H))
        # heavy tails: Student t with 2 degrees of freedom
        found += bool(find_surges(np.arange(1, n + 1), 0.5 + rng.standard_t(2, n) * noise * 0.5))
    print(f"pure noise: a surge in {found} of {2 * 20 * 2 * 3} series")
    assert found == 0


def test_no_surge_in_a_plain_collapse():
    found = 0
    for seed, n, noise in _noise_runs():
        rng = np.random.default_rng(seed + 100)
        s = np.arange(1, n + 1)
        H = 0.2 + 1.3 * np.exp(-s / (n / 6)) + rng.normal(0, noise * 0.2, n)
        found += bool(find_surges(s, H))
    for seed in range(10):  # the law the other log tests use (R = −0.1·e^H + 0.6): its entropy
        steps, H, _, _, _ = law_series(300, seed=seed)
        found += bool(find_surges(steps, H + np.random.default_rng(seed).normal(0, 0.01, 300)))
    print(f"collapse: a surge in {found} of {20 * 2 * 3 + 10} series")
    assert found == 0


def test_a_steady_rise_is_no_surge():
    found = 0
    for seed, n, noise in _noise_runs():
        s = np.arange(1, n + 1)
        H = 0.4 * (1 + 2 * s / n) + np.random.default_rng(seed + 200).normal(0, noise * 0.4, n)
        found += bool(find_surges(s, H))
    print(f"steady rise (x3 over the run): a surge in {found} of 120 series")
    assert found <= 1


def test_no_surge_in_the_committed_real_logs():
    """Every entflow run committed under docs/results (real models and the lab) and the real TRL
    run of the fixtures: none surges (their largest sustained rise is a quarter of the threshold)."""
    from entflow.analysis.log_keys import resolve_keys
    from entflow.analysis.log_readers import read_log

    paths = sorted((ROOT / "docs" / "results").rglob("metrics.jsonl"))
    paths.append(ROOT / "tests" / "fixtures" / "logs" / "trl" / "trainer_state.json")
    long_enough = 0
    for p in paths:
        log = read_log(p)
        s, H = log.series[resolve_keys(log)["entropy"]]
        keep = np.isfinite(H)
        B, W = window_sizes(int(keep.sum()))
        long_enough += int(keep.sum()) >= B + W
        assert find_surges(s[keep], H[keep]) == [], p
    print(f"{len(paths)} real logs, {long_enough} long enough to hold a surge: none found")
    assert long_enough >= 30


def test_noise_scale_and_running_median():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 2.0, 4000)
    assert noise_scale(x) == pytest.approx(2.0, rel=0.08)
    assert noise_scale(x + 0.01 * np.arange(4000)) == pytest.approx(2.0, rel=0.08)  # a trend is not noise
    ar = np.zeros(4000)  # AR(1), φ = 0.7: its differences alone would say 0.77 of its σ
    for i in range(1, 4000):
        ar[i] = 0.7 * ar[i - 1] + x[i]
    assert noise_scale(ar) == pytest.approx(2.0 / math.sqrt(1 - 0.49), rel=0.1)
    assert noise_scale([1.0, 2.0]) == 0.0
    np.testing.assert_array_equal(running_median([1, 9, 1, 1, 1], 3), [1, 1, 1, 1, 1])
    np.testing.assert_array_equal(running_median([0, 0, 5, 5, 5], 3), [0, 0, 5, 5, 5])  # edges kept
    assert window_sizes(300) == (30, 9)
    assert window_sizes(50) == (20, 5)
    assert window_sizes(100_000) == (200, 50)


def test_too_short_a_series_has_no_surge():
    assert find_surges(np.arange(20), np.r_[np.zeros(10), np.ones(10)]) == []


def test_a_step_is_dated_exactly_and_measured():
    s = np.arange(1, 201)
    H = np.where(s >= 120, 1.5, 0.5) + np.random.default_rng(1).normal(0, 0.01, 200)
    (sg,) = find_surges(s, H)
    assert sg.start_step == 120
    assert sg.before == pytest.approx(0.5, abs=0.01)
    assert sg.level == pytest.approx(1.5, abs=0.01)
    assert sg.rise == pytest.approx(1.0, abs=0.03)
    assert sg.rel_rise == pytest.approx(2.0, abs=0.08)
    assert sg.end_step is None
    assert sg.baseline_to_step == 119 and sg.baseline_from_step == 100


def test_two_surges_and_an_end():
    s = np.arange(1, 401)
    up = ((s >= 100) & (s < 160)) | (s >= 300)
    H = np.where(up, 1.0, 0.5) + np.random.default_rng(2).normal(0, 0.01, 400)
    first, second = find_surges(s, H)
    assert (first.start_step, first.end_step) == (100, 160)
    assert (second.start_step, second.end_step) == (300, None)
    lines = surge_lines(triage_surges(s, H))
    assert lines[0].startswith("entropy surge 1 of 2 from step 100") and "back near the baseline at 160" in lines[0]


def test_ties_curves_that_never_move_and_missing_curves():
    s = np.arange(1, 301, dtype=float)
    rng = np.random.default_rng(3)
    H = np.where(s >= 150, 1.0, 0.5) + rng.normal(0, 0.01, 300)
    a = np.where(s >= 140, 2.0, 1.0) + rng.normal(0, 0.02, 300)  # both at step 140: a tie
    b = np.where(s >= 141, 5.0, 3.0) + rng.normal(0, 0.02, 300)
    flat = 0.3 + rng.normal(0, 0.02, 300)
    down = np.where(s >= 160, 100.0, 400.0) + rng.normal(0, 1, 300)  # after the entropy, downwards
    tri = triage_surges(
        s,
        H,
        {
            "clip_high": ("a", s, a),
            "grad_norm": ("b", s, b),
            "lr": ("lr", s, flat),
            "response_length": ("len", s, down),
            "mismatch": None,
            "clip": ("a", s, a),  # the same key again: left out
            "clip_low": ("late", s[200:], a[200:]),  # not logged before the surge
        },
    )
    (sg,) = tri.surges
    assert sg.first == ("clip_high", "grad_norm")
    moves = {m.role: m for m in sg.moves}
    assert "clip" not in moves
    assert moves["clip_high"].step == 140 and moves["clip_high"].lead == -10
    assert moves["lr"].status == "did not move"
    assert moves["mismatch"].status == "not in the log"
    assert moves["clip_low"].status == "no baseline"
    assert moves["response_length"].direction == "down" and moves["response_length"].lead == 10
    text = "\n".join(surge_lines(tri))
    assert "moved first: a tie (within 2 logged steps): clip fraction, high bound (step 140), grad norm" in text
    d = tri.to_dict()
    assert d["surges"][0]["first"] == ["clip_high", "grad_norm"]
    assert d["surges"][0]["curves"]["search"] == [135.0, 180.0]


def test_the_entropy_first_and_a_censored_lead():
    s = np.arange(1, 301, dtype=float)
    rng = np.random.default_rng(4)
    H = np.where(s >= 150, 1.0, 0.5) + rng.normal(0, 0.01, 300)
    after = np.where(s >= 160, 1.0, 0.0) + rng.normal(0, 0.01, 300)
    tri = triage_surges(s, H, {"grad_norm": ("g", s, after)})
    assert tri.surges[0].first == ("entropy",)
    assert "moved first: the entropy itself; every logged curve that moved did so after it" in surge_lines(tri)[4]
    # a curve whose departure lies before the search window (B/2 = 15 steps before the entropy)
    early = np.where(s >= 138, 1.0, 0.0) + rng.normal(0, 0.01, 300)
    m = curve_departure("grad_norm", "g", s, early, baseline=(120, 130), search=(135, 180), reference=150, sustain=9)
    assert m.status == "moved" and not m.censored and m.step == 138 and m.lead == -12
    m = curve_departure("grad_norm", "g", s, early, baseline=(120, 136), search=(141, 180), reference=150, sustain=9)
    assert m.censored and m.step == 141


def test_no_surge_line_and_json():
    s = np.arange(1, 101)
    tri = triage_surges(s, 0.5 + np.random.default_rng(5).normal(0, 0.01, 100), {r: None for r in CURVES})
    assert tri.surges == ()
    assert surge_lines(tri) == [
        "entropy surge: none (no rise above the median + max(6 σ, 10% of it) of 20 stable logged steps, held for 5)"
    ]
    assert tri.to_dict()["surges"] == []
    assert not math.isnan(tri.to_dict()["settings"]["k"])
